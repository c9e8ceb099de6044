// Manual overrides: the engineer says "run exactly these nodes as one kernel
// of that backend", and the plan follows at once, without a new optimisation.
//
// An override is a Pin (core/search/placement_constraints.h) whose selectors are node
// NAMES and whose `group` flag is set even for a single node, so it means
// "exactly these nodes, one kernel": overriding one node inside a fused group
// splits that group, and the op-level DP re-covers the rest optimally. Names,
// not indices, so the pins survive a re-optimisation and read well in a plan.
//
// Re-planning starts from the optimisation's plan (OptimizationResult::plan)
// and keeps its regions: a region of the graph-level search was measured
// whole and no candidate can stand for it, so a re-plan that dropped it would
// silently lose what the search found. A region the pins do not touch stays
// as it is; a region holding a node a pin moves (by the rule the search
// itself honours, honouringConstraints) is dissolved, and the DP covers its
// nodes, with everything else outside the kept regions, by candidates:
//
//   result.plan:  [A B: onednn region] [C: native] [D E F: onednn region]
//   pin D=native: [A B: onednn region] [C: native] [D: native] [E F: DP's]
//
// Pins are applied to that plan, not to the previous override's, so removing
// a pin ("let the optimizer choose") brings its region back.
//
//   OptimizationResult (plan, candidates, measurements, switch costs, allowed)
//        │ runOnChoices(nodes)      which backends can run exactly `nodes`, and why not
//        │ withOverride(pins, ...)  the new pin list (the newest override wins)
//        ▼ replanWithPins(pins)     kept regions + DP over the known costs (+ whatever
//     Plan (groups holding          is missing, measured through the caller's MeasureFn);
//     pinned nodes: origin user)    an impossible override is an Error that says why
#pragma once

#include <string>
#include <vector>

#include "core/measure/candidate_costs.h"
#include "core/search/optimization_job.h"
#include "core/search/placement_constraints.h"
#include "core/plan/plan.h"

namespace collage {

// A measurement that was never taken: a candidate the constraints excluded
// when costs were gathered ("not measured"), or one a cancel stopped short.
bool isMissingMeasurement(const Measurement& m);

// The pin an override becomes: exactly `nodes`, one kernel of `backend`.
Pin overridePin(const Graph& graph, const NodeSet& nodes, const std::string& backend);
// The nodes a pin selects (Error naming the selector when one matches nothing).
NodeSet pinNodes(const Graph& graph, const Pin& pin);
// "conv1+relu1=onednn": the text --pin accepts (a one-node override prints as
// "conv1=onednn", which --pin reads as the looser "on that backend in any
// group"; the app keeps the Pin itself).
std::string pinToString(const Pin& pin);

// `constraints` with the override added; earlier pins that share a node with
// `nodes` are dropped (the newest override wins). Forbids are kept.
PlacementConstraints withOverride(const Graph& graph, const PlacementConstraints& constraints,
                                  const NodeSet& nodes, const std::string& backend);
// `constraints` without the pins that share a node with `nodes` ("let the
// optimizer decide again").
PlacementConstraints withoutOverride(const Graph& graph, const PlacementConstraints& constraints,
                                     const NodeSet& nodes);

// One backend's answer to "can you run exactly these nodes as one kernel?".
struct RunOnChoice {
  std::string backend;
  int32_t candidate = -1;  // the candidate with exactly these nodes on it, -1 when none
  bool runnable = false;   // a valid candidate that is not known to fail
  bool measured = false;   // runnable and its cost is known (else measured when chosen)
  Cost medianNs = kUnknownCost;
  double spread = 0;  // relative: (p75 - p25) / median
  int samples = 0;
  std::string pattern;  // the candidate's origin ("pattern:conv_relu", "rule:op")
  bool current = false; // the plan runs exactly these nodes on this backend now
  std::string reason;   // why not runnable (empty when runnable)
};

// For every backend of the job (result.versions order; backends only seen in
// candidates follow): whether it has a valid candidate covering exactly
// `nodes`, with its measured cost, or the reason it cannot: the set is not a
// valid group (checkSubGraph's reason, naming a node), the backend's limits
// reject it, the backend cannot run one of the ops at all, no pattern or rule
// of it forms exactly this group, or the candidate failed to measure (its
// error). `plan` (optional) sets `current`. Throws Error for an empty set.
std::vector<RunOnChoice> runOnChoices(const Graph& graph, const OptimizationResult& result,
                                      const NodeSet& nodes, const Plan* plan = nullptr);

// Refuses (throws Error with the explanation) an override that cannot hold by
// itself: `nodes` not a valid group (not convex: a path leaves and re-enters
// it), no candidate of `backend` for exactly these nodes, or that candidate
// failed to measure. replanWithPins() also refuses what only the whole
// constraint set reveals (groups depending on each other in a cycle).
void checkOverride(const Graph& graph, const OptimizationResult& result, const NodeSet& nodes,
                   const std::string& backend);

struct ReplanResult {
  Plan plan;  // each group's PlanGroup::candidate says what it is
  int measuredNow = 0;  // candidates measured through the MeasureFn
  int regionsKept = 0;  // regions of result.plan kept as they are
};

// The groups of result.plan that a re-plan under `constraints` keeps as they
// are: its regions (groups no candidate of `result` makes) that honour every
// pin and forbid. Throws Error for a selector that matches no node.
std::vector<PlanGroup> keptRegions(const Graph& graph, const OptimizationResult& result,
                                   const PlacementConstraints& constraints);

// The candidates a re-plan under `constraints` may use: the ones they allow
// that touch no node of `kept`. Throws what allowedCandidates throws.
std::vector<bool> replanCandidates(const Graph& graph, const OptimizationResult& result,
                                   const PlacementConstraints& constraints,
                                   const std::vector<PlanGroup>& kept);

// A new plan: the kept regions of result.plan (keptRegions) and, for every
// other node, the op-level DP over the measurements `result` already has,
// with every pin and forbid of `constraints` applied; groups holding a pinned
// node get origin "user"; predictedNs is the DP's total (kernel costs + the
// switching cost epsilon of each kernel) plus each kept region's measured
// time and epsilon (unknown if one is unknown). Candidates the constraints allow
// but that were never measured are measured through `measure` (deduplicated
// by backend and signature) and the measurements are kept in `result`; with
// no `measure` they are left out of the search, and a pin that needs one is
// refused. Candidates inside kept regions are neither measured nor used.
// Throws Error ("override refused: ...") for a pin that names an
// invalid group, has no candidate, whose candidate cannot run, that leaves a
// node with no placement, or that makes groups depend on each other in a cycle.
ReplanResult replanWithPins(const Graph& graph, OptimizationResult& result,
                            const PlacementConstraints& constraints,
                            const MeasureFn& measure = nullptr);

// Sets origin "user" on the groups of `plan` that hold a node some pin of
// `constraints` selects.
void markPinnedGroups(Plan& plan, const Graph& graph, const PlacementConstraints& constraints);

// "{conv1 (Conv), relu1 (Relu)}" (long lists shortened), for messages.
std::string describeNodes(const Graph& graph, const NodeSet& nodes);

}  // namespace collage
