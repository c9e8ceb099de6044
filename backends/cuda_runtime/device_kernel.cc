#include "backends/cuda_runtime/device_kernel.h"

#include "backends/cuda_runtime/cuda_status.h"

namespace collage::cuda {

size_t dlBytes(const DLTensor& t) {
  size_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= static_cast<size_t>(t.shape[i]);
  return n * ((t.dtype.bits * t.dtype.lanes + 7) / 8);
}

namespace {
bool onHost(const DLTensor& t) {
  return t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost;
}
void ensureSize(DeviceBuffer& buffer, size_t bytes) {
  if (buffer.bytes() != bytes) buffer = DeviceBuffer(bytes);
}
}  // namespace

void DeviceKernel::run(const std::vector<const DLTensor*>& inputs,
                       const std::vector<DLTensor*>& outputs) {
  stagedInputs_.resize(inputs.size());
  stagedOutputs_.resize(outputs.size());
  const cudaStream_t stream = nullptr;  // the legacy default stream
  std::vector<const void*> in(inputs.size());
  std::vector<void*> out(outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DLTensor& t = *inputs[i];
    const char* base = static_cast<const char*>(t.data) + t.byte_offset;
    if (!onHost(t)) {
      in[i] = base;
      continue;
    }
    ensureSize(stagedInputs_[i], dlBytes(t));
    check(cudart().cudaMemcpyAsync(stagedInputs_[i].data(), base, dlBytes(t),
                                   cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync(input to device)");
    in[i] = stagedInputs_[i].data();
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    DLTensor& t = *outputs[i];
    char* base = static_cast<char*>(t.data) + t.byte_offset;
    if (!onHost(t)) {
      out[i] = base;
      continue;
    }
    ensureSize(stagedOutputs_[i], dlBytes(t));
    out[i] = stagedOutputs_[i].data();
  }
  runOnDevice(in, out, stream);
  // The host must wait only for what it reads: an output staged back to it,
  // or a pinned input the copy may still be reading (a pageable one was read
  // before cudaMemcpyAsync returned). Between device kernels nothing waits:
  // the stream orders them, and the next launch overlaps this one, as a
  // framework's eager mode does. Whoever reads device memory on the host
  // synchronizes (DeviceRuntime::copyToHost, the Session's end, a measurement).
  bool hostWaits = false;
  for (const DLTensor* t : inputs) hostWaits = hostWaits || t->device.device_type == kDLCUDAHost;
  for (size_t i = 0; i < outputs.size(); ++i) {
    DLTensor& t = *outputs[i];
    if (!onHost(t)) continue;
    check(cudart().cudaMemcpyAsync(static_cast<char*>(t.data) + t.byte_offset,
                                   stagedOutputs_[i].data(), dlBytes(t), cudaMemcpyDeviceToHost,
                                   stream),
          "cudaMemcpyAsync(output to host)");
    hostWaits = true;
  }
  if (hostWaits) check(cudart().cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

}  // namespace collage::cuda
