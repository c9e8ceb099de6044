// The cuBLAS backends: how groups map onto one cuBLASLt call (no GPU
// needed), what the rule generates, and on a GPU the results in each math
// mode against the reference executor with that mode's tolerance.
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/backend_list.h"
#include "backends/cublas/cublas_math_mode.h"
#include "backends/cublas/matmul_plan.h"
#include "core/measure/kernel_check.h"
#include "core/patterns/pattern_generator.h"
#include "tests/unit/backends/cuda/cuda_test_support.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

using cublas::Epilogue;
using cublas::planMatmul;

TEST(CublasPlan, MatMulBiasReluIsOneCallWithTheBiasReluEpilogue) {
  GraphBuilder b;
  ValueId mm = b.op("MatMul", {b.input({6, 16}), b.constant({16, 8})});
  ValueId add = b.op("Add", {b.constant({8}), mm});  // bias first: order does not matter
  const NodeSet g = b.finish(b.op("Relu", {add}));
  const auto p = planMatmul(b.graph(), g);
  ASSERT_EQ(p.refusal, "");
  EXPECT_EQ(p.epilogue, Epilogue::ReluBias);
  EXPECT_EQ(p.m, 6);
  EXPECT_EQ(p.n, 8);
  EXPECT_EQ(p.k, 16);
  EXPECT_EQ(p.batch, 1);
  EXPECT_EQ(p.toString(), "matmul 1x[6x8x16] relu_bias");
}

TEST(CublasPlan, GemmTransposesAlphaAndC) {
  GraphBuilder b;
  const NodeSet g = b.finish(b.op(
      "Gemm", {b.input({16, 6}), b.constant({8, 16}), b.constant({6, 8})},
      attrs({{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.0f}})));
  const auto p = planMatmul(b.graph(), g);
  ASSERT_EQ(p.refusal, "");
  EXPECT_TRUE(p.transA);
  EXPECT_TRUE(p.transB);
  EXPECT_EQ(p.m, 6);
  EXPECT_EQ(p.k, 16);
  EXPECT_EQ(p.n, 8);
  EXPECT_EQ(p.lda, 6);   // A stored [16, 6]
  EXPECT_EQ(p.ldb, 16);  // B stored [8, 16]
  EXPECT_FLOAT_EQ(p.alpha, 0.5f);
  EXPECT_FLOAT_EQ(p.beta, 2.0f);
  EXPECT_NE(p.c, kNoValue);
  EXPECT_EQ(p.epilogue, Epilogue::None);

  GraphBuilder v;  // a row-vector C with beta 1 is the bias epilogue
  const NodeSet gv =
      v.finish(v.op("Gemm", {v.input({4, 16}), v.constant({16, 8}), v.constant({8})}));
  EXPECT_EQ(planMatmul(v.graph(), gv).epilogue, Epilogue::Bias);
}

TEST(CublasPlan, BatchedMatMulSharesABroadcastOperand) {
  GraphBuilder b;
  const NodeSet g = b.finish(b.op("MatMul", {b.input({2, 3, 5, 7}), b.constant({7, 4})}));
  const auto p = planMatmul(b.graph(), g);
  ASSERT_EQ(p.refusal, "");
  EXPECT_EQ(p.batch, 6);
  EXPECT_EQ(p.batchStrideA, 35);
  EXPECT_EQ(p.batchStrideB, 0);

  GraphBuilder c;  // [2,1] x [1,3] batches: not one strided batch
  const NodeSet gc = c.finish(c.op("MatMul", {c.input({2, 1, 5, 7}), c.input({1, 3, 7, 4})}));
  EXPECT_NE(planMatmul(c.graph(), gc).refusal.find("broadcast partially"), std::string::npos);
}

TEST(CublasPlan, RefusesWhatNoEpilogueDoes) {
  GraphBuilder b;
  ValueId mm = b.op("MatMul", {b.input({4, 8}), b.constant({8, 8})});
  ValueId gelu = b.op("Gelu", {mm});  // exact (erf) GELU: the epilogue is the tanh one
  const NodeSet g = b.finish(gelu);
  EXPECT_NE(planMatmul(b.graph(), g).refusal.find("Gelu"), std::string::npos);

  GraphBuilder t;
  ValueId mt = t.op("MatMul", {t.input({4, 8}), t.constant({8, 8})});
  const NodeSet gt = t.finish(t.op("Gelu", {mt}, attrs({{"approximate", std::string("tanh")}})));
  EXPECT_EQ(planMatmul(t.graph(), gt).epilogue, Epilogue::Gelu);

  GraphBuilder m;  // an Add over the rows is no bias epilogue
  ValueId mr = m.op("MatMul", {m.input({4, 8}), m.constant({8, 8})});
  const NodeSet gm = m.finish(m.op("Add", {mr, m.constant({4, 1})}));
  EXPECT_NE(planMatmul(m.graph(), gm).refusal, "");
}

