// Attention as one kernel: softmax(Q·Kᵀ·scale ⊕ mask)·V.
//
// The pattern it takes, as exporters write it (ONNX ops, any rank 2..4):
//
//   Q ─[Reshape|Transpose|Mul/Div by a scalar]*─┐
//                                               MatMul ─[score op]*─ Softmax(last axis) ─┐
//   K ─[Reshape|Transpose|Mul/Div by a scalar]*─┘                                        MatMul ─[Transpose|Reshape]*─ Y
//   V ─[Reshape|Transpose]*──────────────────────────────────────────────────────────────┘
//
// where a score op is a Mul or Div by a scalar constant (the scale applied
// to the scores), an Add of a tensor broadcastable to the scores (BERT's
// [B,1,1,Sk] mask, a [1,H,Sq,Sk] relative-position bias, a constant
// causal mask) or a Where(cond, scores, fill) / Where(cond, fill, scores)
// (a causal select over a sliced lower-triangular buffer, whatever made it).
// Score ops are applied in the graph's order, so any mix of them is exact.
//
// Invariant: the kernel computes exactly what the group's nodes compute (up
// to float rounding and summation order), or compile refuses with the
// reason. Every member of the group must be one of the nodes above, the
// head split/merge views (Reshape/Transpose) are folded into strides (each
// must be expressible without a copy, as NumPy's no-copy reshape), the
// only output is the last node's, and the tensors are float32 (the select's
// condition bool). Q, K and V are read where the views say; no
// intermediate tensor (scores, probabilities, split heads) is written.
//
// How it runs: (batch × head × block of 64 query rows) tasks run in
// parallel on the backend's threads, each streaming key blocks through a
// score block kept transposed (keys × queries) in L2, with an online
// softmax (flash attention's running max and sum), so Sk may be long. The
// scores read K in place; each V block is copied to contiguous rows. A
// constant mask is copied once at compile time to the kernel's key-major
// order. When a mask varies along the queries (a causal one, constant or
// made at run time), each tile's masks are read first, and a tile they push
// every score of far below each row's running max is skipped (exactly:
// its terms are 0 in float).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/runtime/backend.h"

namespace collage::native {

// Whether the group holds a Softmax fed by a MatMul and feeding a MatMul:
// such a group is the attention kernel's to compile or refuse.
bool isAttentionGroup(const Graph& graph, const NodeSet& nodes);

// Compiles an attention group (isAttentionGroup), or says why it cannot.
CompileResult compileAttention(const KernelRequest& request, int threads);

// The groups the native rule names for each attention found in the graph:
// the core (MatMul ... MatMul) and the core with the Q/K/V head split and
// the output's head merge (the views and a scale folded into Q or K).
// Labels: "attention" and "attention_views"; "decode_attention" and
// "decode_attention_views" where the scores have at most kDecodeMaxQueries
// rows, which compile to the decode kernel (native_decode_attention.h).
// K and V may repeat their heads for grouped-query attention
// (Unsqueeze -> Expand|Tile -> Reshape): query head h reads KV head h / r.
std::vector<std::pair<NodeSet, std::string>> attentionGroups(const Graph& graph);

// "attention B=1 H=12 Sq=197 Sk=197 D=64 Dv=64, ..." for an attention
// kernel; empty for any other kernel.
std::string describeAttentionKernel(const Kernel& kernel);

}  // namespace collage::native
