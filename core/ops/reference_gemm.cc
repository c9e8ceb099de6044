#include "core/ops/reference_gemm.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace collage {

namespace {

// Floats per vector register of the target: the micro-kernel's vector type
// must match it (a 32-byte vector type on an SSE-only build is lowered
// through memory, ~100x slower).
#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
#elif defined(__AVX__)
constexpr int64_t kLanes = 8;
#else
constexpr int64_t kLanes = 4;
#endif
// Register tile: MR rows of A times NR columns of B held in MR * NR float
// accumulators, two vectors per row: 12 of the 16 vector registers of
// SSE/AVX2 (with AVX2, a 6 x 16 tile).
constexpr int64_t kMR = 6;
constexpr int64_t kNR = 2 * kLanes;
// Cache blocks: a KC x NR panel of B (16 KiB with AVX2) stays in L1 while it meets
// every MR-row panel of an MC x KC block of A (L2); a KC x NC block of B is
// reused across all of M.
constexpr int64_t kKC = 256;
constexpr int64_t kMC = 120;
constexpr int64_t kNC = 2048;

// Packs op(A)[i0 : i0 + mc, p0 : p0 + kc] * alpha into MR-row panels, each
// stored k-major (MR consecutive values per k). Rows past mc are zero.
void packA(bool transA, const float* A, int64_t lda, int64_t i0, int64_t p0, int64_t mc,
           int64_t kc, float alpha, float* out) {
  for (int64_t ir = 0; ir < mc; ir += kMR) {
    const int64_t mr = std::min(kMR, mc - ir);
    for (int64_t p = 0; p < kc; ++p) {
      float* dst = out + p * kMR;
      for (int64_t i = 0; i < mr; ++i) {
        const int64_t row = i0 + ir + i, col = p0 + p;
        dst[i] = alpha * (transA ? A[col * lda + row] : A[row * lda + col]);
      }
      for (int64_t i = mr; i < kMR; ++i) dst[i] = 0.0f;
    }
    out += kc * kMR;
  }
}

// Packs op(B)[p0 : p0 + kc, j0 : j0 + nc] into NR-column panels, each stored
// k-major (NR consecutive values per k). Columns past nc are zero.
void packB(bool transB, const float* B, int64_t ldb, int64_t p0, int64_t j0, int64_t kc,
           int64_t nc, float* out) {
  for (int64_t jr = 0; jr < nc; jr += kNR) {
    const int64_t nr = std::min(kNR, nc - jr);
    if (!transB && nr == kNR) {
      for (int64_t p = 0; p < kc; ++p) {
        const float* src = B + (p0 + p) * ldb + j0 + jr;
        float* dst = out + p * kNR;
        for (int64_t j = 0; j < kNR; ++j) dst[j] = src[j];
      }
    } else {
      for (int64_t p = 0; p < kc; ++p) {
        float* dst = out + p * kNR;
        for (int64_t j = 0; j < nr; ++j) {
          const int64_t row = p0 + p, col = j0 + jr + j;
          dst[j] = transB ? B[col * ldb + row] : B[row * ldb + col];
        }
        for (int64_t j = nr; j < kNR; ++j) dst[j] = 0.0f;
      }
    }
    out += kc * kNR;
  }
}

// The micro-kernel works on rows of NR floats as GCC/Clang vector types:
// written as plain loops, GCC's vectoriser shuffles and spills the tile
// (measured ~2x slower); with explicit vector values the tile stays in
// registers and a * b + c becomes an FMA where the target has one.
constexpr int64_t kVecPerRow = kNR / kLanes;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

// C[0:mr, 0:nr] += a-panel * b-panel over kc. The full MR x NR tile is
// computed (the panels are zero-padded); only the valid part is stored.
void microKernel(int64_t kc, const float* __restrict a, const float* __restrict b,
                 float* __restrict c, int64_t ldc, int64_t mr, int64_t nr) {
  Vec acc[kMR][kVecPerRow] = {};
  for (int64_t p = 0; p < kc; ++p) {
    Vec bv[kVecPerRow];
    for (int64_t v = 0; v < kVecPerRow; ++v)
      std::memcpy(&bv[v], b + p * kNR + v * kLanes, sizeof(Vec));
    for (int64_t i = 0; i < kMR; ++i) {
      const float ai = a[p * kMR + i];
      for (int64_t v = 0; v < kVecPerRow; ++v) acc[i][v] += ai * bv[v];
    }
  }
  float tile[kMR][kNR];
  std::memcpy(tile, acc, sizeof(tile));
  if (mr == kMR && nr == kNR) {
    for (int64_t i = 0; i < kMR; ++i)
      for (int64_t j = 0; j < kNR; ++j) c[i * ldc + j] += tile[i][j];
  } else {
    for (int64_t i = 0; i < mr; ++i)
      for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] += tile[i][j];
  }
}

