// Strided views: a logical tensor as dims and element strides over a
// buffer, so that the attention kernel reads Q, K, V and writes Y where the
// graph's Reshape and Transpose views say, without a copy.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/ir/tensor.h"

namespace collage::native {

struct StridedView {
  std::vector<int64_t> dims, strides;
  std::string toString() const;
};

// A row-major tensor of `shape`.
StridedView contiguous(const Shape& shape);
// The view of `in` reshaped to `dims` without a copy (NumPy's
// _attempt_nocopy_reshape): each run of old dims that merges or splits into
// a run of new dims must be contiguous. nullopt when a copy would be needed.
std::optional<StridedView> reshapeView(const StridedView& in, const Shape& dims);
// `in` with its dims permuted (ONNX Transpose's perm).
StridedView transposeView(const StridedView& in, const std::vector<int64_t>& perm);
// The view as the 4-d [b, h, rows, cols] the kernel walks, broadcast to
// `batch` (two dims): leading dims padded, broadcast dims given stride 0.
// nullopt when its batch does not broadcast to `batch`.
std::optional<StridedView> asBatched4d(StridedView v, const int64_t batch[2]);
// A mask view broadcast to the scores' 4-d shape.
std::optional<StridedView> broadcastTo(StridedView v, const std::vector<int64_t>& dims4);

}  // namespace collage::native
