// The native decode attention kernel (native_decode_attention.h) against
// the reference executor, held to the plan check's float32 bound
// (compareScaled, kFloat32Bound): one or a few query rows against caches of
// several lengths (L = 1, L not divisible by the parts, L over several key
// blocks), the keys split into parts at 1, 3 and 8 threads, grouped-query
// attention at 1, 2 and 4 query heads per KV head (repeated by Expand and by
// Tile, as exporters write it), padded and causal masks, the log-sum-exp
// merge alone, the refusals, and the rule finding the kernel in the
// generated decoder models (tests/models/decoder).
#include "backends/native/native_decode_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>

#include "backends/backend_list.h"
#include "backends/native/native_attention.h"
#include "backends/native/native_backend.h"
#include "core/ir/tensor_compare.h"
#include "core/ir/threading.h"
#include "core/measure/kernel_check.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "core/runtime/session.h"
#include "tests/unit/backends/decode_attention_graphs.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using test_support::ThreadCountGuard;

constexpr float kMin = std::numeric_limits<float>::lowest();

std::unique_ptr<Backend> native() {
  std::unique_ptr<Backend> b = createBackend("native");
  EXPECT_NE(b, nullptr);
  return b;
}

// Splits caches of a few keys into parts of 8 (the default, 256, would
// leave every test cache whole) for the scope of a test.
struct SmallParts {
  SmallParts() { setenv("COLLAGE_NATIVE_DECODE_MIN_KEYS", "8", 1); }
  ~SmallParts() { unsetenv("COLLAGE_NATIVE_DECODE_MIN_KEYS"); }
};

// Compiles `group` at 1, 3 and 8 threads; expects the decode kernel and the
// reference executor's output within the plan check's float32 bound, on
// `inputs` (random where empty). Returns the descriptions, one per thread
// count.
std::vector<std::string> expectDecodeMatches(const Graph& g, const NodeSet& group,
                                             std::vector<Tensor> inputs = {}) {
  ThreadCountGuard guard;
  auto backend = native();
  if (inputs.empty()) inputs = randomInputs(g, 5);
  const std::vector<Tensor> env = referenceValues(g, inputs);
  std::vector<std::string> out;
  for (int threads : {1, 3, 8}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    setThreadCount(threads);
    KernelRequest request = KernelRequest::of(g, group, "test");
    CompileResult c = backend->compile(request);
    EXPECT_TRUE(c) << c.refusal;
    if (!c) return out;
    const std::string d = describeNativeKernel(*c.kernel);
    EXPECT_EQ(d.rfind("decode attention ", 0), 0u) << d;
    out.push_back(d);
    std::vector<Tensor> kernelInputs;
    for (ValueId v : request.inputs) kernelInputs.push_back(env[v].clone());
    std::vector<Tensor> y = runKernel(*c.kernel, request, kernelInputs);
    for (size_t i = 0; i < y.size(); ++i) {
      const CompareResult r = compareScaled(y[i], env[request.outputs[i]], kFloat32Bound);
      EXPECT_TRUE(r.ok) << d << ": " << r.message;
    }
  }
  return out;
}

std::string refusalOf(const Graph& g, const NodeSet& group) {
  CompileResult c = native()->compile(KernelRequest::of(g, group, "test"));
  EXPECT_FALSE(c) << "compiled: " << (c ? describeNativeKernel(*c.kernel) : "");
  std::printf("refused: %s\n", c.refusal.c_str());
  return c.refusal;
}

using decode_graphs::decodeGraph;
using decode_graphs::DecodeShape;
using decode_graphs::paddingMask;
using decode_graphs::repeatHeads;

TEST(NativeDecodeAttention, OneTokenAgainstCachesOfSeveralLengthsAndGroupRatios) {
  SmallParts parts;
  for (int64_t L : {1, 7, 37, 300}) {
    for (int64_t ratio : {1, 2, 4}) {
      SCOPED_TRACE("L " + std::to_string(L) + ", " + std::to_string(ratio) +
                   " query heads per KV head");
      const DecodeShape s{2, 4, 4 / ratio, 1, L, 20};
      GraphBuilder b;
      // Row 1 left-padded (a third of its keys), row 0 not.
      const NodeSet all = decodeGraph(b, s, false, {0, L / 3});
      const std::vector<std::string> d = expectDecodeMatches(b.graph(), all);
      ASSERT_EQ(d.size(), 3u);
      EXPECT_NE(d[0].find("H=4 Hkv=" + std::to_string(4 / ratio) + " Sq=1 L=" + std::to_string(L)),
                std::string::npos)
          << d[0];
      EXPECT_NE(d[0].find(" 1 part(s)"), std::string::npos) << d[0];  // one thread: never split
      // At 8 threads the keys are split where the (batch x KV head) tasks
      // are fewer than the threads and the cache holds 2 parts of 8 keys.
      const int64_t groups = 2 * (4 / ratio),
                    expected = std::max<int64_t>(1, std::min((8 + groups - 1) / groups, L / 8));
      EXPECT_NE(d[2].find(" " + std::to_string(expected) + " part(s)"), std::string::npos) << d[2];
    }
  }
}

