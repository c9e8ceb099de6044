// Manual overrides (core/search/plan_override.h) and the inspector's "why"
// (core/search/choice_explanation.h), with a deterministic cost model standing in
// for the measurer: re-planning must honour every pin, keep the plan a valid
// cover whose predicted cost adds up, and refuse impossible overrides with a
// message that names the nodes.
#include <gtest/gtest.h>

#include <map>

#include "core/patterns/backend_spec.h"
#include "core/patterns/candidate.h"
#include "core/search/choice_explanation.h"
#include "core/onnx/onnx_import.h"
#include "core/search/plan_from_cover.h"
#include "core/search/plan_override.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using test_support::expectError;

Measurement ok(double ns, double spread = 0.1) {
  Measurement m;
  m.status = MeasurementStatus::Ok;
  m.medianNs = ns;
  m.spread = spread;
  m.samples = 10;
  return m;
}

Measurement notMeasured() {
  Measurement m;
  m.status = MeasurementStatus::Failed;
  m.message = "not measured";
  return m;
}

// x -> n0 -> n1 -> n2 -> n3 (Relu chain).
Graph chain() {
  Graph g;
  ValueId v = g.addInput("x", {ElementType::Float32, {4}});
  for (int i = 0; i < 4; ++i) {
    ValueId out = g.addValue("v" + std::to_string(i), {ElementType::Float32, {4}});
    g.addNode(Node{"n" + std::to_string(i), "Relu", {}, {v}, {out}});
    v = out;
  }
  g.markOutput(v);
  g.finalize();
  return g;
}

// The job's result for the chain, as if measured:
//   native: every node alone, 10 ns each
//   fast:   n0+n1 8 ns, n2+n3 8 ns, n0 alone 7 ns, n1 alone 7 ns
//   slow:   n1 alone (refused to compile), n2 alone (never measured)
// The cheapest cover is fast{n0,n1} + fast{n2,n3}.
struct ChainFixture {
  Graph graph = chain();
  OptimizationResult result;

  ChainFixture() {
    const int32_t n = graph.numNodes();
    auto add = [&](std::vector<NodeId> nodes, const char* backend, const char* origin,
                   Measurement m) {
      ASSERT_TRUE(result.candidates.add(Candidate{NodeSet::of(n, nodes), backend, origin, {}}));
      result.measurements.push_back(m);
    };
    result.candidates = CandidateSet(n);
    for (NodeId i = 0; i < n; ++i) add({i}, "native", "rule:op", ok(10));
    add({0, 1}, "fast", "pattern:pair", ok(8));
    add({2, 3}, "fast", "pattern:pair", ok(8));
    add({0}, "fast", "rule:op", ok(7));
    add({1}, "fast", "rule:op", ok(7));
    Measurement refused;
    refused.status = MeasurementStatus::Invalid;
    refused.message = "no kernel for Relu of rank 1";
    add({1}, "slow", "rule:op", refused);
    add({2}, "slow", "rule:op", notMeasured());
    result.versions = {{"native", "1"}, {"fast", "2"}, {"slow", "3"}};
    result.limits["native"] = SubGraphLimits{};
    result.limits["fast"] = SubGraphLimits{};
    result.limits["slow"] = SubGraphLimits{0, 1, 1, true};  // one node at most
    // A measured switching cost: 1 ns into fast, 2 ns into native, 3 ns into slow.
    result.switchCosts.pairNs[{"native", "fast"}] = 1;
    result.switchCosts.pairNs[{"fast", "native"}] = 2;
    result.switchCosts.pairNs[{"fast", "slow"}] = 3;
    result.plan = replanWithPins(graph, result, {}).plan;
  }

  NodeSet nodes(std::vector<NodeId> ids) const { return NodeSet::of(graph.numNodes(), ids); }
  NodeId id(const char* name) const { return *graph.findNode(name); }

  // The plan group holding `name`.
  const PlanGroup& groupOf(const Plan& plan, const std::string& name) const {
    for (const auto& g : plan.groups)
      for (const auto& m : g.nodes)
        if (m == name) return g;
    throw Error("no group holds " + name);
  }

  // Sum of group costs plus each kernel's switching cost, recomputed.
  Cost recomputed(const Plan& plan) const {
    Cost sum = 0;
    for (const auto& g : plan.groups) sum += g.costNs + result.switchCosts.epsilonInto(g.backend);
    return sum;
  }
};

