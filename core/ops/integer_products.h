// The integer products behind the reference kernels of MatMulInteger,
// ConvInteger, QLinearMatMul and QLinearConv: sums of
// (a - a_zero_point) * (b - b_zero_point), exact.
//
// Why not a plain loop: the reference executor checks every plan of a
// quantised model, and a naive 7-deep convolution loop in int64 ran at
// ~0.2 GOP/s (22.8 s for one 64-channel 3x3 ConvInteger at 256x256), so a
// U-Net at 1024x1024 could not be checked within the worker's limit.
//
// How, keeping it obviously exact:
//   - operands are centred (zero point subtracted) into int16: for uint8
//     and int8 alike |q - zero_point| <= 255;
//   - a convolution is unfolded (im2col) one block of output positions at a
//     time, so it becomes a matrix product per image and group:
//
//        acc[m][p] = sum_k  w[m][k]  *  col[k][p]
//                           |            |
//          k = (channel, kernel offset)  p = output position in the block
//
//   - the product is a plain loop over a tile of accumulators (4 rows x 128
//     columns) that the compiler vectorises, as reference_gemm.h does for
//     floats: no intrinsics, single-threaded like the rest of the reference.
// The accumulator is int32, as the ONNX spec's and ONNX Runtime's is, when
// K * max|a| * max|b| fits in int32: no partial sum can then overflow, so
// the result is the exact sum. Otherwise it is int64. Both give the same
// numbers as the int64 triple loop they replace (tests/unit/ops/integer_products_test.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "core/ir/tensor.h"
#include "core/ops/conv_geometry.h"

namespace collage {

// Which accumulator a product uses: the narrowest exact one, or int64
// always (for tests: both must agree).
enum class IntegerAccumulator { Exact, Int64 };

// The largest |q - zero_point| over every q of a quantised type (uint8 or
// int8), for the given zero points (empty: 0).
int64_t centredBound(ElementType type, const std::vector<int64_t>& zeroPoints);

// Whether a sum of K products with |a| <= aBound and |b| <= bBound is exact
// in int32 (no partial sum can pass INT32_MAX).
bool sumFitsInt32(int64_t K, int64_t aBound, int64_t bBound);

// C[M x N] = A[M x K] * B[K x N], all row-major with leading dimensions
// lda, ldb, ldc. Exact as long as the accumulator type holds every partial sum.
void integerGemm(int64_t M, int64_t N, int64_t K, const int16_t* A, int64_t lda, const int16_t* B,
                 int64_t ldb, int32_t* C, int64_t ldc);
void integerGemm(int64_t M, int64_t N, int64_t K, const int16_t* A, int64_t lda, const int16_t* B,
                 int64_t ldb, int64_t* C, int64_t ldc);

// acc[batch][i][j] of a matrix product of quantised a [..., M, K] and
// b [..., K, N] with numpy batch broadcasting, into the output shape ys.
// a's zero point is a scalar or one per row (M), b's a scalar or one per
// column (N); empty: 0.
std::vector<int64_t> matMulIntegerAcc(const Tensor& a, const Tensor& b, const std::vector<int64_t>& azp,
                                      const std::vector<int64_t>& bzp, const Shape& ys,
                                      IntegerAccumulator accumulator = IntegerAccumulator::Exact);

// acc[n][m][spatial...] of a grouped N-D convolution of quantised x and w
// with geometry g (ConvGeometry::conv); x's zero point is a scalar, w's a
// scalar or one per output channel; empty: 0.
std::vector<int64_t> convIntegerAcc(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                    const std::vector<int64_t>& xzp, const std::vector<int64_t>& wzp,
                                    IntegerAccumulator accumulator = IntegerAccumulator::Exact);

}  // namespace collage
