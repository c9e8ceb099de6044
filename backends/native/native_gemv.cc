// The few-row product (native_gemv.h): a block of B's rows at a time, the
// output's columns in registers.
#include "backends/native/native_gemv.h"

#include <immintrin.h>

#include <algorithm>

namespace collage::native {

namespace {

#if defined(__AVX512F__)
// Columns [0, 16 * VC) of MR rows (the last vector masked by `last`) over
// B's rows [k0, k1): load Y (or zeros at k0 == 0), add each row's terms in
// order, store.
template <int MR, int VC>
__attribute__((always_inline)) inline void columnTile(int64_t k0, int64_t k1, const float* a,
                                                      int64_t lda, const float* b, int64_t ldb,
                                                      float* y, int64_t ldy, __mmask16 last) {
  __m512 acc[MR][VC];
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int c = 0; c < VC; ++c)
      acc[m][c] = k0 == 0 ? _mm512_setzero_ps()
                          : _mm512_maskz_loadu_ps(c == VC - 1 ? last : __mmask16(0xFFFF),
                                                  y + m * ldy + 16 * c);
  for (int64_t k = k0; k < k1; ++k) {
    __m512 bv[VC];
#pragma GCC unroll 4
    for (int c = 0; c < VC; ++c)
      bv[c] = _mm512_maskz_loadu_ps(c == VC - 1 ? last : __mmask16(0xFFFF), b + k * ldb + 16 * c);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const __m512 av = _mm512_set1_ps(a[m * lda + k]);
#pragma GCC unroll 4
      for (int c = 0; c < VC; ++c) acc[m][c] = _mm512_fmadd_ps(av, bv[c], acc[m][c]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int c = 0; c < VC; ++c)
      _mm512_mask_storeu_ps(y + m * ldy + 16 * c, c == VC - 1 ? last : __mmask16(0xFFFF),
                            acc[m][c]);
}

// Every column of MR rows, B's rows [k0, k1): 64 columns a tile (16
// accumulators at MR = 4), the tail in 16s with a mask.
template <int MR>
void rowBlock(int64_t k0, int64_t k1, int64_t n, const float* a, int64_t lda, const float* b,
              int64_t ldb, float* y, int64_t ldy) {
  int64_t j = 0;
  for (; j + 64 <= n; j += 64)
    columnTile<MR, 4>(k0, k1, a, lda, b + j, ldb, y + j, ldy, __mmask16(0xFFFF));
  const int64_t rest = n - j;
  if (rest == 0) return;
  const __mmask16 last =
      rest % 16 ? static_cast<__mmask16>((1u << (rest % 16)) - 1) : __mmask16(0xFFFF);
  switch ((rest + 15) / 16) {
    case 1: columnTile<MR, 1>(k0, k1, a, lda, b + j, ldb, y + j, ldy, last); break;
    case 2: columnTile<MR, 2>(k0, k1, a, lda, b + j, ldb, y + j, ldy, last); break;
    default: columnTile<MR, 3>(k0, k1, a, lda, b + j, ldb, y + j, ldy, last); break;
  }
}

template <int MR>
void gemvFixed(int64_t n, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb,
               float* y, int64_t ldy) {
  for (int64_t k0 = 0; k0 < K; k0 += kGemvRowBlock)
    rowBlock<MR>(k0, std::min(K, k0 + kGemvRowBlock), n, a, lda, b, ldb, y, ldy);
}
#endif

}  // namespace

void gemvRows(int64_t M, int64_t n, int64_t K, const float* a, int64_t lda, const float* b,
              int64_t ldb, float* y, int64_t ldy) {
  if (M <= 0 || n <= 0) return;
  if (K <= 0) {
    for (int64_t m = 0; m < M; ++m) std::fill(y + m * ldy, y + m * ldy + n, 0.0f);
    return;
  }
#if defined(__AVX512F__)
  for (int64_t m0 = 0; m0 < M; m0 += kGemvMaxRows) {
    const float* am = a + m0 * lda;
    float* ym = y + m0 * ldy;
    switch (std::min<int64_t>(kGemvMaxRows, M - m0)) {
      case 1: gemvFixed<1>(n, K, am, lda, b, ldb, ym, ldy); break;
      case 2: gemvFixed<2>(n, K, am, lda, b, ldb, ym, ldy); break;
      case 3: gemvFixed<3>(n, K, am, lda, b, ldb, ym, ldy); break;
      default: gemvFixed<4>(n, K, am, lda, b, ldb, ym, ldy); break;
    }
  }
#else
  // Without AVX-512: the same order, row by row of B, the compiler's vectors.
  for (int64_t m = 0; m < M; ++m) {
    float* __restrict ym = y + m * ldy;
    std::fill(ym, ym + n, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float s = a[m * lda + k];
      const float* __restrict row = b + k * ldb;
      for (int64_t j = 0; j < n; ++j) ym[j] += s * row[j];
    }
  }
#endif
}

}  // namespace collage::native
