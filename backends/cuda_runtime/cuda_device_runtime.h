// The Session's DeviceRuntime for CUDA device 0, on the CUDA runtime: device
// memory from cudaMalloc, copies on the legacy default stream (the stream
// DeviceKernel launches on, so a copy and the kernels after it are ordered).
// One per process, shared by the CUDA backends, so values pass between
// cuDNN, cuBLASLt and generated kernels on the device without a copy.
#pragma once

#include "core/runtime/device_runtime.h"

namespace collage::cuda {

class CudaDeviceRuntime : public DeviceRuntime {
 public:
  Device device() const override { return Device{DeviceType::CUDA, 0}; }
  // Throws Error naming the call (and, without a device, why there is none).
  void* allocate(size_t bytes) override;
  void release(void* deviceMemory) noexcept override;
  // Pageable host memory: cudaMemcpyAsync returns once the source is staged,
  // so the caller may reuse it.
  void copyToDevice(void* deviceDst, const void* hostSrc, size_t bytes) override;
  // Returns when the bytes are on the host (the stream is synchronised).
  void copyToHost(void* hostDst, const void* deviceSrc, size_t bytes) override;
  void synchronize() override;
  // The GPU fingerprint: name, compute capability, driver, library versions.
  std::string fingerprint() const override;
};

// The process's runtime for device 0 (the CUDA backends' deviceRuntime()).
CudaDeviceRuntime& sharedDeviceRuntime();

}  // namespace collage::cuda