TEST(NativeDecodeAttention, PartsOfUnequalLengthAndSeveralKeyBlocksEach) {
  // One KV head, one batch: 3 threads split L = 1000 into 3 parts of 333
  // and 334 keys (each several 64-key blocks, the last partial); L = 37
  // into 12, 12 and 13.
  SmallParts parts;
  for (int64_t L : {37, 1000}) {
    SCOPED_TRACE(L);
    const DecodeShape s{1, 2, 1, 1, L, 24};
    GraphBuilder b;
    const NodeSet all = decodeGraph(b, s, false, {5});
    const std::vector<std::string> d = expectDecodeMatches(b.graph(), all);
    ASSERT_EQ(d.size(), 3u);
    EXPECT_NE(d[1].find(" 3 part(s)"), std::string::npos) << d[1];
    EXPECT_NE(d[1].find("Hkv=1"), std::string::npos) << d[1];
  }
}

TEST(NativeDecodeAttention, FewQueriesWithCausalSelectAndTileRepeat) {
  // decode_graphs::causalGraph: three new tokens, a causal Where, the
  // padding mask and a per-head bias; heads repeated by Tile.
  SmallParts parts;
  GraphBuilder b;
  const NodeSet all = decode_graphs::causalGraph(b);
  const std::vector<std::string> d = expectDecodeMatches(b.graph(), all);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_NE(d[0].find("H=6 Hkv=3 Sq=3 L=41"), std::string::npos) << d[0];
  EXPECT_NE(d[0].find("scale on Q 0.25, 3 score op(s)"), std::string::npos) << d[0];
}

// A cache preallocated to L rows and filled to a few (the decode loop's):
// the padding mask, read at run time, hides the unfilled rows but the last
// (the new token's). The kernel must not read them: they hold NaN here, and
// the output equals the reference's on the same cache with zeros there.
TEST(NativeDecodeAttention, RowsTheMaskHidesFromEveryQueryAreNotRead) {
  SmallParts parts;
  const int64_t B = 2, H = 4, Hkv = 2, L = 300, D = 16;
  const std::vector<int64_t> filled = {5, 200};
  GraphBuilder b;
  ValueId q = b.input({B, H, 1, D});
  ValueId kIn = b.input({B, Hkv, L, D}), vIn = b.input({B, Hkv, L, D});
  ValueId mask = b.input({B, 1, 1, L});
  ValueId kt =
      b.op("Transpose", {repeatHeads(b, kIn, H / Hkv, false)}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  ValueId scores = b.op("Div", {b.op("MatMul", {q, kt}), b.scalar(4.0f)});
  ValueId p = b.op("Softmax", {b.op("Add", {scores, mask})}, attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, repeatHeads(b, vIn, H / Hkv, false)}));
  const Graph& g = b.graph();
  std::vector<Tensor> clean = randomInputs(g, 7);
  std::vector<Tensor> poisoned;
  for (const Tensor& t : clean) poisoned.push_back(t.clone());
  auto hidden = [&](int64_t batch, int64_t j) { return j >= filled[batch] && j != L - 1; };
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ValueId v = g.inputs()[i];
    if (v == mask)
      for (int64_t x = 0; x < B; ++x)
        for (int64_t j = 0; j < L; ++j)
          clean[i].data<float>()[x * L + j] = poisoned[i].data<float>()[x * L + j] =
              hidden(x, j) ? kMin : 0.0f;
    if (v != kIn && v != vIn) continue;
    for (int64_t x = 0; x < B; ++x)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t j = 0; j < L; ++j)
          if (hidden(x, j))
            for (int64_t d = 0; d < D; ++d) {
              const int64_t at = ((x * Hkv + h) * L + j) * D + d;
              clean[i].data<float>()[at] = 0.0f;
              poisoned[i].data<float>()[at] = std::numeric_limits<float>::quiet_NaN();
            }
  }
  const std::vector<Tensor> env = referenceValues(g, clean);
  ThreadCountGuard guard;
  auto backend = native();
  for (int threads : {1, 3, 8}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    setThreadCount(threads);
    KernelRequest request = KernelRequest::of(g, all, "test");
    CompileResult c = backend->compile(request);
    ASSERT_TRUE(c) << c.refusal;
    ASSERT_EQ(describeNativeKernel(*c.kernel).rfind("decode attention ", 0), 0u);
    std::vector<Tensor> kernelInputs;
    for (ValueId v : request.inputs) {
      const auto input = std::find(g.inputs().begin(), g.inputs().end(), v);
      kernelInputs.push_back(input == g.inputs().end()
                                 ? env[v].clone()
                                 : poisoned[static_cast<size_t>(input - g.inputs().begin())]);
    }
    const std::vector<Tensor> y = runKernel(*c.kernel, request, kernelInputs);
    const CompareResult r = compareScaled(y[0], env[request.outputs[0]], kFloat32Bound);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(NativeDecodeAttention, CachesStoredColumnMajorArePackedPerBlock) {
  // K stored as Kᵀ [B, Hkv, D, L] (read as is, no Transpose) and V as
  // [B, Hkv, Dv, L] transposed: neither has unit stride along its columns,
  // so each 64-key block is copied to rows first; L = 150 is three blocks.
  SmallParts parts;
  const int64_t B = 1, H = 4, Hkv = 2, L = 150, D = 12, Dv = 10;
  GraphBuilder b;
  ValueId kt = b.input({B, Hkv, D, L});
  ValueId u = b.op("Unsqueeze", {kt}, attrs({{"axes", Ints{2}}}));
  u = b.op("Expand", {u}, attrs({{"shape", Ints{B, Hkv, 2, D, L}}}));
  kt = b.op("Reshape", {u}, attrs({{"shape", Ints{B, H, D, L}}}));
  ValueId v = b.op("Transpose", {b.input({B, Hkv, Dv, L})}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  v = repeatHeads(b, v, 2, false);
  ValueId p = b.op("Softmax", {b.op("MatMul", {b.input({B, H, 1, D}), kt})},
                   attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, v}));
  const std::vector<std::string> d = expectDecodeMatches(b.graph(), all);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_NE(d[2].find("H=4 Hkv=2 Sq=1 L=150 D=12 Dv=10, 4 part(s)"), std::string::npos) << d[2];
}

