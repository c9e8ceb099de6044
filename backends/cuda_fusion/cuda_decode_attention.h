// Decode attention on a CUDA device, flash-decoding style: a few query rows
// (one new token, or up to kDecodeMaxQueries) against a K/V cache of L keys.
//
// The contract is the native decode kernel's (native_decode_attention.h):
// the same groups (`decode_attention`, `decode_attention_views`, found by
// native::attentionGroups), read by the same analysis (native::
// compileAttention: views folded into strides, the scale into Q, grouped KV
// heads, the score ops in the graph's order), with the same refusals. This
// file turns that analysis into CUDA C++ for NVRTC; the host logic (the
// split, the grid, the shapes' checks, the source) needs no device.
//
// How it runs, two kernels on the stream:
//
//   collage_decode_partial  grid (P splits, B x Hkv groups), one block per
//       (split, group): the block reads split s's keys [s L / P, (s+1) L / P)
//       of one KV head once for all R = kvGroup x Sq rows that read it (its
//       query heads x queries), in tiles of keysPerTile keys staged in shared
//       memory, keeping per row the running max m, the sum l of exp(s - m)
//       and the unnormalised output acc (each thread owns `accumulators`
//       (row, column) pairs in registers), and writes (m, l, acc) to a
//       workspace [group][split][row].
//   collage_decode_merge    one thread per output element: the splits merged
//       by log-sum-exp, M = max m_p, l = sum l_p e^(m_p - M),
//       y = sum acc_p e^(m_p - M) / l; a row whose every score is -inf is
//       NaN, as the reference's softmax (mergeAttentionPartials' arithmetic).
//
// Not done (yet): the native kernel's skipping of keys every row's mask
// hides (visibleKeys); here every key of the cache is read, the hidden ones
// adding exp(-huge) = 0. The split's constants are not measured: this
// kernel has not run on a GPU (docs/decoding.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/tensor.h"
#include "core/runtime/backend.h"

namespace collage::cuda_fusion {

inline constexpr const char* kDecodePartialEntry = "collage_decode_partial";
inline constexpr const char* kDecodeMergeEntry = "collage_decode_merge";

// Keys per split at least: below that a split's block and its merge cost
// more than the keys it takes off the others. A guess (flash-decoding's
// chunks are 256 to 512 keys), to be measured on a GPU.
constexpr int64_t kCudaDecodeMinKeysPerSplit = 256;
// kCudaDecodeMinKeysPerSplit, unless COLLAGE_CUDA_DECODE_MIN_KEYS says
// otherwise (the tests split short caches with it).
int64_t cudaDecodeMinKeysFromEnvironment();
// Blocks wanted per multiprocessor, so the (split x group) blocks fill it.
constexpr int64_t kCudaDecodeBlocksPerMultiprocessor = 2;
// Static shared memory a block may use without an opt-in.
constexpr size_t kCudaDecodeMaxSharedBytes = 48 * 1024;
// Output elements (row, column) one thread keeps in registers, at most.
constexpr int kCudaDecodeMaxAccumulators = 16;
constexpr int kCudaDecodeMaxThreads = 1024;
constexpr int kCudaDecodeMergeThreads = 256;

// A strided 4-d view of a tensor in a kernel slot: [b, head, row, column]
// for Q, K, V and the output, [b, query head, query, key] for a mask.
struct DecodeView {
  int slot = -1;
  int64_t strides[4] = {0, 0, 0, 0};
};

// A score op (native::ScoreOp): a scale, an added tensor, or a select of
// the scores where `cond` is `scoresWhereTrue`, else `fill`.
struct DecodeScoreOp {
  enum Kind { Scale, Add, Select } kind = Scale;
  float scale = 1.0f;
  DecodeView operand;  // Add: the addend; Select: the condition (bool)
  DecodeView fill;     // Select
  bool scoresWhereTrue = true;
};

struct CudaDecodePlan {
  std::string refusal;  // non-empty: not compiled, and why
  // The shapes, as the native decode kernel's: batch B, query heads H, KV
  // heads Hkv (H = Hkv x kvGroup), Sq queries, L keys, D (Q.K) and Dv widths.
  int64_t B = 1, H = 1, Hkv = 1, kvGroup = 1, Sq = 1, L = 0, D = 0, Dv = 0;
  float qScale = 1.0f;
  DecodeView q, k, v, o;
  std::vector<DecodeScoreOp> ops;
  // Slots: the request's inputs, then `constants` (uploaded at compile),
  // then the workspace, then the output.
  size_t numInputs = 0;
  std::vector<Tensor> constants;

  // The launch (planLaunch): P splits of the keys, the threads of a
  // partial block, keys per tile, accumulators per thread, shared bytes.
  int64_t splits = 1;
  int threads = 128;
  int keysPerTile = 32;
  int accumulators = 0;
  size_t sharedBytes = 0;

  int64_t rows() const { return kvGroup * Sq; }  // R: rows one block computes
  int64_t groups() const { return B * Hkv; }
  size_t slots() const { return numInputs + constants.size() + 2; }
  size_t workspaceSlot() const { return numInputs + constants.size(); }
  size_t outputSlot() const { return numInputs + constants.size() + 1; }
  // Floats of the workspace: per (group, split, row) m, l and Dv of acc.
  int64_t workspaceFloats() const { return groups() * splits * rows() * (Dv + 2); }
  int64_t mergeElements() const { return groups() * rows() * Dv; }
  int64_t mergeBlocks() const;
  std::string describe() const;
};

// Keys [first, end) of split `s` of P over L keys: every key in exactly one
// split, the splits' sizes within one of each other.
std::pair<int64_t, int64_t> splitKeys(int64_t L, int64_t P, int64_t s);

// The splits for `groups` (batch x KV head) blocks on a device of
// `multiprocessors`: enough that the blocks fill it
// (kCudaDecodeBlocksPerMultiprocessor each), each split at least
// `minKeysPerSplit` keys (so a cache shorter than twice that is one split).
int64_t chooseSplits(int64_t L, int64_t groups, int multiprocessors,
                     int64_t minKeysPerSplit = kCudaDecodeMinKeysPerSplit);

// Threads, tile and shared memory for the plan's shapes; sets `refusal`
// when no launch fits (too many rows x columns for the registers, Q and a
// tile over the shared memory).
void planLaunch(CudaDecodePlan& plan, int multiprocessors,
                int64_t minKeysPerSplit = kCudaDecodeMinKeysPerSplit);

// The group read as the native decode kernel reads it, then planned (the
// splits' minimum from the environment): a refusal (the native analysis's,
// or the launch's) names why.
CudaDecodePlan planDecodeAttention(const KernelRequest& request, int multiprocessors);

// The CUDA C++ of both kernels for NVRTC: shapes, strides and score ops as
// literals. Its one parameter is `struct Args { void* p[slots()]; }`.
std::string decodeAttentionSource(const CudaDecodePlan& plan);

}  // namespace collage::cuda_fusion
