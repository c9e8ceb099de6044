// The native backend's fused attention kernel (native_attention.h) against
// the reference executor: odd shapes (Sq != Sk, D not a multiple of 16, Sk
// over several key blocks and not a multiple of one, B and H > 1), each
// mask form (additive [B,1,1,Sk], a [1,H,Sq,Sk] bias, a causal select in
// both operand orders, a constant causal mask added), the scale folded into
// Q or K or applied to the scores, head split/merge read as strides (4-d
// and 3-d layouts), both inner-product paths (OpenBLAS, the default, and
// the microkernel), the refusals, and the rule finding attention in the
// sample transformer models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>

#include "backends/backend_list.h"
#include "backends/native/native_attention.h"
#include "backends/native/native_backend.h"
#include "core/ir/threading.h"
#include "core/measure/kernel_check.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using test_support::ThreadCountGuard;

std::unique_ptr<Backend> native() {
  std::unique_ptr<Backend> b = createBackend("native");
  EXPECT_NE(b, nullptr);
  return b;
}

// Compiles `group` at 1 and 3 threads, expects the attention kernel (not
// the generic fused passes) and the reference's result; returns the
// kernel's description.
std::string expectAttentionMatches(const Graph& g, const NodeSet& group, uint64_t seed = 11) {
  ThreadCountGuard guard;
  auto backend = native();
  std::string description;
  for (int threads : {1, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    setThreadCount(threads);
    CompileResult c = backend->compile(KernelRequest::of(g, group, "test"));
    EXPECT_TRUE(c) << c.refusal;
    if (!c) return {};
    description = describeNativeKernel(*c.kernel);
    EXPECT_EQ(description.rfind("attention ", 0), 0u) << description;
    KernelCheckResult r = checkKernelAgainstReference(*backend, g, group, seed);
    EXPECT_TRUE(r.compiled) << r.refusal;
    EXPECT_TRUE(r.ok) << r.message;
  }
  return description;
}

// Compiles `group` at 2 threads and runs it once on random inputs (the
// reference's values for inputs made inside the graph); returns the
// kernel's description, which counts the tiles that run skipped.
std::string describeAfterARun(const Graph& g, const NodeSet& group, uint64_t seed = 11) {
  ThreadCountGuard guard;
  setThreadCount(2);
  KernelRequest request = KernelRequest::of(g, group, "test");
  CompileResult c = native()->compile(request);
  EXPECT_TRUE(c) << c.refusal;
  if (!c) return {};
  const std::vector<Tensor> env = referenceValues(g, randomInputs(g, seed));
  std::vector<Tensor> inputs;
  for (ValueId v : request.inputs) inputs.push_back(env[v].clone());
  runKernel(*c.kernel, request, inputs);
  return describeNativeKernel(*c.kernel);
}

std::string refusalOf(const Graph& g, const NodeSet& group) {
  CompileResult c = native()->compile(KernelRequest::of(g, group, "test"));
  EXPECT_FALSE(c) << "compiled: " << (c ? describeNativeKernel(*c.kernel) : "");
  std::printf("refused: %s\n", c.refusal.c_str());
  return c.refusal;
}

ValueId boolConstant(GraphBuilder& b, const Shape& shape, const std::function<bool(int64_t, int64_t)>& f) {
  Tensor t(ElementType::Bool, shape);
  const int64_t cols = shape.back(), rows = t.numElements() / cols;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t.data<bool>()[r * cols + c] = f(r % shape[shape.size() - 2], c);
  static int count = 0;
  return b.graph().addConstant("cond" + std::to_string(count++), std::move(t));
}

// BERT's layout: [B, S, H*D] split into heads by Reshape + Transpose, Kᵀ by
// Transpose (0,2,3,1), merged back by Transpose + Reshape.
struct HeadLayout {
  int64_t B, Sq, Sk, H, D, Dv;
};

ValueId splitHeads(GraphBuilder& b, ValueId x, const HeadLayout& l, int64_t S, int64_t D, Ints perm) {
  ValueId r = b.op("Reshape", {x}, attrs({{"shape", Ints{l.B, S, l.H, D}}}));
  return b.op("Transpose", {r}, attrs({{"perm", perm}}));
}

TEST(NativeAttention, AdditiveMaskWithHeadSplitAndMerge) {
  const HeadLayout l{2, 37, 45, 3, 20, 24};
  GraphBuilder b;
  ValueId q = splitHeads(b, b.input({l.B, l.Sq, l.H * l.D}), l, l.Sq, l.D, {0, 2, 1, 3});
  ValueId k = splitHeads(b, b.input({l.B, l.Sk, l.H * l.D}), l, l.Sk, l.D, {0, 2, 3, 1});
  ValueId v = splitHeads(b, b.input({l.B, l.Sk, l.H * l.Dv}), l, l.Sk, l.Dv, {0, 2, 1, 3});
  ValueId mask = b.input({l.B, 1, 1, l.Sk});
  ValueId scores = b.op("Add", {b.op("Div", {b.op("MatMul", {q, k}), b.scalar(4.47f)}), mask});
  ValueId p = b.op("Softmax", {scores}, attrs({{"axis", int64_t{-1}}}));
  ValueId ctx = b.op("Transpose", {b.op("MatMul", {p, v})}, attrs({{"perm", Ints{0, 2, 1, 3}}}));
  ValueId y = b.op("Reshape", {ctx}, attrs({{"shape", Ints{l.B, l.Sq, l.H * l.Dv}}}));
  const NodeSet all = b.finish(y);
  const Graph& g = b.graph();
  const std::string d = expectAttentionMatches(g, all);
  EXPECT_NE(d.find("B=2 H=3 Sq=37 Sk=45 D=20 Dv=24"), std::string::npos) << d;
  EXPECT_NE(d.find("2 score op(s)"), std::string::npos) << d;

  // The rule names the core and the core with the views; both compile.
  const auto groups = native::attentionGroups(g);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].second, "attention");
  EXPECT_EQ(groups[0].first.count(), 5);
  EXPECT_EQ(groups[1].second, "attention_views");
  EXPECT_TRUE(groups[1].first == all);
  expectAttentionMatches(g, groups[0].first);
}

