#include "backends/cuda_runtime/cuda_device_runtime.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "backends/cuda_runtime/cuda_device.h"
#include "backends/cuda_runtime/cuda_status.h"
#include "core/ir/error.h"

namespace collage::cuda {

namespace {
// The legacy default stream: what DeviceKernel launches on.
const cudaStream_t kStream = nullptr;
}  // namespace

void* CudaDeviceRuntime::allocate(size_t bytes) {
  if (!deviceAvailable()) throw Error("cannot allocate on cuda:0: " + unavailableReason());
  void* memory = nullptr;
  // cudaMalloc(0) may give null; every allocation needs its own address.
  check(cudart().cudaMalloc(&memory, std::max<size_t>(bytes, 1)), "cudaMalloc");
  return memory;
}

void CudaDeviceRuntime::release(void* deviceMemory) noexcept {
  if (deviceMemory) cudart().cudaFree(deviceMemory);
}

void CudaDeviceRuntime::copyToDevice(void* deviceDst, const void* hostSrc, size_t bytes) {
  if (bytes == 0) return;
  check(cudart().cudaMemcpyAsync(deviceDst, hostSrc, bytes, cudaMemcpyHostToDevice, kStream),
        "cudaMemcpyAsync (host to cuda:0)");
}

void CudaDeviceRuntime::copyToHost(void* hostDst, const void* deviceSrc, size_t bytes) {
  if (bytes == 0) return;
  check(cudart().cudaMemcpyAsync(hostDst, deviceSrc, bytes, cudaMemcpyDeviceToHost, kStream),
        "cudaMemcpyAsync (cuda:0 to host)");
  check(cudart().cudaStreamSynchronize(kStream), "cudaStreamSynchronize");
}

void CudaDeviceRuntime::synchronize() {
  check(cudart().cudaStreamSynchronize(kStream), "cudaStreamSynchronize");
}

std::string CudaDeviceRuntime::fingerprint() const { return currentGpuFingerprint().toString(); }

CudaDeviceRuntime& sharedDeviceRuntime() {
  static CudaDeviceRuntime runtime;
  return runtime;
}

}  // namespace collage::cuda
