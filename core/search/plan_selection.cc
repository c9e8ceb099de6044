#include "core/search/plan_selection.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <limits>
#include <memory>
#include <sstream>

#include "core/ir/error.h"

namespace collage {

std::string referenceCheckSkipped(double referenceSeconds, double timeLimitSeconds) {
  if (!(referenceSeconds > kReferenceShareOfLimit * timeLimitSeconds)) return "";  // NaN: not known, so checked
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.0f", referenceSeconds);
  return std::string("not checked against the reference executor: it would need about ") + seconds +
         " s on this model; `collage run --verify` checks the written plan";
}

EndToEndSelection selectPlanByEndToEnd(const std::vector<Plan>& plans,
                                       const std::vector<std::string>& labels, const PlanPairTimer& timePair,
                                       const EndToEndOptions& options, const CancellationToken* cancel) {
  COLLAGE_CHECK(!plans.empty() && plans.size() == labels.size(), "one label per plan");
  EndToEndSelection out;
  out.timings.resize(plans.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    out.timings[i].label = labels[i];
    out.timings[i].medianMs = std::numeric_limits<double>::infinity();
  }
  PairedRunOptions runOptions;
  runOptions.minRounds = options.minRounds;
  runOptions.maxRounds = options.maxRounds;
  runOptions.seconds = options.budgetSeconds / static_cast<double>(std::max<size_t>(1, plans.size() - 1));
  // A baseline that computes something else is never chosen; unless the
  // reference cannot run in time (then `unverified` says so).
  out.unverified = referenceCheckSkipped(options.referenceSeconds, options.timeLimitSeconds);
  runOptions.verify = out.unverified.empty();
  // plans[0]'s time is its median over every pairing (alone: against itself).
  std::vector<double> ownMs;
  std::string ownFailure;
  double chosenRatio = 1;
  for (size_t i = plans.size() == 1 ? 0 : 1; i < plans.size(); ++i) {
    if (cancel && cancel->cancelled()) break;
    const PairedPlanRuns runs = timePair(plans[i], plans[0], runOptions);
    if (!runs.ok()) {
      if (runs.message.rfind(kReferencePlanFailed, 0) == 0 ||
          runs.message.rfind(kModelFailsOnTheInputs, 0) == 0) {
        ownFailure = runs.message;
        break;  // plans[0] cannot run: nothing can be compared with it
      }
      if (i != 0) out.timings[i].error = runs.message;
      continue;
    }
    ownMs.insert(ownMs.end(), runs.bMs.begin(), runs.bMs.end());
    if (i == 0) continue;
    PlanRunTiming& t = out.timings[i];
    t.runs = static_cast<int>(runs.aMs.size());
    t.medianMs = runs.aMedianMs();
    t.spread = relativeSpreadOf(runs.aMs);
    t.pairedRatio = runs.medianRatio();
    t.fasterRounds = static_cast<int>(std::lround(runs.aFasterShare() * static_cast<double>(t.runs)));
    if (runs.aReplacesB(EndToEndSelection::kMinGain, EndToEndSelection::kMinFasterShare) &&
        t.pairedRatio < chosenRatio) {
      out.chosen = i;
      chosenRatio = t.pairedRatio;
    }
  }
  // Every other plan was rejected before its rounds, so plans[0] has no
  // time yet: paired with itself it is timed, and checked against the
  // reference as plan A (seen on a landmark net whose "only onednn" and
  // "priority" plans both computed wrong outputs: the op-level plan was
  // reported as "inf ms (0 runs)" and chosen).
  std::string ownNote;
  const bool cancelled = cancel && cancel->cancelled();
  if (ownMs.empty() && ownFailure.empty() && plans.size() > 1 && !cancelled) {
    const PairedPlanRuns runs = timePair(plans[0], plans[0], runOptions);
    if (runs.ok()) {
      ownMs = runs.bMs;
      ownNote = "timed alone: every plan paired with it was rejected";
    } else if (runs.message.rfind(kReferencePlanFailed, 0) == 0 ||
               runs.message.rfind(kModelFailsOnTheInputs, 0) == 0) {
      ownFailure = runs.message;
    } else {
      out.timings[0].error = runs.message;
    }
  }
  // plans[0] runs but computes wrong results: it is never written. The
  // others, each timed alone (and so checked as plan A), stand in its place;
  // the fastest that passes is chosen. With none, the error names the
  // kernel at fault.
  const std::string wrongPrefix = std::string(kReferencePlanFailed) + "wrong result: ";
  if (ownFailure.rfind(wrongPrefix, 0) == 0 && !cancelled) {
    out.timings[0].error = ownFailure.substr(std::strlen(kReferencePlanFailed));
    for (size_t i = 1; i < plans.size(); ++i) {
      if (cancel && cancel->cancelled()) break;
      const PairedPlanRuns runs = timePair(plans[i], plans[i], runOptions);
      PlanRunTiming& t = out.timings[i];
      if (!runs.ok()) {
        t.error = runs.message.rfind(kReferencePlanFailed, 0) == 0
                      ? runs.message.substr(std::strlen(kReferencePlanFailed))
                      : runs.message;
        continue;
      }
      t.runs = static_cast<int>(runs.aMs.size());
      t.medianMs = runs.aMedianMs();
      t.spread = relativeSpreadOf(runs.aMs);
      t.note = "timed alone: the op-level plan computes wrong results";
      if (out.chosen == 0 || t.medianMs < out.timings[out.chosen].medianMs) out.chosen = i;
    }
    if (out.chosen != 0) return out;
  }
  if (!ownFailure.empty()) {
    // The plan must run wherever the model runs; where the model itself does
    // not run on random inputs, there is nothing to compare.
    if (ownFailure.rfind(kModelFailsOnTheInputs, 0) == 0) {
      out.skipped = ownFailure;
      out.chosen = 0;
      return out;
    }
    const bool wrong = ownFailure.rfind(wrongPrefix, 0) == 0;
    throw Error("the " + labels[0] + (wrong ? " plan computes wrong results, and no other plan passed: "
                                            : " plan cannot run: ") +
                ownFailure.substr(std::strlen(kReferencePlanFailed)));
  }
  PlanRunTiming& own = out.timings[0];
  own.note = ownNote;
  own.runs = static_cast<int>(ownMs.size());
  if (!ownMs.empty()) {
    own.spread = relativeSpreadOf(ownMs);
    own.medianMs = medianOf(ownMs);
  }
  return out;
}

double chosenPlanMs(const EndToEndSelection& selection) {
  if (!selection.skipped.empty() || selection.chosen >= selection.timings.size()) return 0;
  const PlanRunTiming& t = selection.timings[selection.chosen];
  return t.error.empty() && std::isfinite(t.medianMs) ? t.medianMs : 0;
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

int choosePlacementByEndToEnd(const OpLevelResult& opLevel,
                              const std::vector<NamedPlacement>& baselines,
                              const std::function<Plan(const OpLevelResult&)>& planOf,
                              const PlanPairTimer& timePair, EndToEndSelection* selection,
                              const CancellationToken* cancel, const EndToEndOptions& options) {
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
  EndToEndSelection s = selectPlanByEndToEnd(plans, labels, timePair, options, cancel);
  const int chosen = index[s.chosen];
  if (selection) *selection = std::move(s);
  return chosen;
}

std::string describeSelection(const EndToEndSelection& selection) {
  if (!selection.skipped.empty()) return "  no plan compared (" + selection.skipped + ")\n";
  std::ostringstream s;
  if (!selection.unverified.empty()) s << "  " << selection.unverified << "\n";
  const double base = selection.timings.at(0).medianMs;
  s.setf(std::ios::fixed);
  s.precision(3);
  for (size_t i = 0; i < selection.timings.size(); ++i) {
    const PlanRunTiming& t = selection.timings[i];
    s << "  " << t.label << ": ";
    // Only plans[0] is chosen without a time: the search's own plan, kept
    // when no plan passed (selectPlanByEndToEnd).
    const char* kept = i == selection.chosen ? "; kept, as no plan passed the check" : "";
    if (!t.error.empty()) {
      const bool wrong = t.error.rfind("wrong result: ", 0) == 0;
      s << "rejected" << (wrong ? " (" : ", cannot run (") << t.error << ")" << kept << "\n";
      continue;
    }
    if (t.runs == 0) {
      s << "not timed" << (i == selection.chosen ? "; kept" : "") << "\n";
      continue;
    }
    s << t.medianMs << " ms (spread " << std::setprecision(1) << 100 * t.spread << "%, " << t.runs
      << " runs" << (t.note.empty() ? "" : "; " + t.note) << ")" << std::setprecision(3);
    if (i != 0 && std::isfinite(base) && base > 0)
      s << ", " << std::setprecision(2) << t.pairedRatio << "x the op-level plan round by round (faster in "
        << t.fasterRounds << " of " << t.runs << ")" << std::setprecision(3);
    if (i == selection.chosen) s << "  <- chosen";
    s << "\n";
  }
  return s.str();
}

}  // namespace collage