TEST(NativeAttention, LongKeysOverSeveralBlocksScaleFoldedIntoQAndBias) {
  // Sk = 600: three key blocks, the last partial; Dv != D; the scale is a
  // Mul on Q (folded into the packed Q); a [1,H,Sq,Sk] relative-position bias.
  const int64_t B = 2, H = 3, Sq = 19, Sk = 600, D = 24, Dv = 40;
  GraphBuilder b;
  ValueId q = b.op("Mul", {b.input({B, H, Sq, D}), b.scalar(0.2f)});
  ValueId k = b.op("Transpose", {b.input({B, H, Sk, D})}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  ValueId v = b.input({B, H, Sk, Dv});
  ValueId bias = b.constant({1, H, Sq, Sk}, -2.0f, 2.0f);
  ValueId p = b.op("Softmax", {b.op("Add", {bias, b.op("MatMul", {q, k})})}, attrs({{"axis", int64_t{3}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, v}));
  const std::string d = expectAttentionMatches(b.graph(), all);
  EXPECT_NE(d.find("scale on Q 0.2"), std::string::npos) << d;
}

TEST(NativeAttention, ScaleOnKAndOnTheScoresAgree) {
  // Div on K before the MatMul, and a Mul after it: both scales apply.
  const int64_t B = 1, H = 5, Sq = 33, Sk = 17, D = 9;
  GraphBuilder b;
  ValueId q = b.input({B, H, Sq, D});
  ValueId kt = b.op("Div", {b.input({B, H, D, Sk}), b.scalar(3.0f)});
  ValueId s = b.op("Mul", {b.scalar(1.7f), b.op("MatMul", {q, kt})});
  ValueId p = b.op("Softmax", {s}, attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, b.input({B, H, Sk, D})}));
  expectAttentionMatches(b.graph(), all);
}