TEST(NativeDecodeAttention, OneKvHeadBroadcastIsOneGroup) {
  // Multi-query attention: one KV head expanded to every query head is a
  // plain broadcast (stride 0); the kernel reads it once for all heads.
  SmallParts parts;
  const DecodeShape s{1, 4, 1, 1, 50, 8};
  GraphBuilder b;
  const NodeSet all = decodeGraph(b, s, false, {0});
  const std::vector<std::string> d = expectDecodeMatches(b.graph(), all);
  ASSERT_FALSE(d.empty());
  EXPECT_NE(d[0].find("H=4 Hkv=1"), std::string::npos) << d[0];
}

TEST(NativeDecodeAttention, GroupsOfOneToEightAtWidthsAcrossTheVectorTails) {
  // 8 query heads on 8, 4, 2 or 1 KV heads (each KV head's K and V read once
  // for its group: a group reading another's head, or a query head's row
  // landing in another's output, differs from the reference), head widths
  // on and off the 16-float vectors (8, 64, 67, 128, 130: the vectorised dot
  // products' and V accumulation's tails), 1 and 4 queries, keys not a
  // multiple of the 16-key products or 64-key blocks.
  SmallParts parts;
  for (int64_t ratio : {1, 2, 4, 8})
    for (int64_t D : {8, 64, 67, 128, 130})
      for (int64_t Sq : {1, 4}) {
        SCOPED_TRACE("group " + std::to_string(ratio) + ", D " + std::to_string(D) + ", Sq " +
                     std::to_string(Sq));
        const int64_t L = 83;
        const DecodeShape s{2, 8, 8 / ratio, Sq, L, D};
        GraphBuilder b;
        const NodeSet all = decodeGraph(b, s, false, {0, 29});
        const std::vector<std::string> d = expectDecodeMatches(b.graph(), all);
        ASSERT_EQ(d.size(), 3u);
        EXPECT_NE(d[0].find("H=8 Hkv=" + std::to_string(8 / ratio)), std::string::npos) << d[0];
      }
}

