// How a MatMul or Gemm group maps onto one cuBLASLt matmul: pure logic, no
// CUDA, so it is unit-tested without a GPU and the pattern rule asks it.
//
//   MatMul|Gemm  ->  [Add(bias over the last axis)]  ->  [Relu | Gelu(tanh)]
//        A x B          CUBLASLT_EPILOGUE_BIAS            _RELU_BIAS / _GELU_BIAS
//
// cuBLASLt is column-major. A row-major [r, c] matrix read column-major is
// its transpose, so the row-major product D = A.B is computed as the
// column-major D^T = B^T.A^T: the library's first operand is B, its second
// A, and a bias over D's last axis is a bias over the rows of D^T, which is
// the one the epilogue adds. Batched MatMul (leading dimensions) becomes a
// strided batch, a broadcast operand having batch stride 0.
#pragma once

#include <cstdint>
#include <string>

#include "core/ir/graph.h"
#include "core/ir/node_set.h"

namespace collage::cublas {

enum class Epilogue { None, Bias, Relu, ReluBias, Gelu, GeluBias };
std::string epilogueName(Epilogue e);  // "relu_bias"

struct MatmulPlan {
  std::string refusal;  // non-empty: not one cuBLASLt call, and why

  // The row-major problem: D[batch][m][n] = alpha * op(A)[m][k] . op(B)[k][n] (+ beta*C) (+ bias).
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool transA = false, transB = false;         // Gemm's transA / transB
  int64_t lda = 0, ldb = 0;                    // row-major leading dimensions as stored
  int64_t batchStrideA = 0, batchStrideB = 0;  // 0: the operand is shared by every batch
  float alpha = 1.0f, beta = 0.0f;

  ValueId a = kNoValue, b = kNoValue;
  ValueId c = kNoValue;     // Gemm's full [m, n] C, added with beta (else kNoValue)
  ValueId bias = kNoValue;  // a vector of n added by the epilogue
  Epilogue epilogue = Epilogue::None;
  ValueId output = kNoValue;

  // "matmul 8x[64x32x16] transB bias relu"
  std::string toString() const;
};

MatmulPlan planMatmul(const Graph& graph, const NodeSet& nodes);

}  // namespace collage::cublas
