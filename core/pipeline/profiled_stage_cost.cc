#include "core/pipeline/profiled_stage_cost.h"

#include <algorithm>
#include <set>

#include "core/ir/error.h"
#include "core/ir/threading.h"
#include "core/ops/reference_executor.h"
#include "core/plan/plan.h"

namespace collage {

NodeProfile profileNodes(const Graph& graph, const std::string& backend,
                         const BackendLookup& backends, int threads, int runs) {
  setThisThreadCount(threads);
  struct Reset {
    ~Reset() { setThisThreadCount(0); }
  } reset;
  Session session(graph, singleNodePlan(graph, backend), backends);
  const std::vector<Tensor> inputs = randomInputs(graph, 1);
  session.run(inputs);  // untimed: page faults, thread start-up
  session.setProfiling(true);
  const size_t n = static_cast<size_t>(graph.numNodes());
  std::vector<std::vector<double>> samples(n);
  for (int r = 0; r < std::max(1, runs); ++r) {
    session.run(inputs);
    for (const KernelTiming& t : session.lastTimings()) {
      const NodeSet nodes = groupNodes(session.plan(), t.group, graph);
      for (NodeId node : nodes.members())
        samples[static_cast<size_t>(node)].push_back(t.durUs * 1e-6);
    }
  }
  NodeProfile p;
  for (size_t i = 0; i < n; ++i) {
    std::vector<double>& s = samples[i];
    std::sort(s.begin(), s.end());
    p.seconds.push_back(s.empty() ? 0 : s[s.size() / 2]);
    double bytes = 0;
    for (ValueId v : graph.node(static_cast<NodeId>(i)).outputs)
      if (v != kNoValue) bytes += static_cast<double>(graph.value(v).type.byteSize());
    p.activationBytes.push_back(bytes);
  }
  return p;
}

ProfiledStageCost::ProfiledStageCost(const Graph& graph) {
  constantBytes_.assign(static_cast<size_t>(graph.numValues()), 0);
  for (const Node& node : graph.nodes()) {
    std::vector<ValueId> constants;
    for (ValueId v : node.inputs)
      if (v != kNoValue && graph.value(v).isConstant()) {
        constants.push_back(v);
        constantBytes_[static_cast<size_t>(v)] =
            static_cast<double>(graph.value(v).type.byteSize());
      }
    constantsOf_.push_back(std::move(constants));
  }
}

void ProfiledStageCost::add(int microBatch, NodeProfile profile) {
  if (profile.seconds.size() != constantsOf_.size())
    throw Error("pipeline: a profile at micro-batch " + std::to_string(microBatch) + " has " +
                std::to_string(profile.seconds.size()) + " nodes; the model has " +
                std::to_string(constantsOf_.size()));
  profiles_[microBatch] = std::move(profile);
}

StageRunCost ProfiledStageCost::stage(const std::vector<int>& nodes, DeviceKind kind, int devices,
                                      int microBatch) const {
  StageRunCost c;
  if (kind != DeviceKind::Cpu || devices < 1 || microBatch % devices != 0) return c;
  auto it = profiles_.find(microBatch / devices);
  if (it == profiles_.end()) return c;
  double seconds = 0, activations = 0, weights = 0;
  std::set<ValueId> seen;
  for (int n : nodes) {
    seconds += it->second.seconds.at(static_cast<size_t>(n));
    activations += it->second.activationBytes.at(static_cast<size_t>(n));
    for (ValueId v : constantsOf_.at(static_cast<size_t>(n)))
      if (seen.insert(v).second) weights += constantBytes_[static_cast<size_t>(v)];
  }
  c.seconds = seconds;
  c.weightBytes = weights;
  c.activationBytes = activations;
  return c;
}

}  // namespace collage