// A mask per query head ([1, H, 1, L], each head's filled rows its own):
// within a KV group the heads see different keys, so the group reads the
// keys some head of it sees, and rows hidden from every head of the group
// are skipped (they hold NaN here; the output is the reference's on zeros).
TEST(NativeDecodeAttention, AMaskPerQueryHeadSkipsOnlyKeysEveryHeadOfTheGroupHides) {
  SmallParts parts;
  const int64_t B = 1, H = 8, Hkv = 2, L = 200, D = 16, r = H / Hkv;
  const std::vector<int64_t> filled = {10, 150, 30, 60, 5, 7, 90, 11};  // per query head
  GraphBuilder b;
  ValueId q = b.input({B, H, 1, D});
  ValueId kIn = b.input({B, Hkv, L, D}), vIn = b.input({B, Hkv, L, D});
  ValueId mask = b.input({1, H, 1, L});
  ValueId kt =
      b.op("Transpose", {repeatHeads(b, kIn, r, false)}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  ValueId scores = b.op("Div", {b.op("MatMul", {q, kt}), b.scalar(4.0f)});
  ValueId p = b.op("Softmax", {b.op("Add", {scores, mask})}, attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, repeatHeads(b, vIn, r, false)}));
  const Graph& g = b.graph();
  auto hiddenFrom = [&](int64_t h, int64_t j) {
    return j >= filled[static_cast<size_t>(h)] && j != L - 1;
  };
  std::vector<Tensor> clean = randomInputs(g, 9);
  std::vector<Tensor> poisoned;
  for (const Tensor& t : clean) poisoned.push_back(t.clone());
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const ValueId v = g.inputs()[i];
    if (v == mask)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < L; ++j)
          clean[i].data<float>()[h * L + j] = poisoned[i].data<float>()[h * L + j] =
              hiddenFrom(h, j) ? kMin : 0.0f;
    if (v != kIn && v != vIn) continue;
    for (int64_t g2 = 0; g2 < Hkv; ++g2)
      for (int64_t j = 0; j < L; ++j) {
        bool hidden = true;
        for (int64_t h = g2 * r; h < (g2 + 1) * r; ++h) hidden = hidden && hiddenFrom(h, j);
        if (!hidden) continue;
        for (int64_t d = 0; d < D; ++d) {
          const int64_t at = (g2 * L + j) * D + d;
          clean[i].data<float>()[at] = 0.0f;
          poisoned[i].data<float>()[at] = std::numeric_limits<float>::quiet_NaN();
        }
      }
  }
  const std::vector<Tensor> env = referenceValues(g, clean);
  ThreadCountGuard guard;
  auto backend = native();
  for (int threads : {1, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    setThreadCount(threads);
    KernelRequest request = KernelRequest::of(g, all, "test");
    CompileResult c = backend->compile(request);
    ASSERT_TRUE(c) << c.refusal;
    ASSERT_EQ(describeNativeKernel(*c.kernel).rfind("decode attention ", 0), 0u);
    std::vector<Tensor> kernelInputs;
    for (ValueId v : request.inputs) {
      const auto input = std::find(g.inputs().begin(), g.inputs().end(), v);
      kernelInputs.push_back(input == g.inputs().end()
                                 ? env[v].clone()
                                 : poisoned[static_cast<size_t>(input - g.inputs().begin())]);
    }
    const std::vector<Tensor> y = runKernel(*c.kernel, request, kernelInputs);
    const CompareResult cr = compareScaled(y[0], env[request.outputs[0]], kFloat32Bound);
    EXPECT_TRUE(cr.ok) << cr.message;
  }
}

TEST(NativeDecodeAttention, GroupedHeadsInAPrefillRunOnTheFlashKernel) {
  // More queries than the decode kernel takes: the flash kernel reads KV
  // head h / group too.
  const int64_t B = 1, H = 4, Hkv = 2, S = 19, D = 8;
  GraphBuilder b;
  ValueId k = repeatHeads(b, b.input({B, Hkv, S, D}), H / Hkv, false);
  ValueId kt = b.op("Transpose", {k}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  ValueId p = b.op("Softmax", {b.op("MatMul", {b.input({B, H, S, D}), kt})},
                   attrs({{"axis", int64_t{-1}}}));
  const NodeSet all =
      b.finish(b.op("MatMul", {p, repeatHeads(b, b.input({B, Hkv, S, D}), H / Hkv, false)}));
  auto backend = native();
  CompileResult c = backend->compile(KernelRequest::of(b.graph(), all, "test"));
  ASSERT_TRUE(c) << c.refusal;
  EXPECT_EQ(describeNativeKernel(*c.kernel).rfind("attention B=1 H=4 Sq=19", 0), 0u)
      << describeNativeKernel(*c.kernel);
  KernelCheckResult r = checkKernelAgainstReference(*backend, b.graph(), all, 3);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(NativeDecodeAttention, LogSumExpMergeOfPartsIsTheSoftmaxOfTheWhole) {
  // Scores split into 3 parts of 5, 1 and 11 keys, each reduced to (max,
  // sum, unnormalised output) on its own; the merge equals softmax . V
  // computed over all 17 keys in double. A row of -inf scores is NaN.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  const int64_t dv = 5, n = 17;
  std::vector<float> s(n), v(n * dv);
  for (float& x : s) x = u(rng);
  for (float& x : v) x = u(rng);
  native::AttentionPartials p;
  p.resize(3, 2, dv);
  const int64_t bounds[4] = {0, 5, 6, 17};
  for (int64_t part = 0; part < 3; ++part) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = bounds[part]; j < bounds[part + 1]; ++j) m = std::max(m, s[j]);
    p.maxAt(part, 0) = m;
    for (int64_t j = bounds[part]; j < bounds[part + 1]; ++j) {
      const float e = std::exp(s[j] - m);
      p.sumAt(part, 0) += e;
      for (int64_t d = 0; d < dv; ++d) p.accAt(part, 0)[d] += e * v[j * dv + d];
    }
    // Row 1: every score -inf (max -inf, sum 0).
  }
  double m = -1e300, l = 0;
  for (float x : s) m = std::max(m, static_cast<double>(x));
  for (float x : s) l += std::exp(x - m);
  float y[dv * 2];
  native::mergeAttentionPartials(p, 0, 3, 0, y, 2);
  for (int64_t d = 0; d < dv; ++d) {
    double expected = 0;
    for (int64_t j = 0; j < n; ++j) expected += std::exp(s[j] - m) / l * v[j * dv + d];
    EXPECT_NEAR(y[d * 2], expected, 1e-5 * 6) << d;
  }
  native::mergeAttentionPartials(p, 0, 3, 1, y, 1);
  for (int64_t d = 0; d < dv; ++d) EXPECT_TRUE(std::isnan(y[d])) << d;
}

