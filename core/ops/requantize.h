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

// v clamped to [lo, hi], with NaN taken to lo: max then min as x86's
// MAXPS / MINPS compute them (each returns its second operand when either is
// NaN), so that a scalar loop gives the bytes a vector loop gives. Converting
// a NaN to an integer is undefined behaviour in C++; no NaN gets past this.
//
// Why NaN quantises to the type's lowest value (uint8 0, int8 -128) rather
// than to the zero point: it is what ONNX Runtime gives on x86 (MLAS's
// MlasQuantizeLinear clamps with MAXPS against the lowest value first), and
// what the ONNX reference implementation gives there too (it rounds, casts to
// int32, where x86 turns NaN into INT32_MIN, adds the zero point and clips).
// +inf and -inf saturate to the highest and lowest values.
inline float saturateToRange(float v, float lo, float hi) {
  const float above = v > lo ? v : lo;
  return above < hi ? above : hi;
}

// The output value before it is stored as the quantised type: rounded half to
// even (nearbyint in the default rounding mode), shifted by the zero point,
// clamped to [lo, hi] (the type's range; NaN gives lo).
inline float requantizeValue(int64_t acc, float scale, float zeroPoint, float lo, float hi) {
  const float v = std::nearbyint(static_cast<float>(acc) * scale) + zeroPoint;
  return saturateToRange(v, lo, hi);
}

// QuantizeLinear's value, saturate(round_half_even(x / scale) + zeroPoint)
// in float32 as the spec writes it, clamped to [lo, hi]; NaN gives lo
// (saturateToRange says why).
inline float quantizeValue(float x, float scale, float zeroPoint, float lo, float hi) {
  return saturateToRange(std::nearbyint(x / scale) + zeroPoint, lo, hi);
}

}  // namespace collage
