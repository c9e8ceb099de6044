// The two math modes the cuBLAS backends offer as separate measured
// choices, and the tolerance each one's results are checked with.
#pragma once

#include <cublas_api.h>

#include <string>

#include "core/ir/tensor_compare.h"

namespace collage::cublas {

enum class MathMode { Fp32, Tf32 };

std::string backendName(MathMode mode);   // "cublas", "cublas_tf32"
std::string mathModeName(MathMode mode);  // "fp32", "tf32"
cublasComputeType_t computeType(MathMode mode);

// FP32: rtol 1e-3, atol 1e-4, as every CPU backend's kernels are checked
// (products in IEEE fp32, only the summation order differs). TF32: inputs
// keep 10 mantissa bits (relative rounding 2^-11 ~ 4.9e-4 per operand), so a
// k-term dot product of values of order 1 errs by about 1e-3 * sqrt(k):
// rtol 1e-2, atol 2e-2 cover k up to a few hundred.
Tolerance mathModeTolerance(MathMode mode);

}  // namespace collage::cublas
