#include <gtest/gtest.h>

#include "core/ir/error.h"
#include "core/ir/graph.h"

namespace collage {
namespace {

TEST(Graph, FinalizeSortsTopologicallyAndFindsConsumers) {
  Graph g;
  ValueId x = g.addInput("x", {ElementType::Float32, {2}});
  ValueId a = g.addValue("a", {ElementType::Float32, {2}});
  ValueId b = g.addValue("b", {ElementType::Float32, {2}});
  // Added out of order: the Relu reading `a` comes before the node producing it.
  g.addNode(Node{"relu", "Relu", {}, {a}, {b}});
  g.addNode(Node{"neg", "Neg", {}, {x}, {a}});
  g.markOutput(b);
  g.finalize();
  ASSERT_EQ(g.numNodes(), 2);
  EXPECT_EQ(g.node(0).name, "neg");
  EXPECT_EQ(g.node(1).name, "relu");
  EXPECT_EQ(g.value(a).producer, 0);
  EXPECT_EQ(g.value(a).consumers, std::vector<NodeId>{1});
  EXPECT_EQ(g.successors(0), std::vector<NodeId>{1});
  EXPECT_EQ(g.predecessors(1), std::vector<NodeId>{0});
  EXPECT_EQ(*g.findNode("relu"), 1);
}

TEST(Graph, CycleIsAnErrorNamingANode) {
  Graph g;
  ValueId a = g.addValue("a", {ElementType::Float32, {2}});
  ValueId b = g.addValue("b", {ElementType::Float32, {2}});
  g.addNode(Node{"n1", "Relu", {}, {a}, {b}});
  g.addNode(Node{"n2", "Relu", {}, {b}, {a}});
  try {
    g.finalize();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos) << e.what();
  }
}

TEST(Graph, UndefinedInputIsAnErrorNamingTheTensor) {
  Graph g;
  ValueId a = g.addValue("dangling", {ElementType::Float32, {2}});
  ValueId b = g.addValue("b", {ElementType::Float32, {2}});
  g.addNode(Node{"n1", "Relu", {}, {a}, {b}});
  try {
    g.finalize();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'dangling'"), std::string::npos) << e.what();
  }
}

TEST(Tensor, ShapeParsingAndStrides) {
  EXPECT_EQ(parseShape("1x3x224x224"), (Shape{1, 3, 224, 224}));
  EXPECT_EQ(parseShape("2,5"), (Shape{2, 5}));
  EXPECT_THROW(parseShape("1xx3"), Error);
  EXPECT_THROW(parseShape("1x-3"), Error);
  EXPECT_EQ(stridesOf({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  Tensor t = Tensor::fromFloats({2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % kTensorAlignment, 0u);
  DLTensor dl = t.toDLTensor();
  EXPECT_EQ(dl.ndim, 2);
  EXPECT_EQ(dl.shape[1], 2);
  EXPECT_EQ(dl.data, t.raw());
}

}  // namespace
}  // namespace collage
