#include "backends/cublas/cublas_math_mode.h"

namespace collage::cublas {

std::string backendName(MathMode mode) { return mode == MathMode::Fp32 ? "cublas" : "cublas_tf32"; }

std::string mathModeName(MathMode mode) { return mode == MathMode::Fp32 ? "fp32" : "tf32"; }

cublasComputeType_t computeType(MathMode mode) {
  return mode == MathMode::Fp32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
}

Tolerance mathModeTolerance(MathMode mode) {
  return mode == MathMode::Fp32 ? Tolerance{1e-3, 1e-4} : Tolerance{1e-2, 2e-2};
}

}  // namespace collage::cublas
