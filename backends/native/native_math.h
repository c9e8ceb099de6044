// Scalar math written so that GCC vectorises loops calling it: only
// arithmetic, comparisons, selects and bit casts, no libm calls (which would
// keep a loop scalar). Accuracy is a few float ulps for exp/log/tanh and
// 1.5e-7 absolute for erf (Abramowitz-Stegun 7.1.26, as PyTorch's vectorised
// erf), far inside the 1e-3 relative tolerance backends are held to.
#pragma once

#include <bit>
#include <cstdint>

#include "core/ops/logistic.h"

namespace collage::native {

// Below ln(FLT_MIN) the result is 0, not the subnormal exp(x) rounds to
// (an absolute difference under 1.2e-38): a subnormal operand makes every
// multiply-add that reads it take a microcode assist, about 100x slower. A
// masked score (the fill a causal Where writes, float's lowest) gave a
// probability of 1.2e-38, and the flash attention's P.V products of it
// were subnormal: a 2,048-token causal attention ran 18x slower than the
// same attention unmasked (1.64 s against 0.09 s).
__attribute__((always_inline)) inline float fastExp(float x) {
  // exp(x) = 2^k * exp(r), k = round(x / ln2), |r| <= ln2 / 2.
  const bool underflows = x < -87.33654f;
  x = underflows ? -87.33654f : x;
  x = x > 88.72283f ? 88.72283f : x;
  const float kf = x * 1.44269504088896341f;
  // Round to nearest through the 1.5 * 2^23 trick (vectorises without SSE4.1 round).
  const float k = (kf + 12582912.0f) - 12582912.0f;
  float r = x - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  // Cephes expf polynomial.
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^k through the exponent bits; k in [-126, 128]: split to stay finite.
  const int32_t ki = static_cast<int32_t>(k);
  const int32_t k1 = ki >> 1;
  const int32_t k2 = ki - k1;
  const float s1 = std::bit_cast<float>((k1 + 127) << 23);
  const float s2 = std::bit_cast<float>((k2 + 127) << 23);
  return underflows ? 0.0f : p * s1 * s2;
}

__attribute__((always_inline)) inline float fastLog(float x) {
  // Cephes logf: x = m * 2^e with m in [sqrt(1/2), sqrt(2)).
  const int32_t bits = std::bit_cast<int32_t>(x);
  int32_t e = ((bits >> 23) & 0xff) - 126;
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);  // [0.5, 1)
  const bool small = m < 0.707106781186547524f;
  e = small ? e - 1 : e;
  m = small ? m + m - 1.0f : m - 1.0f;
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  const float ef = static_cast<float>(e);
  y += -2.12194440e-4f * ef;
  y += -0.5f * z;
  float r = m + y + 0.693359375f * ef;
  // Special values: log(0) = -inf, log(<0) = NaN, log(inf) = inf, NaN stays.
  r = x == 0.0f ? -__builtin_inff() : r;
  r = x < 0.0f ? __builtin_nanf("") : r;
  r = x == __builtin_inff() ? x : r;
  r = x != x ? x : r;
  // Subnormals: rare enough here to accept the flush to log(FLT_MIN)-ish.
  return r;
}

__attribute__((always_inline)) inline float fastTanh(float x) {
  const float ax = x < 0.0f ? -x : x;
  // Small |x|: Cephes tanhf polynomial; large: 1 - 2 / (exp(2|x|) + 1).
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float e = fastExp(2.0f * ax);
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = x < 0.0f ? -big : big;
  return ax < 0.625f ? small : big;
}

// ONNX Runtime's Sigmoid, the reference's (core/ops/logistic.h): bit for bit,
// so that a SiLU fused before a DynamicQuantizeLinear rounds as both do.
__attribute__((always_inline)) inline float fastSigmoid(float x) { return ortLogistic(x); }

__attribute__((always_inline)) inline float fastErf(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float y = 1.061405429f;
  y = y * t - 1.453152027f;
  y = y * t + 1.421413741f;
  y = y * t - 0.284496736f;
  y = y * t + 0.254829592f;
  y = 1.0f - y * t * fastExp(-ax * ax);
  y = x < 0.0f ? -y : y;
  // Near 0 the formula loses relative accuracy to cancellation: Taylor series.
  const float z = x * x;
  float s = -1.0f / 1320.0f;
  s = s * z + 1.0f / 216.0f;
  s = s * z - 1.0f / 42.0f;
  s = s * z + 1.0f / 10.0f;
  s = s * z - 1.0f / 3.0f;
  s = (s * z + 1.0f) * x * 1.12837916709551257f;
  return ax < 0.5f ? s : y;
}

}  // namespace collage::native
