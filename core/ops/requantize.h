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
#ifdef __AVX512F__
#include <immintrin.h>
#endif

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

// Whether x * r == x / scale bit for bit for every float32 x, and r if so.
// It holds when scale is a power of two (normal or denormal, either sign)
// whose reciprocal is a float too (2^-e, not past FLT_MAX): then x * r and
// x / scale are both the correctly rounded value of the same real number,
// x * 2^-e, so they agree on every x: ties, denormal results, overflow to
// infinity, zeros with their sign, infinities, and NaN (propagated as the
// division propagates it). Any other scale has no exact reciprocal, and
// x * RN(1/scale) differs from x / scale in the last bit for some x, which
// moves a value at a rounding tie to the other integer: the quantizers
// divide there.
inline bool exactReciprocal(float scale, float& r) {
  if (!std::isfinite(scale) || scale == 0.0f) return false;
  int e = 0;
  if (std::frexp(scale, &e) != (scale < 0 ? -0.5f : 0.5f)) return false;  // not ±2^(e-1)
  r = 1.0f / scale;
  int er = 0;
  return std::isfinite(r) && std::frexp(r, &er) == (scale < 0 ? -0.5f : 0.5f) && er == 2 - e;
}

// Any other scale: the product decides the integer wherever it lies clear of
// a rounding tie, and only there. With scale and r = RN(1 / scale) normal
// floats, q = RN(x * r) = (x / scale)(1 + e1)(1 + e2) and the reference's
// RN(x / scale) = (x / scale)(1 + e3), |ei| <= 2^-24, so the two are less
// than |q| * 2^-22 apart (below the normal range both are under 1/2 and
// round to a zero of x's sign). Where q lies farther than
// |q| * kReciprocalTieMargin from every half-integer k + 1/2, no tie lies
// between them, and nearbyint gives both the same integer; where |q| > 1024
// both saturate to the same end (|zero point| <= 255). The other lanes,
// near a tie (a few in a million), and q = +-inf or NaN, are divided.
inline constexpr float kReciprocalTieMargin = 0x1p-21f;
inline constexpr float kReciprocalSaturates = 1024.0f;
inline bool boundedReciprocal(float scale, float& r) {
  if (!std::isnormal(scale)) return false;
  r = 1.0f / scale;
  return std::isnormal(r);
}
// Whether the product q decides nearbyint(x / scale) (the rule above).
inline bool reciprocalDecides(float q) {
  const float a = std::fabs(q);
  return a > kReciprocalSaturates || std::fabs(q - std::floor(q) - 0.5f) > a * kReciprocalTieMargin;
}
#ifdef __AVX512F__
// reciprocalDecides for 16 lanes: v * vrec where the product decides, v / vs
// in the other lanes.
inline __m512 divideByReciprocal16(__m512 v, __m512 vrec, __m512 vs) {
  const __m512 q = _mm512_mul_ps(v, vrec);
  const __m512 a = _mm512_abs_ps(q);
  const __m512 frac = _mm512_sub_ps(q, _mm512_roundscale_ps(q, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
  const __mmask16 decides =
      _mm512_cmp_ps_mask(a, _mm512_set1_ps(kReciprocalSaturates), _CMP_GT_OQ) |
      _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(frac, _mm512_set1_ps(0.5f))),
                         _mm512_mul_ps(a, _mm512_set1_ps(kReciprocalTieMargin)), _CMP_GT_OQ);
  return decides == 0xFFFF ? q : _mm512_mask_div_ps(q, static_cast<__mmask16>(~decides), v, vs);
}
#endif

}  // namespace collage
