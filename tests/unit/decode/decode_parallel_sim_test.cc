// The DP / TP / CP decode simulator and planner: three requests of varying
// lengths on two devices worked by hand for each strategy, the memory
// limit's refusal, the fit of the measured points, the shape read from a
// tiny exported decoder, and the orders the cost model implies (CP at long
// context with few requests, DP at short context with many), from costs and
// a link of plausible size rather than from any rule that names a winner.
#include "core/decode/decode_parallel_sim.h"

#include <gtest/gtest.h>

#include "../test_support.h"
#include "core/decode/decoder.h"
#include "core/ir/error.h"

namespace collage {
namespace {

using test_support::expectError;

constexpr double kEps = 1e-9;

// rest 1 s, attention 0.1 s a row; one layer of 2 heads of 2 columns:
// hidden 16 B, Q + K + V 48 B, partials 32 B; 100 B of weights, 10 B a row.
DecodeStepCosts handCosts() {
  DecodeStepCosts c;
  c.restSeconds = 1;
  c.attentionSeconds = 0;
  c.attentionSecondsPerRow = 0.1;
  c.layers = 1;
  c.queryHeads = 2;
  c.kvHeads = 2;
  c.headDim = 2;
  c.hiddenBytes = 16;
  c.weightBytes = 100;
  c.cacheBytesPerRow = 10;
  return c;
}
// 0.5 s, then 1 s per 16 B.
const LinkCost kHandLink{16, 0.5};
// Prompts 2, 1, 0 rows; outputs 2, 1, 3 tokens (caches of 4, 2, 3 rows).
const std::vector<DecodeRequest> kHandRequests{{2, 2}, {1, 1}, {0, 3}};

DecodeStrategy strategy(const std::string& name) {
  for (const DecodeStrategy& s : decodeStrategies())
    if (s.name == name) return s;
  throw Error("no strategy " + name);
}

// Device 0 has requests 0 and 2, device 1 request 1; a step reads its
// filled rows and the new one. Device 0: (1.3 + 1.1) + (1.4 + 1.2) + 1.3 =
// 6.3 s; device 1: 1.2 s. Memory: 100 + 10 (4 + 3) on device 0.
TEST(DecodeParallelSim, DataParallelStepsEachDevicesRequestsOnItsOwn) {
  const DecodeSimulation s =
      simulateDecodeParallel(handCosts(), kHandLink, 2, kHandRequests, strategy("DP"));
  EXPECT_EQ(s.tokens, 6);
  EXPECT_NEAR(s.seconds, 6.3, kEps);
  EXPECT_NEAR(s.tokensPerSecond, 6 / 6.3, kEps);
  // Token steps 2.4 2.4 2.6 2.6 1.3 (device 0), 1.2 (device 1).
  EXPECT_NEAR(s.medianStepSeconds, 2.4, kEps);
  EXPECT_NEAR(s.maxStepSeconds, 2.6, kEps);
  EXPECT_EQ(s.communicationSeconds, 0);
  EXPECT_NEAR(s.memoryBytes, 170, kEps);
}

// Half the heads each: rest 0.5 a request, attention x 0.5. Two ring
// all-reduces of 16 b bytes: 2 x 2 (N - 1) messages of 8 b bytes, 0.5 +
// 0.5 b s each, so 2 + 2 b s a step. Steps (b = 3, 2, 1): 1.8 + 8, 1.3 + 6,
// 0.65 + 4. Memory: 50 + 0.5 x 10 x (4 + 2 + 3).
TEST(DecodeParallelSim, TensorParallelSplitsHeadsAndAllReducesTwicePerLayer) {
  const DecodeSimulation s =
      simulateDecodeParallel(handCosts(), kHandLink, 2, kHandRequests, strategy("TP"));
  EXPECT_EQ(s.tokens, 6);
  EXPECT_NEAR(s.seconds, 9.8 + 7.3 + 4.65, kEps);
  EXPECT_NEAR(s.communicationSeconds, 18, kEps);
  EXPECT_NEAR(s.medianStepSeconds, 9.8, kEps);
  EXPECT_NEAR(s.maxStepSeconds, 9.8, kEps);
  EXPECT_NEAR(s.memoryBytes, 95, kEps);
}

// A weight MatMul TP leaves whole holds 40 B of the 100 and half the rest:
// the rest a request is 0.5 + 0.5 / 2 = 0.75 on each device. Steps (b = 3,
// 2, 1): 2.25 + 0.3 + 8, 1.5 + 0.3 + 6, 0.75 + 0.15 + 4. Memory: 60 / 2 +
// 40 + 0.5 x 10 x 9.
TEST(DecodeParallelSim, TensorParallelRunsWhatItLeavesWholeOnEveryDevice) {
  DecodeStepCosts c = handCosts();
  c.replicatedWeightBytes = 40;
  c.replicatedRestShare = 0.5;
  const DecodeSimulation s = simulateDecodeParallel(c, kHandLink, 2, kHandRequests, strategy("TP"));
  EXPECT_NEAR(s.seconds, 10.55 + 7.8 + 4.9, kEps);
  EXPECT_NEAR(s.medianStepSeconds, 10.55, kEps);
  EXPECT_NEAR(s.memoryBytes, 115, kEps);
  // One device runs everything whatever TP leaves whole.
  const DecodeSimulation one =
      simulateDecodeParallel(c, kHandLink, 1, kHandRequests, strategy("TP"));
  const DecodeSimulation plain =
      simulateDecodeParallel(handCosts(), kHandLink, 1, kHandRequests, strategy("TP"));
  EXPECT_NEAR(one.seconds, plain.seconds, kEps);
  c.replicatedRestShare = 1.5;
  expectError([&] { simulateDecodeParallel(c, kHandLink, 2, kHandRequests, strategy("TP")); },
              {"not within [0, 1]"});
}

// Caches split by rows: request 0 [0,2) [2,4), request 1 [0,1) [1,2),
// request 2 [0,1) [1,3); owners 0, 1, 0.
//  t0: rows read d0 2 1 1, d1 1 1 0; compute d0 0.4 + 2 R, d1 0.2 + R:
//      2.4; Q from device 0 (2 x 48 B: 6.5 s) and 1 (3.5 s) -> 6.5;
//      partials to owner 1 (2.5 s), to owner 0 (2 x 32 B: 4.5 s) -> 4.5;
//      step 2.4 + 11 = 13.4
//  t1: rows d0 2 1, d1 2 1; d0 0.3 + 2 R = 2.3; 6.5 + 4.5; step 13.3
//  t2: rows d0 1, d1 2; d0 0.1 + R = 1.1; 3.5 + 2.5; step 7.1
// Memory: device 1 holds 2 + 1 + 2 rows: 150.
TEST(DecodeParallelSim, CacheParallelSplitsRowsAndSendsQueriesAndPartials) {
  const DecodeSimulation s =
      simulateDecodeParallel(handCosts(), kHandLink, 2, kHandRequests, strategy("CP"));
  EXPECT_NEAR(s.seconds, 13.4 + 13.3 + 7.1, kEps);
  EXPECT_NEAR(s.communicationSeconds, 28, kEps);
  EXPECT_NEAR(s.medianStepSeconds, 13.4, kEps);
  EXPECT_NEAR(s.memoryBytes, 150, kEps);
}

// Every device runs every request's rest; the partials of the b active
// requests all-gathered: one message of 32 b B per layer.
//  t0: d0 0.4 + 3 R, d1 0.2 + 3 R -> 3.4, + 6.5 = 9.9
//  t1: d0 0.3 + 2 R, d1 0.3 + 2 R -> 2.3, + 4.5 = 6.8
//  t2: d0 0.1 + R, d1 0.2 + R -> 1.2, + 2.5 = 3.7
TEST(DecodeParallelSim, CacheParallelReplicatedAllGathersThePartials) {
  const DecodeSimulation s =
      simulateDecodeParallel(handCosts(), kHandLink, 2, kHandRequests, strategy("CP-replicated"));
  EXPECT_NEAR(s.seconds, 9.9 + 6.8 + 3.7, kEps);
  EXPECT_NEAR(s.communicationSeconds, 13.5, kEps);
  EXPECT_NEAR(s.memoryBytes, 150, kEps);
}

// On one device every strategy is the same sequence of whole steps.
TEST(DecodeParallelSim, OneDeviceIsTheSameForEveryStrategy) {
  for (const DecodeStrategy& st : decodeStrategies()) {
    const DecodeSimulation s = simulateDecodeParallel(handCosts(), kHandLink, 1, kHandRequests, st);
    // 3 + 4 (request 0) + 2 (1) + 1 + 2 + 3 (2), each row 0.1 s; 6 rests.
    EXPECT_NEAR(s.seconds, 6 + 1.5, kEps) << st.name;
    EXPECT_NEAR(s.memoryBytes, 100 + 90, kEps) << st.name;
    EXPECT_EQ(s.communicationSeconds, 0) << st.name;
  }
}

// DP is fastest here; under 160 B a device it does not fit (170 B), and
// the fastest that does is CP-replicated (20.4 s against TP's 21.75);
// under 90 B none does, and the refusal names the smallest need (TP, 95).
TEST(DecodeParallelSim, ThePlannerTakesTheFastestSplitThatFitsMemory) {
  const DecodeParallelPlan free = planDecodeParallel(handCosts(), kHandLink, 2, kHandRequests);
  EXPECT_EQ(free.best().strategy.name, "DP");
  const DecodeParallelPlan tight =
      planDecodeParallel(handCosts(), kHandLink, 2, kHandRequests, 160);
  EXPECT_FALSE(tight.options[0].fits);
  EXPECT_EQ(tight.best().strategy.name, "CP-replicated");
  EXPECT_EQ(tight.best().strategy.attention, AttentionSplit::Sequence);
  EXPECT_EQ(tight.best().strategy.projections, ProjectionSplit::Replicated);
  expectError([&] { planDecodeParallel(handCosts(), kHandLink, 2, kHandRequests, 90); },
              {"the smallest, TP, needs 95 bytes per device"});
}

TEST(DecodeParallelSim, BadInputIsRefusedWithTheRequest) {
  expectError(
      [&] {
        simulateDecodeParallel(handCosts(), kHandLink, 2, {{1, 1}, {3, 0}}, strategy("DP"));
      },
      {"request 1 decodes 0 token(s)"});
  expectError(
      [&] {
        simulateDecodeParallel(handCosts(), kHandLink, 2, {{-1, 1}}, strategy("DP"));
      },
      {"request 0 has a negative prompt"});
  expectError(
      [&] { simulateDecodeParallel(handCosts(), kHandLink, 0, kHandRequests, strategy("DP")); },
      {"0 device(s)"});
}

// attention = 1 + 0.001 rows; the rest's median 2.5. Points under the
// origin's line refit through it: (100, 0.05), (200, 0.2) -> 45 / 50000.
TEST(DecodeParallelSim, FitsTheAttentionLineAndTheRestsMedian) {
  DecodeStepCosts c;
  fitDecodeStepCosts({{100, 1.1, 2}, {200, 1.2, 3}, {300, 1.3, 2.5}}, c);
  EXPECT_NEAR(c.attentionSeconds, 1, 1e-9);
  EXPECT_NEAR(c.attentionSecondsPerRow, 0.001, 1e-12);
  EXPECT_NEAR(c.restSeconds, 2.5, 1e-12);
  fitDecodeStepCosts({{100, 0.05, 1}, {200, 0.2, 1}}, c);
  EXPECT_EQ(c.attentionSeconds, 0);
  EXPECT_NEAR(c.attentionSecondsPerRow, 45.0 / 50000, 1e-12);
  expectError([&] { fitDecodeStepCosts({{100, 1, 1}, {100, 2, 1}}, c); }, {"two row counts"});
}

// llama_style_tiny: 2 layers, 4 query heads on 2 KV heads of 16 columns;
// a cache row is 2 layers x K, V x 2 heads x 16 x 4 B.
TEST(DecodeParallelSim, ReadsTheModelsShapeFromTheStepGraph) {
  const DecodeModel m = importDecodeModel(
      std::string(COLLAGE_SOURCE_DIR) + "/tests/models/decoder/llama_style_tiny.onnx", 8);
  const DecodeStepCosts c = decodeModelShape(m.graph, m.signature);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.queryHeads, 4);
  EXPECT_EQ(c.kvHeads, 2);
  EXPECT_EQ(c.headDim, 16);
  EXPECT_EQ(c.hiddenBytes, 4 * 16 * 4);
  EXPECT_EQ(c.cacheBytesPerRow, 2 * 2 * 2 * 16 * 4);
  EXPECT_GT(c.weightBytes, 100000);  // the embedding alone: 512 x 64 x 4 B
}

// A model of plausible size: 8 layers, 16 heads on 4 KV heads of 64; a
// step's rest 2 ms, attention 0.1 ms + 100 ns a row; a link of 5 us and
// 5 GB/s. Nothing below names a winner: the orders follow from the costs.
DecodeStepCosts plausibleCosts() {
  DecodeStepCosts c;
  c.restSeconds = 2e-3;
  c.attentionSeconds = 1e-4;
  c.attentionSecondsPerRow = 1e-7;
  c.layers = 8;
  c.queryHeads = 16;
  c.kvHeads = 4;
  c.headDim = 64;
  c.hiddenBytes = 4.0 * 16 * 64;
  c.weightBytes = 1e8;
  c.cacheBytesPerRow = 8.0 * 2 * 4 * 64 * 4;
  return c;
}
const LinkCost kPlausibleLink{5e9, 5e-6};

// One request at 128k on 8 devices: DP leaves 7 idle; TP cannot split the
// cache finer than its 4 KV heads; CP splits it 8 ways and talks less.
TEST(DecodeParallelSim, CacheParallelismWinsAtLongContextWithFewRequests) {
  const DecodeParallelPlan p =
      planDecodeParallel(plausibleCosts(), kPlausibleLink, 8, {{131072, 64}});
  EXPECT_EQ(p.best().strategy.attention, AttentionSplit::Sequence);
  for (const DecodeSimulation& s : p.options) {
    if (s.strategy.attention != AttentionSplit::Sequence) {
      EXPECT_LT(s.tokensPerSecond, p.best().tokensPerSecond) << s.strategy.name;
    }
  }
  // And CP's memory per device is an eighth of the cache, DP's all of it.
  EXPECT_LT(p.options[2].memoryBytes, p.options[0].memoryBytes);
}

// 64 requests at 128 rows on 8 devices: each device has 8 whole requests
// and nothing to send; TP and CP pay messages every layer and step.
TEST(DecodeParallelSim, DataParallelismWinsAtShortContextWithManyRequests) {
  const std::vector<DecodeRequest> many(64, DecodeRequest{128, 64});
  const DecodeParallelPlan p = planDecodeParallel(plausibleCosts(), kPlausibleLink, 8, many);
  EXPECT_EQ(p.best().strategy.name, "DP");
}

// Two requests at 4k rows with outputs of 1 and 127 tokens (the same total
// as 64 and 64): DP's devices then finish apart, its throughput about
// halves, and a split that shares each step (here TP) overtakes it.
TEST(DecodeParallelSim, VaryingOutputLengthsUnbalanceDataParallelism) {
  const DecodeStepCosts c = plausibleCosts();
  const std::vector<DecodeRequest> even{{4096, 64}, {4096, 64}};
  const std::vector<DecodeRequest> uneven{{4096, 1}, {4096, 127}};
  const double dpEven =
      simulateDecodeParallel(c, kPlausibleLink, 2, even, strategy("DP")).tokensPerSecond;
  const double dpUneven =
      simulateDecodeParallel(c, kPlausibleLink, 2, uneven, strategy("DP")).tokensPerSecond;
  EXPECT_LT(dpUneven, 0.6 * dpEven);
  EXPECT_EQ(planDecodeParallel(c, kPlausibleLink, 2, even).best().strategy.name, "DP");
  EXPECT_NE(planDecodeParallel(c, kPlausibleLink, 2, uneven).best().strategy.name, "DP");
}

}  // namespace
}  // namespace collage
