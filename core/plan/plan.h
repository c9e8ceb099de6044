// A Plan: the chosen cover of a model's graph by kernels. Every node is in
// exactly one group; each group names the backend that runs it, the pattern
// or rule that produced it, its measured cost and where the choice came from.
// It is what `collage optimize` writes and `collage run` / Session read.
//
// On disk a plan is versioned JSON (docs/plan-format.md has the schema).
// Nodes are referred to by NAME, never by index, so a plan stays readable and
// editable by hand; the model it was made for is pinned by its SHA-256 and
// its input shapes. Typical use (the CLI's `run --plan`):
//
//   Plan plan = loadPlan("plan.json");
//   ImportOptions opts;  opts.inputShapes = plan.inputShapes;
//   Graph graph = importOnnx("model.onnx", opts);
//   for (auto& w : checkPlanAgainst(plan, graph, "model.onnx", available)) warn(w);
//   Session session(graph, plan, lookup);           // core/runtime/session.h
//   std::vector<Tensor> outputs = session.run(inputs);
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/patterns/candidate.h"
#include "core/ir/cost.h"
#include "core/ir/graph.h"
#include "core/ir/hardware_fingerprint.h"
#include "core/ir/node_set.h"
#include "core/ir/tensor.h"
#include "core/rewrite/equivalence_check.h"
#include "core/rewrite/spec_substitution.h"
#include "core/rewrite/substitution.h"

namespace collage {

// Which part of the tool chose a group.
enum class PlanOrigin { OpLevel, GraphLevel, User };
// "op-level", "graph-level", "user": the spelling in plan files.
std::string_view planOriginName(PlanOrigin origin);
// Throws Error for any other text.
PlanOrigin planOriginFromName(std::string_view name);

struct PlanGroup {
  std::vector<std::string> nodes;  // node names, in topological order
  std::string backend;             // "onednn"
  std::string pattern;             // the candidate's origin: "pattern:conv_relu", "rule:op"
  Cost costNs = kUnknownCost;      // measured median; NaN = not measured, +inf = invalid
  double spread = 0;               // relative: (p75 - p25) / median
  int samples = 0;
  PlanOrigin origin = PlanOrigin::OpLevel;
  // Not serialised: which candidate of the optimisation that made the plan
  // this group runs as (an index into OptimizationResult::candidates and
  // ::measurements), kept on the group so that it travels with the plan
  // through overrides, undo and the views, and can never describe another
  // plan's groups. None for a region of the graph-level search (a graph
  // library compiles it whole: it is no candidate) and for a group read from
  // a file or written by hand. Who chose the group is `origin`: a user's
  // override is a candidate group with origin User. Check it against the
  // result before use (groupCandidate, core/search/optimization_job.h).
  std::optional<int32_t> candidate;

  // NaN costs compare equal; `candidate` is not compared (a plan read back
  // from its file equals the plan written).
  bool operator==(const PlanGroup&) const;
};

// One run of one group's kernel, as a Session records it when profiling and
// the exports (Chrome trace, Model Explorer) write it.
struct KernelTiming {
  size_t group = 0;     // index into Plan::groups
  double startUs = 0;   // since the Session was created, so several runs line up
  double durUs = 0;
  int64_t run = 0;      // which run (0, 1, ...)
};

// What the graph-level search measured, when it made the plan
// (core/search/graph_level_search.h): the plan against the one it started
// from, timed paired in the same rounds.
struct GraphLevelSummary {
  bool ran = false;          // absent from the file when false
  double startMs = 0;        // the starting plan (op-level or a baseline)
  double ms = 0;             // this plan
  double gain = 1;           // per-round median of startMs / ms
  int generations = 0;
  int plansRun = 0;          // whole plans measured
  std::vector<std::string> changes;  // describeRegionChanges
  bool operator==(const GraphLevelSummary&) const = default;
};

// A graph substitution the plan was made with (core/rewrite/): the plan's
// groups name the nodes of the model *after* its substitutions, replayed in
// order on the model (planGraph).
struct PlanSubstitution {
  SubstitutionSite site;
  // What it bought: the op-level DP's cost before its move minus after,
  // shared evenly among the move's sites (negative: a relaxed step that
  // enabled a later one). NaN = not known.
  Cost savedNs = kUnknownCost;
  bool operator==(const PlanSubstitution& o) const;
};

// (backend name, version), as Backend::name() / version() report them.
using BackendVersion = std::pair<std::string, std::string>;

struct Plan {
  static constexpr int kFormatVersion = 1;  // the version this build writes and reads

  int version = kFormatVersion;
  std::string modelPath;                     // as given when the plan was made (informative)
  std::string modelSha256;                   // the model file's identity (checked)
  std::map<std::string, Shape> inputShapes;  // every graph input's static shape (checked)
  HardwareFingerprint fingerprint;           // the machine the costs were measured on
  std::vector<BackendVersion> backends;      // the backends the groups use, with versions
  std::vector<PlanGroup> groups;
  // The optimizer's estimate for one run of the whole model: the plan's own
  // median when the optimizer timed it whole (the end-to-end check, the
  // graph-level search), else the sum the op-level DP added.
  Cost predictedNs = kUnknownCost;
  // The sum of its kernels' costs timed one kernel at a time (with the DP's
  // layout and switching charges), when predictedNs is a whole-plan time
  // ("kernels_alone_ns", absent when unknown). In a run kernels go slower
  // than back to back alone (docs/measurement.md), so this sum is the
  // smaller; `collage run` reports both.
  Cost kernelsAloneNs = kUnknownCost;
  std::string createdBy;                     // "collage optimize (op-level)"
  std::string createdAt;                     // ISO 8601 UTC, "2024-05-01T12:00:00Z"
  GraphLevelSummary graphLevel;              // set when the graph-level search made it
  // Applied to the model before placement, in order ("substitutions" in the
  // file, absent when empty).
  std::vector<PlanSubstitution> substitutions;
  // The rules from spec files that `substitutions` name, as written
  // ("substitution_rules", absent when empty): a plan made with a user's
  // rule file replays without it. Loading the plan makes them known to the
  // process (a different rule of the same name is refused).
  std::vector<SubstitutionRuleText> substitutionRules;

