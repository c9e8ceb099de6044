// The optimize flow shared by the app (and available to any front end):
// enumerate candidates, cost them (database first, then an isolated worker),
// measure switching costs, run the op-level optimizer, build the plan. The
// CLI's `optimize` command is the same flow with terminal output; the app
// runs this on a worker thread and watches it through the SearchObserver.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/patterns/candidate.h"
#include "core/measure/candidate_costs.h"
#include "core/ir/graph.h"
#include "core/measure/measurement.h"
#include "core/search/graph_level_search.h"
#include "core/search/layout_charges.h"
#include "core/search/placement_constraints.h"
#include "core/plan/plan.h"
#include "core/ir/search_events.h"
#include "core/runtime/session.h"
#include "core/ir/sub_graph.h"
#include "core/search/device_costs.h"
#include "core/measure/switch_costs.h"
#include "core/search/plan_selection.h"
#include "core/search/substitution_search.h"

namespace collage {

struct OptimizationJobOptions {
  std::string modelPath;
  std::vector<std::string> inputShapes;  // "name=1x3x224x224", as on the command line
  // The backends, as backends/backend_list.h's BackendSet gives them (core
  // never names a backend): what enumeration needs, and name -> version.
  std::vector<BackendCapabilities> capabilities;
  // (name, version) in the BackendSet's order, which the hardware
  // fingerprint follows (so the app and the CLI share database entries).
  std::vector<BackendVersion> versions;
  std::string dbPath;       // empty = MeasurementDb::defaultPath(); or postgresql://...
  std::string localDbPath;  // with a postgresql:// dbPath, its cache file (empty = the default)
  bool noDb = false;
  double timeoutSeconds = 60;
  // argv prefix of the measurement worker: {"/path/to/collage"}; the job adds
  // "--threads N measure-worker model [--input-shape s]...".
  std::string workerExecutable;
  // The backends by name: the graph-level search's graph libraries and the
  // copy costs of devices need them.
  BackendLookup backends;
  // Unless false (or constraints are given), the op-level plan is run end to
  // end against the baselines, in the measurement worker, and the fastest is
  // kept (core/search/plan_selection.h).
  bool endToEnd = true;
  // Pins and forbids, applied as the CLI's --pin / --forbid are: candidates
  // they exclude are neither measured nor chosen, and the groups holding
  // pinned nodes get origin "user" in the plan. The app passes the manual
  // overrides here (views/override_commands.h).
  PlacementConstraints constraints;
  // Then the graph-level search (core/search/graph_level_search.h) from the
  // kept plan, in the same worker, with regions that honour the constraints,
  // until it saturates or its budget is spent (on by default: the op-level
  // plan alone is the quick answer, `--op-level`). graphLevelOptions.onBestPlan
  // is called on the job's thread.
  bool graphLevel = true;
  GraphLevelOptions graphLevelOptions;
  // First of all, graph substitutions (core/search/substitution_search.h):
  // the model rewritten where that lets the op-level DP place it cheaper,
  // every rewrite checked; the rest of the job then places the rewritten
  // graph, and the plan carries the substitutions. Off with pins or forbids
  // (they name the model's nodes).
  bool substitutions = false;
  SubstitutionSearchOptions substitutionOptions;
  // Before that, the canonical rewrites (core/search/canonical_rewrites.h):
  // exact rules that only remove work (cancel-transposes), applied wherever
  // they hold without costing, and carried by the plan as its substitutions.
  // With the substitution search on they are its first forced rules. Off
  // with pins or forbids, as the search is, or here (--no-canonical-rewrites).
  bool canonicalRewrites = true;
  // A user's substitution rule files (core/rewrite/substitution_spec_file.h)
  // that the caller registered: the measurement workers, which replay a
  // rewritten graph's sites, load them too.
  std::vector<std::string> substitutionRuleFiles;
  // Measure on the machines of a Slurm constraint (a node feature) instead
  // of this one, and plan for them (core/search/target_optimization.h); needs
  // a shared store as dbPath. Empty: this machine.
  std::string target;
  std::string targetWorkDir;  // shared with the nodes; empty = defaultTargetWorkDir()
  int targetBatchSize = 16;   // kernels per array task
  double targetPollSeconds = 2;
  // How long the kernels' Slurm job may take, queueing included, before it
  // is cancelled and the job fails (TargetMeasurementOptions::deadlineSeconds;
  // 0: no limit).
  double targetTimeoutSeconds = 3600;
  // With a target and graphLevel: the graph-level search too, each
  // generation's plans as one Slurm job array (core/search/slurm_plan_evaluator.h),
  // a generation waiting at most targetGenerationSeconds. Off: the target
  // flow stops at the op-level plan.
  bool targetGraphLevel = false;
  double targetGenerationSeconds = 300;
  // The kill switch, for a job (or a jobMeasureFn) whose result nobody wants
  // any more: cancelled from any thread, it kills the measurement worker at
  // once and the job throws MeasurementAborted (core/measure/measurer.h),
  // storing nothing half measured. The `cancel` token instead stops at the
  // next check and keeps what the job has.
  std::shared_ptr<const CancellationToken> abort;
};

struct OptimizationResult {
  bool hasPlan = false;   // false when cancelled before every candidate had a cost
  bool cancelled = false;
  // Each group says which candidate it runs as (PlanGroup::candidate, an
  // index into `candidates`), or none for a region of the graph-level search.
  Plan plan;
  CandidateSet candidates;
  std::vector<Measurement> measurements;  // per candidate
  CostingReport report;
  std::vector<std::string> warnings;
  // The op-level DP's own placement (after the near ties), before the
  // end-to-end check may replace it; and the baselines from the same
  // measurements, with the backends that cannot cover the model ("name: why").
  OpLevelResult opLevel;
  std::vector<NamedPlacement> baselines;
  std::vector<std::string> uncoveredBaselines;
  // The end-to-end check's report (describeSelection), empty when not run,
  // and the label of the baseline it kept ("" for the op-level plan).
  std::string endToEnd;
  std::string endToEndChoice;
  // The graph-level search, when it ran: what it did, and the plan it
  // started from (the diff view compares the two).
  bool graphLevelRan = false;
  GraphLevelResult graphLevel;
  Plan startPlan;

