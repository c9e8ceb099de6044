// The end-to-end check that closes an optimisation (core/search/plan_selection.h).
// No timing decides a pass here: the tests check which plans are run, which
// are refused and what is reported, never which one is faster.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/backend_list.h"
#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/search/plan_selection.h"

namespace collage {
namespace {

const std::string kModel = std::string(COLLAGE_SOURCE_DIR) + "/resources/models/dcgan_small.onnx";

Backend* backendNamed(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Backend>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, name == "nosuch" ? nullptr : createBackend(name)).first;
  return it->second.get();
}
const BackendLookup kLookup = [](const std::string& n) { return backendNamed(n); };

TEST(PlanSelection, EveryRunnablePlanIsTimedAndABrokenOneIsNeverChosen) {
  Graph g = importOnnx(kModel);
  std::vector<Plan> plans = {singleNodePlan(g, "native"), singleNodePlan(g, "nosuch"),
                             singleNodePlan(g, "native")};
  EndToEndOptions options;
  options.budgetSeconds = 0.05;
  EndToEndSelection s = selectPlanByEndToEnd(g, plans, {"op-level", "broken", "copy"}, kLookup, options);
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
  EXPECT_NE(text.find("broken: cannot run"), std::string::npos) << text;
  EXPECT_NE(text.find("<- chosen"), std::string::npos) << text;
}

TEST(PlanSelection, TheSearchsOwnPlanMustRun) {
  Graph g = importOnnx(kModel);
  EXPECT_THROW(selectPlanByEndToEnd(g, {singleNodePlan(g, "nosuch")}, {"op-level"}, kLookup), Error);
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
  int chosen = choosePlacementByEndToEnd(g, own, {same}, planOf, kLookup, &s);
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
  choosePlacementByEndToEnd(g, own, {close, far}, planOf, kLookup, &s);
  ASSERT_EQ(s.timings.size(), 2u);
  EXPECT_EQ(s.timings[1].label, "priority");
}

}  // namespace
}  // namespace collage

namespace collage {
namespace {

std::vector<PlanRunTiming> timingsFor(size_t plans) { return std::vector<PlanRunTiming>(plans); }

// The decision rule on synthetic rounds (the timings are data here, not
// measurements): pairing the rounds cancels drift that both plans share.
TEST(PairedRounds, AConsistentlyFasterPlanWinsEvenWhenTheMachineDrifts) {
  // The machine slows down 2x halfway; plan 1 is 5 % faster in every round.
  std::vector<double> own = {100, 102, 99, 200, 205, 198, 101, 210};
  std::vector<double> other;
  for (double t : own) other.push_back(t * 0.95);
  auto t = timingsFor(2);
  EXPECT_EQ(chooseByPairedRounds({own, other}, t), 1u);
  EXPECT_NEAR(t[1].pairedRatio, 0.95, 1e-9);
  EXPECT_EQ(t[1].fasterRounds, 8);
}

TEST(PairedRounds, NoiseOrASmallGainKeepsTheSearchsPlan) {
  auto t = timingsFor(3);
  // Plan 1: 1 % faster (below the 2 % gain). Plan 2: 10 % faster in half the
  // rounds, 10 % slower in the others.
  std::vector<double> own = {100, 100, 100, 100, 100, 100};
  std::vector<double> small = {99, 99, 99, 99, 99, 99};
  std::vector<double> mixed = {90, 110, 90, 110, 90, 110};
  EXPECT_EQ(chooseByPairedRounds({own, small, mixed}, t), 0u);
  EXPECT_EQ(t[1].fasterRounds, 6);
  EXPECT_EQ(t[2].fasterRounds, 3);
}

TEST(PairedRounds, TheLowestMedianRatioAmongThePassingPlansWinsAndBrokenPlansAreSkipped) {
  auto t = timingsFor(4);
  std::vector<double> own = {100, 100, 100, 100, 100};
  std::vector<double> a = {90, 91, 89, 120, 90};  // 4 of 5 faster, median 0.90
  std::vector<double> b = {80, 80, 80, 80, 80};   // 5 of 5, median 0.80
  EXPECT_EQ(chooseByPairedRounds({own, a, b, {}}, t), 2u);
  EXPECT_NEAR(t[1].pairedRatio, 0.90, 1e-9);
  EXPECT_EQ(t[3].fasterRounds, 0);
  // A cancelled run: the last round is short; only complete pairs count.
  auto u = timingsFor(2);
  EXPECT_EQ(chooseByPairedRounds({{100, 100, 100, 100}, {80, 80, 80}}, u), 1u);
  EXPECT_EQ(u[1].fasterRounds, 3);
}

}  // namespace
}  // namespace collage