TEST(NativeAttention, CausalSelectInBothOperandOrders) {
  // GPT-2's Where(mask, scores, -big) over a constant lower-triangular
  // buffer, and Where(not-mask, -big, scores) over a run-time condition.
  // A fill far below the scores (float's lowest, or -1e4 against scores
  // near 1) lets the kernel skip the tiles above the diagonal; one near
  // them (-0.5) must not.
  for (auto [scoresWhereTrue, fillValue] : {std::pair{true, -3.4028234663852886e38f}, std::pair{false, -1e4f},
                                            std::pair{true, -0.5f}}) {
    SCOPED_TRACE(scoresWhereTrue ? "Where(mask, scores, fill)" : "Where(cond, fill, scores)");
    SCOPED_TRACE(fillValue);
    const HeadLayout l{2, 70, 70, 3, 12, 12};
    GraphBuilder b;
    ValueId x = b.input({l.B, l.Sq, 3 * l.H * l.D});
    b.op("Split", {x}, attrs({{"axis", int64_t{2}}, {"split", Ints{36, 36, 36}}}), 3);
    const Node split = b.graph().nodes().back();
    ValueId q = splitHeads(b, split.outputs[0], l, l.Sq, l.D, {0, 2, 1, 3});
    ValueId k = splitHeads(b, split.outputs[1], l, l.Sk, l.D, {0, 2, 3, 1});
    ValueId v = splitHeads(b, split.outputs[2], l, l.Sk, l.Dv, {0, 2, 1, 3});
    ValueId s = b.op("Div", {b.op("MatMul", {q, k}), b.scalar(3.46f)});
    ValueId fill = b.scalar(fillValue);
    ValueId w;
    if (scoresWhereTrue) {
      ValueId cond = boolConstant(b, {1, 1, l.Sq, l.Sk}, [](int64_t r, int64_t c) { return c <= r; });
      w = b.op("Where", {cond, s, fill});
    } else {
      ValueId cond = boolConstant(b, {l.Sq, l.Sk}, [](int64_t r, int64_t c) { return c > r; });
      w = b.op("Where", {cond, fill, s});
    }
    ValueId p = b.op("Softmax", {w}, attrs({{"axis", int64_t{-1}}}));
    ValueId ctx = b.op("Transpose", {b.op("MatMul", {p, v})}, attrs({{"perm", Ints{0, 2, 1, 3}}}));
    ValueId y = b.op("Reshape", {ctx}, attrs({{"shape", Ints{l.B, l.Sq, l.H * l.Dv}}}));
    b.finish(y);
    const Graph& g = b.graph();
    NodeSet group(g.numNodes());
    for (NodeId n = 0; n < g.numNodes(); ++n)
      if (g.node(n).op != "Split") group.insert(n);
    expectAttentionMatches(g, group);
    // 2 x 3 heads x 2 query blocks x 2 key blocks; above the diagonal, one
    // tile per head.
    const std::string d = describeAfterARun(g, group);
    EXPECT_NE(d.find(fillValue < -100.0f ? "(6 of 24 in the last run)" : "(0 of 24 in the last run)"),
              std::string::npos)
        << d;
  }
}

TEST(NativeAttention, CausalSelectThenAPaddingMaskAddedStillSkipsTiles) {
  // GPT-2's exporters add the padding mask after the causal Where. A tile
  // of fills is skipped only if the fill plus the mask still vanishes in
  // exp: with a fill of -1e4 and a mask of +3e4 on every seventh key from
  // key 64 on, the first 64 rows' largest scores are those fills, and a
  // kernel skipping on the fill alone would differ from the reference (it
  // skips 18 tiles and 6,523 of 14,400 outputs differ).
  for (bool lifted : {false, true}) {
    SCOPED_TRACE(lifted ? "fill -1e4, mask +3e4 on some keys" : "fill lowest, mask in [-5, 0]");
    const int64_t B = 2, H = 3, S = 150, D = 16;
    GraphBuilder b;
    ValueId s = b.op("Div", {b.op("MatMul", {b.input({B, H, S, D}), b.input({B, H, D, S})}), b.scalar(4.0f)});
    ValueId cond = boolConstant(b, {1, 1, S, S}, [](int64_t r, int64_t c) { return c <= r; });
    ValueId w = b.op("Where", {cond, s, b.scalar(lifted ? -1e4f : std::numeric_limits<float>::lowest())});
    ValueId mask = b.constant({B, 1, 1, S}, -5.0f, 0.0f);
    if (lifted) {
      Tensor t(ElementType::Float32, {B, 1, 1, S});
      for (int64_t j = 0; j < B * S; ++j) t.data<float>()[j] = j % S >= 64 && j % 7 == 3 ? 3e4f : 0.0f;
      mask = b.graph().addConstant("lifting_mask", std::move(t));
    }
    ValueId p = b.op("Softmax", {b.op("Add", {w, mask})}, attrs({{"axis", int64_t{-1}}}));
    const NodeSet all = b.finish(b.op("MatMul", {p, b.input({B, H, S, D})}));
    expectAttentionMatches(b.graph(), all);
    // 2 x 3 heads x 3 query blocks x 3 key blocks; 3 per head above the
    // diagonal, none hidden from every row of its query block when lifted.
    const std::string d = describeAfterARun(b.graph(), all);
    EXPECT_NE(d.find(lifted ? "(0 of 54 in the last run)" : "(18 of 54 in the last run)"), std::string::npos) << d;
  }
}

