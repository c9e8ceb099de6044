// The end-to-end check that closes an optimisation (core/search/plan_selection.h).
// No timing decides a pass here: the tests check which plans are run, which
// are refused and what is reported, never which one is faster.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backends/backend_list.h"
#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "core/search/plan_selection.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using test_support::expectError;

const std::string kModel = std::string(COLLAGE_SOURCE_DIR) + "/resources/models/dcgan_small.onnx";

Backend* backendNamed(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Backend>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, name == "nosuch" ? nullptr : createBackend(name)).first;
  return it->second.get();
}
const BackendLookup kLookup = [](const std::string& n) { return backendNamed(n); };

// Plans timed against each other in this process (the product does it in the
// measurement worker, through the same PairedPlanRunner).
struct InProcessTimer {
  PairedPlanRunner runner;
  explicit InProcessTimer(const Graph& g) : runner(g, kLookup) {}
  PlanPairTimer timer() {
    return [this](const Plan& a, const Plan& b, const PairedRunOptions& o) { return runner.run(a, b, o); };
  }
};

TEST(PlanSelection, EveryRunnablePlanIsTimedAndABrokenOneIsNeverChosen) {
  Graph g = importOnnx(kModel);
  std::vector<Plan> plans = {singleNodePlan(g, "native"), singleNodePlan(g, "nosuch"),
                             singleNodePlan(g, "native")};
  EndToEndOptions options;
  options.budgetSeconds = 0.05;
  InProcessTimer timing(g);
  EndToEndSelection s = selectPlanByEndToEnd(plans, {"op-level", "broken", "copy"}, timing.timer(), options);
  ASSERT_EQ(s.timings.size(), 3u);
  EXPECT_NE(s.chosen, 1u);
  EXPECT_FALSE(s.timings[1].error.empty());
  EXPECT_TRUE(std::isinf(s.timings[1].medianMs));
  for (size_t i : {0u, 2u}) {
    EXPECT_TRUE(s.timings[i].error.empty()) << s.timings[i].error;
    EXPECT_GE(s.timings[i].runs, options.minRounds);
    EXPECT_GT(s.timings[i].medianMs, 0);
  }
  const std::string text = describeSelection(s);
  EXPECT_NE(text.find("broken: rejected, cannot run ("), std::string::npos) << text;
  EXPECT_NE(text.find("<- chosen"), std::string::npos) << text;
}

TEST(PlanSelection, TheSearchsOwnPlanMustRun) {
  Graph g = importOnnx(kModel);
  InProcessTimer timing(g);
  EXPECT_THROW(selectPlanByEndToEnd({singleNodePlan(g, "nosuch")}, {"op-level"}, timing.timer()), Error);
}

TEST(PlanSelection, BaselinesEqualToTheSearchsPlanAreNotRunAgain) {
  Graph g = importOnnx(kModel);
  // A placement and a "baseline" with the same candidates in another order.
  OpLevelResult own;
  own.chosen = {2, 0, 1};
  NamedPlacement same{"priority", "priority", own};
  std::reverse(same.result.chosen.begin(), same.result.chosen.end());
  int built = 0;
  auto planOf = [&](const OpLevelResult&) {
    ++built;
    return singleNodePlan(g, "native");
  };
  EndToEndSelection s;
  InProcessTimer timing(g);
  int chosen = choosePlacementByEndToEnd(own, {same}, planOf, timing.timer(), &s);
  EXPECT_EQ(chosen, -1);
  EXPECT_EQ(built, 1);
  ASSERT_EQ(s.timings.size(), 1u);
  EXPECT_EQ(s.timings[0].label, "op-level");
}

TEST(PlanSelection, BaselinesPredictedFarSlowerAreNotRun) {
  Graph g = importOnnx(kModel);
  OpLevelResult own;
  own.chosen = {0};
  own.total = 1000;
  NamedPlacement close{"priority", "priority", own}, far{"only native", "only_native", own};
  close.result.chosen = {1};
  close.result.total = 1000 * kMaxPredictedRatio * 0.99;
  far.result.chosen = {2};
  far.result.total = 1000 * kMaxPredictedRatio * 1.01;
  auto planOf = [&](const OpLevelResult&) { return singleNodePlan(g, "native"); };
  EndToEndSelection s;
  InProcessTimer timing(g);
  choosePlacementByEndToEnd(own, {close, far}, planOf, timing.timer(), &s);
  ASSERT_EQ(s.timings.size(), 2u);
  EXPECT_EQ(s.timings[1].label, "priority");
}

}  // namespace
}  // namespace collage

