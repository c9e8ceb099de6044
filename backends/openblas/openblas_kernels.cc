#include "backends/openblas/openblas_kernels.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

namespace collage::openblas {

namespace {

// im2col matrices smaller than this are unfolded on one thread.
constexpr int64_t kParallelIm2colFloats = 64 * 1024;

blasint ld(int64_t v) { return static_cast<blasint>(std::max<int64_t>(1, v)); }

// Row-major C[M,N] = op(A) * op(B) with beta 0 (C is not read).
void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: BLAS would leave C as beta * C, which we never read
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
    return;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
              ld(lda), B, ld(ldb), 0.0f, C, ld(ldc));
}

}  // namespace

float* BlasKernel::prepare(const std::vector<const DLTensor*>& inputs,
                           const std::vector<DLTensor*>& outputs) {
  // The OpenMP build of OpenBLAS sizes its parallel regions from the calling
  // thread's OpenMP setting, which is per thread: a kernel compiled on one
  // thread and run on another must set it again.
  if (omp_get_max_threads() != threads_ && !omp_in_parallel()) openblas_set_num_threads(threads_);
  epilogue_.bind(buffers_, inputs, outputs);
  buffers_.anchor = outputData(outputs[static_cast<size_t>(anchorOutput_)]);
  return buffers_.anchor;
}

// ---- Gemm ----

void GemmKernel::run(const std::vector<const DLTensor*>& inputs,
                     const std::vector<DLTensor*>& outputs) {
  float* y = prepare(inputs, outputs);
  sgemm(p_.transA, p_.transB, p_.M, p_.N, p_.K, p_.alpha, p_.a.data(inputs), p_.lda,
        p_.b.data(inputs), p_.ldb, y, p_.N);
  epilogue_.run(buffers_, 0, p_.M * p_.N);
}

// ---- MatMul ----

void MatMulKernel::run(const std::vector<const DLTensor*>& inputs,
                       const std::vector<DLTensor*>& outputs) {
  float* y = prepare(inputs, outputs);
  const float* a = p_.a.data(inputs);
  const float* b = p_.b.data(inputs);
  if (p_.fold) {
    sgemm(false, false, p_.foldedRows, p_.N, p_.K, 1.0f, a, p_.K, b, p_.N, y, p_.N);
    epilogue_.run(buffers_, 0, p_.foldedRows * p_.N);
    return;
  }
  const int64_t mk = p_.M * p_.K, kn = p_.K * p_.N, mn = p_.M * p_.N;
  const int64_t count = static_cast<int64_t>(p_.matrixA.size());
  if (p_.parallelBatch) {
    // Inside the parallel region OpenBLAS runs single-threaded: one whole
    // product per thread beats splitting small products across threads.
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < count; ++i) {
      sgemm(false, false, p_.M, p_.N, p_.K, 1.0f, a + p_.matrixA[i] * mk, p_.K,
            b + p_.matrixB[i] * kn, p_.N, y + i * mn, p_.N);
      epilogue_.runOnThread(buffers_, i * mn, (i + 1) * mn, omp_get_thread_num());
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    sgemm(false, false, p_.M, p_.N, p_.K, 1.0f, a + p_.matrixA[i] * mk, p_.K,
          b + p_.matrixB[i] * kn, p_.N, y + i * mn, p_.N);
    epilogue_.run(buffers_, i * mn, (i + 1) * mn);
  }
}

// ---- Conv ----

ConvKernel::ConvKernel(ConvParams p, Epilogue epilogue, int anchorOutput, int threads)
    : BlasKernel(std::move(epilogue), anchorOutput, threads), p_(std::move(p)) {
  const ConvGeometry& g = p_.geometry;
  const int64_t IW = g.inputSpatial[2], OW = g.outputSpatial[2], SW = g.strides[2];
  for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
    const int64_t offW = kw * g.dilations[2] - g.padsBegin[2];
    int64_t lo = 0;
    while (lo < OW && lo * SW + offW < 0) ++lo;
    int64_t hi = OW;
    while (hi > lo && (hi - 1) * SW + offW >= IW) --hi;
    owLo_.push_back(lo);
    owHi_.push_back(hi);
  }
  colSize_ = p_.pointwise ? 0 : p_.inPerGroup * p_.kernelSize * p_.outSpatial;
  const int workers = p_.parallelItems ? threads_ : 1;
  workspace_.assign(static_cast<size_t>(workers) * static_cast<size_t>(colSize_), 0.0f);
}

