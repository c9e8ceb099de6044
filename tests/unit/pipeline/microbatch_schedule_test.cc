// The micro-batch scheduler: in-flight counts computed by hand on a chain and
// on branches that meet, memory limits respected (fewer micro-batches and a
// longer period, or an error naming the stage and the bytes), and every plan
// the partitioner makes scheduled within its devices' memory.
#include "core/pipeline/microbatch_schedule.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "core/ir/error.h"
#include "tests/unit/pipeline/fake_stage_cost.h"

namespace collage {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Built {
  PipeGraph graph;
  StageGraph plan;
  Topology topo;
};

// One graph node per stage; stage s runs `seconds[s]` per micro-batch on its
// own device "d<s>", holds 100 B of weights and 10 B per micro-batch.
Built pipeline(const std::vector<double>& seconds, const std::vector<std::pair<int, int>>& edges,
               const std::vector<double>& memory) {
  Built b;
  std::vector<PipeDevice> devices;
  for (size_t s = 0; s < seconds.size(); ++s) {
    b.graph.addNode("s" + std::to_string(s));
    PipelineStage st;
    st.nodes = {static_cast<int>(s)};
    st.devices = {"d" + std::to_string(s)};
    st.estimate.computeSeconds = seconds[s];
    st.estimate.weightBytes = 100;
    st.estimate.activationBytes = 10;
    b.plan.stages.push_back(st);
    devices.push_back({st.devices[0], DeviceKind::Cpu, 1, memory[s]});
  }
  for (auto [from, to] : edges) b.graph.addEdge(from, to, 1);
  b.plan.edges = edges;
  const LinkCost link{1e9, 0};
  b.topo = Topology(devices, {}, &link, "test");
  return b;
}

TEST(MicroBatchSchedule, ChainStagesHoldTwo) {
  // Periods of 1, 2, 1 s: period 2; offsets 0, 1, 3. Stage 0's micro-batch
  // lives from 0 until stage 1 finishes at 3: ceil(3/2) = 2. Stage 1: from 1
  // to 4: 2. The sink: its own second: 1.
  const Built b = pipeline({1, 2, 1}, {{0, 1}, {1, 2}}, {kInf, kInf, kInf});
  const auto s = scheduleMicroBatches(b.plan, b.topo, b.graph);
  EXPECT_EQ(s.fullPeriodSeconds, 2);
  EXPECT_TRUE(s.full());
  EXPECT_EQ(s.fillSeconds, 4);
  ASSERT_EQ(s.stages.size(), 3u);
  EXPECT_EQ(s.stages[1].startOffsetSeconds, 1);
  EXPECT_EQ(s.stages[2].startOffsetSeconds, 3);
  EXPECT_EQ(s.stages[0].neededInFlight, 2);
  EXPECT_EQ(s.stages[1].neededInFlight, 2);
  EXPECT_EQ(s.stages[2].neededInFlight, 1);
  EXPECT_EQ(s.stages[0].memoryBytes, 120);
}

// Stages x, b, a1, a2, j: x -> a1 -> a2 -> j and x -> b -> j, each 1 s per
// micro-batch. Offsets x 0, b 1, a1 1, a2 2, j 3 (the join waits for its
// last producer, a2, whose edge comes after b's). b's output waits at the
// join for a2's: it lives from 1 until j finishes at 4, three periods.
const std::vector<std::pair<int, int>> kTowers = {{0, 1}, {0, 2}, {1, 4}, {2, 3}, {3, 4}};

TEST(MicroBatchSchedule, ShortBranchHoldsMoreAtTheJoin) {
  const Built b = pipeline({1, 1, 1, 1, 1}, kTowers, {kInf, kInf, kInf, kInf, kInf});
  const auto s = scheduleMicroBatches(b.plan, b.topo, b.graph);
  EXPECT_EQ(s.stages[1].startOffsetSeconds, 1);
  EXPECT_EQ(s.stages[4].startOffsetSeconds, 3);
  EXPECT_EQ(s.stages[1].neededInFlight, 3);
  EXPECT_EQ(s.stages[2].neededInFlight, 2);
  EXPECT_EQ(s.stages[3].neededInFlight, 2);
  EXPECT_EQ(s.fillSeconds, 4);
  EXPECT_TRUE(s.full());
  EXPECT_EQ(s.periodSeconds, 1);
}

TEST(MicroBatchSchedule, MemoryCapsInFlightAndStretchesThePeriod) {
  // b's device holds 125 B: weights 100 + two micro-batches of 10, not three.
  // Each of its two buffers is busy 3 s, so one comes free every 1.5 s.
  const Built b = pipeline({1, 1, 1, 1, 1}, kTowers, {kInf, 125, kInf, kInf, kInf});
  const auto s = scheduleMicroBatches(b.plan, b.topo, b.graph);
  EXPECT_EQ(s.stages[1].inFlight, 2);
  EXPECT_EQ(s.stages[1].neededInFlight, 3);
  EXPECT_EQ(s.stages[1].memoryBytes, 120);
  EXPECT_LE(s.stages[1].memoryBytes, s.stages[1].memoryLimitBytes);
  EXPECT_FALSE(s.full());
  EXPECT_DOUBLE_EQ(s.periodSeconds, 1.5);
}

TEST(MicroBatchSchedule, NoRoomForOneMicroBatchNamesTheStageAndBytes) {
  const Built b = pipeline({1, 1, 1, 1, 1}, kTowers, {kInf, 105, kInf, kInf, kInf});
  try {
    scheduleMicroBatches(b.plan, b.topo, b.graph);
    FAIL() << "scheduled over the memory limit";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* part :
         {"stage 1 [s1]", "d1", "needs 110 B", "100 B of weights", "limit is 105 B"})
      EXPECT_NE(what.find(part), std::string::npos) << what << " lacks " << part;
  }
}