TEST(NativeAttention, ACausalMaskMadeAtRunTimeSkipsTheTilesItHides) {
  // LLaMA's exporters build the causal and padding mask at run time, one
  // [B, 1, S, S] tensor added to the scores. The tiles it hides are found
  // by reading it: the rows and keys of those tiles hold NaN in K and V,
  // which the reference carries (0 x NaN) and a skipped tile never reads.
  const int64_t B = 1, H = 2, S = 200, D = 16;
  GraphBuilder b;
  ValueId q = b.input({B, H, S, D}), k = b.input({B, H, S, D}), v = b.input({B, H, S, D});
  ValueId mask = b.input({B, 1, S, S});
  ValueId kt = b.op("Transpose", {k}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  ValueId scores = b.op("Div", {b.op("MatMul", {q, kt}), b.scalar(4.0f)});
  ValueId p = b.op("Softmax", {b.op("Add", {scores, mask})}, attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, v}));
  const Graph& g = b.graph();
  std::vector<Tensor> in = randomInputs(g, 5);
  const float lowest = std::numeric_limits<float>::lowest();
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) in[3].data<float>()[i * S + j] = j <= i ? 0.0f : lowest;
  const std::vector<Tensor> expected = referenceValues(g, in);
  // Keys 192..199 sit only in the last key block (64 keys a block), which
  // only the last query block (rows 192..199) reads: poison them for every
  // other row's sake, then check the rows that never see them.
  for (int idx : {1, 2})
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 192; j < S; ++j)
        for (int64_t d = 0; d < D; ++d)
          in[static_cast<size_t>(idx)].data<float>()[(h * S + j) * D + d] = std::numeric_limits<float>::quiet_NaN();
  ThreadCountGuard guard;
  setThreadCount(2);
  KernelRequest request = KernelRequest::of(g, all, "test");
  CompileResult c = native()->compile(request);
  ASSERT_TRUE(c) << c.refusal;
  std::vector<Tensor> kernelInputs;
  for (ValueId x : request.inputs)
    kernelInputs.push_back(in[static_cast<size_t>(std::find(g.inputs().begin(), g.inputs().end(), x) - g.inputs().begin())]);
  const Tensor y = runKernel(*c.kernel, request, kernelInputs).at(0);
  const Tensor& want = expected[request.outputs[0]];
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < 192; ++i)
      for (int64_t d = 0; d < D; ++d) {
        const int64_t at = (h * S + i) * D + d;
        ASSERT_NEAR(y.data<float>()[at], want.data<float>()[at], 1e-5f) << "head " << h << " row " << i;
      }
  const std::string desc = describeNativeKernel(*c.kernel);
  // 2 heads x 4 query blocks: 6 tiles above the diagonal each.
  EXPECT_NE(desc.find("(12 of 32 in the last run)"), std::string::npos) << desc;
}