TEST(CublasPlan, RuleGeneratesTheFusedGroupsInBothMathModes) {
  for (const std::string name : {"cublas", "cublas_tf32"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Backend> backend = createBackend(name);
    ASSERT_TRUE(backend);
    EXPECT_EQ(backend->device().toString(), "cuda:0");
    GraphBuilder b;
    ValueId mm = b.op("MatMul", {b.input({6, 16}), b.constant({16, 8})});
    ValueId add = b.op("Add", {mm, b.constant({8})});
    const NodeSet all = b.finish(b.op("Relu", {add}));
    std::vector<std::string> labels;
    bool whole = false;
    for (const GeneratedGroup& gg :
         PatternGenerator(b.graph()).generate(*backend->codeRule(), {})) {
      labels.push_back(gg.label);
      whole = whole || gg.nodes == all;
    }
    EXPECT_TRUE(whole);
    EXPECT_NE(std::find(labels.begin(), labels.end(), "fusion:matmul_relu_bias"), labels.end());
  }
  EXPECT_LT(cublas::mathModeTolerance(cublas::MathMode::Fp32).rtol,
            cublas::mathModeTolerance(cublas::MathMode::Tf32).rtol);
}

// TF32 trades precision for speed, so it runs only when named: the default
// set (what `optimize`, the app and the API use) keeps every plan to float32,
// and the TF32 backend declares the tolerance it is checked with.
TEST(Cublas, Tf32IsDeclaredReducedPrecisionAndLeftOutOfTheDefaultSet) {
  const auto tf32 = reducedPrecisionTolerance("cublas_tf32");
  ASSERT_TRUE(tf32.has_value());
  EXPECT_EQ(tf32->rtol, cublas::mathModeTolerance(cublas::MathMode::Tf32).rtol);
  EXPECT_EQ(tf32->atol, cublas::mathModeTolerance(cublas::MathMode::Tf32).atol);
  for (const char* fp32 : {"cublas", "cudnn", "cuda_fusion", "onednn", "openblas", "native"})
    EXPECT_FALSE(reducedPrecisionTolerance(fp32).has_value()) << fp32;
  const std::vector<std::string> defaults = defaultBackendNames();
  EXPECT_EQ(std::count(defaults.begin(), defaults.end(), "cublas_tf32"), 0);
  for (const std::string& name : builtinBackendNames())
    if (!reducedPrecisionTolerance(name)) EXPECT_EQ(std::count(defaults.begin(), defaults.end(), name), 1) << name;
}

TEST(Cublas, MatchesTheReferenceInEachMathModeOnTheGpu) {
  COLLAGE_SKIP_WITHOUT_GPU();
  for (const auto mode : {cublas::MathMode::Fp32, cublas::MathMode::Tf32}) {
    std::unique_ptr<Backend> backend = createBackend(cublas::backendName(mode));
    auto check = [&](GraphBuilder& b, const NodeSet& g, const char* what) {
      SCOPED_TRACE(cublas::backendName(mode) + ": " + what);
      const KernelCheckResult r =
          checkKernelAgainstReference(*backend, b.graph(), g, 5, cublas::mathModeTolerance(mode));
      EXPECT_TRUE(r.compiled) << r.refusal;
      EXPECT_TRUE(r.ok) << r.message;
    };
    {
      GraphBuilder b;
      ValueId mm = b.op("MatMul", {b.input({33, 64}), b.constant({64, 17})});
      check(b, b.finish(b.op("Relu", {b.op("Add", {mm, b.constant({17})})})), "matmul bias relu");
    }
    {
      GraphBuilder b;
      check(b, b.finish(b.op("MatMul", {b.input({2, 3, 5, 16}), b.constant({16, 4})})), "batched");
    }
    {
      GraphBuilder b;
      check(b,
            b.finish(b.op("Gemm", {b.input({16, 6}), b.constant({8, 16}), b.constant({6, 8})},
                          attrs({{"transA", int64_t{1}},
                                 {"transB", int64_t{1}},
                                 {"alpha", 0.5f},
                                 {"beta", 2.0f}}))),
            "gemm trans alpha beta");
    }
    {
      GraphBuilder b;
      ValueId mm = b.op("MatMul", {b.input({8, 32}), b.input({32, 24})});
      check(b,
            b.finish(b.op("Gelu", {b.op("Add", {mm, b.constant({24})})},
                          attrs({{"approximate", std::string("tanh")}}))),
            "matmul bias gelu, both inputs data");
    }
  }
}

}  // namespace
}  // namespace collage
