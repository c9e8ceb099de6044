// The cuDNN backend: how groups map onto one cuDNN call (no GPU needed),
// what the rule generates, and on a GPU the results against the reference.
#include <gtest/gtest.h>

#include "backends/backend_list.h"
#include "backends/cudnn/cudnn_plan.h"
#include "core/measure/kernel_check.h"
#include "core/patterns/pattern_generator.h"
#include "tests/unit/backends/cuda/cuda_test_support.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

using cudnn::CudnnOp;
using cudnn::planCudnn;

ValueId conv(GraphBuilder& b, ValueId x, const Shape& w, AttributeMap a = {}) {
  return b.op("Conv", {x, b.constant(w), b.constant({w[0]})}, std::move(a));
}

TEST(CudnnPlan, ConvBiasResidualReluIsOneFusedCall) {
  GraphBuilder b;
  ValueId x = b.input({1, 8, 6, 6});
  ValueId c = b.op("Conv", {x, b.constant({8, 8, 3, 3})}, attrs({{"pads", Ints{1, 1, 1, 1}}}));
  ValueId bias = b.op("Add", {c, b.constant({8, 1, 1})});
  ValueId res = b.op("Add", {bias, x});
  const NodeSet g = b.finish(b.op("Relu", {res}));
  const auto p = planCudnn(b.graph(), g);
  ASSERT_EQ(p.refusal, "");
  EXPECT_EQ(p.op, CudnnOp::Conv);
  EXPECT_NE(p.bias, kNoValue);
  EXPECT_EQ(p.z, x);
  EXPECT_TRUE(p.relu);
  EXPECT_EQ(p.toString(), "conv2d 1x8x6x6 k3x3 s1x1 g1 bias residual relu");
}

TEST(CudnnPlan, OneTwoAndThreeDimensionalGroupedAndDepthwise) {
  GraphBuilder b;
  ValueId c1 = conv(b, b.input({1, 4, 10}), {6, 2, 3}, attrs({{"group", int64_t{2}}}));
  b.endGroup();
  const NodeSet g1 = b.finish(c1);
  const auto p1 = planCudnn(b.graph(), g1);
  ASSERT_EQ(p1.refusal, "");
  EXPECT_EQ(p1.xDims, (std::vector<int>{1, 4, 1, 10}));  // a leading spatial 1 for cuDNN
  EXPECT_EQ(p1.wDims, (std::vector<int>{6, 2, 1, 3}));
  EXPECT_EQ(p1.groups, 2);

  GraphBuilder d;
  const NodeSet g3 = d.finish(conv(d, d.input({1, 4, 5, 6, 7}), {4, 1, 3, 3, 3},
                                   attrs({{"group", int64_t{4}}, {"strides", Ints{2, 2, 2}}})));
  const auto p3 = planCudnn(d.graph(), g3);
  ASSERT_EQ(p3.refusal, "");
  EXPECT_EQ(p3.toString(), "conv3d 1x4x5x6x7 k3x3x3 s2x2x2 g4 bias");
}

TEST(CudnnPlan, RefusesWhatCudnnCannotFuse) {
  GraphBuilder b;
  ValueId c = b.op("Conv", {b.input({1, 2, 5, 5}), b.constant({2, 2, 3, 3})},
                   attrs({{"pads", Ints{0, 0, 1, 1}}}));
  EXPECT_NE(planCudnn(b.graph(), b.finish(c)).refusal.find("asymmetric pads"), std::string::npos);

  GraphBuilder s;
  ValueId cs = conv(s, s.input({1, 2, 5, 5}), {2, 2, 3, 3});
  const NodeSet sig = s.finish(s.op("Sigmoid", {cs}));
  EXPECT_NE(planCudnn(s.graph(), sig).refusal.find("Sigmoid"), std::string::npos);
}

