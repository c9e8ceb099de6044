// Y[R rows][n columns] (+)= A[R rows][k0, k1) . B[k0, k1)[n columns], with
// AVX-512: the few-row product's inner block (native_gemv.h) and the decode
// attention's P . V (native_decode_attention.h) are the same thing. The
// columns go in tiles of 64 (the tail in 16s, its last vector masked); a
// tile's R x 4 accumulators stay in registers over B's rows, each B row is
// loaded once for the R rows, and every output column adds its terms in
// ascending k, one fused multiply-add each: the result does not depend on
// how the columns are split.
#pragma once

#if defined(__AVX512F__)

#include <immintrin.h>

#include <cstdint>

namespace collage::native {

// Columns [0, 16 * VC) of the tile, the last vector masked by `last`: load
// Y (or zeros when not `accumulate`), add B's rows [k0, k1), store.
template <int R, int VC>
__attribute__((always_inline)) inline void fmaTile(int64_t k0, int64_t k1, const float* a,
                                                   int64_t lda, const float* b, int64_t ldb,
                                                   float* y, int64_t ldy, __mmask16 last,
                                                   bool accumulate, int64_t prefetchRows) {
  __m512 acc[R][VC];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < VC; ++c)
      acc[r][c] = accumulate ? _mm512_maskz_loadu_ps(c == VC - 1 ? last : __mmask16(0xFFFF),
                                                     y + r * ldy + 16 * c)
                             : _mm512_setzero_ps();
  for (int64_t k = k0; k < k1; ++k) {
    __m512 bv[VC];
    if (prefetchRows > 0)
#pragma GCC unroll 4
      for (int c = 0; c < VC; ++c)
        _mm_prefetch(reinterpret_cast<const char*>(b + (k + prefetchRows) * ldb + 16 * c),
                     _MM_HINT_T0);
#pragma GCC unroll 4
    for (int c = 0; c < VC; ++c)
      bv[c] = _mm512_maskz_loadu_ps(c == VC - 1 ? last : __mmask16(0xFFFF), b + k * ldb + 16 * c);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + k]);
#pragma GCC unroll 4
      for (int c = 0; c < VC; ++c) acc[r][c] = _mm512_fmadd_ps(av, bv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < VC; ++c)
      _mm512_mask_storeu_ps(y + r * ldy + 16 * c, c == VC - 1 ? last : __mmask16(0xFFFF),
                            acc[r][c]);
}

// Every column of the R rows, in tiles of 64 columns and a masked tail.
// With prefetchRows > 0, B's row k + prefetchRows is prefetched as row k is
// read (B streamed from memory: the decode attention's V).
template <int R>
inline void fmaRows(int64_t k0, int64_t k1, int64_t n, const float* a, int64_t lda, const float* b,
                    int64_t ldb, float* y, int64_t ldy, bool accumulate, int64_t prefetchRows = 0) {
  int64_t j = 0;
  for (; j + 64 <= n; j += 64)
    fmaTile<R, 4>(k0, k1, a, lda, b + j, ldb, y + j, ldy, __mmask16(0xFFFF), accumulate,
                  prefetchRows);
  const int64_t rest = n - j;
  if (rest == 0) return;
  const __mmask16 last =
      rest % 16 ? static_cast<__mmask16>((1u << (rest % 16)) - 1) : __mmask16(0xFFFF);
  switch ((rest + 15) / 16) {
    case 1:
      fmaTile<R, 1>(k0, k1, a, lda, b + j, ldb, y + j, ldy, last, accumulate, prefetchRows);
      break;
    case 2:
      fmaTile<R, 2>(k0, k1, a, lda, b + j, ldb, y + j, ldy, last, accumulate, prefetchRows);
      break;
    default:
      fmaTile<R, 3>(k0, k1, a, lda, b + j, ldb, y + j, ldy, last, accumulate, prefetchRows);
      break;
  }
}

}  // namespace collage::native

#endif  // __AVX512F__
