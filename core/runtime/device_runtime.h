// What the Session needs from a device other than the host: memory and
// copies. A backend that runs on a GPU hands one out (Backend::deviceRuntime);
// the CUDA backends implement it with the CUDA runtime
// (backends/cuda_runtime/cuda_device_runtime.h), and the unit tests with a
// fake device whose "device memory" is separate host memory, so the Session's
// device logic is tested without a GPU. Core never includes a device header.
//
// Ordering: copies and kernels on one device run in the order they are
// issued (CUDA's default stream). copyToHost returns when the bytes are on
// the host, so a host kernel may read them next; copyToDevice may return
// before the copy ends, and a kernel issued after it sees the bytes.
// synchronize() waits for everything issued so far.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <string>

#include "core/ir/device.h"

namespace collage {

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual Device device() const = 0;

  // Device memory of at least `bytes` bytes (non-null, even for 0 bytes);
  // throws Error when the device has no room.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* deviceMemory) noexcept = 0;

  virtual void copyToDevice(void* deviceDst, const void* hostSrc, size_t bytes) = 0;
  virtual void copyToHost(void* hostDst, const void* deviceSrc, size_t bytes) = 0;
  virtual void synchronize() = 0;

  // What copy measurements are keyed by beside the machine (the GPU's name,
  // driver, runtime version): a copy time taken on another device is never
  // reused.
  virtual std::string fingerprint() const = 0;
};

// The DLPack device a kernel sees for a tensor on `device`.
DLDevice toDLDevice(const Device& device);

}  // namespace collage
