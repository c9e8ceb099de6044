#include "backends/cuda_runtime/device_buffer.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "backends/cuda_runtime/cuda_status.h"
#include "core/ir/tensor.h"

namespace collage::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) check(cudart().cudaMalloc(&data_, bytes), "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudart().cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudart().cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer DeviceBuffer::upload(const Tensor& tensor) {
  DeviceBuffer buffer(tensor.byteSize());
  if (buffer.bytes() > 0)
    check(cudart().cudaMemcpy(buffer.data(), tensor.raw(), buffer.bytes(), cudaMemcpyHostToDevice),
          "cudaMemcpy(constant upload)");
  return buffer;
}

}  // namespace collage::cuda
