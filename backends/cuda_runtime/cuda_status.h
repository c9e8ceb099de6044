// The CUDA libraries' status codes turned into Errors that say which call
// failed and why. One overload per library, so a call site reads
// `check(cublasLt().cublasLtMatmul(...), "cublasLtMatmul")` whatever library it
// calls (the libraries' entry points: cuda_libraries.h).
#pragma once

#include "backends/cuda_runtime/cuda_libraries.h"

namespace collage::cuda {

void check(cudaError_t status, const char* what);
void check(cublasStatus_t status, const char* what);
void check(cudnnStatus_t status, const char* what);
void check(nvrtcResult status, const char* what);

}  // namespace collage::cuda
