#include "backends/cuda_runtime/cuda_device.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nvrtc.h>

namespace collage::cuda {

const std::string& unavailableReason() {
  static const std::string reason = [] {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess)
      return std::string("no CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(status) + ", " +
             cudaGetErrorString(status) + ")";
    if (count == 0) return std::string("no CUDA device (cudaGetDeviceCount found none)");
    return std::string();
  }();
  return reason;
}

std::string libraryVersions() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  int nvrtcMajor = 0, nvrtcMinor = 0;
  nvrtcVersion(&nvrtcMajor, &nvrtcMinor);
  return "cudart=" + std::to_string(runtime) + ";cublasLt=" + std::to_string(cublasLtGetVersion()) +
         ";cudnn=" + std::to_string(cudnnGetVersion()) + ";nvrtc=" + std::to_string(nvrtcMajor) +
         "." + std::to_string(nvrtcMinor);
}

GpuFingerprint currentGpuFingerprint() {
  GpuFingerprint f;
  f.libraries = libraryVersions();
  cudaDriverGetVersion(&f.driverVersion);
  if (!deviceAvailable()) return f;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return f;
  f.present = true;
  f.name = prop.name;
  f.computeMajor = prop.major;
  f.computeMinor = prop.minor;
  return f;
}

std::string GpuFingerprint::toString() const {
  if (!present) return "no device";
  return name + " (sm_" + std::to_string(computeMajor) + std::to_string(computeMinor) +
         ", driver " + std::to_string(driverVersion) + ", " + libraries + ")";
}

std::string targetArchitecture() {
  static const std::string arch = [] {
    if (deviceAvailable()) {
      int major = 0, minor = 0;
      if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess &&
          cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) == cudaSuccess)
        return "compute_" + std::to_string(major) + std::to_string(minor);
    }
    return std::string("compute_75");
  }();
  return arch;
}

}  // namespace collage::cuda
