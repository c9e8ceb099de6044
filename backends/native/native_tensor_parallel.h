// Tensor parallelism across devices on the native backend (docs/decoding.md,
// "Tensor parallelism across MPI ranks"): Megatron's split of a decoder's
// step, found by structure in the step graph, never by names.
//
// Every device keeps the full-shape tensors of the step graph (its static
// shapes stay as they are); what splits is which parts of them a device
// computes. Device r of n owns KV heads [r Hkv / n, (r + 1) Hkv / n) of every
// decode attention, and the query heads that read them:
//  - a weight MatMul (B a constant matrix) whose output reaches only decode
//    attentions' Q, K or V through head-preserving ops (Reshape splitting
//    the columns into heads, Transpose, Split, Slice and Concat off the head
//    axis, elementwise ops: rotary embeddings, a bias, the Concat with the
//    past) is *column-sharded*: the device computes only its heads' columns
//    (a fused QKV MatMul followed by a Split: each piece's heads);
//  - the decode attention computes only the device's heads;
//  - the weight MatMul its output feeds (through the head merge) is
//    *row-sharded*: it reads only the device's heads' rows of its input and
//    of its weight, and its [rows, columns] output is summed across the
//    devices (an all-reduce, in device order: every device the same bits),
//    so a bias added after it is added once;
//  - the MLP: weight MatMuls whose outputs reach another weight MatMul's
//    input only through elementwise ops (gate and up, SiLU, the product;
//    GELU) are column-sharded uniformly (device r: columns [r F / n,
//    (r + 1) F / n) of F), the MatMul they feed row-sharded the same way and
//    all-reduced;
//  - everything else (norms, residuals, the LM head) runs on every device.
// So each device reads 1/n of those weights per step, at the price of two
// all-reduces of the hidden rows per layer. The columns a device does not
// own are filled with NaN, and the attention's heads it does not own too:
// nothing the device computes reads them, and a split that let something
// read them would show as NaN, never as a plausible wrong number.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/node_set.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"

namespace collage::native {

// A block of a sharded MatMul's output columns (column-sharded) or of its
// input's columns = its weight's rows (row-sharded): `width` columns from
// `offset`, in `units` equal units (heads, or single columns for the MLP);
// device r of n owns units [r units / n, (r + 1) units / n).
struct TensorParallelBlock {
  int64_t offset = 0, width = 0, units = 0;
};

struct TensorParallelMatMul {
  NodeId node = kNoNode;
  bool rows = false;  // false: column-sharded; true: row-sharded, then all-reduced
  std::vector<TensorParallelBlock> blocks;
  std::string role;  // "attention 0 (Q, K, V)", "attention 0 output", "MLP into NODE", "MLP"
};

struct TensorParallelAttention {
  NodeSet nodes;  // the native rule's widest decode attention group
  int64_t heads = 0, kvHeads = 0;
  NodeId output = kNoNode;  // the row-sharded MatMul its output feeds
};

struct TensorParallelSplit {
  std::vector<TensorParallelAttention> attentions;  // in the graph's order
  std::vector<TensorParallelMatMul> matmuls;        // in node order
  // Weight MatMuls left whole (run on every device), each with the reason
  // ("NAME: why").
  struct Replicated {
    NodeId node = kNoNode;
    std::string why;
  };
  std::vector<Replicated> replicated;
};

// The split of `graph` (a decode step). Error naming the attention when a
// decode attention's output reaches anything but one weight MatMul through
// its head merge (its heads could not be split), or when the graph has no
// decode attention.
TensorParallelSplit findTensorParallelSplit(const Graph& graph);

// Device `rank` of `ranks`: the columns (rows) of `m` it owns, as ranges
// [first, end) of the output's (input's) last axis. Error naming the node
// when a block's units do not divide by `ranks`.
std::vector<std::pair<int64_t, int64_t>> ownedRanges(const Graph& graph,
                                                     const TensorParallelMatMul& m, int64_t rank,
                                                     int64_t ranks);

// decodeAttentionPlan with each sharded MatMul on the `tensor_parallel`
// backend (createTensorParallelBackend): the plan `generate
// --tensor-parallel` runs.
Plan tensorParallelPlan(const Graph& graph, const TensorParallelSplit& split);

// `plan` (the user's, for `graph`) with its groups that hold a sharded
// MatMul or a node of a decode attention split: those attentions as
// tensorParallelPlan groups them, the sharded MatMuls on `tensor_parallel`,
// their other nodes native groups of one node; every other group as it is.
// `kept` (optional) gets how many of the plan's groups were kept whole.
Plan tensorParallelPlan(const Graph& graph, const TensorParallelSplit& split, const Plan& plan,
                        size_t* kept = nullptr);

// The weights' bytes (their constant inputs) of the split's sharded
// MatMuls and of those it leaves whole: what the decode simulator prices
// TP's rest by (the whole ones run on every device).
struct TensorParallelWeights {
  double sharded = 0, replicated = 0;
};
TensorParallelWeights tensorParallelWeights(const Graph& graph, const TensorParallelSplit& split);

// The one-line summary: "2 attention(s) split by heads, 8 MatMul(s) sharded
// (6 by columns, 2 by rows), 1 left whole".
std::string describeSplit(const Graph& graph, const TensorParallelSplit& split);

}  // namespace collage::native
