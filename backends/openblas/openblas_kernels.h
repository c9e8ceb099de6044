// The OpenBLAS kernels: one per anchor op (Gemm, MatMul, Conv), each running
// cblas_sgemm and then the group's epilogue (openblas_epilogue.h). They hold
// only resolved numbers, owned constants and workspaces: the lowering in
// openblas_backend.cc does all the deciding at compile time.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/openblas/openblas_epilogue.h"
#include "core/runtime/backend.h"
#include "core/ops/conv_geometry.h"

namespace collage::openblas {

// What every kernel shares: the epilogue, which output receives the anchor's
// result, and the thread count fixed at compile time.
class BlasKernel : public Kernel {
 public:
  BlasKernel(Epilogue epilogue, int anchorOutput, int threads)
      : epilogue_(std::move(epilogue)), anchorOutput_(anchorOutput), threads_(threads) {}

 protected:
  // Binds the epilogue's buffers for this run and returns the anchor's buffer.
  float* prepare(const std::vector<const DLTensor*>& inputs, const std::vector<DLTensor*>& outputs);

  Epilogue epilogue_;
  int anchorOutput_;
  int threads_;
  Epilogue::Buffers buffers_;
};

// Gemm: Y = alpha * op(A) * op(B); beta * C is an epilogue step.
struct GemmParams {
  bool transA = false, transB = false;
  int64_t M = 0, N = 0, K = 0;
  int64_t lda = 0, ldb = 0;
  float alpha = 1.0f;
  OperandSource a, b;
};

class GemmKernel : public BlasKernel {
 public:
  GemmKernel(GemmParams p, Epilogue epilogue, int anchorOutput, int threads)
      : BlasKernel(std::move(epilogue), anchorOutput, threads), p_(std::move(p)) {}
  void run(const std::vector<const DLTensor*>& inputs,
           const std::vector<DLTensor*>& outputs) override;

 private:
  GemmParams p_;
};

// MatMul with numpy semantics. When B has no batch (a weight matrix), A's
// batch folds into M and the whole op is one sgemm; otherwise one sgemm per
// output matrix, with A's and B's matrix index for each precomputed.
struct MatMulParams {
  int64_t M = 0, N = 0, K = 0;
  bool fold = false;  // one sgemm of (foldedRows x N x K)
  int64_t foldedRows = 0;
  std::vector<int64_t> matrixA, matrixB;  // per output matrix (when !fold)
  bool parallelBatch = false;             // one matrix per thread instead of threaded sgemm
  OperandSource a, b;
};

class MatMulKernel : public BlasKernel {
 public:
  MatMulKernel(MatMulParams p, Epilogue epilogue, int anchorOutput, int threads)
      : BlasKernel(std::move(epilogue), anchorOutput, threads), p_(std::move(p)) {}
  void run(const std::vector<const DLTensor*>& inputs,
           const std::vector<DLTensor*>& outputs) override;

 private:
  MatMulParams p_;
};

// Conv (1 to 3 spatial dimensions, run as 3D): per image and group, im2col
// into a workspace and one sgemm W_g[Cout/g, Cin/g*K] x col[Cin/g*K, P]; a
// pointwise conv multiplies the input directly. The bias is an epilogue step.
struct ConvParams {
  ConvGeometry geometry;  // expanded to 3 spatial dimensions
  int64_t inPerGroup = 0, outPerGroup = 0;
  int64_t kernelSize = 0, inSpatial = 0, outSpatial = 0;
  bool pointwise = false;
  bool parallelItems = false;  // (image, group) items spread over threads
  OperandSource x, w;
};

class ConvKernel : public BlasKernel {
 public:
  ConvKernel(ConvParams p, Epilogue epilogue, int anchorOutput, int threads);
  void run(const std::vector<const DLTensor*>& inputs,
           const std::vector<DLTensor*>& outputs) override;

 private:
  // Unfolds channels [c0, c1) of one group of one image (x at the group's
  // first channel) into rows of col.
  void im2col(const float* x, int64_t c0, int64_t c1, float* col) const;
  void item(const float* x, const float* w, float* y, int64_t image, int64_t group, float* col,
            int thread);

  ConvParams p_;
  std::vector<int64_t> owLo_, owHi_;  // per kw: output columns whose input column is inside
  int64_t colSize_ = 0;               // floats of one im2col matrix
  std::vector<float> workspace_;      // one col matrix per worker
};

}  // namespace collage::openblas