TEST(MicroBatchSchedule, PartitionerPlansScheduleWithinMemory) {
  // Random branching graphs and tight devices: whatever the partitioner
  // returns, the schedule keeps every stage within its devices' memory and
  // holds at least one micro-batch, or refuses with an error.
  std::mt19937 rng(7);
  int scheduled = 0, capped = 0;
  for (int trial = 0; trial < 200; ++trial) {
    PipeGraph g;
    const int n = 3 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) g.addNode("n" + std::to_string(i));
    for (int a = 0; a < n; ++a)
      for (int c = a + 1; c < n; ++c)
        if (rng() % 100 < 35) g.addEdge(a, c, 1000);
    FakeStageCost cost;
    double total = 0;
    for (int i = 0; i < n; ++i) {
      cost.nodes.push_back(
          {1e-3 * (1 + rng() % 5), kInf, 1e4 * (rng() % 5), 1e4 * (1 + rng() % 5)});
      total += cost.nodes.back().weightBytes + 4 * cost.nodes.back().activationBytesPerSample;
    }
    const double memory = total * (0.2 + 0.1 * (rng() % 5));
    std::vector<PipeDevice> devices;
    for (int i = 0; i < 3; ++i)
      devices.push_back({"c" + std::to_string(i), DeviceKind::Cpu, 1, memory});
    const LinkCost link{1e7, 1e-5};
    const Topology topo(devices, {}, &link, "t");
    PartitionOptions opt;
    opt.batch = 4;
    StageGraph plan;
    try {
      plan = partitionGraphPipeline(g, topo, cost, opt);
    } catch (const Error&) {
      continue;  // nothing fits even at the partitioner's count
    }
    try {
      const auto s = scheduleMicroBatches(plan, topo, g);
      ++scheduled;
      for (const auto& st : s.stages) {
        EXPECT_GE(st.inFlight, 1);
        EXPECT_LE(st.inFlight, st.neededInFlight);
        EXPECT_LE(st.memoryBytes, st.memoryLimitBytes);
      }
      capped += !s.full();
      EXPECT_GE(s.periodSeconds, s.fullPeriodSeconds);
    } catch (const Error& e) {
      ADD_FAILURE() << "the partitioner's plan fits 2 micro-batches per stage, so 1 fits: "
                    << e.what();
    }
  }
  EXPECT_GT(scheduled, 50);
}

}  // namespace
}  // namespace collage