TEST(CudnnPlan, PoolingSoftmaxAndBatchNorm) {
  GraphBuilder b;
  ValueId p = b.op(
      "MaxPool", {b.input({1, 3, 8, 8})},
      attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
  const auto pool = planCudnn(b.graph(), b.finish(p));
  ASSERT_EQ(pool.refusal, "");
  EXPECT_EQ(pool.op, CudnnOp::MaxPool);
  EXPECT_EQ(pool.window, (std::vector<int>{3, 3}));

  GraphBuilder s;  // softmax over axis 1 of [2, 5, 3]: outer 2, len 5, inner 3
  const auto sm = planCudnn(
      s.graph(), s.finish(s.op("Softmax", {s.input({2, 5, 3})}, attrs({{"axis", int64_t{1}}}))));
  ASSERT_EQ(sm.refusal, "");
  EXPECT_EQ(sm.xDims, (std::vector<int>{2, 5, 3, 1}));

  GraphBuilder n;
  const auto bn = planCudnn(
      n.graph(),
      n.finish(n.op("BatchNormalization", {n.input({1, 4, 3, 3}), n.constant({4}), n.constant({4}),
                                           n.constant({4}), n.constant({4}, 0.5f, 1.5f)})));
  ASSERT_EQ(bn.refusal, "");
  EXPECT_EQ(bn.op, CudnnOp::BatchNorm);
}

TEST(CudnnPlan, RuleGeneratesTheFusedConvolution) {
  std::unique_ptr<Backend> backend = createBackend("cudnn");
  ASSERT_TRUE(backend);
  EXPECT_EQ(backend->device().toString(), "cuda:0");
  GraphBuilder b;
  ValueId c = conv(b, b.input({1, 4, 6, 6}), {4, 4, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}}));
  const NodeSet all = b.finish(b.op("Relu", {c}));
  bool whole = false;
  for (const GeneratedGroup& gg : PatternGenerator(b.graph()).generate(*backend->codeRule(), {}))
    whole = whole || gg.nodes == all;
  EXPECT_TRUE(whole);
}

TEST(Cudnn, MatchesTheReferenceOnTheGpu) {
  COLLAGE_SKIP_WITHOUT_GPU();
  std::unique_ptr<Backend> backend = createBackend("cudnn");
  auto check = [&](GraphBuilder& b, const NodeSet& g, const char* what) {
    SCOPED_TRACE(what);
    const KernelCheckResult r = checkKernelAgainstReference(*backend, b.graph(), g, 9);
    EXPECT_TRUE(r.compiled) << r.refusal;
    EXPECT_TRUE(r.ok) << r.message;
  };
  {
    GraphBuilder b;
    ValueId x = b.input({2, 8, 7, 7});
    ValueId c = conv(b, x, {8, 8, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}}));
    check(b, b.finish(b.op("Relu", {b.op("Add", {c, x})})), "conv bias residual relu");
  }
  {
    GraphBuilder b;
    check(b, b.finish(conv(b, b.input({1, 4, 10}), {6, 2, 3}, attrs({{"group", int64_t{2}}}))),
          "conv1d grouped");
  }
  {
    GraphBuilder b;
    check(b,
          b.finish(
              conv(b, b.input({1, 4, 5, 6, 7}), {4, 1, 3, 3, 3}, attrs({{"group", int64_t{4}}}))),
          "conv3d depthwise");
  }
  {
    GraphBuilder b;
    check(b,
          b.finish(b.op("AveragePool", {b.input({1, 3, 8, 8})},
                        attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}))),
          "average pool");
  }
  {
    GraphBuilder b;
    check(b, b.finish(b.op("Softmax", {b.input({2, 5, 3})}, attrs({{"axis", int64_t{1}}}))),
          "softmax");
  }
  {
    GraphBuilder b;
    check(b,
          b.finish(
              b.op("BatchNormalization", {b.input({1, 4, 3, 3}), b.constant({4}), b.constant({4}),
                                          b.constant({4}), b.constant({4}, 0.5f, 1.5f)})),
          "batch norm");
  }
}

}  // namespace
}  // namespace collage
