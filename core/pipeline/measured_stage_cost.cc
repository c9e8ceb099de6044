#include "core/pipeline/measured_stage_cost.h"

#include <vector>

#include "core/ir/error.h"
#include "core/patterns/candidate.h"

namespace collage {

NodeProfile measureNodes(const Graph& graph, const std::string& backend,
                         const std::string& backendVersion, MeasurementDb* db,
                         const HardwareFingerprint& fingerprint, const MeasureFn& measure,
                         CostingReport* report) {
  CandidateSet candidates(graph.numNodes());
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    Candidate c;
    c.nodes = NodeSet::of(graph.numNodes(), {n});
    c.backend = backend;
    c.origin = "rule:op";
    candidates.add(c);
  }
  CandidateCoster coster(
      graph, db, fingerprint, [&](const std::string&) { return backendVersion; }, measure);
  CostingReport costs;
  const std::vector<Measurement> m = coster.costAll(candidates, {}, nullptr, nullptr, &costs);
  if (report) *report = costs;
  NodeProfile p;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const NodeId n = candidates[i].nodes.first();
    if (m[i].status != MeasurementStatus::Ok)
      throw Error(
          "pipeline: node " + graph.node(n).name + " (" + graph.node(n).op + ") on " + backend +
          " could not be measured: " + (m[i].message.empty() ? m[i].toString() : m[i].message));
  }
  p.seconds.assign(static_cast<size_t>(graph.numNodes()), 0);
  p.activationBytes.assign(static_cast<size_t>(graph.numNodes()), 0);
  for (size_t i = 0; i < candidates.size(); ++i) {
    const NodeId n = candidates[i].nodes.first();
    p.seconds[static_cast<size_t>(n)] = m[i].medianNs * 1e-9;
    double bytes = 0;
    for (ValueId v : graph.node(n).outputs)
      if (v != kNoValue) bytes += static_cast<double>(graph.value(v).type.byteSize());
    p.activationBytes[static_cast<size_t>(n)] = bytes;
  }
  return p;
}

}  // namespace collage