const RunOnChoice& choiceFor(const std::vector<RunOnChoice>& choices, const std::string& backend) {
  for (const auto& c : choices)
    if (c.backend == backend) return c;
  throw Error("no choice for " + backend);
}

TEST(PlanOverride, TheUnpinnedPlanIsTheCheapestCover) {
  ChainFixture f;
  ASSERT_EQ(f.result.plan.groups.size(), 2u);
  for (const auto& g : f.result.plan.groups) {
    EXPECT_EQ(g.backend, "fast");
    EXPECT_EQ(g.origin, PlanOrigin::OpLevel);
  }
  EXPECT_DOUBLE_EQ(f.result.plan.predictedNs, 2 * (8 + 1));
  EXPECT_DOUBLE_EQ(f.result.plan.predictedNs, f.recomputed(f.result.plan));
}

TEST(PlanOverride, RunOnChoicesListsEveryBackendWithCostOrReason) {
  ChainFixture f;
  // One node: native and fast can, slow refused to compile it.
  auto one = runOnChoices(f.graph, f.result, f.nodes({f.id("n1")}), &f.result.plan);
  ASSERT_EQ(one.size(), 3u);
  EXPECT_EQ(one[0].backend, "native");  // the job's order
  EXPECT_TRUE(choiceFor(one, "native").runnable);
  EXPECT_DOUBLE_EQ(choiceFor(one, "native").medianNs, 10);
  EXPECT_DOUBLE_EQ(choiceFor(one, "native").spread, 0.1);
  EXPECT_TRUE(choiceFor(one, "fast").runnable);
  EXPECT_DOUBLE_EQ(choiceFor(one, "fast").medianNs, 7);
  EXPECT_FALSE(choiceFor(one, "fast").current);  // n1 runs inside a pair, not alone
  EXPECT_FALSE(choiceFor(one, "slow").runnable);
  EXPECT_NE(choiceFor(one, "slow").reason.find("no kernel for Relu of rank 1"), std::string::npos)
      << choiceFor(one, "slow").reason;

  // The pair: only fast forms it; native never fuses; slow's limit is one node.
  auto pair = runOnChoices(f.graph, f.result, f.nodes({0, 1}), &f.result.plan);
  EXPECT_TRUE(choiceFor(pair, "fast").runnable);
  EXPECT_TRUE(choiceFor(pair, "fast").current);
  EXPECT_EQ(choiceFor(pair, "fast").pattern, "pattern:pair");
  EXPECT_FALSE(choiceFor(pair, "native").runnable);
  EXPECT_NE(choiceFor(pair, "native").reason.find("no pattern or fusion rule of native"),
            std::string::npos)
      << choiceFor(pair, "native").reason;
  EXPECT_NE(choiceFor(pair, "slow").reason.find("too many nodes"), std::string::npos)
      << choiceFor(pair, "slow").reason;

  // A node slow has no candidate for at all, and one it never measured.
  auto n3 = runOnChoices(f.graph, f.result, f.nodes({3}));
  EXPECT_NE(choiceFor(n3, "slow").reason.find("cannot run node 'n3' (Relu)"), std::string::npos)
      << choiceFor(n3, "slow").reason;
  EXPECT_NE(choiceFor(n3, "fast").reason.find("only fused"), std::string::npos)
      << choiceFor(n3, "fast").reason;
  auto n2 = runOnChoices(f.graph, f.result, f.nodes({2}));
  EXPECT_TRUE(choiceFor(n2, "slow").runnable);
  EXPECT_FALSE(choiceFor(n2, "slow").measured);

  expectError([&] { runOnChoices(f.graph, f.result, NodeSet(f.graph.numNodes())); },
              {"select at least one node"});
}

