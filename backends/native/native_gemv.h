// A few rows times a weight matrix, Y[M x n] = A[M x K] . B[K x n] for
// M <= kGemvMaxRows: the decode step's projections and MLP at one token (or
// the few of speculative decoding). Their cost is reading B once; packing B
// into panels, as a blocked sgemm does, would read it twice.
//
// How it reads B: rows of B in blocks of kGemvRowBlock, the block's rows
// streamed along the columns together (that many concurrent streams, each
// a long contiguous run the hardware prefetcher follows), the output's
// columns held in registers over the block. Each output column sums over K
// in ascending order, one fused multiply-add a term, as the reference
// sgemm's row-vector path does: the same values however the columns are
// split across threads (MatMulStep splits them in contiguous ranges).
#pragma once

#include <cstdint>

namespace collage::native {

constexpr int64_t kGemvMaxRows = 4;
constexpr int64_t kGemvRowBlock = 8;

// Y[m][j] = sum_k A[m][k] B[k][j] for m < M (<= kGemvMaxRows), j in
// [0, n); row strides lda, ldb, ldy, columns contiguous. B's rows start at
// `b` (a column range of a wider matrix is b + col0, ldb its width).
void gemvRows(int64_t M, int64_t n, int64_t K, const float* a, int64_t lda, const float* b,
              int64_t ldb, float* y, int64_t ldy);

}  // namespace collage::native