TEST(NativeAttention, RunTimeSelectWithTensorFillAndConstantCausalMaskAdded) {
  const int64_t B = 2, H = 2, Sq = 21, Sk = 300, D = 17;
  GraphBuilder b;
  ValueId s = b.op("MatMul", {b.input({B, H, Sq, D}), b.input({B, H, D, Sk})});
  Tensor causal(ElementType::Float32, {Sq, Sk});
  for (int64_t r = 0; r < Sq; ++r)
    for (int64_t c = 0; c < Sk; ++c) causal.data<float>()[r * Sk + c] = c <= r + 250 ? 0.0f : -1e9f;
  ValueId added = b.op("Add", {s, b.graph().addConstant("causal", std::move(causal))});
  ValueId cond = b.graph().addInput("cond", {ElementType::Bool, {B, 1, Sq, Sk}});
  ValueId w = b.op("Where", {cond, added, b.constant({1, H, 1, Sk}, -5.0f, 0.0f)});
  ValueId p = b.op("Softmax", {w}, attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, b.input({B, H, Sk, D})}));
  const std::string d = expectAttentionMatches(b.graph(), all);
  EXPECT_NE(d.find("2 score op(s)"), std::string::npos) << d;
}

TEST(NativeAttention, ThreeDimensionalHeadsAsTorchMultiheadAttentionWritesThem) {
  // [S, B, E] -> Reshape [S, B*H, D] -> Transpose (1,0,2); Kᵀ by (1,2,0);
  // the scale a Div on Q; the merge Transpose (1,0,2) -> Reshape [S*B, E].
  const int64_t S = 23, B = 2, H = 3, D = 20;
  GraphBuilder b;
  auto heads = [&](ValueId x, Ints perm) {
    ValueId r = b.op("Reshape", {x}, attrs({{"shape", Ints{S, B * H, D}}}));
    return b.op("Transpose", {r}, attrs({{"perm", perm}}));
  };
  ValueId q = b.op("Div", {heads(b.input({S, B, H * D}), {1, 0, 2}), b.scalar(4.47f)});
  ValueId k = heads(b.input({S, B, H * D}), {1, 2, 0});
  ValueId v = heads(b.input({S, B, H * D}), {1, 0, 2});
  ValueId p = b.op("Softmax", {b.op("MatMul", {q, k})}, attrs({{"axis", int64_t{-1}}}));
  ValueId ctx = b.op("Transpose", {b.op("MatMul", {p, v})}, attrs({{"perm", Ints{1, 0, 2}}}));
  const NodeSet all = b.finish(b.op("Reshape", {ctx}, attrs({{"shape", Ints{S * B, H * D}}})));
  const std::string d = expectAttentionMatches(b.graph(), all);
  EXPECT_NE(d.find("B=1 H=6 Sq=23 Sk=23 D=20"), std::string::npos) << d;
}

TEST(NativeAttention, MicrokernelInnerProductsAgreeToo) {
  setenv("COLLAGE_NATIVE_ATTENTION_GEMM", "microkernel", 1);
  const int64_t B = 2, H = 3, Sq = 29, Sk = 270, D = 20;
  GraphBuilder b;
  ValueId s = b.op("Mul", {b.op("MatMul", {b.input({B, H, Sq, D}), b.input({B, H, D, Sk})}), b.scalar(0.3f)});
  ValueId p = b.op("Softmax", {b.op("Add", {s, b.input({B, 1, 1, Sk})})}, attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, b.input({B, H, Sk, D})}));
  const std::string d = expectAttentionMatches(b.graph(), all);
  unsetenv("COLLAGE_NATIVE_ATTENTION_GEMM");
  EXPECT_NE(d.find("microkernel"), std::string::npos) << d;
}

// ---- refusals: each form the kernel cannot take is refused with its reason.

