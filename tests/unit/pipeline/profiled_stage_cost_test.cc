// The profiled cost model adds up what a profiled run measured per node; it
// counts a constant two nodes share once, and has no answer (+inf) for a
// micro-batch share nobody profiled. No timing is checked, only sums.
#include "core/pipeline/profiled_stage_cost.h"

#include <gtest/gtest.h>

#include <cmath>

#include "backends/backend_list.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

TEST(ProfiledStageCost, AddsProfiledNodesAndCountsSharedWeightsOnce) {
  // in[2x8] -> Mul(w) -> Add(w) -> Relu, the constant w read twice.
  GraphBuilder b;
  const ValueId w = b.constant({2, 8});
  b.finish(b.op("Relu", {b.op("Add", {b.op("Mul", {b.input({2, 8}), w}), w})}));
  const Graph& g = b.graph();
  auto native = std::shared_ptr<Backend>(createBackend("native"));
  const BackendLookup lookup = [native](const std::string& n) {
    return n == "native" ? native.get() : nullptr;
  };
  const NodeProfile p = profileNodes(g, "native", lookup, 1, 3);
  ASSERT_EQ(p.seconds.size(), 3u);
  for (double s : p.seconds) EXPECT_TRUE(std::isfinite(s) && s >= 0);
  EXPECT_EQ(p.activationBytes[0], 2 * 8 * 4);

  ProfiledStageCost cost(g);
  cost.add(2, p);
  const StageRunCost all = cost.stage({0, 1, 2}, DeviceKind::Cpu, 1, 2);
  EXPECT_DOUBLE_EQ(all.seconds, p.seconds[0] + p.seconds[1] + p.seconds[2]);
  EXPECT_EQ(all.weightBytes, 2 * 8 * 4);  // w once
  EXPECT_EQ(all.activationBytes, 3 * 2 * 8 * 4);
  EXPECT_EQ(cost.stage({1}, DeviceKind::Cpu, 1, 2).weightBytes, 2 * 8 * 4);
  EXPECT_EQ(cost.stage({2}, DeviceKind::Cpu, 1, 2).weightBytes, 0);
  // Micro-batch 4 on two devices runs 2 each: profiled. Micro-batch 4 on one
  // device, or a GPU: not.
  EXPECT_DOUBLE_EQ(cost.stage({0}, DeviceKind::Cpu, 2, 4).seconds, p.seconds[0]);
  EXPECT_TRUE(std::isinf(cost.stage({0}, DeviceKind::Cpu, 1, 4).seconds));
  EXPECT_TRUE(std::isinf(cost.stage({0}, DeviceKind::Gpu, 1, 2).seconds));
}

}  // namespace
}  // namespace collage
