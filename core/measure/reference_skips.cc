#include "core/measure/reference_skips.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/measure/candidate_costs.h"

namespace collage {

ReferenceVerdict judgeReferenceCandidate(const Graph& graph, const CandidateSet& candidates, size_t i,
                                         const KernelEstimate& estimate,
                                         const std::vector<Measurement>& measured,
                                         const ReferenceScreen& screen) {
  ReferenceVerdict v;
  const Candidate& c = candidates[i];
  // Per node, the cheapest other measured candidate holding it; their sum
  // is what the other candidates take for these nodes (a candidate holding
  // several of them counted once per node: an upper bound).
  double alternative = 0;
  std::vector<NodeId> alone;  // nodes no other measured candidate holds
  c.nodes.forEach([&](NodeId n) {
    Cost best = kInvalidCost;
    for (int32_t j : candidates.covering(n)) {
      if (static_cast<size_t>(j) == i || static_cast<size_t>(j) >= measured.size()) continue;
      const Measurement& m = measured[static_cast<size_t>(j)];
      if (m.status == MeasurementStatus::Ok) best = std::min(best, m.cost());
    }
    if (isKnown(best))
      alternative += best;
    else
      alone.push_back(n);
  });
  const std::string what = c.backend + " " + opsLabel(graph, c.nodes) + ": reference kernel estimated at " +
                           formatDuration(estimate.ns) + " per run (" + estimate.describe(graph) + ")";
  const double measureSeconds = estimate.ns * 1e-9 * screen.runsPerMeasurement;
  char buf[256];
  if (alone.empty()) {
    v.alternativeNs = alternative;
    if (estimate.ns > screen.factor * alternative) {
      v.skip = true;
      std::snprintf(buf, sizeof buf, ", %.0fx the %s that faster candidates take for the same nodes",
                    alternative > 0 ? estimate.ns / alternative : 0.0, formatDuration(alternative).c_str());
      v.message = what + buf;
      return v;
    }
    if (measureSeconds > screen.timeoutSeconds) {
      v.skip = true;
      std::snprintf(buf, sizeof buf,
                    "; its %d runs would pass the %.0f s measurement timeout, and other candidates "
                    "cover its nodes",
                    screen.runsPerMeasurement, screen.timeoutSeconds);
      v.message = what + buf;
      return v;
    }
    return v;
  }
  if (measureSeconds > kSlowMeasurementWarningSeconds) {
    std::string nodes;
    for (size_t k = 0; k < alone.size() && k < 3; ++k)
      nodes += (k ? ", '" : "'") + graph.node(alone[k]).name + "' (" + graph.node(alone[k]).op + ")";
    if (alone.size() > 3) nodes += " and " + std::to_string(alone.size() - 3) + " more";
    std::snprintf(buf, sizeof buf, "; measuring it takes about %s (at least %d runs; the timeout is %.0f s)",
                  formatDuration(measureSeconds * 1e9).c_str(), screen.runsPerMeasurement,
                  screen.timeoutSeconds);
    v.message = "no faster candidate for " + nodes + ": " + what + buf;
    // It will be killed at the timeout, and the node then has no kernel:
    // say what would let it finish.
    if (measureSeconds > screen.timeoutSeconds) {
      std::snprintf(buf, sizeof buf, "; it will time out unless the per-kernel timeout (--timeout) is at least %.0f s",
                    std::ceil(measureSeconds * 1.5));
      v.message += buf;
    }
  }
  return v;
}

std::string skippedReferencesSummary(int skipped, double estimateSeconds) {
  if (skipped == 0) return "";
  return "skipped " + std::to_string(skipped) + " reference kernel" + (skipped == 1 ? "" : "s") +
         " estimated at " + formatDuration(estimateSeconds * 1e9) + " per run in all (faster candidates exist)";
}

}  // namespace collage
