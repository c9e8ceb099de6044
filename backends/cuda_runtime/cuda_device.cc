#include "backends/cuda_runtime/cuda_device.h"

#include "backends/cuda_runtime/cuda_libraries.h"

namespace collage::cuda {

const std::string& unavailableReason() {
  static const std::string reason = [] {
    if (const std::string& missing = loadError(Library::Runtime); !missing.empty())
      return "no CUDA runtime: " + missing;
    int count = 0;
    const cudaError_t status = cudart().cudaGetDeviceCount(&count);
    if (status != cudaSuccess)
      return std::string("no CUDA device (cudaGetDeviceCount: ") +
             cudart().cudaGetErrorName(status) + ", " + cudart().cudaGetErrorString(status) + ")";
    if (count == 0) return std::string("no CUDA device (cudaGetDeviceCount found none)");
    return std::string();
  }();
  return reason;
}

std::string unavailableReason(const std::vector<Library>& needed) {
  // The libraries first: without them the device question cannot be asked,
  // and a missing library is what the user has to install.
  if (std::string missing = missingLibrary(needed); !missing.empty()) return missing;
  return unavailableReason();
}

std::string libraryVersions() {
  // Each as loaded; "missing" for one that did not load, so a fingerprint
  // never claims a version that is not there.
  const auto version = [](Library library, const auto& read) {
    return loadError(library).empty() ? read() : std::string("missing");
  };
  return "cudart=" +
         version(Library::Runtime,
                 [] {
                   int v = 0;
                   cudart().cudaRuntimeGetVersion(&v);
                   return std::to_string(v);
                 }) +
         ";cublasLt=" +
         version(Library::BlasLt, [] { return std::to_string(cublasLt().cublasLtGetVersion()); }) +
         ";cudnn=" +
         version(Library::Dnn, [] { return std::to_string(cudnn().cudnnGetVersion()); }) +
         ";nvrtc=" + version(Library::Rtc, [] {
           int major = 0, minor = 0;
           nvrtc().nvrtcVersion(&major, &minor);
           return std::to_string(major) + "." + std::to_string(minor);
         });
}

GpuFingerprint currentGpuFingerprint() {
  GpuFingerprint f;
  f.libraries = libraryVersions();
  if (!loadError(Library::Runtime).empty()) return f;
  cudart().cudaDriverGetVersion(&f.driverVersion);
  if (!deviceAvailable()) return f;
  cudaDeviceProp prop{};
  if (cudart().cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return f;
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
      if (cudart().cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) ==
              cudaSuccess &&
          cudart().cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) ==
              cudaSuccess)
        return "compute_" + std::to_string(major) + std::to_string(minor);
    }
    return std::string("compute_75");
  }();
  return arch;
}

}  // namespace collage::cuda
