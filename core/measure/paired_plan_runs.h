// Whole plans timed against each other: the graph-level search's fitness.
//
// A plan's speed is measured, never modelled: both plans are built as
// Sessions and run in rounds of one run each, the order alternating from
// round to round (A B, B A, A B, ...), so the drift of this shared machine
// hits both alike and their per-round ratio cancels it. Before timing, the
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
#include "core/runtime/session.h"

namespace collage {

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
};

nlohmann::json toJson(const PairedPlanRuns& runs);
PairedPlanRuns pairedPlanRunsFromJson(const nlohmann::json& j);

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
};

}  // namespace collage