  // The substitution search, when it ran, and the graph the plan places:
  // the model rewritten (null = the model as given: nothing was applied).
  bool substitutionsRan = false;
  SubstitutionSearchResult substitutions;
  std::shared_ptr<const Graph> graph;

  // What re-planning needs without measuring again (core/search/plan_override.h):
  // the DP's inputs as the job had them.
  PlacementConstraints constraints;       // the ones the plan honours
  std::vector<bool> allowed;              // per candidate: what the constraints allowed
  std::vector<bool> measured;             // per candidate: has a real measurement (cached or
                                          // fresh); false = skipped (excluded) or cancelled
  SwitchCostTable switchCosts;            // epsilon per kernel, as the DP charged it
  DeviceCosts deviceCosts;                // backends off the host and their copy models
  // What the DP charged for layout changes (core/search/layout_charges.h):
  // per candidate the layouts its kernel offers and its cost measured so, and
  // the reorder model. Empty offers: no charges.
  std::vector<LayoutOffers> layoutOffers;
  ReorderModel reorderModel;
  std::vector<BackendVersion> versions;   // every backend of the job, in the set's order
  std::map<std::string, SubGraphLimits> limits;  // backend -> the limits its spec sets
};

// Runs the whole flow on `graph` (imported from options.modelPath with the
// same input shapes). Throws Error for a model no backend set can cover, and
// for a pin that cannot hold (allowedCandidates names the node and why).
OptimizationResult runOptimizationJob(const Graph& graph, const OptimizationJobOptions& options,
                                      SearchObserver* observer, const CancellationToken* cancel);

// The graph `result`'s plan and candidates are for: the rewritten graph, or `model`.
inline const Graph& placedGraph(const OptimizationResult& result, const Graph& model) {
  return result.graph ? *result.graph : model;
}
// The plan's record of the substitutions `result` applied (with what each bought).
std::vector<PlanSubstitution> planSubstitutions(const SubstitutionSearchResult& search);
// The spec-file rules those substitutions name, as written (Plan::substitutionRules).
std::vector<SubstitutionRuleText> planSubstitutionRules(const std::vector<PlanSubstitution>& substitutions);

// The candidate of `result` that `group` (of a plan of `graph`) runs as: its
// PlanGroup::candidate when that names a candidate of this result with the
// group's backend and exactly its nodes; none for a region, a group read from
// a file, or a group of a plan that another optimisation made.
std::optional<int32_t> groupCandidate(const OptimizationResult& result, const Graph& graph,
                                      const PlanGroup& group);

// A MeasureFn for what re-planning after the job finds missing
// (core/search/plan_override.h, OverrideController::setMeasureFn): the job's
// database first, else an isolated worker (started on first use, kept), and
// each new measurement stored, exactly as the job would have. One worker
// process serves every call, so call it from one thread at a time. Throws
// Error when there is no worker executable.
MeasureFn jobMeasureFn(std::shared_ptr<const Graph> graph, const OptimizationJobOptions& options);

// The job's measurement database: options.dbPath (a file or a shared store's
// URL, with options.localDbPath as its cache), the default file when empty.
std::unique_ptr<MeasurementDb> openMeasurementDb(const OptimizationJobOptions& options);

// The argv that starts a measurement worker for this job.
std::vector<std::string> optimizationWorkerCommand(const OptimizationJobOptions& options);

}  // namespace collage
