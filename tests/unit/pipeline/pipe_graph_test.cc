// The pipeline graph of a model: one node per operator, an edge per value
// between operators with its bytes per sample; constants and graph inputs
// are no edges. And the decomposition sees the model's branches.
#include "core/pipeline/pipe_graph.h"

#include <gtest/gtest.h>

#include "core/ir/error.h"
#include "core/pipeline/series_parallel.h"
#include "core/pipeline/stage_cost.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

TEST(PipeGraph, FromAModelGraph) {
  // in[4x8] -> Relu -> {Sigmoid, Mul(x, constant)} -> Add
  GraphBuilder b;
  const ValueId x = b.op("Relu", {b.input({4, 8})});
  const ValueId l = b.op("Sigmoid", {x});
  const ValueId r = b.op("Mul", {x, b.constant({4, 8})});
  b.finish(b.op("Add", {l, r}));
  const Graph& g = b.graph();
  const PipeGraph p = pipeGraphOf(g, 4);
  ASSERT_EQ(p.size(), g.numNodes());
  ASSERT_EQ(p.edges().size(), 4u);  // relu->sigmoid, relu->mul, sigmoid->add, mul->add
  for (const auto& e : p.edges())
    EXPECT_EQ(e.bytesPerSample, 8 * 4);  // float32[4x8] over 4 samples
  const auto tree = decomposeSeriesParallel(p);
  EXPECT_EQ(tree.nodes[tree.root].kind, SpNode::Kind::Series);
  EXPECT_EQ(tree.nodes[tree.root].children.size(), 3u);  // relu, P(sigmoid, mul), add
  EXPECT_EQ(tree.nodes[tree.nodes[tree.root].children[1]].kind, SpNode::Kind::Parallel);
  EXPECT_THROW(pipeGraphOf(g, 0), Error);
}

TEST(PipeGraph, RefusesBadEdges) {
  PipeGraph p;
  p.addNode("a");
  p.addNode("b");
  EXPECT_THROW(p.addEdge(0, 2, 1), Error);
  EXPECT_THROW(p.addEdge(0, 0, 1), Error);
  EXPECT_THROW(p.addEdge(0, 1, -1), Error);
  p.addEdge(0, 1, 3);
  p.addEdge(0, 1, 4);  // two values between one pair: two edges, one dependency
  EXPECT_EQ(p.edges().size(), 2u);
  EXPECT_EQ(p.successors(0).size(), 1u);
  EXPECT_EQ(receivedBytesPerSample(p, {1}), 7);
}

}  // namespace
}  // namespace collage
