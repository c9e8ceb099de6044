#include "core/ops/reference_gemm.h"

#include <algorithm>
#include <cstring>
#include <memory>

namespace collage {

namespace {

// Register tile: MR rows of A times NR columns of B held in MR * NR float
// accumulators. 6 x 16 fills 12 of AVX2's 16 vector registers (2 per row);
// on narrower targets the compiler splits the rows, which is still correct.
constexpr int64_t kMR = 6;
constexpr int64_t kNR = 16;
// Cache blocks: a KC x NR panel of B (16 KiB) stays in L1 while it meets
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
// written as plain loops, GCC's vectoriser shuffles and spills the 6 x 16
// tile (measured ~2x slower); with explicit vector values the tile stays in
// registers and a * b + c becomes an FMA where the target has one. The code
// is still portable C++ (the vector extension lowers to scalar code on a
// target without SIMD).
constexpr int64_t kLanes = 8;
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
