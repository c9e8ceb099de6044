// The native backend's steps for the integer products: ConvInteger,
// MatMulInteger (int32 results) and QLinearConv, QLinearMatMul (requantised
// uint8/int8 results), on the blocked int8 GEMM of native_int8_gemm.h.
//
// Conv is im2col into the GEMM's column blocks (kNr output pixels at a time,
// padding read as the input's zero point so that it adds nothing), against
// the weights of each group as the GEMM's rows; N-D convolutions with any
// strides, dilations and pads (ConvGeometry) go through one 3-D loop. A
// depthwise conv (one input channel per output channel) would use one row
// of the GEMM's six-row tile per group, so it sums its windows directly,
// a whole output row per tap.
// MatMul is A as the rows (zero point per row) and B as the columns (zero
// point per column), batches broadcast as numpy does. Work is split over
// images, groups, column blocks and row chunks on the backend's threads.
//
// Results equal the reference kernels' (core/ops/quantize_ops.cc) exactly:
// the integer sums are exact (modulo 2^32, as the int32 the *Integer ops
// store), and requantisation makes the same float and double operations in
// the same order: scale = a_scale * b_scale / y_scale in float, then
// round_half_even(acc * scale) + y_zero_point in double, then saturate. A
// QLinear op whose sum could leave int32 (K > 33025) is left to the
// reference, whose accumulator is int64.
#pragma once

#include <memory>

#include "backends/native/native_steps.h"

namespace collage::native {

// The step for an integer product node, or null when the node is none of
// them (or one this kernel leaves to the reference, as above).
std::unique_ptr<Step> makeInt8ProductStep(const NodeBinding& binding, int threads);

}  // namespace collage::native
