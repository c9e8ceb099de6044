// The end-to-end check that closes an optimisation (core/plan_selection.h).
// No timing decides a pass here: the tests check which plans are run, which
// are refused and what is reported, never which one is faster.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/backend_list.h"
#include "core/error.h"
#include "core/onnx_import.h"
#include "core/plan_selection.h"

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
