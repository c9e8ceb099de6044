// The graph-level search's pieces that need no measuring: graph libraries
// restricted by the user's pins and forbids, and the model key that plan
// runs are stored under. (The measured search runs end to end in
// tests/e2e/graph_level_roundtrip.sh; its logic on a test double in
// evolutionary_search_test.cc; a search whose plans are timed by a
// PlanEvaluator, as the Slurm fan-out does, on a test double here.)
#include "core/search/graph_level_search.h"

#include <gtest/gtest.h>

#include "core/ir/error.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

// relu -> sigmoid -> tanh -> exp
struct Chain {
  GraphBuilder b;
  Chain() {
    b.finish(b.op("Exp", {b.op("Tanh", {b.op("Sigmoid", {b.op("Relu", {b.input({4})})})})}));
  }
  const Graph& g() { return b.graph(); }
};

std::vector<GraphLibrary> anything() {
  return {{"fuser", [](const NodeSet&) { return std::string(); }},
          {"other", [](const NodeSet&) { return std::string(); }}};
}

TEST(GraphLevelSearch, RegionsHonourPinsAndForbids) {
  Chain c;
  const Graph& g = c.g();
  PlacementConstraints constraints;
  constraints.pins.push_back(PlacementConstraints::parsePin(g.node(1).name + "=fuser"));
  constraints.pins.push_back(PlacementConstraints::parsePin(g.node(3).name + "=native"));
  constraints.forbids.push_back(PlacementConstraints::parseForbid("op:Relu=other"));
  const std::vector<GraphLibrary> libs = honouringConstraints(g, anything(), constraints);
  ASSERT_EQ(libs.size(), 2u);
  const NodeSet first3 = NodeSet::of(g.numNodes(), {0, 1, 2});
  EXPECT_EQ(libs[0].refusal(first3), "");  // the Sigmoid is pinned to fuser: fuser may take it
  EXPECT_NE(libs[1].refusal(first3).find("must not run on other"), std::string::npos)
      << libs[1].refusal(first3);
  EXPECT_NE(libs[1].refusal(NodeSet::of(g.numNodes(), {1, 2})).find("is pinned to fuser"),
            std::string::npos);
  const std::string last = libs[0].refusal(NodeSet::of(g.numNodes(), {2, 3}));
  EXPECT_NE(last.find("node '" + g.node(3).name + "' is pinned to native"), std::string::npos)
      << last;
  // A pinned group stays a kernel of its own.
  PlacementConstraints group;
  group.pins.push_back(
      PlacementConstraints::parsePin(g.node(0).name + "+" + g.node(1).name + "=fuser"));
  const std::vector<GraphLibrary> grouped = honouringConstraints(g, anything(), group);
  EXPECT_NE(grouped[0].refusal(NodeSet::of(g.numNodes(), {1, 2})).find("pinned group"),
            std::string::npos);
  EXPECT_EQ(grouped[0].refusal(NodeSet::of(g.numNodes(), {2, 3})), "");
  // A selector that matches nothing is an error naming it.
  PlacementConstraints bad;
  bad.forbids.push_back(PlacementConstraints::parseForbid("nosuchnode=fuser"));
  EXPECT_THROW(honouringConstraints(g, anything(), bad), Error);
}

TEST(GraphLevelSearch, PlanRunsAreKeyedByTheModelAndItsShapes) {
  Plan p;
  p.modelSha256 = "abc";
  p.inputShapes = {{"x", {1, 3, 8, 8}}, {"mask", {1, 8}}};
  EXPECT_EQ(graphLevelModelKey(p), "sha256:abc;mask=1x8;x=1x3x8x8;timing=own-run-first");
  p.inputShapes["x"] = {2, 3, 8, 8};
  EXPECT_EQ(graphLevelModelKey(p), "sha256:abc;mask=1x8;x=2x3x8x8;timing=own-run-first");
}

