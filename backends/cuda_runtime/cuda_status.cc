#include "backends/cuda_runtime/cuda_status.h"

#include <string>

#include "core/ir/error.h"

namespace collage::cuda {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(std::string(what) + ": " + cudart().cudaGetErrorName(status) + " (" +
                cudart().cudaGetErrorString(status) + ")");
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(status)));
}

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw Error(std::string(what) + ": " + cudnn().cudnnGetErrorString(status));
}

void check(nvrtcResult status, const char* what) {
  if (status != NVRTC_SUCCESS)
    throw Error(std::string(what) + ": " + nvrtc().nvrtcGetErrorString(status));
}

}  // namespace collage::cuda
