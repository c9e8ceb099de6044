#include "core/ir/tensor_size.h"

#include <algorithm>
#include <limits>

namespace collage {

namespace {
thread_local size_t tAllocationLimit = std::numeric_limits<size_t>::max();
}  // namespace

std::optional<int64_t> checkedByteSize(const Shape& shape, ElementType elementType) {
  int64_t bytes = static_cast<int64_t>(elementSize(elementType));
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes)) return std::nullopt;
  return bytes;
}

ScopedAllocationLimit::ScopedAllocationLimit(size_t maxBytes) : previous_(tAllocationLimit) {
  tAllocationLimit = std::min(previous_, maxBytes);
}

ScopedAllocationLimit::~ScopedAllocationLimit() { tAllocationLimit = previous_; }

size_t allocationLimit() { return tAllocationLimit; }

}  // namespace collage