TEST(NativeDecodeAttention, CombinedPartsMergeAsThePartsThemselves) {
  // Parts {0, 1, 2} and {3} each combined into one (what a device sends
  // for cache parallelism), then merged: the merge of the four parts.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  const int64_t dv = 4;
  native::AttentionPartials p;
  p.resize(4, 1, dv);
  for (int64_t part = 0; part < 4; ++part) {
    p.maxAt(part, 0) = u(rng);
    p.sumAt(part, 0) = 1.0f + std::abs(u(rng));
    for (int64_t d = 0; d < dv; ++d) p.accAt(part, 0)[d] = u(rng);
  }
  p.maxAt(2, 0) = -std::numeric_limits<float>::infinity();  // a part that saw no key
  p.sumAt(2, 0) = 0.0f;
  ASSERT_NE(p.maxAt(0, 0), p.maxAt(1, 0));
  native::AttentionPartials two;
  two.resize(2, 1, dv);
  native::combineAttentionPartials(p, 0, 3, 0, two, 0, 0);
  native::combineAttentionPartials(p, 3, 1, 0, two, 1, 0);
  float whole[dv], merged[dv];
  native::mergeAttentionPartials(p, 0, 4, 0, whole, 1);
  native::mergeAttentionPartials(two, 0, 2, 0, merged, 1);
  for (int64_t d = 0; d < dv; ++d) EXPECT_NEAR(merged[d], whole[d], 1e-6f * 6) << d;
}

// The split against no split, on the kernel the backend compiles (its
// minimum keys per part set as bench_decode_split sets it): at any setting,
// odd lengths, grouped queries, one KV head and several, the output is the
// unsplit kernel's within the float32 bound (the merge only reorders the
// sums), and the part count follows the minimum: P = 1 below two parts'
// worth of keys, else as many as cover the threads.
TEST(NativeDecodeAttention, SplitAtAnyMinimumMatchesTheUnsplitKernel) {
  ThreadCountGuard guard;
  setThreadCount(8);
  auto backend = native();
  for (int64_t L : {1, 7, 37, 129, 301, 1001}) {
    for (int64_t Hkv : {1, 2, 4}) {
      SCOPED_TRACE("L " + std::to_string(L) + ", 4 query heads on " + std::to_string(Hkv) +
                   " KV head(s)");
      GraphBuilder b;
      const NodeSet all = decodeGraph(b, DecodeShape{1, 4, Hkv, 1, L, 24}, false, {L / 5});
      const KernelRequest request = KernelRequest::of(b.graph(), all, "test");
      CompileResult c = backend->compile(request);
      ASSERT_TRUE(c) << c.refusal;
      auto* k = dynamic_cast<native::DecodeAttentionKernel*>(c.kernel.get());
      ASSERT_NE(k, nullptr) << describeNativeKernel(*c.kernel);
      const std::vector<Tensor> env = referenceValues(b.graph(), randomInputs(b.graph(), 11));
      std::vector<Tensor> inputs;
      for (ValueId v : request.inputs) inputs.push_back(env[v].clone());
      k->minKeysPerPart = L + 1;
      ASSERT_EQ(k->parts(), 1);
      const Tensor unsplit = runKernel(*k, request, inputs).at(0);
      int64_t mostParts = 1;
      for (int64_t m : {1, 2, 3, 5, 8, 13, 64, 256}) {
        SCOPED_TRACE("at least " + std::to_string(m) + " keys per part");
        k->minKeysPerPart = m;
        const int64_t wanted = (8 + Hkv - 1) / Hkv;
        EXPECT_EQ(k->parts(), L < 2 * m ? 1 : std::min(wanted, L / m));
        mostParts = std::max(mostParts, k->parts());
        const Tensor y = runKernel(*k, request, inputs).at(0);
        const CompareResult r = compareScaled(y, unsplit, kFloat32Bound);
        EXPECT_TRUE(r.ok) << k->describe() << ": " << r.message;
      }
      // Not vacuous: every length of two keys or more was split somewhere.
      if (L >= 2) {
        EXPECT_GT(mostParts, 1);
      }
    }
  }
}

