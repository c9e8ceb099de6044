// Small helpers shared by the reference kernels' shape inference.
#pragma once

#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ops/op_registry.h"
#include "core/ir/tensor.h"

namespace collage {

// Normalises a possibly negative axis against rank; throws Error naming the node.
int64_t normalizeAxis(const Node& node, int64_t axis, int64_t rank);
// Numpy-style multidirectional broadcast of shapes; throws Error naming the node.
Shape broadcastShapes(const Node& node, const std::vector<Shape>& shapes);
// Throws Unsupported unless the type is float32.
void requireFloat32(const Node& node, const TensorType& type);
// "node 'conv1' (Conv): " — prefix for messages.
std::string nodeLabel(const Node& node);

// A Pad node's per-dimension begin and end amounts (negative = crop), from
// its `pads` and `axes` attributes; throws Error naming the node.
struct PadAmounts {
  std::vector<int64_t> begin, end;
};
PadAmounts padAmounts(const Node& node, int64_t rank);

}  // namespace collage
