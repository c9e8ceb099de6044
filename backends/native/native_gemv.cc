// The few-row product (native_gemv.h): a block of B's rows at a time, the
// output's columns in registers.
#include "backends/native/native_gemv.h"

#include <algorithm>

#include "backends/native/native_fma_tile.h"

namespace collage::native {

namespace {

#if defined(__AVX512F__)
template <int MR>
void gemvFixed(int64_t n, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb,
               float* y, int64_t ldy) {
  for (int64_t k0 = 0; k0 < K; k0 += kGemvRowBlock)
    fmaRows<MR>(k0, std::min(K, k0 + kGemvRowBlock), n, a, lda, b, ldb, y, ldy, k0 != 0);
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
