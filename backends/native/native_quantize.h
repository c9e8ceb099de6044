// The native backend's quantise / dequantise steps, as vectorised
// elementwise loops split over the backend's threads:
//
//   QuantizeLinear        y = saturate(round_half_even(x / scale) + zero_point)
//   DequantizeLinear      y = (x - zero_point) * scale
//   DynamicQuantizeLinear the range [min(0, min x), max(0, max x)] of x (a
//                         parallel reduction), then QuantizeLinear to uint8
//                         with the scale and zero point it gives
//
// per tensor or per index of `axis`. Each element goes through the float32
// operations the reference kernels (core/ops/quantize_ops.cc) make, in their
// order: a division by the scale, never a multiplication by its reciprocal,
// so that the bytes are the reference's bit for bit, halfway cases included.
// float32 inputs to QuantizeLinear and uint8/int8 inputs to DequantizeLinear;
// int32 ones are left to the reference kernel.
#pragma once

#include <memory>

#include "backends/native/native_steps.h"

namespace collage::native {

// The step for a quantise / dequantise node, or null when the node is none
// of them or has types these loops leave to the reference.
std::unique_ptr<Step> makeQuantizeStep(const NodeBinding& binding, int threads);

}  // namespace collage::native
