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

// TensorType::sequenceLength of a tensor, and of a sequence whose length is
// only known at run time.
inline constexpr int64_t kNotSequence = -2;
inline constexpr int64_t kUnknownLength = -1;

struct TensorType {
  ElementType elementType = ElementType::Undefined;
  Shape shape;
  // A value is a tensor, or (ONNX seq(tensor(T)), made by the Sequence ops
  // and carried through loops) a sequence of tensors: then elementType and
  // shape are every element's, and sequenceLength is the element count, or
  // kUnknownLength when only a run tells it. Sequences of elements of
  // different shapes are not represented (static shapes, as everywhere).
  // A sequence never crosses a kernel boundary: backends see tensors only.
  int64_t sequenceLength = kNotSequence;

  static TensorType sequenceOf(const TensorType& element, int64_t length) {
    return TensorType{element.elementType, element.shape, length};
  }
  bool isSequence() const { return sequenceLength != kNotSequence; }
  // The type of one element of a sequence (the type itself for a tensor).
  TensorType elementTensorType() const { return TensorType{elementType, shape}; }

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numElements() const { return collage::numElements(shape); }
  size_t byteSize() const;
  // "float32[1x3x224x224]"; a sequence "seq(float32[2x3], length 4)"
  // ("length ?" when unknown).
  std::string toString() const;
  bool operator==(const TensorType& other) const = default;
};

// True if a value of type `actual` (as a run produced it) may stand where
// `declared` is expected: the same type, or a sequence whose length the
// declaration leaves unknown, or an empty sequence (whose element shape
// says nothing) of the same element type.
bool acceptsType(const TensorType& declared, const TensorType& actual);

// Alignment of every buffer a Tensor allocates: a cache line, enough for AVX-512.
inline constexpr size_t kTensorAlignment = 64;

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-initialised, aligned storage. For a sequence type: an
  // empty sequence (of that element type and shape).
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

  // A sequence value: `element` gives the element type (and the element
  // shape when `items` is empty); every item must have that element type
  // and one shape (Error otherwise). Items are shared, not copied.
  static Tensor sequence(const TensorType& element, std::vector<Tensor> items);
  bool isSequence() const { return type_.isSequence(); }
  // The elements of a sequence (empty for a tensor).
  const std::vector<Tensor>& items() const;

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
  // True when no other Tensor (a copy, a reshaped view) shares this one's
  // storage: its holder may write it without anyone else seeing.
  bool soleOwner() const { return storage_ && storage_.use_count() == 1; }

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
  std::shared_ptr<const std::vector<Tensor>> items_;  // a sequence's elements
};

DLDataType toDLDataType(ElementType type);

}  // namespace collage
