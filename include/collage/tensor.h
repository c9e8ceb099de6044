// A tensor the library hands out (a Session's output): it owns a
// DLManagedTensor, so the memory the Session wrote is passed on without a
// copy, to the caller or, through release(), to any framework that takes
// DLPack (NumPy, PyTorch, ...). Inputs go the other way as plain DLTensor
// views the caller owns (session.h).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collage/export.h"

namespace collage::api {

class Tensor {
 public:
  Tensor() = default;
  // Takes ownership: the tensor's deleter is called when this Tensor is destroyed.
  explicit Tensor(DLManagedTensor* managed) : managed_(managed) {}
  Tensor(Tensor&& other) noexcept : managed_(other.release()) {}
  Tensor& operator=(Tensor&& other) noexcept {
    if (this != &other) {
      reset();
      managed_ = other.release();
    }
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() { reset(); }

  bool empty() const { return managed_ == nullptr; }
  // The view: CPU, compact row-major (strides == nullptr).
  const DLTensor& dl() const { return managed_->dl_tensor; }
  std::vector<int64_t> shape() const {
    return std::vector<int64_t>(dl().shape, dl().shape + dl().ndim);
  }
  int64_t numElements() const {
    int64_t n = 1;
    for (int i = 0; i < dl().ndim; ++i) n *= dl().shape[i];
    return n;
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(dl().data);
  }
  // Hands the DLManagedTensor on; the receiver calls its deleter.
  DLManagedTensor* release() {
    DLManagedTensor* m = managed_;
    managed_ = nullptr;
    return m;
  }

 private:
  void reset() {
    if (managed_ && managed_->deleter) managed_->deleter(managed_);
    managed_ = nullptr;
  }
  DLManagedTensor* managed_ = nullptr;
};

// Reads an ONNX TensorProto file (the .pb inputs and outputs that ONNX test
// data and the model zoo ship). Error naming the file.
COLLAGE_API Tensor loadTensorProto(const std::string& path);

}  // namespace collage::api
