// `collage inspect`'s summary (core/ops/model_stats.h): its "largest:" line
// names the largest tensor a node makes, which bench/decode_bench.py sets
// against the machine's memory to say when ONNX Runtime's prompt pass (it
// keeps each node's output) cannot fit.
#include "core/ops/model_stats.h"

#include <gtest/gtest.h>

#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

TEST(ModelStats, TheSummaryNamesTheLargestTensorANodeMakes) {
  GraphBuilder b;
  const ValueId q = b.input({256, 16});
  const ValueId k = b.input({16, 256});
  b.finish(b.op("Relu", {b.op("MatMul", {q, k})}));
  const std::string text = describeModel(b.graph(), "m.onnx");
  const Graph& g = b.graph();
  const Node& matmul = g.node(0);
  EXPECT_NE(text.find("largest: " + g.value(matmul.outputs[0]).name + "  float32[256x256], 262144 bytes (256"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("the output of MatMul '" + matmul.name + "'"), std::string::npos) << text;
}

}  // namespace
}  // namespace collage
