// What the attributes of the ops that only move elements mean: Transpose's
// perm, Slice's starts/ends/axes/steps and Split's sizes, resolved to
// explicit numbers with ONNX's defaults, negative indices and clamping
// applied. Like conv_geometry, written once for the reference kernels
// (shape_ops.cc) and for the backends that fold these ops into index
// arithmetic (the native backend's lowering, its attention kernel).
// Each throws Error, naming the node, on attributes that mean nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ir/graph.h"

namespace collage {

// Transpose's permutation of `rank` axes: perm with negative axes made
// positive, or the reversal when perm is absent.
std::vector<int64_t> transposePerm(const Node& node, int64_t rank);

// One axis of a Slice (opset 13 semantics: clamping, negative steps): the
// first input index read, the step between reads, and how many are read.
// Axes the Slice does not name are {0, 1, dim}.
struct SliceRange {
  int64_t start, step, count;
};
std::vector<SliceRange> sliceRanges(const Node& node, const Shape& in);

// The sizes of Split's outputs along `axis` of `in` (split, num_outputs,
// or equal parts), one per output of the node.
std::vector<int64_t> splitSizes(const Node& node, const Shape& in, int64_t axis);

}  // namespace collage
