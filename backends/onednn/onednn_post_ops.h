// Post-op legalisation: a chain's post-ops (onednn_chain.h) rewritten into
// a list oneDNN 2.6 runs correctly and fast, before any primitive is made.
// Pure functions of the post-ops and shapes: no memory, no engine.
//
//   chain.postOps --foldLeading--> per-channel scale/shift (into weights, bias)
//                 --simplified---> scalar binaries as eltwise ops
//                 --legalized----> one parameter set per eltwise algorithm
#pragma once

#include <string>
#include <vector>

#include "backends/onednn/onednn_chain.h"

namespace collage::onednn {

// The lowering's way of saying no, with the reason; lowerChain and
// lowerSequence turn it into a refused CompileResult.
struct Refusal {
  std::string reason;
};

// The combined affine map of leading post-ops that multiply or add a constant
// varying along one dimension (the output channel) only:
// result * scale[c] + shift[c]. Anchors with constant weights take it into
// their weights and bias, which removes those post-ops altogether.
struct Fold {
  size_t count = 0;  // leading post-ops folded
  bool scales = false, shifts = false;
  std::vector<float> scale, shift;
};

// The leading post-ops of `ops` that fold along `channelDim` of `dst`
// (multiplies only where `allowMul`, adds only where `allowAdd`).
Fold foldLeading(const std::vector<PostOp>& ops, const Shape& dst, size_t channelDim, bool allowMul,
                 bool allowAdd);

// oneDNN 2.6's JIT post-op injector keeps one eltwise injector per
// algorithm, so a second eltwise post-op of the same algorithm silently runs
// with the first one's alpha and beta (seen with jit:avx2, jit_1x1, jit_dw
// convolutions, jit:uni binary and gemm:jit matmul: linear(2,1) then
// linear(1,1) gives 3, not 2). This pass makes every eltwise algorithm appear
// with one set of parameters: adjacent linear and clip ops are merged, and a
// later linear or clip that still differs becomes binary ops on a scalar;
// any other repeat is refused (throws Refusal).
std::vector<PostOp> legalized(const std::vector<PostOp>& ops);

// Scalar-constant binary post-ops as eltwise ones (cheaper, and they need no
// operand memory), then legalized.
std::vector<PostOp> simplified(std::vector<PostOp> ops);

// Whether `p` adds a run-time tensor of the result's shape `dst` (a
// residual): on a blocked destination, or as a GEMM's beta, oneDNN's sum
// post-op does it for free.
bool isResidualAdd(const PostOp& p, const Shape& dst);

}  // namespace collage::onednn
