#include "core/search/plan_from_cover.h"

#include <algorithm>
#include <set>

#include "core/ir/error.h"
#include "core/ir/hashing.h"

namespace collage {

namespace {

// makePlan and makePlanAround: the kept groups count as covered, and the
// chosen candidates must cover the rest.
Plan planFromCover(const Graph& graph, const std::string& modelPath, const std::vector<PlanGroup>& kept,
                   const CandidateSet& candidates, const std::vector<int32_t>& chosen,
                   const std::vector<Measurement>& measurements, PlanOrigin origin,
                   const HardwareFingerprint& fingerprint,
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
  for (const PlanGroup& g : kept) {
    for (const std::string& name : g.nodes) {
      const auto n = graph.findNode(name);
      if (!n) throw Error("a kept group names node '" + name + "', which the model lacks");
      if (covered.contains(*n)) throw Error("node '" + name + "' is in two kept groups");
      covered.insert(*n);
    }
    used.insert(g.backend);
    plan.groups.push_back(g);
  }
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
  if (!kept.empty()) {
    // The order a plan reads in: by each group's first node.
    std::vector<std::pair<NodeId, PlanGroup>> byFirst;
    for (PlanGroup& g : plan.groups) {
      NodeId first = graph.numNodes();
      for (const std::string& name : g.nodes) first = std::min(first, *graph.findNode(name));
      byFirst.emplace_back(first, std::move(g));
    }
    std::stable_sort(byFirst.begin(), byFirst.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    plan.groups.clear();
    for (auto& [first, g] : byFirst) plan.groups.push_back(std::move(g));
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

}  // namespace

Plan makePlan(const Graph& graph, const std::string& modelPath, const CandidateSet& candidates,
              const std::vector<int32_t>& chosen, const std::vector<Measurement>& measurements,
              PlanOrigin origin, const HardwareFingerprint& fingerprint,
              const std::vector<BackendVersion>& backends) {
  return planFromCover(graph, modelPath, {}, candidates, chosen, measurements, origin, fingerprint,
                       backends);
}

Plan makePlanAround(const Graph& graph, const std::vector<PlanGroup>& kept,
                    const CandidateSet& candidates, const std::vector<int32_t>& chosen,
                    const std::vector<Measurement>& measurements, PlanOrigin origin,
                    const HardwareFingerprint& fingerprint,
                    const std::vector<BackendVersion>& backends) {
  return planFromCover(graph, "", kept, candidates, chosen, measurements, origin, fingerprint,
                       backends);
}

}  // namespace collage
