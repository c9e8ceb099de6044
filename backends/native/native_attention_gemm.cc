#include "backends/native/native_attention_gemm.h"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace collage::native {

InnerProduct innerProductFromEnvironment() {
  const char* e = std::getenv("COLLAGE_NATIVE_ATTENTION_GEMM");
  return e && std::string(e) == "microkernel" ? InnerProduct::Microkernel : InnerProduct::OpenBlas;
}

namespace {

#if defined(__AVX512F__)
// C[MR×n] (= or +=) A[MR×K]·B[K×n], n <= 16 * NV: MR rows by NV zmm columns.
template <int MR, int NV>
__attribute__((always_inline)) inline void tile(int64_t K, MatA A, const float* B, int64_t ldb, float* C,
                                                  int64_t ldc, int64_t n, bool acc) {
  const __mmask16 m0 = n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
  const __mmask16 m1 = n >= 32 ? __mmask16(0xFFFF) : n <= 16 ? __mmask16(0) : __mmask16((1u << (n - 16)) - 1);
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    c0[r] = acc ? _mm512_maskz_loadu_ps(m0, C + r * ldc) : _mm512_setzero_ps();
    if constexpr (NV == 2) c1[r] = acc ? _mm512_maskz_loadu_ps(m1, C + r * ldc + 16) : _mm512_setzero_ps();
  }
  const float* a = A.a;
  for (int64_t k = 0; k < K; ++k, a += A.csa) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, B + k * ldb);
    const __m512 b1 = NV == 2 ? _mm512_maskz_loadu_ps(m1, B + k * ldb + 16) : b0;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * A.rsa]);
      c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
      if constexpr (NV == 2) c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(C + r * ldc, m0, c0[r]);
    if constexpr (NV == 2) _mm512_mask_storeu_ps(C + r * ldc + 16, m1, c1[r]);
  }
}
#endif

#if defined(__AVX512F__)
// One panel of n <= 16 * NV columns: tiles of 8 rows, then the rest.
template <int NV>
void columns(int64_t M, int64_t n, int64_t K, MatA A, const float* B, int64_t ldb, float* C, int64_t ldc,
             bool acc) {
  int64_t i = 0;
  for (; i + 8 <= M; i += 8) tile<8, NV>(K, {A.a + i * A.rsa, A.rsa, A.csa}, B, ldb, C + i * ldc, ldc, n, acc);
  const MatA a{A.a + i * A.rsa, A.rsa, A.csa};
  float* c = C + i * ldc;
  switch (M - i) {
    case 7: tile<7, NV>(K, a, B, ldb, c, ldc, n, acc); break;
    case 6: tile<6, NV>(K, a, B, ldb, c, ldc, n, acc); break;
    case 5: tile<5, NV>(K, a, B, ldb, c, ldc, n, acc); break;
    case 4: tile<4, NV>(K, a, B, ldb, c, ldc, n, acc); break;
    case 3: tile<3, NV>(K, a, B, ldb, c, ldc, n, acc); break;
    case 2: tile<2, NV>(K, a, B, ldb, c, ldc, n, acc); break;
    case 1: tile<1, NV>(K, a, B, ldb, c, ldc, n, acc); break;
    default: break;
  }
}
#endif

// C[M×N] (= or +=) A[M×K]·B[K×N]; B and C row-major with leading dimensions.
void microGemm(int64_t M, int64_t N, int64_t K, MatA A, const float* B, int64_t ldb, float* C, int64_t ldc,
               bool acc) {
#if defined(__AVX512F__)
  for (int64_t j = 0; j < N; j += 32) {
    const int64_t n = std::min<int64_t>(32, N - j);
    if (n <= 16) columns<1>(M, n, K, A, B + j, ldb, C + j, ldc, acc);
    else columns<2>(M, n, K, A, B + j, ldb, C + j, ldc, acc);
  }
#else
  // Portable: rows of C updated by rows of B (GCC vectorises the inner loop).
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    if (!acc) std::fill(c, c + N, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float a = A.a[i * A.rsa + k * A.csa];
      const float* b = B + k * ldb;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j];
    }
  }
#endif
}

}  // namespace

void gemm(InnerProduct how, int64_t M, int64_t N, int64_t K, MatA A, const float* B, int64_t ldb, float* C,
          int64_t ldc, bool acc) {
  if (how == InnerProduct::OpenBlas && (A.csa == 1 || A.rsa == 1)) {
    const bool transA = A.csa != 1;
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, CblasNoTrans, static_cast<blasint>(M),
                static_cast<blasint>(N), static_cast<blasint>(K), 1.0f, A.a,
                static_cast<blasint>(transA ? A.csa : A.rsa), B, static_cast<blasint>(ldb), acc ? 1.0f : 0.0f, C,
                static_cast<blasint>(ldc));
    return;
  }
  microGemm(M, N, K, A, B, ldb, C, ldc, acc);
}

}  // namespace collage::native
