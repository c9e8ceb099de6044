// Tensor sizes that a model decides, checked before anything is allocated.
// A corrupt or hostile model can declare or compute any shape; its byte size
// must not overflow (undefined behaviour in the size arithmetic), and the
// importer's constant folding must not allocate without bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/ir/element_type.h"
#include "core/ir/error.h"
#include "core/ir/tensor.h"

namespace collage {

// The byte size of a tensor of this shape and element type, or nullopt when
// a dim is negative or the size does not fit in int64: no machine holds it.
std::optional<int64_t> checkedByteSize(const Shape& shape, ElementType elementType);

// Thrown by the Tensor constructor when a ScopedAllocationLimit is in force
// on this thread and the tensor is larger.
class AllocationLimitExceeded : public Error {
 public:
  using Error::Error;
};

// Caps the size of each tensor this thread allocates while it lives (the
// importer folds constants under one: a larger result stays a node, computed
// when the plan runs). Nests; the previous cap comes back at the end.
class ScopedAllocationLimit {
 public:
  explicit ScopedAllocationLimit(size_t maxBytes);
  ~ScopedAllocationLimit();
  ScopedAllocationLimit(const ScopedAllocationLimit&) = delete;
  ScopedAllocationLimit& operator=(const ScopedAllocationLimit&) = delete;

 private:
  size_t previous_;
};

// The cap in force on this thread (SIZE_MAX when none).
size_t allocationLimit();

}  // namespace collage
