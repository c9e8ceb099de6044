// How the Session reuses memory, planned before the first run: values ask for
// a buffer when their producer runs and give it back after their last reader
// (or copy) has run. One plan per device: the host's buffers and a GPU's are
// planned alike, then allocated once by whoever owns that memory.
//
// A request takes the smallest free buffer that fits (best fit), else grows
// the largest free one (cheaper than a new buffer beside a free one), else
// adds a buffer. Sizes are rounded up to 64 bytes, so every buffer is aligned
// for any element type and vector width.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace collage {

class BufferPoolPlan {
 public:
  static constexpr size_t kAlignment = 64;

  // A buffer of at least `bytes`, held until release(); returns its index.
  int32_t acquire(size_t bytes);
  void release(int32_t buffer);
  bool isFree(int32_t buffer) const { return buffers_.at(static_cast<size_t>(buffer)).free; }

  size_t bufferCount() const { return buffers_.size(); }
  size_t bufferBytes(int32_t buffer) const { return buffers_.at(static_cast<size_t>(buffer)).size; }
  // The sum of the buffers' final sizes: what allocating the plan takes.
  size_t totalBytes() const;

 private:
  struct Buffer {
    size_t size = 0;
    bool free = true;
  };
  std::vector<Buffer> buffers_;
};

}  // namespace collage
