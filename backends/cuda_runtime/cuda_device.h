// Whether this process can use a CUDA device, and what identifies the one it
// uses. Everything here works without a GPU and without a driver: the CUDA
// backends ask it before touching the device, and report the reason to the
// user instead of failing later.
#pragma once

#include <string>
#include <vector>

#include "backends/cuda_runtime/cuda_libraries.h"

namespace collage::cuda {

// Empty when device 0 can be used; otherwise why not, e.g. "no CUDA device
// (cudaGetDeviceCount: cudaErrorInsufficientDriver ...)". Asked once per
// process (the answer does not change while it runs).
const std::string& unavailableReason();
inline bool deviceAvailable() { return unavailableReason().empty(); }
// Empty when device 0 can be used and every library in `needed` loads;
// otherwise why not, a missing library first: "libcudnn.so.9 did not load
// (...)". What a backend reports when it cannot run here.
std::string unavailableReason(const std::vector<Library>& needed);

// What GPU measurements are keyed by, beside the CPU's HardwareFingerprint:
// the device's name and compute capability, the driver, and the versions of
// the libraries whose kernels are timed.
struct GpuFingerprint {
  bool present = false;
  std::string name;      // "NVIDIA H100 80GB HBM3"
  int computeMajor = 0;  // 9 for sm_90
  int computeMinor = 0;
  int driverVersion = 0;  // cudaDriverGetVersion: 13000 for 13.0; 0 without a driver
  std::string libraries;  // libraryVersions()
  // "no device" without one; else "NVIDIA H100 (sm_90, driver 13000, cudart=13000;...)".
  std::string toString() const;
};
GpuFingerprint currentGpuFingerprint();

// "cudart=13000;cublasLt=130000;cudnn=91900;nvrtc=13.0": the versions of the
// libraries as loaded (not as compiled against), read without a device.
std::string libraryVersions();

// The virtual architecture NVRTC compiles for: the device's compute
// capability when there is one ("compute_90"), else the oldest that this
// NVRTC supports, whose PTX any newer driver can JIT ("compute_75").
std::string targetArchitecture();

}  // namespace collage::cuda
