// Decode attention graphs as exporters write them, for the tests of both
// decode attention kernels (native_decode_attention_test.cc, the CUDA one's
// cuda/cuda_decode_attention_test.cc): the KV heads' repeat, a padding
// mask, and one step's attention on a cache.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tests/unit/graph_builder.h"

namespace collage::decode_graphs {

// KV heads [B, Hkv, L, D] repeated to [B, Hkv * r, L, D] as exporters write
// it: Unsqueeze(2) -> Expand|Tile -> Reshape.
inline ValueId repeatHeads(GraphBuilder& b, ValueId kv, int64_t r, bool tile) {
  if (r == 1) return kv;
  const Shape s = b.shape(kv);
  ValueId u = b.op("Unsqueeze", {kv}, attrs({{"axes", Ints{2}}}));
  u = tile ? b.op("Tile", {u}, attrs({{"repeats", Ints{1, 1, r, 1, 1}}}))
           : b.op("Expand", {u}, attrs({{"shape", Ints{s[0], s[1], r, s[2], s[3]}}}));
  return b.op("Reshape", {u}, attrs({{"shape", Ints{s[0], s[1] * r, s[2], s[3]}}}));
}

// A left-padded additive mask [B, 1, 1, L]: row b's first pad[b] keys at
// the float minimum (as (1 - attention_mask) * min), the rest 0.
inline ValueId paddingMask(GraphBuilder& b, int64_t B, int64_t L, const std::vector<int64_t>& pad) {
  Tensor t(ElementType::Float32, {B, 1, 1, L});
  for (int64_t i = 0; i < B; ++i)
    for (int64_t j = 0; j < L; ++j)
      t.data<float>()[i * L + j] =
          j < pad[static_cast<size_t>(i)] ? std::numeric_limits<float>::lowest() : 0.0f;
  static int count = 0;
  return b.graph().addConstant("pad" + std::to_string(count++), std::move(t));
}

struct DecodeShape {
  int64_t B, H, Hkv, Sq, L, D;
};

// One decode step's attention on a cache: Q [B, H, Sq, D], the cache K, V
// [B, Hkv, L, D] repeated to H heads, Kᵀ by Transpose, the scale a Div,
// the padding mask added; the whole group from Q and the cache to Y.
inline NodeSet decodeGraph(GraphBuilder& b, const DecodeShape& s, bool tile,
                           const std::vector<int64_t>& pad) {
  const int64_t r = s.H / s.Hkv;
  ValueId q = b.input({s.B, s.H, s.Sq, s.D});
  ValueId k = repeatHeads(b, b.input({s.B, s.Hkv, s.L, s.D}), r, tile);
  ValueId v = repeatHeads(b, b.input({s.B, s.Hkv, s.L, s.D}), r, tile);
  ValueId kt = b.op("Transpose", {k}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  ValueId scores =
      b.op("Div", {b.op("MatMul", {q, kt}), b.scalar(std::sqrt(static_cast<float>(s.D)))});
  scores = b.op("Add", {scores, paddingMask(b, s.B, s.L, pad)});
  ValueId p = b.op("Softmax", {scores}, attrs({{"axis", int64_t{-1}}}));
  return b.finish(b.op("MatMul", {p, v}));
}

// Three new tokens (query i sees keys <= L - 3 + i), GPT-2's Where(causal,
// scores, min) over a constant buffer, then the padding mask and a per-head
// bias [1, H, Sq, L] (ALiBi's form) read at run time; heads repeated by
// Tile; the scale a Mul on Q and on Kᵀ. B 2, H 6, Hkv 3, L 41, D 16.
inline NodeSet causalGraph(GraphBuilder& b) {
  const int64_t B = 2, H = 6, Hkv = 3, Sq = 3, L = 41, D = 16;
  const float lowest = std::numeric_limits<float>::lowest();
  ValueId q = b.op("Mul", {b.input({B, H, Sq, D}), b.scalar(0.5f)});
  ValueId k = repeatHeads(b, b.input({B, Hkv, L, D}), H / Hkv, true);
  ValueId v = repeatHeads(b, b.input({B, Hkv, L, D}), H / Hkv, true);
  ValueId kt =
      b.op("Mul", {b.op("Transpose", {k}, attrs({{"perm", Ints{0, 1, 3, 2}}})), b.scalar(0.5f)});
  Tensor causal(ElementType::Bool, {1, 1, Sq, L});
  for (int64_t i = 0; i < Sq; ++i)
    for (int64_t j = 0; j < L; ++j) causal.data<bool>()[i * L + j] = j <= L - Sq + i;
  ValueId w = b.op("Where", {b.graph().addConstant("causal", std::move(causal)),
                             b.op("MatMul", {q, kt}), b.scalar(lowest)});
  ValueId biased =
      b.op("Add", {b.op("Add", {w, paddingMask(b, B, L, {9, 0})}), b.input({1, H, Sq, L})});
  ValueId p = b.op("Softmax", {biased}, attrs({{"axis", int64_t{-1}}}));
  return b.finish(b.op("MatMul", {p, v}));
}

}  // namespace collage::decode_graphs