// The search with a PlanEvaluator (the Slurm fan-out's hook) on a test
// double: a plan's time is its number of groups (regions are faster), each
// generation's plans arrive as one batch, the first batch's answers come
// back only with the second (still out at their deadline: they keep their
// estimate, then are collected), and the best is accepted only after the
// evaluator's re-check against the starting plan. The worker is never used.
class CountingEvaluator final : public PlanEvaluator {
 public:
  static PairedPlanRuns pair(const Plan& a, const Plan& b, int rounds) {
    PairedPlanRuns r;
    r.status = MeasurementStatus::Ok;
    r.aMs.assign(static_cast<size_t>(rounds), static_cast<double>(a.groups.size()));
    r.bMs.assign(static_cast<size_t>(rounds), static_cast<double>(b.groups.size()));
    return r;
  }
  std::vector<TimedPlan> timeGeneration(const std::vector<PlanToTime>& plans,
                                        const std::string& incumbentKey, const Plan& incumbent,
                                        const CancellationToken*) override {
    ++calls;
    sent += static_cast<int>(plans.size());
    std::vector<TimedPlan> back;
    for (const PlanToTime& p : plans)
      back.push_back({p.key, incumbentKey, pair(*p.plan, incumbent, 5)});
    if (calls == 1) {  // nothing back by the first deadline
      late = std::move(back);
      return {};
    }
    for (TimedPlan& t : late) back.push_back(std::move(t));
    late.clear();
    return back;
  }
  PairedPlanRuns recheck(const Plan& best, const Plan& start, const PairedRunOptions& runs,
                         const CancellationToken*) override {
    ++rechecks;
    return pair(best, start, runs.minRounds);
  }
  int calls = 0, sent = 0, rechecks = 0;
  std::vector<TimedPlan> late;
};

TEST(GraphLevelSearch, AnEvaluatorTimesWholeGenerationsAndTheBestIsRecheckedBeforeItIsAccepted) {
  Chain c;
  Plan start = singleNodePlan(c.g(), "native");
  start.modelSha256 = "m";
  CountingEvaluator evaluator;
  GraphLevelOptions options;
  options.evolution.population = 6;
  options.evolution.offspring = 6;
  options.evolution.maxGenerations = 6;
  options.evolution.saturationGenerations = 6;
  options.evolution.budgetSeconds = 1e9;
  options.evaluator = &evaluator;
  IsolatedMeasurer unused({"/nonexistent/collage-worker"}, MeasurerOptions{});
  const GraphLevelResult r = runGraphLevelSearch(c.g(), start, anything(), unused, nullptr,
                                                 HardwareFingerprint{}, options, nullptr, nullptr);
  EXPECT_GE(evaluator.calls, 2);
  EXPECT_GT(evaluator.sent, 0);
  EXPECT_GT(r.plansStillOut, 0);       // the first batch missed its deadline
  EXPECT_GT(r.plansCollectedLate, 0);  // and was collected by the second
  EXPECT_EQ(evaluator.rechecks, 1);
  ASSERT_TRUE(r.improved) << r.verdict;
  EXPECT_LT(r.plan.groups.size(), start.groups.size());
  EXPECT_NEAR(r.gain,
              static_cast<double>(start.groups.size()) / static_cast<double>(r.plan.groups.size()),
              1e-9);
  EXPECT_NE(describeGraphLevel(r).find("still out at their generation's deadline"),
            std::string::npos);
}

// A re-check that does not confirm the best keeps the starting plan.
class RefutingEvaluator final : public PlanEvaluator {
 public:
  std::vector<TimedPlan> timeGeneration(const std::vector<PlanToTime>& plans,
                                        const std::string& incumbentKey, const Plan& incumbent,
                                        const CancellationToken*) override {
    std::vector<TimedPlan> back;
    for (const PlanToTime& p : plans)
      back.push_back({p.key, incumbentKey, CountingEvaluator::pair(*p.plan, incumbent, 5)});
    return back;
  }
  PairedPlanRuns recheck(const Plan&, const Plan&, const PairedRunOptions&,
                         const CancellationToken*) override {
    PairedPlanRuns none;
    none.status = MeasurementStatus::TimedOut;
    none.message = "the re-check did not come back";
    return none;
  }
};

TEST(GraphLevelSearch, ABestTheRecheckDoesNotConfirmIsNotAccepted) {
  Chain c;
  Plan start = singleNodePlan(c.g(), "native");
  start.modelSha256 = "m";
  RefutingEvaluator evaluator;
  GraphLevelOptions options;
  options.evolution.population = 4;
  options.evolution.offspring = 4;
  options.evolution.maxGenerations = 3;
  options.evolution.budgetSeconds = 1e9;
  options.evaluator = &evaluator;
  IsolatedMeasurer unused({"/nonexistent/collage-worker"}, MeasurerOptions{});
  const GraphLevelResult r = runGraphLevelSearch(c.g(), start, anything(), unused, nullptr,
                                                 HardwareFingerprint{}, options, nullptr, nullptr);
  EXPECT_FALSE(r.improved);
  EXPECT_EQ(placementKey(r.plan), placementKey(start));
  EXPECT_NE(r.verdict.find("failed its final check"), std::string::npos) << r.verdict;
}

}  // namespace
}  // namespace collage
