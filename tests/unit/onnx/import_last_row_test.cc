// keepLastRow (core/onnx/import_last_row.h): a decoder prompt's logits at
// the last position only, through the LM head's bias and cap, equal the
// last row of the whole graph's output; a graph it cannot see through is
// left as it was, with the reason.
#include "core/onnx/import_last_row.h"

#include <gtest/gtest.h>

#include "core/ir/tensor_compare.h"
#include "core/ops/reference_executor.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

// Hidden rows [1, 5, 4] -> MatMul by a [4, 6] weight -> + bias [6] -> x
// 0.5 -> Tanh: the logits [1, 5, 6].
ValueId logitsGraph(GraphBuilder& b, ValueId hidden) {
  ValueId y = b.op("MatMul", {hidden, b.constant({4, 6})});
  y = b.op("Add", {y, b.constant({6})});
  y = b.op("Mul", {y, b.scalar(0.5f)});
  return b.op("Tanh", {y});
}

TEST(ImportLastRow, LogitsAtTheLastPositionAreTheWholeOutputsLastRow) {
  GraphBuilder b;
  const ValueId hidden = b.op("Relu", {b.input({1, 5, 4})});
  b.finish(logitsGraph(b, hidden));
  Graph whole = b.graph();
  Graph last = b.graph();
  const std::string name = last.value(last.outputs()[0]).name;
  ASSERT_EQ(keepLastRow(last, name), "");
  const TensorType& t = last.value(last.outputs()[0]).type;
  EXPECT_EQ(t.shape, (Shape{1, 1, 6}));
  EXPECT_EQ(last.numNodes(), whole.numNodes() + 1);  // the Gather

  const std::vector<Tensor> in = randomInputs(whole, 5);
  const Tensor all = ReferenceExecutor(whole).run(in).at(0);
  const Tensor one = ReferenceExecutor(last).run(in).at(0);
  const std::vector<float> a = all.toFloats(), o = one.toFloats();
  ASSERT_EQ(o.size(), 6u);
  for (size_t j = 0; j < 6; ++j) EXPECT_EQ(o[j], a[4 * 6 + j]) << j;
}

TEST(ImportLastRow, LeavesWhatItCannotSeeThroughWithTheReason) {
  {
    // A softmax over the vocabulary between the product and the output.
    GraphBuilder b;
    ValueId y = b.op("MatMul", {b.input({1, 5, 4}), b.constant({4, 6})});
    b.finish(b.op("Softmax", {y}, attrs({{"axis", int64_t{-1}}})));
    Graph g = b.graph();
    const std::string why = keepLastRow(g, g.value(g.outputs()[0]).name);
    EXPECT_NE(why.find("(Softmax) between the weight product"), std::string::npos) << why;
    EXPECT_EQ(g.numNodes(), b.graph().numNodes());
  }
  {
    // A bias with rows (it differs per position).
    GraphBuilder b;
    ValueId y = b.op("MatMul", {b.input({1, 5, 4}), b.constant({4, 6})});
    b.finish(b.op("Add", {y, b.constant({5, 6})}));
    Graph g = b.graph();
    const std::string why = keepLastRow(g, g.value(g.outputs()[0]).name);
    EXPECT_NE(why.find("not elementwise with a constant"), std::string::npos) << why;
  }
  {
    // Products of two activations (attention scores) are no weight product.
    GraphBuilder b;
    const ValueId x = b.input({1, 5, 4});
    b.finish(b.op("MatMul", {x, b.op("Transpose", {x}, attrs({{"perm", Ints{0, 2, 1}}}))}));
    Graph g = b.graph();
    const std::string why = keepLastRow(g, g.value(g.outputs()[0]).name);
    EXPECT_NE(why.find("not a product by a constant weight"), std::string::npos) << why;
  }
  {
    GraphBuilder b;
    b.finish(b.op("MatMul", {b.input({1, 1, 4}), b.constant({4, 6})}));
    Graph g = b.graph();
    EXPECT_NE(keepLastRow(g, g.value(g.outputs()[0]).name).find("one row"), std::string::npos);
    EXPECT_NE(keepLastRow(g, "nothing").find("no output 'nothing'"), std::string::npos);
  }
}

}  // namespace
}  // namespace collage