namespace collage {
namespace {

// Paired rounds as data (a test double of the timing, for the decision
// logic only): plan A's and plan B's run in each round.
PairedPlanRuns rounds(std::vector<double> a, std::vector<double> b) {
  PairedPlanRuns r;
  r.status = MeasurementStatus::Ok;
  r.aMs = std::move(a);
  r.bMs = std::move(b);
  return r;
}

// The one decision rule (PairedPlanRuns::aReplacesB, which the graph-level
// search uses too): pairing the rounds cancels drift that both plans share.
TEST(PairedRounds, AConsistentlyFasterPlanWinsEvenWhenTheMachineDrifts) {
  // The machine slows down 2x halfway; plan A is 5 % faster in every round.
  std::vector<double> own = {100, 102, 99, 200, 205, 198, 101, 210};
  std::vector<double> other;
  for (double t : own) other.push_back(t * 0.95);
  const PairedPlanRuns r = rounds(other, own);
  EXPECT_TRUE(r.aReplacesB(EndToEndSelection::kMinGain, EndToEndSelection::kMinFasterShare));
  EXPECT_NEAR(r.medianRatio(), 0.95, 1e-9);
  EXPECT_DOUBLE_EQ(r.aFasterShare(), 1.0);
}

TEST(PairedRounds, NoiseOrASmallGainKeepsTheIncumbent) {
  // 1 % faster (below the 2 % gain); 10 % faster in half the rounds only.
  const std::vector<double> own = {100, 100, 100, 100, 100, 100};
  EXPECT_FALSE(rounds({99, 99, 99, 99, 99, 99}, own)
                   .aReplacesB(EndToEndSelection::kMinGain, EndToEndSelection::kMinFasterShare));
  EXPECT_FALSE(rounds({90, 110, 90, 110, 90, 110}, own)
                   .aReplacesB(EndToEndSelection::kMinGain, EndToEndSelection::kMinFasterShare));
  PairedPlanRuns failed = rounds({50, 50, 50}, {100, 100, 100});
  failed.status = MeasurementStatus::Invalid;  // fast and wrong
  EXPECT_FALSE(failed.aReplacesB(EndToEndSelection::kMinGain, EndToEndSelection::kMinFasterShare));
}

// The selection over several baselines: the lowest median ratio among those
// the rule accepts wins; a broken one is reported and never chosen.
TEST(PlanSelection, TheLowestPassingRatioWinsAndBrokenPlansAreReported) {
  Graph g = importOnnx(kModel);
  const Plan own = singleNodePlan(g, "native");
  std::vector<Plan> plans(4, own);
  for (size_t i = 0; i < plans.size(); ++i) plans[i].createdBy = std::to_string(i);
  const std::vector<double> base = {100, 100, 100, 100, 100};
  std::vector<std::string> order;
  const PlanPairTimer timer = [&](const Plan& a, const Plan& b, const PairedRunOptions&) {
    EXPECT_EQ(b.createdBy, "0");  // every baseline is paired with the search's plan
    order.push_back(a.createdBy);
    if (a.createdBy == "1") return rounds({90, 91, 89, 120, 90}, base);  // 4 of 5 faster, 0.90
    if (a.createdBy == "2") return rounds({80, 80, 80, 80, 80}, base);   // 0.80
    PairedPlanRuns broken;
    broken.status = MeasurementStatus::Invalid;
    broken.message = "wrong result: output 'y'";
    return broken;
  };
  const EndToEndSelection s = selectPlanByEndToEnd(plans, {"op-level", "a", "b", "broken"}, timer);
  EXPECT_EQ(order, (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(s.chosen, 2u);
  EXPECT_NEAR(s.timings[1].pairedRatio, 0.90, 1e-9);
  EXPECT_EQ(s.timings[1].fasterRounds, 4);
  EXPECT_EQ(s.timings[3].error, "wrong result: output 'y'");
  EXPECT_DOUBLE_EQ(s.timings[0].medianMs, 100);
  EXPECT_EQ(s.timings[0].runs, 10);
}

// Every baseline computes a wrong result (a landmark net whose "only
// onednn" and "priority" plans both did): the search's plan was never timed,
// and was reported as "inf ms (0 runs)  <- chosen". It is now paired with
// itself, so it is timed and checked, and the rejected plans say why.
TEST(PlanSelection, WhenEveryOtherPlanIsRejectedTheSearchsPlanIsTimedAloneAndChecked) {
  Graph g = importOnnx(kModel);
  std::vector<Plan> plans(3, singleNodePlan(g, "native"));
  for (size_t i = 0; i < plans.size(); ++i) plans[i].createdBy = std::to_string(i);
  const std::string wrong =
      "wrong result: output 'landmarks': 1402 of 1404 elements differ; group 21 on onednn "
      "({pool MaxPool, add Add}), rerun alone on the reference's inputs: output 'sum': max abs error 9.26";
  for (bool ownRight : {true, false}) {
    std::vector<std::string> pairs;
    const PlanPairTimer timer = [&](const Plan& a, const Plan& b, const PairedRunOptions& o) {
      pairs.push_back(a.createdBy + b.createdBy);
      EXPECT_TRUE(o.verify);
      PairedPlanRuns r = rounds({100, 100, 100, 100, 100}, {100, 101, 99, 100, 100});
      if (a.createdBy != "0" || !ownRight) {
        r = PairedPlanRuns{};
        r.status = MeasurementStatus::Invalid;
        r.message = wrong;
      }
      return r;
    };
    const EndToEndSelection s = selectPlanByEndToEnd(plans, {"op-level", "only onednn", "priority"}, timer);
    EXPECT_EQ(pairs, (std::vector<std::string>{"10", "20", "00"}));
    EXPECT_EQ(s.chosen, 0u);
    const std::string text = describeSelection(s);
    EXPECT_EQ(text.find("inf ms"), std::string::npos) << text;
    EXPECT_NE(text.find("only onednn: rejected (" + wrong + ")\n"), std::string::npos) << text;
    EXPECT_NE(text.find("priority: rejected (wrong result"), std::string::npos) << text;
    if (ownRight) {
      EXPECT_EQ(s.timings[0].runs, 5);
      EXPECT_DOUBLE_EQ(s.timings[0].medianMs, 100);
      EXPECT_NE(text.find("op-level: 100.000 ms (spread "), std::string::npos) << text;
      EXPECT_NE(text.find("5 runs; timed alone: every plan paired with it was rejected)  <- chosen"),
                std::string::npos)
          << text;
    } else {
      EXPECT_EQ(s.timings[0].error, wrong);
      EXPECT_NE(text.find("op-level: rejected (wrong result"), std::string::npos) << text;
      EXPECT_NE(text.find("kept, as no plan passed the check"), std::string::npos) << text;
      EXPECT_EQ(text.find("<- chosen"), std::string::npos) << text;
    }
  }
}

// A model that does not run on random inputs (an If branch that cannot run
// at the bound sizes, taken by a random condition): nothing is compared, the
// search's plan is kept and the reason said.

// The op-level plan is checked as the incumbent of every pairing (plan B):
// when it computes wrong results it is never written. Each other plan is
// then timed alone (so checked as plan A), and the fastest that passes is
// chosen; with none passing, the error names the kernel at fault.
TEST(PlanSelection, AWrongOpLevelPlanIsReplacedByTheFastestPlanThatPasses) {
  Graph g = importOnnx(kModel);
  std::vector<Plan> plans(4, singleNodePlan(g, "native"));
  for (size_t i = 0; i < plans.size(); ++i) plans[i].createdBy = std::to_string(i);
  const std::string wrong = "wrong result: output 'y': 12 of 16 elements differ; group 2 on onednn";
  for (bool anyPasses : {true, false}) {
    std::vector<std::string> pairs;
    const PlanPairTimer timer = [&](const Plan& a, const Plan& b, const PairedRunOptions& o) {
      pairs.push_back(a.createdBy + b.createdBy);
      PairedPlanRuns r;
      r.status = MeasurementStatus::Invalid;
      if (o.verify && b.createdBy == "0") {
        r.message = std::string(kReferencePlanFailed) + wrong;
      } else if (a.createdBy == "2" || !anyPasses) {
        r.message = wrong;
      } else {
        const double ms = a.createdBy == "1" ? 120 : 110;
        r = rounds({ms, ms, ms, ms, ms}, {ms, ms, ms, ms, ms});
      }
      return r;
    };
    if (!anyPasses) {
      expectError([&] { selectPlanByEndToEnd(plans, {"op-level", "only onednn", "only native", "priority"}, timer); },
                  {"op-level plan computes wrong results", "group 2 on onednn"});
      continue;
    }
    const EndToEndSelection s =
        selectPlanByEndToEnd(plans, {"op-level", "only onednn", "only native", "priority"}, timer);
    EXPECT_EQ(pairs, (std::vector<std::string>{"10", "11", "22", "33"}));
    EXPECT_EQ(s.chosen, 3u);  // 110 ms, the faster of the two that pass
    EXPECT_EQ(s.timings[0].error, wrong);
    // What the written plan is predicted to run in: the chosen plan's median.
    EXPECT_DOUBLE_EQ(chosenPlanMs(s), 110);
    const std::string text = describeSelection(s);
    EXPECT_NE(text.find("op-level: rejected (wrong result"), std::string::npos) << text;
    EXPECT_NE(text.find("only native: rejected (wrong result"), std::string::npos) << text;
    EXPECT_NE(text.find("priority: 110.000 ms"), std::string::npos) << text;
    EXPECT_NE(text.find("the op-level plan computes wrong results)  <- chosen"), std::string::npos) << text;
  }
}
// Nothing timed whole, nothing to predict by: the kept plan's own failure,
// or no comparison at all.
TEST(PlanSelection, ARejectedOrUncomparedPlanHasNoWholeRunTime) {
  EndToEndSelection s;
  s.timings = {PlanRunTiming{"op-level", 2.0}, PlanRunTiming{"priority", 1.5}};
  s.chosen = 1;
  EXPECT_DOUBLE_EQ(chosenPlanMs(s), 1.5);
  s.timings[1].error = "wrong result: output 'y'";
  EXPECT_EQ(chosenPlanMs(s), 0);
  s.timings[1].error.clear();
  s.skipped = "the model fails on random inputs";
  EXPECT_EQ(chosenPlanMs(s), 0);
  s.skipped.clear();
  s.timings[1].medianMs = std::numeric_limits<double>::infinity();
  EXPECT_EQ(chosenPlanMs(s), 0);
}

TEST(PlanSelection, AModelThatFailsOnRandomInputsIsNotCompared) {
  ImportOptions bind;
  bind.inputShapes["x"] = {1, 8};
  Graph g = importOnnx(std::string(COLLAGE_SOURCE_DIR) + "/tests/models/control_flow/if_nested_rate.onnx", bind);
  ASSERT_THROW(ReferenceExecutor(g).run(randomInputs(g, 1)), Error) << "the rate input must take the else branch";
  InProcessTimer timing(g);
  const Plan plan = singleNodePlan(g, "native");
  const EndToEndSelection s = selectPlanByEndToEnd({plan, plan}, {"op-level", "copy"}, timing.timer());
  EXPECT_EQ(s.chosen, 0u);
  EXPECT_NE(s.skipped.find("the model itself fails on random inputs"), std::string::npos) << s.skipped;
  EXPECT_NE(describeSelection(s).find("no plan compared"), std::string::npos);
}

// A model whose reference run would not fit the worker's limit (issue #30:
// a quantised U-Net at 1024x1024): the plans are still timed, without the
// check against the reference, and the report says so plainly.
TEST(PlanSelection, PlansAreTimedWithoutTheReferenceWhenItWouldNotFinishInTime) {
  Graph g = importOnnx(kModel);
  std::vector<Plan> plans = {singleNodePlan(g, "native"), singleNodePlan(g, "native")};
  EndToEndOptions options;
  options.budgetSeconds = 0.05;
  options.referenceSeconds = 410;  // an injected estimate: nothing here is timed against it
  options.timeLimitSeconds = 60;
  InProcessTimer timing(g);
  std::vector<bool> verified;
  const PlanPairTimer timer = [&](const Plan& a, const Plan& b, const PairedRunOptions& o) {
    verified.push_back(o.verify);
    return timing.runner.run(a, b, o);
  };
  EndToEndSelection s = selectPlanByEndToEnd(plans, {"op-level", "copy"}, timer, options);
  ASSERT_EQ(verified, std::vector<bool>{false});
  EXPECT_TRUE(s.timings[1].error.empty()) << s.timings[1].error;
  EXPECT_GT(s.timings[0].runs, 0);
  const std::string text = describeSelection(s);
  EXPECT_NE(text.find("not checked against the reference executor: it would need about 410 s on this model; "
                      "`collage run --verify` checks the written plan"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<- chosen"), std::string::npos) << text;

  // Within the share of the limit, or not known: checked as before.
  for (double seconds : {1.0, std::numeric_limits<double>::quiet_NaN()}) {
    options.referenceSeconds = seconds;
    verified.clear();
    s = selectPlanByEndToEnd(plans, {"op-level", "copy"}, timer, options);
    EXPECT_EQ(verified, std::vector<bool>{true});
    EXPECT_TRUE(s.unverified.empty()) << s.unverified;
  }
}

TEST(PlanSelection, TheReferenceMayTakeAShareOfTheLimit) {
  EXPECT_EQ(referenceCheckSkipped(6, 60), "");
  EXPECT_NE(referenceCheckSkipped(6.5, 60), "");
  EXPECT_EQ(referenceCheckSkipped(std::numeric_limits<double>::quiet_NaN(), 60), "");
  EXPECT_EQ(referenceCheckSkipped(1000, std::numeric_limits<double>::infinity()), "");
  EXPECT_NE(referenceCheckSkipped(123.4, 60).find("about 123 s"), std::string::npos);
}

}  // namespace
}  // namespace collage
