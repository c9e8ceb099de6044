#include "backends/onednn/dynamic_quantize.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/ops/requantize.h"

namespace collage::onednn {

namespace {

// Elements per parallel chunk: large enough that a thread's share streams.
constexpr int64_t kChunk = 1 << 16;

bool haveAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f");
  return have;
}

// The scalar forms are the reference's expressions, so both paths agree.
void rangeScalar(const float* x, int64_t n, float& lo, float& hi) {
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
}

// The reference's saturate(nearbyint(x / scale) + zp) into [lo, hi], NaN to
// lo (requantize.h); x * inv where `multiply` (inv the scale's exact
// reciprocal, the same floats as the division for every x).
float quantizeOne(float x, float scale, bool multiply, float inv, float zp, float lo, float hi) {
  return saturateToRange(std::nearbyint(multiply ? x * inv : x / scale) + zp, lo, hi);
}

__attribute__((target("avx512f"))) void rangeAvx512(const float* x, int64_t n, float& lo, float& hi) {
  __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    vlo = _mm512_min_ps(vlo, v);
    vhi = _mm512_max_ps(vhi, v);
  }
  lo = std::min(lo, _mm512_reduce_min_ps(vlo));
  hi = std::max(hi, _mm512_reduce_max_ps(vhi));
  rangeScalar(x + i, n - i, lo, hi);
}

// x / scale (or what stands for it) rounded to nearest even (the default
// mode, as nearbyint), plus the zero point, clamped: max then min, NaN to lo
// as the reference's saturateToRange; 16 values into y.
template <bool Signed>
__attribute__((target("avx512f"))) inline void storeQuantized(__m512 v, __m512 vzp, __m512 vlo, __m512 vhi, void* y) {
  v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, vzp), vlo), vhi);
  const __m512i q = _mm512_cvtps_epi32(v);  // integral and in range: exact
  _mm_storeu_si128(static_cast<__m128i*>(y), Signed ? _mm512_cvtsepi32_epi8(q) : _mm512_cvtusepi32_epi8(q));
}

template <bool Signed>
__attribute__((target("avx512f"))) void quantizeAvx512(const float* x, int64_t n, float scale, float zp,
                                                       void* out) {
  using Q = std::conditional_t<Signed, int8_t, uint8_t>;
  Q* y = static_cast<Q*>(out);
  const float lo = Signed ? -128.0f : 0.0f, hi = Signed ? 127.0f : 255.0f;
  float inv = 0.0f;
  const bool multiply = exactReciprocal(scale, inv);
  const __m512 vs = _mm512_set1_ps(scale), vinv = _mm512_set1_ps(inv), vzp = _mm512_set1_ps(zp);
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  int64_t i = 0;
  // A multiplication by the exact reciprocal; else by RN(1/scale) where the
  // product decides the integer, divided in the lanes near a tie
  // (reciprocalDecides, core/ops/requantize.h); else one division per vector.
  float rec = 0.0f;
  if (multiply) {
    for (; i + 16 <= n; i += 16) storeQuantized<Signed>(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv), vzp, vlo, vhi, y + i);
  } else if (boundedReciprocal(scale, rec)) {
    const __m512 vrec = _mm512_set1_ps(rec);
    for (; i + 16 <= n; i += 16)
      storeQuantized<Signed>(divideByReciprocal16(_mm512_loadu_ps(x + i), vrec, vs), vzp, vlo, vhi, y + i);
  } else {
    for (; i + 16 <= n; i += 16) storeQuantized<Signed>(_mm512_div_ps(_mm512_loadu_ps(x + i), vs), vzp, vlo, vhi, y + i);
  }
  for (; i < n; ++i) y[i] = static_cast<Q>(quantizeOne(x[i], scale, multiply, inv, zp, lo, hi));
}

template <bool Signed>
void quantizeRange(const float* x, int64_t n, float scale, float zp, void* out) {
  using Q = std::conditional_t<Signed, int8_t, uint8_t>;
  const float lo = Signed ? -128.0f : 0.0f, hi = Signed ? 127.0f : 255.0f;
  const bool wide = haveAvx512();
  float inv = 0.0f;
  const bool multiply = exactReciprocal(scale, inv);
#pragma omp parallel for schedule(static) if (n > 4 * kChunk)
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = std::min(kChunk, n - c);
    Q* y = static_cast<Q*>(out) + c;
    if (wide) {
      quantizeAvx512<Signed>(x + c, len, scale, zp, y);
    } else {
      for (int64_t i = 0; i < len; ++i) y[i] = static_cast<Q>(quantizeOne(x[c + i], scale, multiply, inv, zp, lo, hi));
    }
  }
}

}  // namespace

DynamicQuantization dynamicQuantizationOf(const float* x, int64_t n) {
  float lo = 0.0f, hi = 0.0f;
  const bool wide = haveAvx512();
#pragma omp parallel for reduction(min : lo) reduction(max : hi) schedule(static) if (n > 4 * kChunk)
  for (int64_t c = 0; c < n; c += kChunk) {
    float l = 0.0f, h = 0.0f;
    const int64_t len = std::min(kChunk, n - c);
    if (wide)
      rangeAvx512(x + c, len, l, h);
    else
      rangeScalar(x + c, len, l, h);
    lo = std::min(lo, l);
    hi = std::max(hi, h);
  }
  DynamicQuantization q;
  q.scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;  // the reference's: 1 for all zeros
  // The reference's expression: nearbyint(clamp(0 - lo / scale, 0, 255)).
  q.zeroPoint = q.scale != 0
                    ? static_cast<uint8_t>(std::nearbyint(std::min(std::max(0.0f - lo / q.scale, 0.0f), 255.0f)))
                    : 0;
  return q;
}

void quantizeU8(const float* x, int64_t n, const DynamicQuantization& q, uint8_t* y) {
  if (q.scale == 0) {
    std::fill(y, y + n, uint8_t{0});
    return;
  }
  quantizeRange<false>(x, n, q.scale, static_cast<float>(q.zeroPoint), y);
}

void quantizeLinear(const float* x, int64_t n, float scale, int32_t zeroPoint, bool isSigned, void* y) {
  if (isSigned)
    quantizeRange<true>(x, n, scale, static_cast<float>(zeroPoint), y);
  else
    quantizeRange<false>(x, n, scale, static_cast<float>(zeroPoint), y);
}

}  // namespace collage::onednn
