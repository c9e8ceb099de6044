#include "core/search/near_ties.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "core/patterns/candidate_signature.h"

namespace collage {

std::vector<NearTie> findNearTies(const CandidateSet& candidates,
                                  const std::vector<Measurement>& measurements,
                                  const std::vector<int32_t>& chosen,
                                  const std::vector<bool>& allowed, const NearTieOptions& options) {
  std::vector<NearTie> ties;
  if (chosen.empty()) return ties;
  // The plan's group of each node.
  std::map<NodeId, int32_t> groupOf;
  for (int32_t c : chosen) candidates[static_cast<size_t>(c)].nodes.forEach([&](NodeId n) { groupOf[n] = c; });
  const std::set<int32_t> inPlan(chosen.begin(), chosen.end());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (inPlan.count(id) || (!allowed.empty() && !allowed[i])) continue;
    const Measurement& m = measurements[i];
    if (m.status != MeasurementStatus::Ok) continue;
    // The plan's groups it touches; it must be exactly their union.
    std::set<int32_t> parts;
    bool covered = true;
    candidates[i].nodes.forEach([&](NodeId n) {
      auto it = groupOf.find(n);
      if (it == groupOf.end()) covered = false;
      else parts.insert(it->second);
    });
    if (!covered || parts.size() < 2) continue;
    double partsNs = 0;
    bool fresh = !m.fromCache;
    for (int32_t p : parts) {
      const Measurement& pm = measurements[static_cast<size_t>(p)];
      if (!candidates[static_cast<size_t>(p)].nodes.isSubsetOf(candidates[i].nodes) ||
          pm.status != MeasurementStatus::Ok) {
        covered = false;
        break;
      }
      partsNs += pm.medianNs;
      fresh = fresh || !pm.fromCache;
    }
    if (!covered || !fresh || partsNs < options.minPartsNs) continue;
    const double ratio = m.medianNs / partsNs;
    if (ratio <= 1.0 || ratio > 1.0 + options.margin) continue;
    ties.push_back(NearTie{id, std::vector<int32_t>(parts.begin(), parts.end()), ratio});
  }
  // The largest first: they move the plan's total the most.
  std::sort(ties.begin(), ties.end(), [&](const NearTie& a, const NearTie& b) {
    return measurements[static_cast<size_t>(a.fused)].medianNs >
           measurements[static_cast<size_t>(b.fused)].medianNs;
  });
  if (static_cast<int>(ties.size()) > options.maxTies) ties.resize(static_cast<size_t>(options.maxTies));
  return ties;
}

NearTieReport remeasureNearTies(const Graph& graph, const CandidateSet& candidates,
                                std::vector<Measurement>& measurements,
                                const std::vector<NearTie>& ties, CandidateCoster& coster) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  NearTieReport report;
  report.ties = static_cast<int>(ties.size());
  if (ties.empty()) return report;
  // Candidates that are the same kernel share a measurement.
  std::map<std::pair<std::string, std::string>, std::vector<size_t>> sameKernel;
  std::vector<std::pair<std::string, std::string>> keyOf(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    keyOf[i] = {candidates[i].backend, candidateSignature(graph, candidates[i].nodes).hash};
    sameKernel[keyOf[i]].push_back(i);
  }
  std::set<std::pair<std::string, std::string>> done;
  auto again = [&](int32_t c) {
    const size_t i = static_cast<size_t>(c);
    if (!done.insert(keyOf[i]).second) return;
    const Measurement before = measurements[i];
    const Measurement kept = coster.remeasure(candidates[i], before);
    ++report.remeasured;
    if (kept.medianNs < before.medianNs) ++report.lowered;
    for (size_t j : sameKernel[keyOf[i]]) measurements[j] = kept;
  };
  for (const NearTie& t : ties) {
    again(t.fused);
    for (int32_t p : t.parts) again(p);
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

OpLevelResult refineAtNearTies(const Graph& graph, const CandidateSet& candidates,
                               std::vector<Measurement>& measurements, OpLevelProblem& problem,
                               const OpLevelResult& first, CandidateCoster& coster,
                               const CancellationToken* cancel, NearTieReport* report) {
  const std::vector<NearTie> ties = findNearTies(candidates, measurements, first.chosen, problem.allowed);
  const NearTieReport r = remeasureNearTies(graph, candidates, measurements, ties, coster);
  if (report) *report = r;
  if (ties.empty()) return first;
  problem.costs.clear();
  for (const auto& m : measurements) problem.costs.push_back(m.cost());
  return optimizeOpLevel(problem, nullptr, cancel);
}

}  // namespace collage
