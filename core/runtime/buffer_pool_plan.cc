#include "core/runtime/buffer_pool_plan.h"

#include <algorithm>

#include "core/ir/error.h"

namespace collage {

int32_t BufferPoolPlan::acquire(size_t bytes) {
  const size_t need = std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  int32_t best = -1, largestFree = -1;
  for (size_t b = 0; b < buffers_.size(); ++b) {
    if (!buffers_[b].free) continue;
    if (buffers_[b].size >= need &&
        (best < 0 || buffers_[b].size < buffers_[static_cast<size_t>(best)].size))
      best = static_cast<int32_t>(b);
    if (largestFree < 0 || buffers_[b].size > buffers_[static_cast<size_t>(largestFree)].size)
      largestFree = static_cast<int32_t>(b);
  }
  if (best < 0 && largestFree >= 0) {
    best = largestFree;
    buffers_[static_cast<size_t>(best)].size = need;
  }
  if (best < 0) {
    buffers_.push_back({need, true});
    best = static_cast<int32_t>(buffers_.size() - 1);
  }
  buffers_[static_cast<size_t>(best)].free = false;
  return best;
}

void BufferPoolPlan::release(int32_t buffer) {
  Buffer& b = buffers_.at(static_cast<size_t>(buffer));
  COLLAGE_CHECK(!b.free, "a pool buffer was given back twice");
  b.free = true;
}

size_t BufferPoolPlan::totalBytes() const {
  size_t total = 0;
  for (const Buffer& b : buffers_) total += b.size;
  return total;
}

}  // namespace collage
