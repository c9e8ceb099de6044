// Requantisation of an integer product, y = saturate(round_half_even(acc *
// scale) + zero point), in the arithmetic every backend and the reference
// share. ONNX leaves its precision open; ONNX Runtime (MLAS) and oneDNN
// multiply in float32: the int32 sum, bias included, converted to float,
// times a float scale x_scale * w_scale / y_scale computed in float in that
// order. So do we, in one place, so that the reference, the native kernels
// and oneDNN's epilogue agree byte for byte, and with ONNX Runtime. (In
// double, an exact tie such as acc * scale = -36.5 in float32 is -36.5000028,
// which rounds the other way.)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace collage {

inline float requantizeScale(float xScale, float wScale, float yScale) {
  return xScale * wScale / yScale;
}

// The output value before it is stored as the quantised type: rounded half to
// even (nearbyint in the default rounding mode), shifted by the zero point,
// clamped to [lo, hi] (the type's range).
inline float requantizeValue(int64_t acc, float scale, float zeroPoint, float lo, float hi) {
  const float v = std::nearbyint(static_cast<float>(acc) * scale) + zeroPoint;
  return std::min(std::max(v, lo), hi);
}

}  // namespace collage
