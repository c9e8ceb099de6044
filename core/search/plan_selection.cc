#include "core/search/plan_selection.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <limits>
#include <memory>
#include <sstream>

#include "core/ir/error.h"
#include "core/measure/machine_timing_lock.h"
#include "core/ops/reference_executor.h"

namespace collage {

EndToEndSelection selectPlanByEndToEnd(const Graph& graph, const std::vector<Plan>& plans,
                                       const std::vector<std::string>& labels, const BackendLookup& backends,
                                       const EndToEndOptions& options, const CancellationToken* cancel) {
  COLLAGE_CHECK(!plans.empty() && plans.size() == labels.size(), "one label per plan");
  using Clock = std::chrono::steady_clock;
  EndToEndSelection out;
  out.timings.resize(plans.size());
  std::vector<std::unique_ptr<Session>> sessions(plans.size());
  const std::vector<Tensor> inputs = randomInputs(graph);
  // Timed alone on the machine (core/measure/machine_timing_lock.h).
  MachineTimingLock turn("end-to-end check of " + graph.sourcePath,
                         [&](const std::string& holder) { out.waitedFor = holder; });
  double oneRoundMs = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    out.timings[i].label = labels[i];
    out.timings[i].medianMs = std::numeric_limits<double>::infinity();
    try {
      sessions[i] = std::make_unique<Session>(graph, plans[i], backends);
      auto t0 = Clock::now();
      sessions[i]->run(inputs);  // untimed: page faults, thread start-up, lazy set-up
      oneRoundMs += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    } catch (const Error& e) {
      if (i == 0) {
        // The plan must run wherever the model runs; where the model does
        // not run on these inputs, there is nothing to compare.
        try {
          ReferenceExecutor(graph).run(inputs);
        } catch (const Error& modelError) {
          out.skipped = std::string("the model does not run on random inputs: ") + modelError.what();
          return out;
        }
        throw;
      }
      sessions[i].reset();
      out.timings[i].error = e.what();
    }
  }
  const int rounds = std::clamp(static_cast<int>(options.budgetSeconds * 1000 / std::max(oneRoundMs, 1e-3)),
                                options.minRounds, options.maxRounds);
  std::vector<std::vector<double>> ms(plans.size());
  for (int r = 0; r < rounds && !(cancel && cancel->cancelled()); ++r)
    for (size_t i = 0; i < plans.size(); ++i) {
      if (!sessions[i]) continue;
      auto t0 = Clock::now();
      sessions[i]->run(inputs);
      ms[i].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  for (size_t i = 0; i < plans.size(); ++i) {
    std::vector<double>& v = ms[i];
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    PlanRunTiming& t = out.timings[i];
    t.runs = static_cast<int>(v.size());
    t.medianMs = v[v.size() / 2];
    t.spread = t.medianMs > 0 ? (v[3 * v.size() / 4] - v[v.size() / 4]) / t.medianMs : 0;
  }
  out.chosen = chooseByPairedRounds(ms, out.timings);
  return out;
}

size_t chooseByPairedRounds(const std::vector<std::vector<double>>& ms,
                            std::vector<PlanRunTiming>& timings) {
  COLLAGE_CHECK(ms.size() == timings.size(), "one row of rounds per plan");
  if (ms.empty() || ms[0].empty()) return 0;
  size_t chosen = 0;
  double chosenRatio = 1;
  for (size_t i = 1; i < ms.size(); ++i) {
    const size_t rounds = std::min(ms[0].size(), ms[i].size());  // a cancelled last round may be short
    if (rounds == 0) continue;
    std::vector<double> ratios;
    int faster = 0;
    for (size_t r = 0; r < rounds; ++r) {
      ratios.push_back(ms[i][r] / ms[0][r]);
      if (ms[i][r] < ms[0][r]) ++faster;
    }
    std::sort(ratios.begin(), ratios.end());
    const double median = rounds % 2 ? ratios[rounds / 2] : (ratios[rounds / 2 - 1] + ratios[rounds / 2]) / 2;
    timings[i].pairedRatio = median;
    timings[i].fasterRounds = faster;
    const bool passes = median < 1 - EndToEndSelection::kMinGain &&
                        faster >= std::ceil(EndToEndSelection::kMinFasterShare * static_cast<double>(rounds));
    if (passes && median < chosenRatio) {
      chosen = i;
      chosenRatio = median;
    }
  }
  return chosen;
}

std::vector<NamedPlacement> baselinePlacements(const OpLevelProblem& problem,
                                               const std::vector<std::string>& order,
                                               std::vector<std::string>* uncovered) {
  std::vector<NamedPlacement> out;
  const std::string fallback = completeBackend(problem, order);
  for (const std::string& backend : order) {
    try {
      out.push_back({"only " + backend, "only_" + backend,
                     singleBackendPlacement(problem, backend, fallback)});
    } catch (const Error& e) {
      if (uncovered) uncovered->push_back(backend + ": " + e.what());
    }
  }
  out.push_back({"priority", "priority", priorityPlacement(problem, order)});
  return out;
}

int choosePlacementByEndToEnd(const Graph& graph, const OpLevelResult& opLevel,
                              const std::vector<NamedPlacement>& baselines,
                              const std::function<Plan(const OpLevelResult&)>& planOf,
                              const BackendLookup& backends, EndToEndSelection* selection,
                              const CancellationToken* cancel) {
  auto sorted = [](std::vector<int32_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  const std::vector<int32_t> own = sorted(opLevel.chosen);
  std::vector<Plan> plans = {planOf(opLevel)};
  std::vector<std::string> labels = {"op-level"};
  std::vector<int> index = {-1};
  for (size_t i = 0; i < baselines.size(); ++i) {
    if (sorted(baselines[i].result.chosen) == own) continue;  // the same plan: nothing to learn
    if (baselines[i].result.total > opLevel.total * kMaxPredictedRatio) continue;
    plans.push_back(planOf(baselines[i].result));
    labels.push_back(baselines[i].label);
    index.push_back(static_cast<int>(i));
  }
  EndToEndSelection s = selectPlanByEndToEnd(graph, plans, labels, backends, {}, cancel);
  const int chosen = index[s.chosen];
  if (selection) *selection = std::move(s);
  return chosen;
}

std::string describeSelection(const EndToEndSelection& selection) {
  if (!selection.skipped.empty()) return "  no plan compared (" + selection.skipped + ")\n";
  std::ostringstream s;
  if (!selection.waitedFor.empty())
    s << "  (waited for the machine's timing lock, held by " << selection.waitedFor << ")\n";
  const double base = selection.timings.at(0).medianMs;
  s.setf(std::ios::fixed);
  s.precision(3);
  for (size_t i = 0; i < selection.timings.size(); ++i) {
    const PlanRunTiming& t = selection.timings[i];
    s << "  " << t.label << ": ";
    if (!t.error.empty()) {
      s << "cannot run (" << t.error << ")\n";
      continue;
    }
    s << t.medianMs << " ms (spread " << std::setprecision(1) << 100 * t.spread << "%, " << t.runs
      << " runs)" << std::setprecision(3);
    if (i != 0 && std::isfinite(base) && base > 0)
      s << ", " << std::setprecision(2) << t.pairedRatio << "x the op-level plan round by round (faster in "
        << t.fasterRounds << " of " << t.runs << ")" << std::setprecision(3);
    if (i == selection.chosen) s << "  <- chosen";
    s << "\n";
  }
  return s.str();
}

}  // namespace collage