// The backend's default: no split below 2 x kDecodeMinKeysPerPart keys
// (COLLAGE_NATIVE_DECODE_MIN_KEYS unset), two parts from there at two
// threads with one KV head, and none at any length when the KV heads cover
// the threads.
TEST(NativeDecodeAttention, DefaultSplitStartsAtTwiceTheMinimumKeysPerPart) {
  unsetenv("COLLAGE_NATIVE_DECODE_MIN_KEYS");
  ASSERT_EQ(native::decodeMinKeysFromEnvironment(), native::kDecodeMinKeysPerPart);
  ThreadCountGuard guard;
  setThreadCount(2);
  const int64_t m = native::kDecodeMinKeysPerPart;
  for (const auto& [L, Hkv, P] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {2 * m - 1, 1, 1}, {2 * m, 1, 2}, {16 * m + 3, 1, 2}, {16 * m, 2, 1}}) {
    SCOPED_TRACE("L " + std::to_string(L) + ", " + std::to_string(Hkv) + " KV head(s)");
    GraphBuilder b;
    const NodeSet all = decodeGraph(b, DecodeShape{1, 2, Hkv, 1, L, 8}, false, {0});
    CompileResult c = native()->compile(KernelRequest::of(b.graph(), all, "test"));
    ASSERT_TRUE(c) << c.refusal;
    const std::string d = describeNativeKernel(*c.kernel);
    EXPECT_NE(d.find(", " + std::to_string(P) + " part(s) of >= " + std::to_string(m) + " keys"),
              std::string::npos)
        << d;
  }
}

// Cache parallelism (DecodeAttentionShard): the cache's keys split between
// two devices (two kernels, each reading only its keys), their partials
// exchanged in process, each device's output equals the reference's over
// the whole cache within the float32 bound, and the two devices' outputs
// are the same bits. Each device's K and V hold NaN outside its keys (the
// rows another device holds). Splits: a device whose keys the padding mask hides
// for one batch, the new (last) key on the first device, a device with no
// keys at all.
TEST(NativeDecodeAttention, CacheSlicesOnTwoDevicesMergeToTheWholeCache) {
  SmallParts parts;
  const DecodeShape shape{2, 4, 2, 1, 37, 8};
  GraphBuilder b;
  const NodeSet group = decodeGraph(b, shape, false, {3, 0});
  const Graph& g = b.graph();
  const std::vector<Tensor> env = referenceValues(g, randomInputs(g, 11));
  using Runs = std::vector<std::pair<int64_t, int64_t>>;
  const int64_t L = shape.L;
  const std::vector<std::pair<Runs, Runs>> splits = {
      {{{0, 2}}, {{2, L}}},
      {{{0, 20}, {L - 1, L}}, {{20, L - 1}}},
      {{{0, L}}, {}},
  };
  ThreadCountGuard guard;
  auto backend = native();
  // 8 threads: two parts per device, combined before the exchange.
  for (int threads : {1, 8}) {
    setThreadCount(threads);
    for (size_t s = 0; s < splits.size(); ++s) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", split " + std::to_string(s));
      KernelRequest request = KernelRequest::of(g, group, "test");
      std::vector<std::unique_ptr<Kernel>> kernels;
      std::vector<native::AttentionPartials> sent(2);
      bool gathered = false;  // the first round records what each device sends
      for (int dev = 0; dev < 2; ++dev) {
        CompileResult c = backend->compile(request);
        ASSERT_TRUE(c) << c.refusal;
        auto* k = dynamic_cast<native::DecodeAttentionKernel*>(c.kernel.get());
        ASSERT_NE(k, nullptr);
        k->shard = std::make_shared<native::DecodeAttentionShard>();
        k->shard->keys = dev == 0 ? splits[s].first : splits[s].second;
        k->shard->exchange = [&, dev](const native::AttentionPartials& mine,
                                      native::AttentionPartials& all) {
          sent[static_cast<size_t>(dev)] = mine;
          if (!gathered) {
            all = mine;
            return;
          }
          all.resize(2, mine.rows, mine.dv);
          for (int64_t p = 0; p < 2; ++p)
            for (int64_t x = 0; x < mine.rows; ++x)
              native::combineAttentionPartials(sent[static_cast<size_t>(p)], 0, 1, x, all, p, x);
        };
        kernels.push_back(std::move(c.kernel));
      }
      // Each device's cache holds its keys only: the others' rows are NaN
      // there, so a key read outside its slice shows.
      std::vector<std::vector<Tensor>> inputs(2);
      for (int dev = 0; dev < 2; ++dev) {
        const Runs& mine = dev == 0 ? splits[s].first : splits[s].second;
        auto held = [&](int64_t j) {
          return std::any_of(mine.begin(), mine.end(),
                             [&](const auto& r) { return j >= r.first && j < r.second; });
        };
        for (ValueId v : request.inputs) {
          Tensor t = env[v].clone();
          if (v == g.inputs()[1] || v == g.inputs()[2]) {
            float* x = t.data<float>();
            for (int64_t bh = 0; bh < shape.B * shape.Hkv; ++bh)
              for (int64_t j = 0; j < L; ++j)
                if (!held(j))
                  for (int64_t d = 0; d < shape.D; ++d)
                    x[(bh * L + j) * shape.D + d] = std::numeric_limits<float>::quiet_NaN();
          }
          inputs[static_cast<size_t>(dev)].push_back(std::move(t));
        }
      }
      for (int dev = 0; dev < 2; ++dev)
        runKernel(*kernels[static_cast<size_t>(dev)], request, inputs[static_cast<size_t>(dev)]);
      gathered = true;
      std::vector<std::vector<Tensor>> y;
      for (int dev = 0; dev < 2; ++dev)
        y.push_back(runKernel(*kernels[static_cast<size_t>(dev)], request,
                              inputs[static_cast<size_t>(dev)]));
      for (int dev = 0; dev < 2; ++dev) {
        const CompareResult r =
            compareScaled(y[static_cast<size_t>(dev)][0], env[request.outputs[0]], kFloat32Bound);
        EXPECT_TRUE(r.ok) << "device " << dev << ": " << r.message;
      }
      EXPECT_EQ(std::memcmp(y[0][0].raw(), y[1][0].raw(), y[0][0].byteSize()), 0)
          << "the devices' outputs differ";
    }
  }
}

