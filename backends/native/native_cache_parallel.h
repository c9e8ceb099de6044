// Cache parallelism across devices on the native decode attention kernel
// (docs/decoding.md): each device holds a contiguous slice of the KV cache
// along the sequence, computes each layer's decode attention over its slice
// (partial output, running max and sum per row) and the devices merge the
// partials by log-sum-exp; the projections and the MLP run replicated on
// every device (the same inputs, the same results). What splits is the
// attention's kernel: a Session's DecodeAttentionKernels get a shard
// (DecodeAttentionShard: the keys the device reads, the exchange with the
// others), nothing else changes. The exchange itself (MPI between ranks) is
// the caller's.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backends/native/native_decode_attention.h"
#include "core/ir/graph.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"

namespace collage::native {

// A plan for `graph` with each decode attention (the native rule's
// `decode_attention_views` group, else `decode_attention`) one native group
// and every other node a native group of its own: the plan cache
// parallelism needs when the user gives none. Error when the graph has no
// decode attention the rule names.
Plan decodeAttentionPlan(const Graph& graph);

// The session's decode attention kernels, in group order.
std::vector<DecodeAttentionKernel*> decodeAttentionKernels(const Session& session);

// A device that holds only its share of the cache (cache parallelism: its
// rows; tensor parallelism: its KV heads) keeps each present in a smaller
// buffer, a window of it (Session::appendInPlace with offsets; the Decoder's
// CacheShare). The views kernel `k` reads K and V through from buffers of
// KV heads [headFirst, headFirst + heads) and `rows` rows (keyRows left to
// the caller, per step): the presents' views rebased on the smaller
// buffers. Error when the kernel reads K or V other than as the present's
// rows [batch, KV head, key, col], row-major (then the window's layout is
// not a view of its inputs).
std::shared_ptr<StoredCache> storedCacheViews(const DecodeAttentionKernel& k, int64_t headFirst,
                                              int64_t heads, int64_t rows);
// Cache parallelism's shards for a device holding rows [first, end) of a
// `capacity`-row cache (the step's new row is key `capacity`), one per
// kernel, each handing its partials to `exchange`: each kernel reads keys
// [first, end), and the new row on the device whose rows hold the step's
// (the one that appends it). With `held` (the Decoder holds only those
// rows: CacheShare), K and V are read from the smaller buffers
// (storedCacheViews: the rows at 0.., the new one after them). Returns what
// to call before each step with its row. Error as storedCacheViews.
std::function<void(int64_t row)> splitByCacheRows(
    const std::vector<DecodeAttentionKernel*>& kernels, int64_t first, int64_t end,
    int64_t capacity, bool held,
    const std::function<void(const AttentionPartials& mine, AttentionPartials& all)>& exchange);
// Error, naming the group and the present, unless every group of `session`
// that reads a windowed present (Session::windowedOutputs) is a decode
// attention kernel reading it as its K or V: any other kernel would read the
// smaller buffer as the whole present.
void requireWindowedPresentsReadByDecodeAttention(const Session& session);

}  // namespace collage::native
