// Tensors: a TensorType (element type + static shape) and a Tensor that owns
// (or views) plain row-major memory. Every tensor that crosses a kernel
// boundary is in this layout, so CPU backends exchange them with no copy
// (as DLPack views, see toDLTensor()).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/element_type.h"

namespace collage {

using Shape = std::vector<int64_t>;

int64_t numElements(const Shape& shape);
// "1x3x224x224"; "scalar" for rank 0.
std::string shapeToString(const Shape& shape);
// Parses "1x3x224x224" (also "1,3,224,224"); throws Error on bad text.
Shape parseShape(const std::string& text);
// Row-major strides in elements.
std::vector<int64_t> stridesOf(const Shape& shape);

struct TensorType {
  ElementType elementType = ElementType::Undefined;
  Shape shape;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numElements() const { return collage::numElements(shape); }
  size_t byteSize() const;
  // "float32[1x3x224x224]"
  std::string toString() const;
  bool operator==(const TensorType& other) const = default;
};

// Alignment of every buffer a Tensor allocates: a cache line, enough for AVX-512.
inline constexpr size_t kTensorAlignment = 64;

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-initialised, aligned storage.
  explicit Tensor(TensorType type);
  Tensor(ElementType elementType, Shape shape) : Tensor(TensorType{elementType, std::move(shape)}) {}

  // A view of memory owned by someone else (no copy). The caller keeps it alive.
  static Tensor view(TensorType type, void* data);
  // A tensor sharing this one's storage with another shape (same element count).
  Tensor reshaped(Shape shape) const;
  // Convenience constructors for tests and folding.
  static Tensor fromFloats(Shape shape, const std::vector<float>& values);
  static Tensor fromInts(Shape shape, const std::vector<int64_t>& values);
  static Tensor scalarFloat(float v) { return fromFloats({}, {v}); }

  const TensorType& type() const { return type_; }
  ElementType elementType() const { return type_.elementType; }
  const Shape& shape() const { return type_.shape; }
  int64_t rank() const { return type_.rank(); }
  int64_t numElements() const { return type_.numElements(); }
  size_t byteSize() const { return type_.byteSize(); }
  bool empty() const { return data_ == nullptr && type_.elementType == ElementType::Undefined; }

  template <class T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  void* raw() { return data_; }
  const void* raw() const { return data_; }

  // Deep copy into fresh storage.
  Tensor clone() const;
  // Values converted to int64 / float (for shape-like tensors and tests).
  std::vector<int64_t> toInts() const;
  std::vector<float> toFloats() const;
  std::vector<double> toDoubles() const;

  // A DLPack view of this tensor (CPU device, compact row-major: strides == nullptr).
  // The shape array points into this Tensor, which must outlive the view.
  DLTensor toDLTensor();

  // "float32[2x3] {0.1, 0.2, ...}" with at most a few values.
  std::string toString() const;

 private:
  TensorType type_;
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
};

DLDataType toDLDataType(ElementType type);

}  // namespace collage