// Dot product with 8 independent partial sums, so that it vectorises
// without reassociation flags.
float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float partial[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int l = 0; l < 8; ++l) partial[l] += a[k + l] * b[k + l];
  float sum = 0.0f;
  for (; k < n; ++k) sum += a[k] * b[k];
  for (float p : partial) sum += p;
  return sum;
}

// C (already scaled by beta) += alpha * op(A) * op(B) when op(A) is a single
// row (M == 1) or op(B) a single column (N == 1): a matrix-vector product,
// for which packing would cost more than the arithmetic (a classifier's
// Gemm at batch 1, a depthwise Conv's one output channel per group).
void gemv(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  std::vector<float> vec(static_cast<size_t>(K));
  if (M == 1) {
    for (int64_t k = 0; k < K; ++k) vec[k] = transA ? A[k * lda] : A[k];
    if (transB) {
      for (int64_t j = 0; j < N; ++j) C[j] += alpha * dot(vec.data(), B + j * ldb, K);
    } else {
      for (int64_t k = 0; k < K; ++k) {
        const float s = alpha * vec[k];
        const float* __restrict row = B + k * ldb;
        float* __restrict c = C;
        for (int64_t j = 0; j < N; ++j) c[j] += s * row[j];
      }
    }
    return;
  }
  // N == 1: C is a column with stride ldc.
  for (int64_t k = 0; k < K; ++k) vec[k] = transB ? B[k] : B[k * ldb];
  if (!transA) {
    for (int64_t i = 0; i < M; ++i) C[i * ldc] += alpha * dot(A + i * lda, vec.data(), K);
  } else {
    std::vector<float> acc(static_cast<size_t>(M), 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float s = vec[k];
      const float* __restrict row = A + k * lda;
      float* __restrict a = acc.data();
      for (int64_t i = 0; i < M; ++i) a[i] += s * row[i];
    }
    for (int64_t i = 0; i < M; ++i) C[i * ldc] += alpha * acc[i];
  }
}

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};

std::unique_ptr<float, AlignedFree> allocFloats(int64_t count) {
  size_t bytes = static_cast<size_t>(count) * sizeof(float);
  bytes = (bytes + 63) / 64 * 64;
  return std::unique_ptr<float, AlignedFree>(static_cast<float*>(std::aligned_alloc(64, bytes)));
}

}  // namespace

void referenceSgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                    float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  // C = beta * C first; the blocked loop then only accumulates.
  if (beta == 0.0f) {
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
  } else if (beta != 1.0f) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] *= beta;
  }
  if (K <= 0 || alpha == 0.0f) return;
  if (M == 1 || N == 1) {
    gemv(transA, transB, M, N, K, alpha, A, lda, B, ldb, C, ldc);
    return;
  }

  const int64_t mcMax = std::min(kMC, (M + kMR - 1) / kMR * kMR);
  const int64_t kcMax = std::min(kKC, K);
  const int64_t ncMax = std::min(kNC, (N + kNR - 1) / kNR * kNR);
  auto bufA = allocFloats(mcMax * kcMax);
  auto bufB = allocFloats(kcMax * ncMax);

  for (int64_t j0 = 0; j0 < N; j0 += kNC) {
    const int64_t nc = std::min(kNC, N - j0);
    for (int64_t p0 = 0; p0 < K; p0 += kKC) {
      const int64_t kc = std::min(kKC, K - p0);
      packB(transB, B, ldb, p0, j0, kc, nc, bufB.get());
      for (int64_t i0 = 0; i0 < M; i0 += kMC) {
        const int64_t mc = std::min(kMC, M - i0);
        packA(transA, A, lda, i0, p0, mc, kc, alpha, bufA.get());
        for (int64_t jr = 0; jr < nc; jr += kNR) {
          const int64_t nr = std::min(kNR, nc - jr);
          const float* bPanel = bufB.get() + (jr / kNR) * kc * kNR;
          for (int64_t ir = 0; ir < mc; ir += kMR) {
            const int64_t mr = std::min(kMR, mc - ir);
            microKernel(kc, bufA.get() + (ir / kMR) * kc * kMR, bPanel,
                        C + (i0 + ir) * ldc + j0 + jr, ldc, mr, nr);
          }
        }
      }
    }
  }
}

}  // namespace collage