  // Not serialised: the file it was loaded from, for messages ("" = "the plan").
  std::string sourcePath;

  // Name used in messages: sourcePath or "the plan".
  std::string displayName() const;
  // "group 3 (onednn pattern:conv_relu: conv1, relu1)" (long node lists shortened).
  std::string describeGroup(size_t group) const;
  // Sum of the groups' costs (NaN if any is unknown, +inf if any is invalid).
  Cost sumOfGroupCosts() const;
  // The plan was timed whole (median `ms`): that becomes its prediction, and
  // the kernels' sum it replaces (or, where it had none, sumOfGroupCosts)
  // stays as kernelsAloneNs. A time that is not finite and positive is ignored.
  void predictByWholeRun(double ms);

  bool operator==(const Plan&) const;  // ignores sourcePath; NaN costs compare equal
};

// ---- JSON ----------------------------------------------------------------

// The plan as JSON laid out for people and diffs: one line per group.
std::string planToJson(const Plan& plan);
// Parses a plan. Every malformed case is an Error that starts with
// `displayPath` and names the field: not JSON, not a Collage plan (missing or
// wrong "format"), a version this build cannot read (newer, or not a positive
// integer), a missing required field, a field of the wrong type or value.
// Sets sourcePath = displayPath.
Plan planFromJson(const std::string& text, const std::string& displayPath);
// Write / read a file (Error naming the path if it cannot be written or read).
void savePlan(const Plan& plan, const std::string& path);
Plan loadPlan(const std::string& path);

// ---- Building a plan -----------------------------------------------------

// A stable key of a plan's placement: its groups' backends and nodes (not
// costs, patterns or origins). Plans with equal keys run the same kernels.
std::string placementKey(const Plan& plan);

// Every graph input's static shape, as a plan records it (Plan::inputShapes).
std::map<std::string, Shape> graphInputShapes(const Graph& graph);
// The names of a node set's nodes, in topological order (PlanGroup::nodes).
std::vector<std::string> nodeNames(const Graph& graph, const NodeSet& nodes);

// A plan with every node in a group of its own on `backend` (origin User,
// costs unknown): a baseline, and a starting point for hand-written plans.
Plan singleNodePlan(const Graph& graph, const std::string& backend);

// ---- Checking a plan against a model --------------------------------------

// The graph the plan's groups name: `model` with the plan's substitutions
// replayed (each checked again on the reference executor); `model` itself
// when it has none. Error starting with the plan's name when one does not
// hold on this model (a plan for another model). `effects` (optional): what
// each substitution did, one per site (rewrittenNodeSites marks them).
// `ranges` (optional): the model's value ranges on the caller's inputs,
// which the checks draw inputs from too (observeValueRanges).
Graph planGraph(const Plan& plan, const Graph& model, std::vector<RewriteEffect>* effects = nullptr,
                const ValueRanges* ranges = nullptr);
// The sites of the plan's substitutions, in order.
std::vector<SubstitutionSite> planSites(const Plan& plan);

// Resolves the groups' node names: one NodeSet per group. Error naming the
// node or group for an unknown node name, a node in two groups, a node in no
// group, an empty group.
std::vector<NodeSet> resolvePlanGroups(const Plan& plan, const Graph& graph);
// The node set of one group (same errors for that group's names).
NodeSet groupNodes(const Plan& plan, size_t group, const Graph& graph);

// The order groups can run in: a group runs once every group producing one of
// its inputs has run. Ties go to the group with the lowest first node, so the
// order follows the graph's. Error naming two groups on a cycle when groups
// depend on each other both ways (possible even when each group is convex).
std::vector<size_t> planExecutionOrder(const Plan& plan, const Graph& graph,
                                       const std::vector<NodeSet>& groups);

// Everything that makes a plan unusable for this model on this machine, as an
// The first of checkPlanAgainst's checks alone, which needs no graph: Error
// when the model file's sha256 differs from the plan's (nothing when
// modelPath is "").
void checkPlanModelFile(const Plan& plan, const std::string& modelPath);

// Error naming the plan file and what is wrong:
//  - the model file's sha256 differs from the plan's ("plan.json was made for
//    a model with sha256 X, model.onnx has Y"; skipped when modelPath is "");
//  - an input shape differs from the plan's, or an input is missing/extra;
//  - the node errors of resolvePlanGroups;
//  - a group that is not a valid sub-graph (not convex), or groups that form
//    a cycle between them;
//  - a group whose backend is not in `available` (the message lists them).
// Returns warnings for what is usable but suspect: a backend whose version
// differs from the plan's (costs may be stale), and, when `machine` is given,
// a different hardware fingerprint. An empty version in `available` is not
// compared.
std::vector<std::string> checkPlanAgainst(const Plan& plan, const Graph& graph,
                                          const std::string& modelPath,
                                          const std::vector<BackendVersion>& available,
                                          const HardwareFingerprint* machine = nullptr);

// The current time as ISO 8601 UTC ("2024-05-01T12:00:00Z").
std::string isoTimeNow();

}  // namespace collage
