// The attention kernel's inner products: small, skinny products (K = D =
// 64 for the scores, N = Dv = 64 for P·V) read in place from the heads'
// strides, once per (query block, key block), by OpenBLAS or by an AVX-512
// microkernel.
#pragma once

#include <cstdint>

namespace collage::native {

// How the inner products run: chosen by measurement. Both products are
// small and skinny (K = D = 64 for the scores, N = Dv = 64 for P·V), read
// in place from the heads' strides, once per (query block, key block). Two
// ways were measured in the whole kernel, interleaved, at 2 threads on Zen 4
// (bench/attention/compare.sh; bench/attention/README.md has the rounds):
// cblas_sgemm of OpenBLAS 0.3.21 was 2.5 % faster than the AVX-512
// microkernel below on BERT-base and GPT-2 and ~14 % on ViT-B/16 (paired
// medians), its Cooperlake kernel packing both operands better than our
// unpacked 8x32 tiles use the L1. Its OpenMP build runs single-threaded
// inside our parallel region (num_cpu_avail() is 1 when omp_in_parallel();
// checked: 2 threads each calling a 256^3 sgemm in a region reach 198
// GFLOP/s together, the 2-thread 2048^3 peak). The microkernel stays for a
// transposed operand OpenBLAS cannot take (neither stride 1) and for
// re-measuring: COLLAGE_NATIVE_ATTENTION_GEMM=microkernel.
enum class InnerProduct { Microkernel, OpenBlas };

InnerProduct innerProductFromEnvironment();

// A[r][k] at a[r * rsa + k * csa]: the kernels broadcast one element of A
// at a time, so a transposed A costs nothing.
struct MatA {
  const float* a;
  int64_t rsa, csa;
};

// C[M×N] (= or +=) A[M×K]·B[K×N]; B and C row-major with leading dimensions.
void gemm(InnerProduct how, int64_t M, int64_t N, int64_t K, MatA A, const float* B, int64_t ldb, float* C,
          int64_t ldc, bool acc);

}  // namespace collage::native
