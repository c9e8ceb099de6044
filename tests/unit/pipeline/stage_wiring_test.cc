// The wiring both pipeline runtimes share: each stage's inputs come from the
// right producer and slot, and the producer sends, in slot order, exactly
// the values the consumer reads there (the MPI runtime tags its messages by
// slot, with no handshake, so both ends must agree). Wiring twice gives the
// same numbering (every rank wires on its own).
#include "core/pipeline/stage_wiring.h"

#include <gtest/gtest.h>

#include "core/ir/error.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using test_support::expectError;

// in -> relu r -> sigmoid s; mul m = r * in; a1 = s + m; a2 = a1 + r; r is
// also an output. Stages: {relu, mul} {sigmoid} {a1, a2}: stage 2 reads m
// and r from stage 0 (two tensors on one edge, in the other order than
// stage 0 makes them), s from stage 1; stages 0 and 2 read the model input.
struct Diamond {
  GraphBuilder b;
  Diamond() {
    const ValueId in = b.input({2, 4});
    const ValueId r = b.op("Relu", {in});
    const ValueId s = b.op("Sigmoid", {r});
    const ValueId m = b.op("Mul", {r, in});
    const ValueId a1 = b.op("Add", {s, m});
    b.graph().markOutput(r);
    b.finish(b.op("Add", {a1, r}));
  }
};

StageGraph threeStages() {
  StageGraph g;
  for (const auto& [nodes, device] : std::vector<std::pair<std::vector<int>, std::string>>{
           {{0, 2}, "c0"}, {{1}, "c1"}, {{3, 4}, "c0"}}) {
    PipelineStage s;
    s.nodes = nodes;
    s.devices = {device};
    g.stages.push_back(s);
  }
  return g;
}

TEST(StageWiring, EachSlotIsTheValueItsProducerSendsThere) {
  Diamond d;
  const Graph& graph = d.b.graph();
  const std::vector<WiredStage> stages = wireStages(graph, threeStages(), nullptr, "native");
  ASSERT_EQ(stages.size(), 3u);
  int fromStages = 0, fromModel = 0;
  for (const WiredStage& stage : stages) {
    for (size_t i = 0; i < stage.inputs.size(); ++i) {
      const StageInputSource& src = stage.inputs[i];
      const std::string& name = stage.graph->value(stage.graph->inputs()[i]).name;
      if (src.graphInput >= 0) {
        EXPECT_EQ(graph.value(graph.inputs()[static_cast<size_t>(src.graphInput)]).name, name);
        ++fromModel;
        continue;
      }
      ++fromStages;
      const WiredStage& producer = stages[stage.inEdges.at(src.edge)];
      const StageSend* send = nullptr;
      for (const StageSend& s : producer.outEdges)
        if (s.consumer == stage.index) send = &s;
      ASSERT_NE(send, nullptr) << "stage " << producer.index << " sends nothing to " << stage.index;
      const size_t position = send->outputs.at(src.slot);
      EXPECT_EQ(producer.graph->value(producer.graph->outputs()[position]).name, name);
    }
  }
  EXPECT_EQ(fromStages, 4);  // r into 1; m, r and s into 2
  EXPECT_EQ(fromModel, 1);   // the input into 0 (mul is stage 0's too)
  // Stage 2's in-edges: from 1 (s, read first) and from 0 (m then r).
  EXPECT_EQ(stages[2].inEdges, (std::vector<size_t>{1, 0}));
  for (const StageSend& send : stages[0].outEdges) {
    if (send.consumer == 2) {
      EXPECT_EQ(send.outputs.size(), 2u);
    }
  }
  // relu (stage 0) and add (stage 2) are the model's outputs.
  ASSERT_EQ(stages[0].modelOutputs.size(), 1u);
  ASSERT_EQ(stages[2].modelOutputs.size(), 1u);
  EXPECT_EQ(stageDisplayName(2, stages[2].devices), "stage 2 [c0]");
}

TEST(StageWiring, WiringTwiceNumbersAlike) {
  Diamond d;
  const auto a = wireStages(d.b.graph(), threeStages(), nullptr, "native");
  const auto b = wireStages(d.b.graph(), threeStages(), nullptr, "native");
  for (size_t s = 0; s < a.size(); ++s) {
    EXPECT_EQ(a[s].inEdges, b[s].inEdges);
    ASSERT_EQ(a[s].outEdges.size(), b[s].outEdges.size());
    for (size_t e = 0; e < a[s].outEdges.size(); ++e) {
      EXPECT_EQ(a[s].outEdges[e].consumer, b[s].outEdges[e].consumer);
      EXPECT_EQ(a[s].outEdges[e].outputs, b[s].outEdges[e].outputs);
    }
  }
}

TEST(StageWiring, RefusesANodeInNoStageAndAStageWithNoDevice) {
  Diamond d;
  StageGraph missing = threeStages();
  missing.stages[2].nodes = {3};
  expectError([&] { wireStages(d.b.graph(), missing, nullptr, "native"); }, {"is in no stage"});
  StageGraph bare = threeStages();
  bare.stages[1].devices.clear();
  expectError([&] { wireStages(d.b.graph(), bare, nullptr, "native"); },
              {"stage 1 has no device"});
}

}  // namespace
}  // namespace collage
