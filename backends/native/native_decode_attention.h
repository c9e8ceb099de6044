// Decode attention: a few query rows (one new token, or a handful) against
// a K/V cache of length L, as flash-decoding runs it.
//
// The attention compiler (native_attention.h) finds the pattern, folds the
// views into strides and the scale into Q, and hands the decode kernel the
// shapes when the scores have at most kDecodeMaxQueries rows: with so few
// queries, the (batch x head x query block) tasks of the flash kernel are
// too few to keep the threads busy and each reads K and V once per query
// head, while the step's cost is reading the cache.
//
// Keys the masks hide from every row are not read (visibleKeys): a decode
// step on a cache preallocated to capacity reads the filled rows and the
// new token's, not the capacity; the parts split the keys that are read.
//
// How it runs: the keys are split into P parts of at least `minKeysPerPart`
// keys, P chosen so that (batch x KV head x part) tasks cover the threads.
// Each task reads its part of one KV head's K and V once for all the query
// heads that share that KV head (grouped-query attention: Q head h reads KV
// head h / kvGroup) and all queries, keeping per row its running max m,
// sum l of exp(s - m) and unnormalised output acc = sum exp(s - m) v (an
// online softmax). The parts are then merged by log-sum-exp
// (mergeAttentionPartials): M = max m_p, l = sum l_p e^(m_p - M),
// y = sum acc_p e^(m_p - M) / l. The score ops (scale, additive mask,
// select) apply between Q.Kᵀ and the softmax, in the graph's order.
//
// The cache it expects (the next piece, a Session-owned cache, hands it
// that): K and V as strided views [batch, KV head, key, column], any
// strides, so a cache preallocated to a maximum length and filled to L is
// read in place (the head stride is the maximum length's, the keys the
// first L). It neither writes nor copies the cache; the exported graphs'
// present.* outputs are written by their Concat, outside the kernel.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/native/native_strided_view.h"
#include "core/ir/tensor.h"
#include "core/runtime/backend.h"

