// Lowering a group of nodes for oneDNN, step one: read the group as one
// oneDNN primitive (the anchor) followed by a chain of post-ops.
//
// The analysis is generic over the group, not a table of patterns: it walks
// the nodes in topological order; the first is the anchor (Conv, MatMul,
// pooling, a normalisation, Softmax, ...) or, for a group of elementwise ops
// alone, the group's input is the start; every later node must consume the
// running result and map to eltwise or binary post-ops. A composition nobody
// listed (Conv then Sigmoid then Mul by a tensor) therefore runs as soon as a
// spec pattern names it. The second step (onednn_kernel.cc) turns the chain
// into primitives, folding what it can into the anchor's weights.
#pragma once

#include <dnnl.hpp>
#include <string>
#include <vector>

#include "core/runtime/backend.h"

namespace collage::onednn {

// A tensor the kernel reads: a constant of the graph (taken at compile time)
// or one of the request's inputs (bound at run time).
struct Operand {
  bool isConstant = false;
  Tensor constant;      // when isConstant (shares the graph's storage)
  int inputIndex = -1;  // position in KernelRequest::inputs otherwise
  Shape shape;
  bool present() const { return isConstant || inputIndex >= 0; }
};

struct PostOp {
  // Sum: result += the operand, read from the destination buffer, which the
  // kernel fills with the operand first (oneDNN's sum post-op; set by the
  // lowering for a residual Add on a blocked-layout convolution).
  enum class Kind { Eltwise, Binary, Sum };
  Kind kind = Kind::Eltwise;
  dnnl::algorithm alg = dnnl::algorithm::undef;
  float alpha = 0.0f;  // Eltwise parameters (oneDNN's meaning per algorithm)
  float beta = 0.0f;
  Operand operand;   // Binary: result = result <alg> operand (numpy broadcasting); Sum: the addend
  std::string node;  // the node it comes from, for messages

  static PostOp eltwise(dnnl::algorithm alg, float alpha, float beta, std::string node);
  static PostOp binary(dnnl::algorithm alg, Operand operand, std::string node);
};

// anchor <post-op> <post-op> ... -> output.
struct FusedChain {
  // The anchor node; kNoNode for a group of elementwise ops only, whose
  // post-ops then apply to `source`.
  NodeId anchor = kNoNode;
  Operand source;  // elementwise groups: the value the chain starts from
  // A constant-zero Pad folded into the anchor (a Conv or an AveragePool):
  // the anchor reads the Pad's input and adds these amounts, one per spatial
  // dimension, to its own padding.
  NodeId pad = kNoNode;
  std::vector<int64_t> padBegin, padEnd;
  // A Transpose from channels last into channels first (perm 0, r-1, 1, ...,
  // r-2: what tf2onnx writes before each block of an NHWC model) that only
  // the anchor Conv reads: the Conv reads the Transpose's input as its
  // source in channels-last memory (nhwc), so the transposed copy is never
  // made.
  NodeId channelsLastInput = kNoNode;
  // The other way at the end: a Transpose from channels first into channels
  // last (perm 0, 2, ..., r-1, 1) of a Conv's result (after its post-ops)
  // is the group's output: the Conv writes its result as nhwc memory into
  // the Transpose's output, so the transposed copy is never made either.
  // `shape` stays the Conv's (channels first); `output` is the Transpose's.
  NodeId channelsLastOutput = kNoNode;
  std::vector<PostOp> postOps;
  Shape shape;  // of the running result (the output)
  ValueId output = kNoValue;

  std::string describe(const Graph& graph) const;  // "Conv + eltwise_relu + binary_add"
};

// Either a chain or the reason the group is not one oneDNN can run.
struct ChainAnalysis {
  FusedChain chain;
  std::string refusal;
  bool ok() const { return refusal.empty(); }
};

ChainAnalysis analyzeChain(const KernelRequest& request);

// A group of several chains (a residual block: Conv -> Relu -> Conv -> Relu
// -> Conv -> Add -> Relu, an Inception block's branches, or any region of
// chains feeding each other) read as a sequence of chains: each anchor
// starts a chain, every other node extends the chain whose running result is
// its first such input (or starts an elementwise chain). Each part is a
// request of its own (analysed as a chain). Any part's result may be one of
// the group's outputs, and later parts may read it too: this is what lets
// oneDNN take a whole region of the graph-level search.
struct ChainSequence {
  struct Part {
    KernelRequest request;
    FusedChain chain;
    // Per input of `request`: {index in the group's inputs, -1}, or
    // {-1, index of the earlier part that makes it}.
    std::vector<std::pair<int, int>> inputs;
    int groupOutput = -1;    // the index of its result in the group's outputs, or -1
    bool readLater = false;  // a later part reads its result
  };
  std::vector<Part> parts;
  bool severalChains = false;  // false: not a sequence at all (refusal says why)
  std::string refusal;
  bool ok() const { return refusal.empty(); }
};

// Splits a group of two or more chains into parts, in an order where
// each part comes after the parts it reads; refuses otherwise.
ChainSequence analyzeSequence(const KernelRequest& request);

// The operand for value `v` of the request's graph: a constant or one of the
// request's inputs; not present for kNoValue or a value made inside the group.
Operand operandOf(const KernelRequest& request, ValueId v);

// Ops the analysis accepts as an anchor (the first node of a group).
bool isAnchorOp(const std::string& op);

}  // namespace collage::onednn
