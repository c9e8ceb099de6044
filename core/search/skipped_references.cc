#include "core/search/skipped_references.h"

#include <string>

#include "core/ir/error.h"
#include "core/search/op_level_optimizer.h"

namespace collage {

bool measureSkippedIfNoCover(const Graph& graph, const CandidateSet& candidates, const std::vector<bool>& allowed,
                             CandidateCoster& coster, std::vector<Measurement>& measurements,
                             CostingReport& report, SearchObserver* observer, const CancellationToken* cancel) {
  if (report.skipped == 0) return false;
  std::vector<Cost> costs;
  for (const auto& m : measurements) costs.push_back(m.cost());
  const OpLevelProblem problem{&graph, &candidates, costs, [](const std::string&) { return 0.0; }, allowed};
  std::string why;
  try {
    optimizeOpLevel(problem, nullptr, cancel);
    return false;
  } catch (const Error& e) {
    why = e.what();
  }
  std::vector<bool> skipped(candidates.size(), false);
  for (size_t i = 0; i < measurements.size(); ++i)
    skipped[i] = measurements[i].status == MeasurementStatus::Skipped;
  if (observer)
    observer->onLog("the candidates left after skipping " + std::to_string(report.skipped) +
                    " reference kernels cover no plan (" + why + "): measuring them after all");
  coster.setReferenceScreen({});
  CostingReport again;
  const std::vector<Measurement> measured = coster.costAll(candidates, skipped, observer, cancel, &again);
  for (size_t i = 0; i < measured.size(); ++i)
    if (skipped[i]) measurements[i] = measured[i];
  report.measured += again.measured;
  report.cached += again.cached;
  report.failed += again.failed;
  report.environmental += again.environmental;
  report.seconds += again.seconds;
  report.cancelled = report.cancelled || again.cancelled;
  report.skipped = 0;
  report.skippedEstimateSeconds = 0;
  return true;
}

}  // namespace collage