namespace collage::native {

// Queries at most, for the decode kernel (more: the flash kernel). Not
// measured yet: one token, or the few of speculative decoding.
constexpr int64_t kDecodeMaxQueries = 4;
// Keys per part at least, unless COLLAGE_NATIVE_DECODE_MIN_KEYS says
// otherwise (the tests split short caches with it). It is the split's
// threshold: P >= 2 needs L >= 2 x this, so below that a cache is never
// split (a part's merge and its task's start cost more than the part
// saves). Set from bench/kernels/bench_decode_split.cc (bench/README.md):
// the smallest cache length from which splitting beats not splitting by
// more than the spread, at 2 threads, halved. Measured 2026-11-29 (one KV
// head, batch 1, 2 threads, chrt -f 10): splitting pays from 128 keys on
// (1.23x at 128, 1.39x at 256, 1.50-1.55x from 768), so 64, not the 256
// guessed before or the ~512 other runtimes use.
constexpr int64_t kDecodeMinKeysPerPart = 64;
int64_t decodeMinKeysFromEnvironment();

// One operation on the scores between Q.Kᵀ and the Softmax (both attention
// kernels): a scale by a constant, an addend read through a view broadcast
// to the scores [b, h, query, key], or a select of the scores or a fill by
// a bool condition.
struct ScoreOp {
  enum Kind { Scale, Add, Select } kind = Scale;
  float scale = 1.0f;
  int slot = -1;  // Add: the addend; Select: the condition
  StridedView view;
  int fillSlot = -1;  // Select: the value taken where the scores are not
  StridedView fillView;
  bool scoresWhereTrue = true;
};

// Skipping masked keys (both kernels): raw scores Q.Kᵀ are taken to be
// within +-kRawScoreBound (a softmax over larger scores is already
// meaningless in float32); a score the ops bring to kHiddenBelow or lower
// whatever Q.Kᵀ is, is hidden (the masks' float minimum, -inf); a row with
// a score above kShownAbove has its max there, so a hidden score's
// exp(s - max) is below any float: skipping it changes nothing.
constexpr double kRawScoreBound = 1e20;
constexpr double kHiddenBelow = -1e30;
constexpr double kShownAbove = -1e29;

// Partial attention results of `rows` rows over P parts of the keys: per
// part and row the running max, the sum of exp(s - max) and the
// unnormalised output row of Dv floats.
struct AttentionPartials {
  int64_t parts = 0, rows = 0, dv = 0;
  std::vector<float> max, sum, acc;  // [part][row], [part][row], [part][row][dv]
  void resize(int64_t p, int64_t r, int64_t d);
  float& maxAt(int64_t p, int64_t r) { return max[static_cast<size_t>(p * rows + r)]; }
  float& sumAt(int64_t p, int64_t r) { return sum[static_cast<size_t>(p * rows + r)]; }
  float* accAt(int64_t p, int64_t r) { return acc.data() + (p * rows + r) * dv; }
  float maxAt(int64_t p, int64_t r) const { return max[static_cast<size_t>(p * rows + r)]; }
  float sumAt(int64_t p, int64_t r) const { return sum[static_cast<size_t>(p * rows + r)]; }
  const float* accAt(int64_t p, int64_t r) const { return acc.data() + (p * rows + r) * dv; }
};

// Merges row `row` of parts [first, first + count) by log-sum-exp into
// out[d * colStride]. A row whose every score was -inf (its sum 0 in every
// part) is NaN, as the reference's softmax of it.
void mergeAttentionPartials(const AttentionPartials& p, int64_t first, int64_t count, int64_t row,
                            float* out, int64_t colStride);
// The same merge left unnormalised: row `row` of parts [first, first +
// count) of `p` as one part, written to part `toPart`, row `toRow` of `to`
// (max M, sum l, acc = sum acc_p e^(m_p - M)). Merging such merges gives the
// merge of all the parts: what each device sends for cache parallelism.
void combineAttentionPartials(const AttentionPartials& p, int64_t first, int64_t count, int64_t row,
                              AttentionPartials& to, int64_t toPart, int64_t toRow);

// Cache parallelism across devices (docs/decoding.md): the cache is split
// along the keys, each device's kernel reads only the keys it holds, and the
// devices' partial results are merged by log-sum-exp. A kernel with a shard
// reads the keys in `keys` (ranges [first, end), within its visible keys),
// combines its parts into one per (group, row) (rows = B * Hkv * kvGroup *
// Sq, group-major), hands them to `exchange`, which returns every device's
// (one part per device, in device order, the same order on every device),
// and merges those into the output: every device computes the same output.
// Tensor parallelism (native_tensor_parallel.h) splits by heads instead: a
// shard with KV heads [kvHeadFirst, kvHeadEnd) computes only those heads and
// the query heads that read them (the other heads' output rows are not
// written), over `keys` (all of them), with no exchange (null).
//
// A device that holds only its share of the cache (its rows, its KV heads)
// sets `stored`: K and V are then read from buffers that are a window of
// the graph's present, [B, heads held, rows held, col], through those views
// (the input slots point at the buffers): KV head g is the buffer's head
// g - stored->kvHeadFirst, and key j of keys[i] its row
// stored->keyRows[i] + (j - keys[i].first). The masks are read at the
// graph's key indices, as without it.
struct StoredCache {
  StridedView k, v;
  int64_t kvHeadFirst = 0;
  std::vector<int64_t> keyRows;  // per range of DecodeAttentionShard::keys
};
struct DecodeAttentionShard {
  std::vector<std::pair<int64_t, int64_t>> keys;
  std::function<void(const AttentionPartials& mine, AttentionPartials& all)> exchange;
  int64_t kvHeadFirst = 0, kvHeadEnd = -1;  // -1: every KV head
  std::shared_ptr<const StoredCache> stored;  // null: K and V are the whole presents
};

class DecodeAttentionKernel : public Kernel {
 public:
  // [B, H] batch and query heads, Hkv KV heads (H = Hkv * kvGroup), Sq
  // queries, L keys, D (Q.K) and Dv (V) widths.
  int64_t B = 1, H = 1, Hkv = 1, kvGroup = 1, Sq = 1, L = 0, D = 0, Dv = 0;
  float qScale = 1.0f;
  int qSlot = -1, kSlot = -1, vSlot = -1;
  StridedView q, k, v, o;  // q, o: [b, h, query, col]; k, v: [b, KV head, key, col]
  std::vector<ScoreOp> ops;
  std::vector<Tensor> constants;  // slots numInputs.. are these
  size_t numInputs = 0;
  int threads = 1;
  int64_t minKeysPerPart = kDecodeMinKeysPerPart;
  // Set: this device's keys and the exchange with the others (above).
  std::shared_ptr<DecodeAttentionShard> shard;

  // The parts the keys are split into at `threads` threads.
  int64_t parts() const;
  // The KV heads this kernel computes: Hkv, or its shard's.
  int64_t kvHeadsRun() const;
  void run(const std::vector<const DLTensor*>& inputs,
           const std::vector<DLTensor*>& outputs) override;
  std::string describe() const;

 private:
  struct Scratch {
    std::vector<float> qr, s, kp, vp;
  };
  Scratch& scratch(int thread);
  void applyScoreOps(const std::vector<const void*>& slots, float* s, int64_t ld, int64_t b,
                     int64_t g, int64_t j0, int64_t nk) const;
  void visibleKeys(const std::vector<const void*>& slots, int64_t b, int64_t g,
                   std::vector<std::pair<int64_t, int64_t>>& runs) const;
  std::vector<int64_t> rowOperands(int64_t b, int64_t h, int64_t i) const;
  std::vector<std::vector<int64_t>> groupOperands(int64_t b, int64_t g) const;
  std::vector<Scratch> scratch_;
  AttentionPartials partials_;
  AttentionPartials mine_, all_;  // with a shard: this device's parts, every device's
  std::vector<std::vector<std::pair<int64_t, int64_t>>> visible_;  // per group: key ranges read
  std::vector<int64_t> visibleSource_;  // per group: the group whose scan it shares
};

}  // namespace collage::native
