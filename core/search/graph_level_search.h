// The graph-level search: Collage's second level. Starting from a plan the
// op-level DP made (or the baseline the end-to-end check kept), it decides
// which runs of groups to hand, as regions, to a graph library (a backend
// that optimises across kernels: oneDNN keeping its blocked layout through a
// region, the native backend fusing elementwise and reduction regions), by
// an evolutionary search (core/search/evolutionary_search.h) over the genome
// of core/search/region_genome.h.
//
// Fitness is measured, never modelled. Each new plan runs whole in the
// measurement worker, paired round by round with the best plan so far
// (core/measure/paired_plan_runs.h), after its outputs are checked against
// the reference; its cost is its median per-round ratio to the best times
// the best's cost (the starting plan costs 1). It replaces the best only
// when it is faster by more than minGain in at least minFasterShare of the
// rounds. A plan that crashes or hangs the worker costs that plan only.
// Every plan run is kept in the measurement database, keyed by the model,
// the starting plan and the plan, so a second search reuses what the first
// measured and starts from its best genomes. At the end the best plan is
// timed against the starting plan once more, with more rounds, and kept
// only if it still wins: the search never returns a slower plan.
//
// With GraphLevelOptions::evaluator set (`optimize --target C
// --target-graph-level`), the plans are timed elsewhere instead: each
// generation's new plans go out at once (a Slurm job array), each paired
// with the incumbent of that generation; a plan whose answer is not back by
// the generation's deadline keeps the incumbent's cost as its estimate (it
// cannot become the best on it) and is collected when it arrives; the final
// check runs through the evaluator too.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/hardware_fingerprint.h"
#include "core/ir/search_events.h"
#include "core/measure/measurement_db.h"
#include "core/measure/measurer.h"
#include "core/measure/paired_plan_runs.h"
#include "core/plan/plan.h"
#include "core/runtime/backend.h"
#include "core/search/evolutionary_search.h"
#include "core/search/placement_constraints.h"
#include "core/search/region_genome.h"

namespace collage {

// Where the search's plans are timed when not in this machine's worker: a
// whole generation at once, each plan paired with the incumbent in one
// process so the ratio cancels the speed of the machine that ran it (a
// Slurm job array: core/search/slurm_plan_evaluator.h).
struct PlanToTime {
  std::string key;  // placementKey
  const Plan* plan = nullptr;
  std::string genome;  // RegionEncoding::toString
};
struct TimedPlan {
  std::string planKey;
  std::string incumbentKey;  // the plan it was paired with
  PairedPlanRuns runs;
};
class PlanEvaluator {
 public:
  virtual ~PlanEvaluator() = default;
  // Times `plans` against `incumbent` and waits until the generation's
  // deadline. Returns what came back by then: this generation's plans, and
  // any sent by an earlier call that have arrived since (each names its
  // incumbent). A plan not returned is still out: the search keeps its
  // estimate (the incumbent's cost) and collects it from a later call.
  virtual std::vector<TimedPlan> timeGeneration(const std::vector<PlanToTime>& plans,
                                                const std::string& incumbentKey, const Plan& incumbent,
                                                const CancellationToken* cancel) = 0;
  // The final check: `best` against `start` with `runs`, on one machine.
  virtual PairedPlanRuns recheck(const Plan& best, const Plan& start, const PairedRunOptions& runs,
                                 const CancellationToken* cancel) = 0;
};

struct GraphLevelOptions {
  EvolutionOptions evolution;
  PairedRunOptions runs;                            // per genome against the best
  PairedRunOptions finalRuns{9, 31, 4.0, false};    // the best against the starting plan
  double timeoutSeconds = 120;                      // per paired request
  double minGain = 0.02;                            // as the end-to-end check (plan_selection.h)
  double minFasterShare = 0.75;
  // The model's identity for the database: its sha256 and input shapes
  // (graphLevelModelKey).
  std::string modelKey;
  // Called on the search's thread whenever the best plan changes, with it
  // and its estimated time (ms).
  std::function<void(const Plan&, double ms)> onBestPlan;
  // Set: each generation's plans go out as one batch through it, and the
  // final check too; the measurer is not used. Null: this machine's worker.
  PlanEvaluator* evaluator = nullptr;
};

struct GraphLevelResult {
  Plan plan;              // the plan to keep: the best found, or the starting plan
  bool improved = false;  // plan differs from the starting plan
  EvolutionResult evolution;
  // The final check, paired: medians of the starting plan and of the best.
  double baseMs = 0;
  double bestMs = 0;
  double gain = 1;  // the starting plan's time over the best's (per-round median)
  std::string verdict;                 // one line: what the final check decided and why
  std::vector<std::string> changes;    // describeRegionChanges(start, plan)
  int kernelsCompiled = 0;             // by the worker, over the whole search
  int kernelsReused = 0;
  int storedRuns = 0;                  // plan runs found in the database at the start
  int failedPlans = 0;                 // genomes whose plan could not compile, run or verify
  int plansStillOut = 0;               // sent to the evaluator, not back by their deadline
  int plansCollectedLate = 0;          // came back after their generation's deadline
};

// The graph libraries of a backend set: the backends that compile regions
// (Backend::compilesRegions) among `allowed` (all when empty).
std::vector<GraphLibrary> graphLibrariesOf(const Graph& graph, const std::vector<Backend*>& backends,
                                           const std::vector<std::string>& allowed = {});

// The libraries restricted by the user's pins and forbids: a region is
// refused when it holds a node pinned to another backend, a node of a pinned
// group (that group must stay one kernel of its own), or a node the library
// is forbidden to run. Throws Error for a selector that matches no node.
std::vector<GraphLibrary> honouringConstraints(const Graph& graph, std::vector<GraphLibrary> libraries,
                                               const PlacementConstraints& constraints);

// "sha256:...;input=1x3x224x224;timing=...": what the database keys plan
// runs by (the model, its shapes, how the rounds were timed).
std::string graphLevelModelKey(const Plan& plan);

// Runs the search from `start` (a plan of `graph` whose groups have costs).
// `db` may be null (nothing reused or stored). Stops as the evolution options
// say or on `cancel`, and returns the best found.
GraphLevelResult runGraphLevelSearch(const Graph& graph, const Plan& start,
                                     const std::vector<GraphLibrary>& libraries, IsolatedMeasurer& measurer,
                                     MeasurementDb* db, const HardwareFingerprint& fingerprint,
                                     const GraphLevelOptions& options, SearchObserver* observer,
                                     const CancellationToken* cancel);

// "graph-level: 1.12x faster than the starting plan (23.1 -> 20.6 ms, paired), 14 generations, ..."
std::string describeGraphLevel(const GraphLevelResult& result);

}  // namespace collage
