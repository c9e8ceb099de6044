// A single-threaded sgemm for the reference kernels (Conv, ConvTranspose,
// Gemm, MatMul). Core links no BLAS library, yet the reference executor must
// run a ResNet-50 in seconds, so this is a cache-blocked GEMM in the GotoBLAS
// style (packed panels of A and B, a 6 x 16 register-tiled micro-kernel
// written with GCC/Clang vector types, no intrinsics, so the compiler picks
// the instructions: FMA on AVX2) rather than a triple loop. Row or column
// vectors (M == 1 or N == 1) skip the packing. Accumulation is in float.
#pragma once

#include <cstdint>

namespace collage {

// Row-major C = alpha * op(A) * op(B) + beta * C, with op(A) of M x K and
// op(B) of K x N. A is stored M x K (row stride lda) when !transA and K x M
// when transA; likewise B is K x N (ldb) or N x K. C is M x N (row stride
// ldc). With beta == 0, C is not read (NaNs in it do not propagate), as BLAS
// specifies. Any of M, N, K may be 0.
void referenceSgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                    float* C, int64_t ldc);

}  // namespace collage
