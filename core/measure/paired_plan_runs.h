// Whole plans timed against each other: the graph-level search's fitness.
//
// A plan's speed is measured, never modelled: both plans are built as
// Sessions and run in rounds of one run each, the order alternating from
// round to round (A B, B A, A B, ...), so the drift of this shared machine
// hits both alike and their per-round ratio cancels it. Each timed run
// follows an untimed run of the same plan, so it is timed as a deployed
// plan runs, again and again, not in the caches the other plan left. Before timing, the
// new plan's outputs are checked against the reference executor (a region
// that computes something else costs that plan only).
//
// It runs in the measurement worker (core/measure/measurer.h), so a region
// that crashes or hangs takes down the worker, not the search. The worker
// keeps its kernels between requests (core/runtime/kernel_cache.h): plans
// that share groups share compiled kernels.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/ir/graph.h"
#include "core/ir/tensor_compare.h"
#include "core/measure/measurement.h"
#include "core/plan/plan.h"
#include "core/runtime/kernel_cache.h"
#include "core/measure/plan_check.h"
#include "core/runtime/session.h"

namespace collage {

// The median of `v` (the mean of the middle two for an even count; 0 when
// empty), and its relative inter-quartile spread (p75 - p25) / median: the
// one summary of a series of runs every comparison of plans uses.
double medianOf(std::vector<double> v);
double relativeSpreadOf(std::vector<double> v);

// How PairedPlanRuns::message starts when nothing could be compared: plan B
// (the incumbent) could not be built or run, or the model itself (the
// reference executor) fails on the random inputs (an If branch that cannot
// run at the bound sizes, taken by a random condition).
inline constexpr const char* kReferencePlanFailed = "the reference plan: ";
inline constexpr const char* kModelFailsOnTheInputs = "the model itself fails on random inputs: ";

// How rounds are timed (each timed run after a run of its own plan). Part
// of the key plan runs are stored under (graphLevelModelKey), so that rows
// timed another way, whose ratios mean something else, are not reused.
inline constexpr const char* kPairedRunMethod = "own-run-first";

struct PairedRunOptions {
  int minRounds = 5;
  int maxRounds = 15;
  double seconds = 1.0;  // rounds continue past minRounds until this much time has passed
  bool verify = true;    // check plan A's outputs against the reference first
};

struct PairedPlanRuns {
  // Ok: timed. Invalid: plan A does not compile, cannot run or computes
  // wrong outputs (message says which group or output). Failed / TimedOut:
  // it crashed or hung the worker.
  MeasurementStatus status = MeasurementStatus::Failed;
  std::string message;
  std::vector<double> aMs, bMs;  // one run each per round
  int kernelsCompiled = 0;       // by this request (the rest came from the worker's cache)
  int kernelsReused = 0;
  double seconds = 0;  // wall time of the request, compiling included
  // The worker crashed, hung or answered nonsense (IsolatedMeasurer): the
  // run says something about this minute of the machine, maybe nothing
  // lasting about the plan, so it is retried by a later search, not stored.
  bool workerLost = false;

  bool ok() const { return status == MeasurementStatus::Ok; }
  // A result that holds on this machine until its kernels change: timed, or
  // refused / wrong with the worker's own reason.
  bool isVerdict() const { return !workerLost && status != MeasurementStatus::TimedOut; }
  // Median over rounds of aMs[r] / bMs[r], and the share of rounds A won.
  double medianRatio() const;
  double aFasterShare() const;
  double aMedianMs() const;
  double bMedianMs() const;
  // The one decision rule on paired rounds (the end-to-end check and the
  // graph-level search): A replaces B when its median ratio is below
  // 1 - minGain and it was the faster in at least minFasterShare of the
  // rounds, so noise does not trade a plan for an equal one.
  bool aReplacesB(double minGain, double minFasterShare) const {
    return ok() && medianRatio() < 1 - minGain && aFasterShare() >= minFasterShare;
  }
};

nlohmann::json toJson(const PairedPlanRuns& runs);
PairedPlanRuns pairedPlanRunsFromJson(const nlohmann::json& j);

// How long a pairing of plans A and B may take in the measurement worker:
// `base` (the measurer's limit), or more where the plans' predicted times
// (Plan::predictedNs) say their runs need it. A pairing runs each plan at
// least 2 * minRounds + 3 times (a first run, the check, a warm-up, two runs a round)
// and keeps going for options.seconds; on a large model (a 1024x1024 U-Net:
// several seconds a run) a fixed 60 s killed every pairing. Four times that
// need, for a busy machine and predictions that run short.
double pairedRunTimeoutSeconds(const Plan& a, const Plan& b, const PairedRunOptions& options, double base);

// The worker side: builds Sessions through one KernelCache and keeps the last
// few (the incumbent plan is timed again and again).
class PairedPlanRunner {
 public:
  PairedPlanRunner(const Graph& graph, BackendLookup backends);
  PairedPlanRuns run(const Plan& a, const Plan& b, const PairedRunOptions& options);

 private:
  Session& sessionFor(const Plan& plan);
  std::string verify(Session& session);  // "" or the first bad output

  const Graph& graph_;
  BackendLookup backends_;
  KernelCache cache_;
  std::vector<std::pair<std::string, std::unique_ptr<Session>>> sessions_;  // most recent last
  std::vector<Tensor> inputs_;
  std::vector<Tensor> expected_;  // the reference's outputs, computed on first use
  std::map<std::string, std::string> verified_;  // plan key -> "" or its problem
  PlanCheckMemo checkMemo_;                      // kernels rerun alone, ties: shared by the plans
};

}  // namespace collage
