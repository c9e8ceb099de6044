// The CUDA libraries' status codes turned into Errors that say which call
// failed and why. One overload per library, so a call site reads
// `check(cublasLtMatmul(...), "cublasLtMatmul")` whatever library it calls.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nvrtc.h>

namespace collage::cuda {

void check(cudaError_t status, const char* what);
void check(cublasStatus_t status, const char* what);
void check(cudnnStatus_t status, const char* what);
void check(nvrtcResult status, const char* what);

}  // namespace collage::cuda
