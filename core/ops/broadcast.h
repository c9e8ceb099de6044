// Strided iteration for the reference kernels. A StridedPlan walks an output
// in row-major order and, for each of several operands, the element offset
// that output element reads (or writes). Broadcasting is the special case of
// stride 0 on broadcast dimensions; Transpose, Slice, Expand and Tile are
// strided copies; reductions walk the input with the output as the operand.
//
// Dimensions of size 1 are dropped and adjacent dimensions that every operand
// walks contiguously are merged, so that the innermost loop is as long as
// possible: adding a [C,1,1] bias to [N,C,H,W] becomes [N, C, H*W] with the
// bias's inner stride 0, and equal shapes become one flat row.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/ir/tensor.h"

namespace collage {

struct StridedPlan {
  Shape dims;                                 // merged output dims, rank >= 1
  std::vector<std::vector<int64_t>> strides;  // per operand, per merged dim (elements)
  int64_t total = 0;                          // output element count

  int64_t innerStride(size_t operand) const { return strides[operand].back(); }
};

// A plan over `out` for operands with explicit strides (one per output dim).
StridedPlan makeStridedPlan(const Shape& out, std::vector<std::vector<int64_t>> strides);

// Per-dimension strides with which an input of shape `in` is read when
// broadcast to `out` (numpy rules: aligned right, 0 where the input has 1).
std::vector<int64_t> broadcastStrides(const Shape& in, const Shape& out);

// A plan reading each input broadcast to `out`.
StridedPlan makeBroadcastPlan(const Shape& out, const std::vector<Shape>& inputs);

// Calls row(outOffset, operandOffsets, n) once per innermost row of n output
// elements; operand k's elements in that row are at operandOffsets[k] + j *
// plan.innerStride(k).
template <class Row>
void forEachRow(const StridedPlan& plan, Row&& row) {
  if (plan.total == 0) return;
  const size_t rank = plan.dims.size();
  const size_t k = plan.strides.size();
  const int64_t n = plan.dims.back();
  std::vector<int64_t> idx(rank, 0), off(k, 0);
  const int64_t rows = plan.total / n;
  int64_t outOff = 0;
  for (int64_t r = 0; r < rows; ++r, outOff += n) {
    row(outOff, static_cast<const int64_t*>(off.data()), n);
    for (int64_t d = static_cast<int64_t>(rank) - 2; d >= 0; --d) {
      if (++idx[d] < plan.dims[d]) {
        for (size_t i = 0; i < k; ++i) off[i] += plan.strides[i][d];
        break;
      }
      idx[d] = 0;
      for (size_t i = 0; i < k; ++i) off[i] -= plan.strides[i][d] * (plan.dims[d] - 1);
    }
  }
}

// dst (contiguous, shape plan.dims) = src read at srcBase + plan offsets of operand 0.
// Elements are moved as raw bytes of elemSize (1, 2, 4 or 8).
void copyStrided(const StridedPlan& plan, const void* src, int64_t srcBase, void* dst,
                 size_t elemSize);

}  // namespace collage
