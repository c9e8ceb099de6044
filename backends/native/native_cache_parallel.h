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

}  // namespace collage::native