// Tensor parallelism: two kernels, each with a shard of the KV heads (and
// the query heads reading them); each computes its heads as the whole
// kernel does and fills the other heads with NaN (it does not compute them).
TEST(NativeDecodeAttention, HeadShardsComputeTheirHeadsOnly) {
  const DecodeShape shape{2, 4, 2, 1, 37, 8};
  GraphBuilder b;
  const NodeSet group = decodeGraph(b, shape, false, {3, 0});
  const Graph& g = b.graph();
  const std::vector<Tensor> env = referenceValues(g, randomInputs(g, 5));
  auto backend = native();
  const KernelRequest request = KernelRequest::of(g, group, "test");
  const int64_t kvGroup = shape.H / shape.Hkv;
  Tensor joined = env[request.outputs[0]].clone();
  for (int64_t dev = 0; dev < 2; ++dev) {
    CompileResult c = backend->compile(request);
    ASSERT_TRUE(c) << c.refusal;
    auto* k = dynamic_cast<native::DecodeAttentionKernel*>(c.kernel.get());
    ASSERT_NE(k, nullptr);
    k->shard = std::make_shared<native::DecodeAttentionShard>();
    k->shard->keys = {{0, shape.L}};
    k->shard->kvHeadFirst = dev;
    k->shard->kvHeadEnd = dev + 1;
    std::vector<Tensor> in;
    for (ValueId v : request.inputs) in.push_back(env[v]);
    const std::vector<Tensor> y = runKernel(*k, request, in);
    // Y [B, H, Sq, D]: this device's heads into `joined`, the others NaN.
    const float* o = y[0].data<float>();
    float* all = joined.data<float>();
    for (int64_t i = 0; i < y[0].numElements(); ++i) {
      if ((i / (shape.Sq * shape.D)) % shape.H / kvGroup == dev)
        all[i] = o[i];
      else
        EXPECT_TRUE(std::isnan(o[i])) << "device " << dev << ", element " << i;
    }
  }
  const CompareResult r = compareScaled(joined, env[request.outputs[0]], kFloat32Bound);
  EXPECT_TRUE(r.ok) << r.message;
}

// ---- refusals: each form the kernel does not take, with its reason.

TEST(NativeDecodeAttention, RefusesHeadsTiledInBlocks) {
  // Tile(K, [1, r, 1, 1]) repeats the KV heads as blocks (query head h
  // reads KV head h % Hkv): no stride and no group says that.
  GraphBuilder b;
  ValueId k = b.op("Tile", {b.input({1, 2, 9, 8})}, attrs({{"repeats", Ints{1, 2, 1, 1}}}));
  ValueId kt = b.op("Transpose", {k}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  ValueId p = b.op("Softmax", {b.op("MatMul", {b.input({1, 4, 1, 8}), kt})},
                   attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, b.input({1, 4, 9, 8})}));
  EXPECT_NE(refusalOf(b.graph(), all).find("in blocks"), std::string::npos);
}

