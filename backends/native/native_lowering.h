// Lowering a group of nodes to a native kernel.
//
// Every value of the group that can be computed element by element is
// inlined into the pass that needs it: elementwise ops become program
// nodes; Transpose, Reshape, Squeeze, Unsqueeze, Flatten, Slice, Expand,
// Split and broadcasting become index arithmetic folded into the leaves'
// affine offsets; Gather becomes an indirect term of a leaf offset;
// reductions (Reduce*, and Softmax, LogSoftmax, LayerNormalization,
// InstanceNormalization, GlobalAverage/MaxPool written as them) become
// per-row accumulations over the pass's inner dims, so a decomposed
// LayerNorm or Softmax is one pass that reads its input once and writes
// its output once.
//
// A value is materialised (written to a scratch buffer by an earlier pass)
// only when it cannot be expressed in the consumer's iteration space: a
// reshape of an inlined value that no refinement of the iteration space
// makes affine, reductions over different dims in one pass, a Concat that
// is not the group's result. Nodes that are not elementwise at heart (Conv,
// MatMul, Gemm, pools, ...) run as steps of their own; the backend accepts
// them in a group only as anchors whose output feeds fused passes.
#pragma once

#include <memory>
#include <string>

#include "core/runtime/backend.h"

namespace collage::native {

// Why node n cannot be evaluated inside a fused pass; empty when it can.
std::string inlineRefusal(const Graph& graph, NodeId n);

// Compiles the request into a kernel, or returns the reason for refusing.
CompileResult compileGroup(const KernelRequest& request, int threads);

// "pass ...; step ..." for a kernel of this backend; empty for another's.
std::string describeKernel(const Kernel& kernel);

}  // namespace collage::native
