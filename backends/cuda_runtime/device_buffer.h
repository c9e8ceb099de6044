// Device memory owned by one object (cudaMalloc / cudaFree), and the
// upload of host constants that kernels take at compile time (weights,
// biases): compile() uploads them once, run() only computes.
#pragma once

#include <cstddef>

namespace collage {
class Tensor;
}

namespace collage::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // throws Error when cudaMalloc fails
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // A copy of a host tensor's bytes on the device.
  static DeviceBuffer upload(const Tensor& tensor);

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace collage::cuda