TEST(NativeAttention, RefusesSoftmaxOverAnotherAxis) {
  GraphBuilder b;
  ValueId s = b.op("MatMul", {b.input({2, 4, 8}), b.input({2, 8, 6})});
  ValueId p = b.op("Softmax", {s}, attrs({{"axis", int64_t{1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, b.input({2, 6, 5})}));
  EXPECT_NE(refusalOf(b.graph(), all).find("not over the last axis"), std::string::npos);
}

TEST(NativeAttention, RefusesScoresScaledByATensor) {
  GraphBuilder b;
  ValueId s = b.op("Mul", {b.op("MatMul", {b.input({2, 4, 8}), b.input({2, 8, 6})}), b.input({2, 4, 6})});
  ValueId p = b.op("Softmax", {s}, attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, b.input({2, 6, 5})}));
  EXPECT_NE(refusalOf(b.graph(), all).find("by a tensor"), std::string::npos);
}

TEST(NativeAttention, RefusesAHeadSplitThatNeedsACopy) {
  // Transpose then a Reshape that merges the transposed dims: not a stride.
  GraphBuilder b;
  ValueId t = b.op("Transpose", {b.input({2, 6, 4})}, attrs({{"perm", Ints{0, 2, 1}}}));
  ValueId q = b.op("Reshape", {t}, attrs({{"shape", Ints{2, 3, 8}}}));
  ValueId p = b.op("Softmax", {b.op("MatMul", {q, b.input({2, 8, 7})})}, attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, b.input({2, 7, 5})}));
  EXPECT_NE(refusalOf(b.graph(), all).find("would need a copy"), std::string::npos);
}

TEST(NativeAttention, RefusesANodeOutsideThePattern) {
  GraphBuilder b;
  ValueId p = b.op("Softmax", {b.op("MatMul", {b.input({2, 4, 8}), b.input({2, 8, 6})})},
                   attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("Relu", {b.op("MatMul", {p, b.input({2, 6, 5})})}));
  EXPECT_NE(refusalOf(b.graph(), all).find("is not part of the attention pattern"), std::string::npos);
}

TEST(NativeAttention, RefusesProbabilitiesReadOutsideTheGroup) {
  // The Softmax's output is also a graph output: it cannot stay in the kernel.
  GraphBuilder b;
  ValueId p = b.op("Softmax", {b.op("MatMul", {b.input({2, 4, 8}), b.input({2, 8, 6})})},
                   attrs({{"axis", int64_t{-1}}}));
  b.graph().markOutput(p);
  const NodeSet all = b.finish(b.op("MatMul", {p, b.input({2, 6, 5})}));
  EXPECT_NE(refusalOf(b.graph(), all).find("read by a MatMul alone"), std::string::npos);
}

TEST(NativeAttention, RefusesAMaskThatDoesNotBroadcast) {
  // A mask broadcast to a larger shape than the scores'.
  GraphBuilder b;
  ValueId s = b.op("MatMul", {b.input({1, 4, 8}), b.input({1, 8, 6})});
  ValueId p = b.op("Softmax", {b.op("Add", {s, b.input({3, 4, 6})})}, attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, b.input({1, 6, 5})}));
  EXPECT_NE(refusalOf(b.graph(), all).find("broadcasts the scores to another shape"), std::string::npos);
}

// ---- the rule on the sample transformer models.

TEST(NativeAttention, RuleFindsAttentionInTheSampleTransformers) {
  for (const char* model : {"vit_b_16_small", "bert_small", "bert_small_opset13", "gpt2_small"}) {
    SCOPED_TRACE(model);
    const Graph g = importOnnx(std::string(COLLAGE_SOURCE_DIR) + "/resources/models/" + model + ".onnx");
    int softmaxes = 0;
    for (const Node& n : g.nodes()) softmaxes += n.op == "Softmax";
    const auto groups = native::attentionGroups(g);
    int core = 0, views = 0;
    auto backend = native();
    for (const auto& [group, label] : groups) {
      (label == "attention" ? core : views) += 1;
      expectAttentionMatches(g, group, 3);
    }
    EXPECT_GE(softmaxes, 1);
    EXPECT_EQ(core, softmaxes);
    EXPECT_EQ(views, softmaxes);
    // The rule's groups are candidates: the code rule names them whole.
    const auto named = backend->codeRule()->wholeGroups(g);
    int named_attention = 0;
    for (const auto& [group, label] : named) named_attention += label.rfind("attention", 0) == 0;
    EXPECT_EQ(named_attention, core + views);
  }
}

}  // namespace
}  // namespace collage