TEST(PlanOverride, OverridingANodeInsideAFusedGroupSplitsIt) {
  ChainFixture f;
  PlacementConstraints pins = withOverride(f.graph, {}, f.nodes({f.id("n1")}), "native");
  ASSERT_EQ(pins.pins.size(), 1u);
  EXPECT_TRUE(pins.pins[0].group);
  EXPECT_EQ(pinToString(pins.pins[0]), "n1=native");

  ReplanResult r = replanWithPins(f.graph, f.result, pins);
  EXPECT_EQ(r.measuredNow, 0);
  // A valid cover of the model: every node once, convex groups, no cycle.
  EXPECT_NO_THROW(checkPlanAgainst(r.plan, f.graph, "", {{"native", "1"}, {"fast", "2"}}));
  ASSERT_EQ(r.plan.groups.size(), 3u);
  const PlanGroup& pinned = f.groupOf(r.plan, "n1");
  EXPECT_EQ(pinned.nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(pinned.backend, "native");
  EXPECT_EQ(pinned.origin, PlanOrigin::User);
  // The rest is re-covered optimally: n0 alone on fast (7) beats native (10).
  EXPECT_EQ(f.groupOf(r.plan, "n0").backend, "fast");
  EXPECT_EQ(f.groupOf(r.plan, "n0").nodes.size(), 1u);
  EXPECT_EQ(f.groupOf(r.plan, "n0").origin, PlanOrigin::OpLevel);
  EXPECT_EQ(f.groupOf(r.plan, "n2").nodes.size(), 2u);
  EXPECT_DOUBLE_EQ(r.plan.predictedNs, (7 + 1) + (10 + 2) + (8 + 1));
  EXPECT_DOUBLE_EQ(r.plan.predictedNs, f.recomputed(r.plan));
  EXPECT_NE(r.plan.createdBy.find("pinned by the user"), std::string::npos);

  // The newest override of a node replaces an older one that shares it.
  PlacementConstraints again = withOverride(f.graph, pins, f.nodes({0, 1}), "fast");
  ASSERT_EQ(again.pins.size(), 1u);
  EXPECT_EQ(pinToString(again.pins[0]), "n0+n1=fast");
  ReplanResult back = replanWithPins(f.graph, f.result, again);
  EXPECT_EQ(f.groupOf(back.plan, "n0").nodes.size(), 2u);
  EXPECT_EQ(f.groupOf(back.plan, "n0").origin, PlanOrigin::User);
  EXPECT_EQ(f.groupOf(back.plan, "n2").origin, PlanOrigin::OpLevel);
  EXPECT_TRUE(withoutOverride(f.graph, again, f.nodes({1})).pins.empty());
}

TEST(PlanOverride, ACyclicOverrideIsRefusedNamingTheNode) {
  ChainFixture f;
  NodeSet skip = f.nodes({f.id("n0"), f.id("n2")});  // n1 lies between them
  for (const auto& c : runOnChoices(f.graph, f.result, skip)) {
    EXPECT_FALSE(c.runnable);
    EXPECT_NE(c.reason.find("not convex"), std::string::npos) << c.reason;
    EXPECT_NE(c.reason.find("n1"), std::string::npos) << c.reason;
  }
  expectError([&] { checkOverride(f.graph, f.result, skip, "fast"); },
              {"override refused", "n0", "n2", "n1", "not convex"});
  expectError(
      [&] { replanWithPins(f.graph, f.result, withOverride(f.graph, {}, skip, "fast")); },
      {"override refused", "n1", "not convex"});
  // No candidate, and a candidate that cannot run: refused with the reason.
  expectError([&] { checkOverride(f.graph, f.result, f.nodes({0, 1}), "native"); },
              {"override refused", "no pattern or fusion rule of native"});
  expectError(
      [&] { replanWithPins(f.graph, f.result, withOverride(f.graph, {}, f.nodes({1}), "slow")); },
      {"override refused", "n1", "no kernel for Relu of rank 1"});
  EXPECT_NO_THROW(checkOverride(f.graph, f.result, f.nodes({1}), "native"));
}

TEST(PlanOverride, AMissingMeasurementIsTakenThroughTheMeasureFn) {
  ChainFixture f;
  PlacementConstraints pins = withOverride(f.graph, {}, f.nodes({2}), "slow");
  // Nothing to measure with: a pin that needs a measurement is refused.
  expectError([&] { replanWithPins(f.graph, f.result, pins); }, {"override refused", "n2"});
  int calls = 0;
  ReplanResult r = replanWithPins(f.graph, f.result, pins, [&](const Candidate& c) {
    ++calls;
    EXPECT_EQ(c.backend, "slow");
    return ok(4);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(r.measuredNow, 1);
  EXPECT_EQ(f.groupOf(r.plan, "n2").backend, "slow");
  EXPECT_DOUBLE_EQ(f.groupOf(r.plan, "n2").costNs, 4);
  EXPECT_EQ(f.groupOf(r.plan, "n2").origin, PlanOrigin::User);
  EXPECT_DOUBLE_EQ(r.plan.predictedNs, f.recomputed(r.plan));
  // Kept: the next re-plan measures nothing.
  ReplanResult again = replanWithPins(f.graph, f.result, pins, [&](const Candidate&) {
    ++calls;
    return ok(4);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(again.measuredNow, 0);
}

// The chain after a graph-level search: two regions of "fast", each measured
// whole (5 ns) and faster than any cover by candidates:
//   [n0 n1: fast region] [n2 n3: fast region]
Plan graphLevelPlan(const ChainFixture& f) {
  Plan plan = f.result.plan;
  plan.groups.clear();
  for (std::vector<std::string> nodes : {std::vector<std::string>{"n0", "n1"}, {"n2", "n3"}}) {
    PlanGroup region;
    region.nodes = nodes;
    region.backend = "fast";
    region.pattern = "region";
    region.origin = PlanOrigin::GraphLevel;
    region.costNs = 5;
    plan.groups.push_back(region);
  }
  return plan;
}

bool isRegion(const PlanGroup& g) { return g.pattern == "region" && !g.candidate; }

TEST(PlanOverride, EveryGroupNamesTheCandidateItRunsAs) {
  ChainFixture f;
  for (const PlanGroup& g : f.result.plan.groups) {
    ASSERT_TRUE(g.candidate.has_value()) << g.nodes.front();
    EXPECT_EQ(groupCandidate(f.result, f.graph, g), g.candidate);
    const Candidate& c = f.result.candidates[static_cast<size_t>(*g.candidate)];
    EXPECT_EQ(c.backend, g.backend);
    EXPECT_EQ(nodeNames(f.graph, c.nodes), g.nodes);
  }
  // A region is no candidate, and neither is a group whose index names
  // another candidate (a plan of another optimisation).
  const Plan regions = graphLevelPlan(f);
  EXPECT_FALSE(groupCandidate(f.result, f.graph, regions.groups[0]));
  PlanGroup stale = f.result.plan.groups[0];
  stale.candidate = 0;  // native n0, not fast n0+n1
  EXPECT_FALSE(groupCandidate(f.result, f.graph, stale));
  // Not serialised: a plan read back has no candidates, and still equals it.
  const Plan back = planFromJson(planToJson(f.result.plan), "plan.json");
  EXPECT_FALSE(back.groups[0].candidate);
  EXPECT_EQ(back, f.result.plan);
}

TEST(PlanOverride, AnOverrideKeepsTheRegionsItDoesNotTouch) {
  ChainFixture f;
  f.result.plan = graphLevelPlan(f);
  // Pin n1 alone to fast: the first region holds n1 and is dissolved; the
  // second is kept as it is, with its measured time.
  const PlacementConstraints pins = withOverride(f.graph, {}, f.nodes({1}), "fast");
  int calls = 0;
  ReplanResult r = replanWithPins(f.graph, f.result, pins, [&](const Candidate&) {
    ++calls;
    return ok(4);
  });
  EXPECT_EQ(r.regionsKept, 1);
  ASSERT_EQ(r.plan.groups.size(), 3u);
  const PlanGroup& kept = f.groupOf(r.plan, "n2");
  EXPECT_TRUE(isRegion(kept));
  EXPECT_EQ(kept.nodes, (std::vector<std::string>{"n2", "n3"}));
  EXPECT_EQ(kept.origin, PlanOrigin::GraphLevel);
  EXPECT_DOUBLE_EQ(kept.costNs, 5);
  // The dissolved region's nodes are op-level groups again, each a candidate.
  EXPECT_EQ(f.groupOf(r.plan, "n0").nodes, (std::vector<std::string>{"n0"}));
  EXPECT_EQ(f.groupOf(r.plan, "n0").backend, "fast");
  EXPECT_TRUE(f.groupOf(r.plan, "n0").candidate);
  EXPECT_EQ(f.groupOf(r.plan, "n1").origin, PlanOrigin::User);
  EXPECT_TRUE(f.groupOf(r.plan, "n1").candidate);
  // The DP re-planned only outside the kept region: slow's n2, never
  // measured, lies inside it and is not measured now.
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(r.measuredNow, 0);
  // The prediction adds up: kernels and regions at their measured times,
  // each with its switching cost.
  EXPECT_DOUBLE_EQ(r.plan.predictedNs, f.recomputed(r.plan));
  EXPECT_DOUBLE_EQ(r.plan.predictedNs, (7 + 1) + (7 + 1) + (5 + 1));
  EXPECT_NO_THROW(checkPlanAgainst(r.plan, f.graph, "", f.result.versions));

  // Letting the optimizer choose again brings the dissolved region back.
  ReplanResult back = replanWithPins(f.graph, f.result, withoutOverride(f.graph, pins, f.nodes({1})));
  EXPECT_EQ(back.regionsKept, 2);
  EXPECT_EQ(placementKey(back.plan), placementKey(f.result.plan));
}

TEST(PlanOverride, ARegionPinnedToAnotherBackendIsDissolved) {
  ChainFixture f;
  f.result.plan = graphLevelPlan(f);
  // A --pin of n3 to native (not a group pin): the region on fast cannot
  // hold it, as the graph-level search itself would have refused.
  PlacementConstraints pins;
  pins.pins.push_back(PlacementConstraints::parsePin("n3=native"));
  ReplanResult r = replanWithPins(f.graph, f.result, pins);
  EXPECT_EQ(r.regionsKept, 1);
  EXPECT_TRUE(isRegion(f.groupOf(r.plan, "n0")));
  EXPECT_EQ(f.groupOf(r.plan, "n3").backend, "native");
  EXPECT_FALSE(isRegion(f.groupOf(r.plan, "n2")));
  // A pin to the region's own backend, not as a group, the region honours.
  PlacementConstraints same;
  same.pins.push_back(PlacementConstraints::parsePin("n3=fast"));
  EXPECT_EQ(replanWithPins(f.graph, f.result, same).regionsKept, 2);
}

TEST(PlanOverride, PinsGoIntoThePlanAsUserGroups) {
  ChainFixture f;
  Plan plan = f.result.plan;
  PlacementConstraints constraints;
  constraints.pins.push_back(PlacementConstraints::parsePin("n3=fast"));  // a --pin
  markPinnedGroups(plan, f.graph, constraints);
  EXPECT_EQ(f.groupOf(plan, "n3").origin, PlanOrigin::User);
  EXPECT_EQ(f.groupOf(plan, "n2").origin, PlanOrigin::User);  // the same group
  EXPECT_EQ(f.groupOf(plan, "n0").origin, PlanOrigin::OpLevel);
  // And survive the JSON round trip.
  Plan back = planFromJson(planToJson(plan), "plan.json");
  EXPECT_EQ(f.groupOf(back, "n3").origin, PlanOrigin::User);
}

TEST(ChoiceExplanation, SaysWhyTheChosenBackendWon) {
  ChainFixture f;
  // A node inside a fused group: the group, its cost and the alternative.
  ChoiceExplanation inside = explainChoice(f.graph, f.result.plan, &f.result, f.nodes({1}));
  EXPECT_FALSE(inside.exactGroup);
  EXPECT_EQ(inside.backend, "fast");
  EXPECT_DOUBLE_EQ(inside.groupCostNs, 8 + 1);
  EXPECT_DOUBLE_EQ(inside.alternativeCostNs, (7 + 1) + (7 + 1));  // fast n0 + fast n1
  EXPECT_NE(inside.why.find("bigger fused group"), std::string::npos) << inside.why;
  EXPECT_NE(inside.why.find("n0"), std::string::npos) << inside.why;

  // The exact group: the only backend that forms it.
  ChoiceExplanation exact = explainChoice(f.graph, f.result.plan, &f.result, f.nodes({0, 1}));
  EXPECT_TRUE(exact.exactGroup);
  EXPECT_NE(exact.why.find("only backend"), std::string::npos) << exact.why;

  // After an override of n1 to native, fast is cheaper alone for n1: pinned.
  ReplanResult r = replanWithPins(f.graph, f.result, withOverride(f.graph, {}, f.nodes({1}), "native"));
  ChoiceExplanation pinned = explainChoice(f.graph, r.plan, &f.result, f.nodes({1}));
  EXPECT_EQ(pinned.origin, PlanOrigin::User);
  EXPECT_NE(pinned.why.find("pinned by the user"), std::string::npos) << pinned.why;
  // n0 alone on fast beats native by 30%.
  ChoiceExplanation cheapest = explainChoice(f.graph, r.plan, &f.result, f.nodes({0}));
  EXPECT_NE(cheapest.why.find("cheapest"), std::string::npos) << cheapest.why;
  EXPECT_NE(cheapest.why.find("30%"), std::string::npos) << cheapest.why;
  // Spanning two groups.
  ChoiceExplanation span = explainChoice(f.graph, r.plan, &f.result, f.nodes({0, 1}));
  EXPECT_EQ(span.groups.size(), 2u);
  EXPECT_NE(span.why.find("2 kernels"), std::string::npos) << span.why;
}

TEST(ChoiceExplanation, ABackendOnAnotherDeviceLosesToItsCopies) {
  // fast on a GPU whose copies cost 100 ns + 16 B at 16 B/ns each way:
  // fast's 2 x 9 ns plus 2 x 101 ns of copies loses to native's 4 x 12 ns.
  ChainFixture f;
  f.result.deviceCosts.backendDevices["fast"] = Device{DeviceType::CUDA, 0};
  f.result.deviceCosts.copyModels.emplace_back(Device{DeviceType::CUDA, 0},
                                               CopyCostModel{100, 16, 100, 16});
  ReplanResult r = replanWithPins(f.graph, f.result, {});
  ASSERT_EQ(r.plan.groups.size(), 4u);
  for (const auto& g : r.plan.groups) EXPECT_EQ(g.backend, "native");
  EXPECT_DOUBLE_EQ(r.plan.predictedNs, 4 * (10 + 2));
  ChoiceExplanation why = explainChoice(f.graph, r.plan, &f.result, f.nodes({0}));
  EXPECT_NE(why.why.find("fast alone is 30% faster"), std::string::npos) << why.why;
  EXPECT_NE(why.why.find("runs on cuda:0 and native on cpu"), std::string::npos) << why.why;
  EXPECT_NE(why.why.find("copies between devices"), std::string::npos) << why.why;

  // Cheap copies (1 ns + 16 B at 16 B/ns): the GPU wins again, copies included.
  f.result.deviceCosts.copyModels[0].second = CopyCostModel{1, 16, 1, 16};
  ReplanResult cheap = replanWithPins(f.graph, f.result, {});
  for (const auto& g : cheap.plan.groups) EXPECT_EQ(g.backend, "fast");
  EXPECT_DOUBLE_EQ(cheap.plan.predictedNs, 2 * (8 + 1) + 2 * (1 + 1));
}

// The same on a real model: candidates from the built-in specs, costs from a
// deterministic function of (backend, size).
TEST(PlanOverride, ResNetOverrideKeepsAValidCover) {
  SpecLoadResult specs = loadBackendSpecs(std::string(COLLAGE_SOURCE_DIR) + "/resources/backends");
  std::vector<BackendCapabilities> caps;
  for (const auto& s : specs.specs) caps.push_back(BackendCapabilities{&s, nullptr});
  Graph graph =
      importOnnx(std::string(COLLAGE_SOURCE_DIR) + "/resources/models/resnet50_small.onnx");
  OptimizationResult result;
  result.candidates = enumerateCandidates(graph, caps);
  std::map<std::string, double> perNode;
  for (const auto& s : specs.specs) {
    result.versions.push_back({s.name, "test"});
    result.limits[s.name] = s.limits;
    perNode[s.name] = 100.0 + 10.0 * static_cast<double>(perNode.size());
  }
  for (const auto& c : result.candidates.all())
    result.measurements.push_back(ok(perNode[c.backend] * (1 + 0.5 * c.nodes.count()), 0.05));
  result.plan = replanWithPins(graph, result, {}).plan;
  std::vector<BackendVersion> available = result.versions;

  // A node inside a fused group, and a backend that can run it alone.
  std::string target, backend;
  for (const auto& g : result.plan.groups) {
    if (g.nodes.size() < 2) continue;
    NodeId n = *graph.findNode(g.nodes.back());
    for (const auto& c : runOnChoices(graph, result, NodeSet::of(graph.numNodes(), {n})))
      if (c.runnable) {
        target = g.nodes.back();
        backend = c.backend;
        break;
      }
    if (!target.empty()) break;
  }
  ASSERT_FALSE(target.empty()) << "no fused group with an overridable node";
  NodeSet nodes = NodeSet::of(graph.numNodes(), {*graph.findNode(target)});
  ReplanResult r = replanWithPins(graph, result, withOverride(graph, {}, nodes, backend));
  EXPECT_NO_THROW(checkPlanAgainst(r.plan, graph, "", available));
  Cost sum = 0;
  bool found = false;
  for (const auto& g : r.plan.groups) {
    sum += g.costNs;
    if (g.nodes == std::vector<std::string>{target}) {
      found = true;
      EXPECT_EQ(g.backend, backend);
      EXPECT_EQ(g.origin, PlanOrigin::User);
    } else {
      EXPECT_EQ(g.origin, PlanOrigin::OpLevel);
    }
  }
  EXPECT_TRUE(found) << target << " is not a group of its own";
  EXPECT_DOUBLE_EQ(r.plan.predictedNs, sum);  // no switching costs measured here
  EXPECT_GE(r.plan.predictedNs, result.plan.predictedNs);  // the optimum was unpinned
}

}  // namespace
}  // namespace collage
