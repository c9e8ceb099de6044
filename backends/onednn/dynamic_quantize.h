// ONNX DynamicQuantizeLinear, vectorised, bit for bit the reference's
// (core/ops/quantize_ops.cc): the range [min, max] widened to include 0,
// scale = (max - min) / 255, zero point = saturate(round_half_even(-min /
// scale)), y = saturate(round_half_even(x / scale) + zero point), all in
// float32 with a true division as the spec writes it (a multiply by 1/scale
// would round differently at halfway points). The int8 kernels run it
// before their integer product (onednn_int8_kernel.h).
#pragma once

#include <cstdint>

namespace collage::onednn {

struct DynamicQuantization {
  float scale = 0.0f;
  uint8_t zeroPoint = 0;
};

// The scale and zero point of x[0..n).
DynamicQuantization dynamicQuantizationOf(const float* x, int64_t n);
// y[i] for x[0..n) under `q` (all zeros when q.scale is 0, as the reference).
void quantizeU8(const float* x, int64_t n, const DynamicQuantization& q, uint8_t* y);
// ONNX QuantizeLinear with a per-tensor scale, as the reference:
// y = saturate(round_half_even(x / scale) + zeroPoint) into uint8 or int8 (isSigned).
void quantizeLinear(const float* x, int64_t n, float scale, int32_t zeroPoint, bool isSigned, void* y);

}  // namespace collage::onednn
