#include "views/decode_profile.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <vector>

#include "core/decode/cache_plan.h"
#include "core/decode/decoder.h"
#include "core/ir/error.h"

namespace collage {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The attentions the native rule finds in `graph`, with their labels.
std::vector<std::pair<NodeSet, std::string>> attentions(const Graph& graph,
                                                       const BackendLookup& backends) {
  Backend* native = backends("native");
  if (!native) throw Error("the Decode panel needs the native backend (its attention rule)");
  std::vector<std::pair<NodeSet, std::string>> out;
  if (auto rule = native->codeRule())
    for (auto& [group, label] : rule->wholeGroups(graph))
      if (label.find("attention") != std::string::npos) out.emplace_back(group, label);
  return out;
}

}  // namespace

Plan defaultDecodePlan(const Graph& graph, const BackendLookup& backends) {
  Plan plan = singleNodePlan(graph, "native");
  // Each core (MatMul .. MatMul) as one group: its views stay single nodes,
  // so a cache Concat is never fused into it (plannedDecoder needs it alone).
  std::set<std::string> taken;
  std::vector<PlanGroup> fused;
  for (auto& [group, label] : attentions(graph, backends)) {
    if (label.find("_views") != std::string::npos) continue;
    std::vector<std::string> names = nodeNames(graph, group);
    bool overlaps = false;
    for (const std::string& n : names) overlaps = overlaps || taken.count(n);
    if (overlaps) continue;
    taken.insert(names.begin(), names.end());
    PlanGroup g;
    g.nodes = std::move(names);
    g.backend = "native";
    g.pattern = "rule:" + label;
    g.origin = PlanOrigin::User;
    fused.push_back(std::move(g));
  }
  std::vector<PlanGroup> groups;
  for (PlanGroup& g : plan.groups)
    if (!taken.count(g.nodes.front())) groups.push_back(std::move(g));
  for (PlanGroup& g : fused) groups.push_back(std::move(g));
  plan.groups = std::move(groups);
  return plan;
}

DecodePoint measureDecodeStep(const std::string& modelPath, const DecoderSignature& signature,
                              int64_t context, const Plan* plan, const BackendLookup& backends,
                              int repeats, const std::function<Plan(const Graph&)>& stepPlan) {
  // context - 1 rows filled, then the step's own new row.
  if (context < 2) throw Error(modelPath + ": a context of " + std::to_string(context) +
                               " rows is too short to time a decode step (2 at least)");
  const DecodeModel model = importDecodeModel(modelPath, context, &signature);
  DecodePoint point;
  point.context = context;
  point.withPlan = plan && plan->substitutions.empty() &&
                   planCapacity(signature, plan->inputShapes) == context;
  const Plan chosen = point.withPlan ? *plan
                     : stepPlan     ? stepPlan(model.graph)
                                    : defaultDecodePlan(model.graph, backends);
  PlannedDecoder planned = plannedDecoder(model, chosen, backends, {}, "native");
  Session& session = *planned.session;
  session.setProfiling(true);

  // The session's groups (the plan with its cache Concats split off) that
  // hold an attention node.
  NodeSet attentionNodes(model.graph.numNodes());
  for (auto& [group, label] : attentions(model.graph, backends)) attentionNodes |= group;
  std::vector<bool> isAttention(session.plan().groups.size(), false);
  for (size_t g = 0; g < isAttention.size(); ++g)
    for (const std::string& name : session.plan().groups[g].nodes)
      if (auto n = model.graph.findNode(name); n && attentionNodes.contains(*n)) isAttention[g] = true;
  point.attentionGroups = static_cast<int>(std::count(isAttention.begin(), isAttention.end(), true));

  // The cache's rows written directly (Decoder::fillCache), not by a
  // prompt's pass: that pass would cost far more than the steps timed. Each
  // repeat is the step at the last row, so it reads all `context` rows; it
  // rewrites that row, which no step reads.
  Decoder& decoder = *planned.decoder;
  decoder.fillCache(context - 1, /*seed=*/1);
  std::vector<double> steps, attention;
  for (int r = 0; r <= repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    decoder.decodeStep(0, context - 1);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r == 0) continue;  // warm-up
    double us = 0;
    for (const KernelTiming& t : session.lastTimings())
      if (isAttention.at(t.group)) us += t.durUs;
    steps.push_back(ms);
    attention.push_back(us / 1000.0);
  }
  point.rowsAttended = decoder.lastStepRows();
  point.stepMs = median(steps);
  point.attentionMs = median(attention);
  point.restMs = std::max(0.0, point.stepMs - point.attentionMs);
  return point;
}

}  // namespace collage
