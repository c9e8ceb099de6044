// The base of every CUDA backend's kernel: the computation is written once,
// against device pointers, and run() accepts either placement of its tensors.
//
//   device tensors (kDLCUDA)  the Session's device-aware path: no copy;
//   host tensors (kDLCPU)     the CPU-only Session and the measurer: each
//                             input is copied to a device buffer the kernel
//                             owns, the outputs copied back.
//
// Host staging keeps the CUDA backends usable by every caller that exists
// today; its copies are part of what the measurer then times, which is the
// honest cost of a GPU kernel inside a host-resident plan. run() returns once
// the host may read what it reads: after the copies back when it staged any;
// with device tensors only, at once (the stream orders the kernels, and the
// next launch overlaps this one). A measurement synchronizes after each run,
// so a measured time is the whole work.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "backends/cuda_runtime/device_buffer.h"
#include "core/runtime/backend.h"

namespace collage::cuda {

class DeviceKernel : public Kernel {
 public:
  void run(const std::vector<const DLTensor*>& inputs, const std::vector<DLTensor*>& outputs) final;

 protected:
  // Pointers to device memory in KernelRequest order; work is queued on `stream`.
  virtual void runOnDevice(const std::vector<const void*>& inputs,
                           const std::vector<void*>& outputs, cudaStream_t stream) = 0;

 private:
  std::vector<DeviceBuffer> stagedInputs_;
  std::vector<DeviceBuffer> stagedOutputs_;
};

// Bytes of a compact DLTensor.
size_t dlBytes(const DLTensor& t);

}  // namespace collage::cuda
