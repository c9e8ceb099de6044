#include "core/search/plan_from_cover.h"

#include <algorithm>
#include <set>

#include "core/ir/error.h"
#include "core/ir/hashing.h"

namespace collage {

Plan makePlan(const Graph& graph, const std::string& modelPath, const CandidateSet& candidates,
              const std::vector<int32_t>& chosen, const std::vector<Measurement>& measurements,
              PlanOrigin origin, const HardwareFingerprint& fingerprint,
              const std::vector<BackendVersion>& backends) {
  COLLAGE_CHECK(measurements.empty() || measurements.size() == candidates.size(),
                "makePlan: one measurement per candidate");
  Plan plan;
  plan.modelPath = modelPath;
  if (!modelPath.empty()) plan.modelSha256 = sha256File(modelPath);
  plan.inputShapes = graphInputShapes(graph);
  plan.fingerprint = fingerprint;
  plan.createdAt = isoTimeNow();
  plan.createdBy = "collage";

  NodeSet covered(graph.numNodes());
  std::set<std::string> used;
  for (int32_t c : chosen) {
    COLLAGE_CHECK(c >= 0 && static_cast<size_t>(c) < candidates.size(), "makePlan: bad candidate index");
    const Candidate& cand = candidates[static_cast<size_t>(c)];
    if (covered.intersects(cand.nodes))
      throw Error("the chosen candidates overlap: " + cand.toString(graph) +
                  " shares nodes with an earlier one");
    covered |= cand.nodes;
    PlanGroup g;
    g.nodes = nodeNames(graph, cand.nodes);
    g.backend = cand.backend;
    g.pattern = cand.origin;
    g.origin = origin;
    g.candidate = c;
    if (!measurements.empty()) {
      const Measurement& m = measurements[static_cast<size_t>(c)];
      g.costNs = m.cost();
      if (m.status == MeasurementStatus::Ok) {
        g.spread = m.spread;
        g.samples = m.samples;
      }
    }
    used.insert(g.backend);
    plan.groups.push_back(std::move(g));
  }
  if (covered.count() != graph.numNodes()) {
    NodeId missing = covered.firstMissing();
    throw Error("the chosen candidates do not cover node '" + graph.node(missing).name + "' (" +
                graph.node(missing).op + ")");
  }
  for (const auto& b : backends)
    if (used.count(b.first)) plan.backends.push_back(b);
  for (const auto& name : used) {
    bool listed = std::any_of(plan.backends.begin(), plan.backends.end(),
                              [&](const BackendVersion& b) { return b.first == name; });
    if (!listed) plan.backends.push_back({name, ""});
  }
  plan.predictedNs = plan.sumOfGroupCosts();
  return plan;
}

}  // namespace collage