// col[(c * K + tap) * P + outPos] = x[c, outPos * stride - pad + tap * dilation]
// (0 outside the input), for c in [c0, c1).
void ConvKernel::im2col(const float* x, int64_t c0, int64_t c1, float* col) const {
  const ConvGeometry& g = p_.geometry;
  const int64_t ID = g.inputSpatial[0], IH = g.inputSpatial[1], IW = g.inputSpatial[2];
  const int64_t OD = g.outputSpatial[0], OH = g.outputSpatial[1], OW = g.outputSpatial[2];
  const int64_t KD = g.kernel[0], KH = g.kernel[1], KW = g.kernel[2];
  const int64_t SW = g.strides[2];
  for (int64_t c = c0; c < c1; ++c) {
    const float* xc = x + c * p_.inSpatial;
    float* dst = col + c * p_.kernelSize * p_.outSpatial;
    for (int64_t kd = 0; kd < KD; ++kd)
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw) {
          const int64_t offW = kw * g.dilations[2] - g.padsBegin[2];
          const int64_t lo = owLo_[kw], hi = owHi_[kw];
          for (int64_t od = 0; od < OD; ++od) {
            const int64_t id = od * g.strides[0] - g.padsBegin[0] + kd * g.dilations[0];
            for (int64_t oh = 0; oh < OH; ++oh, dst += OW) {
              const int64_t ih = oh * g.strides[1] - g.padsBegin[1] + kh * g.dilations[1];
              if (id < 0 || id >= ID || ih < 0 || ih >= IH) {
                std::fill(dst, dst + OW, 0.0f);
                continue;
              }
              const float* row = xc + (id * IH + ih) * IW;
              std::fill(dst, dst + lo, 0.0f);
              if (SW == 1) {
                if (hi > lo)
                  std::memcpy(dst + lo, row + lo + offW,
                              static_cast<size_t>(hi - lo) * sizeof(float));
              } else {
                for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = row[ow * SW + offW];
              }
              std::fill(dst + std::max(lo, hi), dst + OW, 0.0f);
            }
          }
        }
  }
}

void ConvKernel::item(const float* x, const float* w, float* y, int64_t image, int64_t group,
                      float* col, int thread) {
  const ConvGeometry& g = p_.geometry;
  const int64_t P = p_.outSpatial, depth = p_.inPerGroup * p_.kernelSize;
  const float* xg = x + (image * g.inChannels + group * p_.inPerGroup) * p_.inSpatial;
  const float* wg = w + group * p_.outPerGroup * depth;
  const int64_t yOffset = (image * g.outChannels + group * p_.outPerGroup) * P;
  const float* b = xg;
  if (!p_.pointwise) {
    if (thread < 0 && colSize_ >= kParallelIm2colFloats && threads_ > 1) {
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (int64_t c = 0; c < p_.inPerGroup; ++c) im2col(xg, c, c + 1, col);
    } else {
      im2col(xg, 0, p_.inPerGroup, col);
    }
    b = col;
  }
  sgemm(false, false, p_.outPerGroup, P, depth, 1.0f, wg, depth, b, P, y + yOffset, P);
  const int64_t end = yOffset + p_.outPerGroup * P;
  if (thread < 0)
    epilogue_.run(buffers_, yOffset, end);
  else
    epilogue_.runOnThread(buffers_, yOffset, end, thread);
}

void ConvKernel::run(const std::vector<const DLTensor*>& inputs,
                     const std::vector<DLTensor*>& outputs) {
  float* y = prepare(inputs, outputs);
  const float* x = p_.x.data(inputs);
  const float* w = p_.w.data(inputs);
  const int64_t groups = p_.geometry.group;
  const int64_t items = p_.geometry.batch * groups;
  if (p_.parallelItems) {
#pragma omp parallel for num_threads(threads_) schedule(static)
    for (int64_t i = 0; i < items; ++i) {
      const int t = omp_get_thread_num();
      item(x, w, y, i / groups, i % groups, workspace_.data() + t * colSize_, t);
    }
    return;
  }
  for (int64_t i = 0; i < items; ++i) item(x, w, y, i / groups, i % groups, workspace_.data(), -1);
}

}  // namespace collage::openblas
