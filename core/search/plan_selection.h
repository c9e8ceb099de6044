// The last step of an optimisation: run the op-level plan and the baselines
// end to end, each baseline paired with the op-level plan in alternating
// rounds in the measurement worker, and keep the fastest.
//
// Why: the op-level DP adds kernel costs measured one kernel at a time, with
// that kernel's data hot in the caches. In a whole run kernels share the
// caches and pay their layout changes at every boundary, so the cheapest sum
// is not always the fastest plan. Measured on ResNet-50 (2 threads): the DP
// split the bottleneck blocks into single-conv oneDNN groups (predicted
// 51 ms) that ran in 55 ms, while the priority placement's whole-block
// groups ran in 50 ms. This check measures what the sum cannot see, on a
// handful of whole plans; it is a first step of the graph-level search,
// which measures whole plans by the hundred.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/search/op_level_optimizer.h"
#include "core/plan/plan.h"
#include "core/ir/search_events.h"
#include "core/measure/paired_plan_runs.h"
#include "core/runtime/session.h"

namespace collage {

struct PlanRunTiming {
  std::string label;          // "op-level", "priority", "only onednn"
  double medianMs = 0;        // +inf when the plan could not be compiled or run
  double spread = 0;          // (p75 - p25) / median
  int runs = 0;
  std::string error;          // why it was rejected: it could not run, or computes a wrong result
  std::string note;           // how it was timed, where not as usual
  // Against plans[0], round by round (the two ran one after the other, so
  // the machine's drift cancels): the median of this plan's time over
  // plans[0]'s, and in how many rounds this plan was the faster.
  double pairedRatio = 1;
  int fasterRounds = 0;
};

struct EndToEndSelection {
  size_t chosen = 0;  // index into the plans
  std::vector<PlanRunTiming> timings;
  // Why nothing was compared, when the model itself (the reference
  // executor) fails on random inputs (an If branch that cannot run at the
  // bound sizes, taken by a random condition): plans[0] is kept.
  std::string skipped;
  // Why the plans were timed without the check against the reference
  // executor (referenceCheckSkipped), else empty.
  std::string unverified;
  // Another plan replaces plans[0] only when, round by round, it is faster
  // by more than this fraction (the median of its per-round ratios) and was
  // the faster in at least kMinFasterShare of the rounds, so noise does not
  // trade the search's plan for an equal one (seen on r3d_18: plans 5 %
  // apart with 7 % spreads swapped places between runs). Pairing the rounds
  // cancels the drift both plans share, which per-plan spreads cannot.
  static constexpr double kMinGain = 0.02;
  static constexpr double kMinFasterShare = 0.75;
};

struct EndToEndOptions {
  double budgetSeconds = 4;  // for the timed runs, shared by the pairings
  int minRounds = 5;         // fewer let one slow run decide (seen on r3d_18 at 3)
  int maxRounds = 25;
  // One run of the model on the reference executor, estimated
  // (estimateReferenceRun; NaN: not known), and the worker's limit for one
  // paired request: see referenceCheckSkipped.
  double referenceSeconds = std::numeric_limits<double>::quiet_NaN();
  double timeLimitSeconds = std::numeric_limits<double>::infinity();
};

// The share of the worker's limit for one paired request that the
// reference executor's estimate may take: the first pairing runs it once,
// then builds, checks and times two plans within the same limit, and the
// estimate is a lower bound (kernel_estimate.h). Measured on the U-Net
// stand-ins of issue #30 at 1024x1024 (shared machine): int8 dynamic
// estimated 2.7 s, ran 5.7 to 7.8 s; float estimated 2.8 s, ran 7.7 s. A
// tenth of the limit keeps the real run under about a third of it.
inline constexpr double kReferenceShareOfLimit = 0.1;

// Empty when a check of plans against the reference executor fits
// (referenceSeconds unknown, or at most kReferenceShareOfLimit of
// timeLimitSeconds); else why plans are timed without it: "not checked
// against the reference executor: it would need about 410 s on this model;
// `collage run --verify` checks the written plan". A check that cannot
// finish would cost every plan its timing (the worker is killed at the
// limit), and the reference's speed is no property of the plans.
std::string referenceCheckSkipped(double referenceSeconds, double timeLimitSeconds);

// Times plan A against plan B in paired, alternating rounds
// (core/measure/paired_plan_runs.h): in the product, in the measurement
// worker (IsolatedMeasurer::timePlans), so a baseline that crashes or hangs
// costs that baseline only, never the app.
using PlanPairTimer =
    std::function<PairedPlanRuns(const Plan& a, const Plan& b, const PairedRunOptions& options)>;

// Times every other plan against plans[0] (the search's own) in paired
// rounds, each checked against the reference first, and keeps the one with
// the lowest median ratio among those PairedPlanRuns::aReplacesB accepts
// (kMinGain, kMinFasterShare), else plans[0]. Without the check where
// referenceCheckSkipped says so (`unverified` then says why). plans[0]'s time is its median
// over all the pairings (alone, it is paired with itself). A plan that fails
// to compile, run or verify is reported and never chosen; when plans[0]
// cannot run the Error propagates (the search's plan must run), unless the
// model itself fails on random inputs (then `skipped` says so). When every
// other plan was rejected, plans[0] is paired with itself, so it is timed
// and checked against the reference too (its timing's `note` says so); if
// it fails that check it is kept, nothing else being left, with its
// `error` saying why. Stops between plans when `cancel` is set.
EndToEndSelection selectPlanByEndToEnd(const std::vector<Plan>& plans,
                                       const std::vector<std::string>& labels, const PlanPairTimer& timePair,
                                       const EndToEndOptions& options = {},
                                       const CancellationToken* cancel = nullptr);

// The chosen plan's median when it was timed and passed the check (a
// prediction of what it runs in: collage run measures the same thing), else
// 0: nothing compared (`skipped`), or the plan kept was rejected.
double chosenPlanMs(const EndToEndSelection& selection);

// The baselines the plan is compared with, from the same measurements: each
// single backend that can cover the graph ("only onednn", with the first
// backend in `order` that runs every node alone covering the rest: see
// completeBackend), then the priority placement in `order` ("priority"). `uncovered` receives "backend: reason"
// for the single backends that cannot.
struct NamedPlacement {
  std::string label;
  std::string file;  // "only_onednn", "priority": for plan files
  OpLevelResult result;
};
std::vector<NamedPlacement> baselinePlacements(const OpLevelProblem& problem,
                                               const std::vector<std::string>& order,
                                               std::vector<std::string>* uncovered = nullptr);

// The search's placement and every baseline that differs from it, run end to
// end (selectPlanByEndToEnd); returns the index into `baselines` of the one
// to keep, or -1 for the search's own. Baselines predicted more than
// kMaxPredictedRatio times the search's total are not run: running a 5x
// slower plan only costs time. The margin is wide because on a loaded
// machine the sum's error differs between plans of one model: ResNet-50's
// priority placement was predicted 1.37x the op-level plan and ran 0.92x of
// it (bench run 20261122-133818). `planOf` builds a plan from a placement;
// `selection` receives the timings (labels "op-level", ...).
inline constexpr double kMaxPredictedRatio = 1.5;
int choosePlacementByEndToEnd(const OpLevelResult& opLevel,
                              const std::vector<NamedPlacement>& baselines,
                              const std::function<Plan(const OpLevelResult&)>& planOf,
                              const PlanPairTimer& timePair, EndToEndSelection* selection,
                              const CancellationToken* cancel = nullptr,
                              const EndToEndOptions& options = {});

// One line per plan: "  op-level: 55.1 ms (spread 2.0%, 25 runs)", "  priority:
// 49.8 ms (...), 0.90x the op-level plan round by round (faster in 24 of 25)
// <- chosen", "  only onednn: rejected (wrong result: output 'y': ...; group 3
// on onednn (...), rerun alone on the reference's inputs: ...)". A plan
// rejected or never timed is never shown as chosen with a time.
std::string describeSelection(const EndToEndSelection& selection);

}  // namespace collage