TEST(NativeDecodeAttention, RefusesKAndVRepeatedDifferently) {
  GraphBuilder b;
  ValueId k = repeatHeads(b, b.input({1, 2, 9, 8}), 2, false);
  ValueId kt = b.op("Transpose", {k}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  ValueId p = b.op("Softmax", {b.op("MatMul", {b.input({1, 4, 1, 8}), kt})},
                   attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, b.input({1, 4, 9, 8})}));
  EXPECT_NE(refusalOf(b.graph(), all).find("K and V repeat their heads differently (K 2x, V 1x)"),
            std::string::npos);
}

TEST(NativeDecodeAttention, RefusesRepeatedQueryHeads) {
  GraphBuilder b;
  ValueId q = repeatHeads(b, b.input({1, 2, 1, 8}), 2, false);
  ValueId kt = b.op("Transpose", {b.input({1, 4, 9, 8})}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  ValueId p = b.op("Softmax", {b.op("MatMul", {q, kt})}, attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, b.input({1, 4, 9, 8})}));
  EXPECT_NE(refusalOf(b.graph(), all).find("Q's heads are repeated"), std::string::npos);
}

TEST(NativeDecodeAttention, RefusesAReshapeOfTheRepeatedHeads) {
  // Heads repeated, then folded into the batch ([B * H, L, D]): the group
  // is no longer on a head axis the kernel walks.
  GraphBuilder b;
  ValueId k = b.op("Reshape", {repeatHeads(b, b.input({1, 2, 9, 8}), 2, false)},
                   attrs({{"shape", Ints{4, 9, 8}}}));
  ValueId kt = b.op("Transpose", {k}, attrs({{"perm", Ints{0, 2, 1}}}));
  ValueId p =
      b.op("Softmax", {b.op("MatMul", {b.input({4, 1, 8}), kt})}, attrs({{"axis", int64_t{-1}}}));
  const NodeSet all = b.finish(b.op("MatMul", {p, b.input({4, 9, 8})}));
  EXPECT_NE(refusalOf(b.graph(), all).find("reshapes the repeated heads"), std::string::npos);
}

// ---- the rule on the generated decoder models (tests/models/decoder).

TEST(NativeDecodeAttention, RuleFindsDecodeAttentionInTheGeneratedDecoders) {
  SmallParts parts;
  for (const char* model : {"mha_where_two_layers", "gqa_expand_padded", "gqa_tile_two_tokens"}) {
    SCOPED_TRACE(model);
    const std::string base = std::string(COLLAGE_SOURCE_DIR) + "/tests/models/decoder/" + model;
    const Graph g = importOnnx(base + ".onnx");
    // The committed inputs: the padded rows' masks are the float minimum.
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < g.inputs().size(); ++i)
      inputs.push_back(readTensorProtoFile(base + ".input_" + std::to_string(i) + ".pb"));
    int softmaxes = 0;
    for (const Node& n : g.nodes()) softmaxes += n.op == "Softmax";
    ASSERT_GE(softmaxes, 1);
    int core = 0, views = 0;
    for (const auto& [group, label] : native::attentionGroups(g)) {
      SCOPED_TRACE(label);
      if (label == "decode_attention")
        ++core;
      else if (label == "decode_attention_views")
        ++views;
      else
        ADD_FAILURE() << "label " << label;
      // The present.* Concat stays outside: the group reads the cache.
      group.forEach([&](NodeId n) { EXPECT_NE(g.node(n).op, "Concat") << g.node(n).name; });
      expectDecodeMatches(g, group, inputs);
    }
    EXPECT_EQ(core, softmaxes);
    EXPECT_EQ(views, softmaxes);
    // The views group holds the head repeat (Expand or Tile) where there is one.
    int repeats = 0;
    for (const Node& n : g.nodes()) repeats += n.op == "Expand" || n.op == "Tile";
    int repeatsInGroups = 0;
    for (const auto& [group, label] : native::attentionGroups(g))
      group.forEach(
          [&](NodeId n) { repeatsInGroups += g.node(n).op == "Expand" || g.node(n).op == "Tile"; });
    EXPECT_EQ(repeatsInGroups, repeats);
    // The code rule names them as candidates.
    int named = 0;
    for (const auto& [group, label] : native()->codeRule()->wholeGroups(g))
      named += label.rfind("decode_attention", 0) == 0;
    EXPECT_EQ(named, core + views);
  }
}

}  // namespace
}  // namespace collage
