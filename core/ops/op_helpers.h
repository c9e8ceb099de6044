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
// "[1,-1,3]": an int list as ONNX writes it, for messages.
std::string intsToString(const std::vector<int64_t>& v);

// A Pad node's per-dimension begin and end amounts (negative = crop), from
// its `pads` and `axes` attributes; throws Error naming the node.
struct PadAmounts {
  std::vector<int64_t> begin, end;
};
PadAmounts padAmounts(const Node& node, int64_t rank);

// ---- Shared by the kernels of data-dependent and index-driven ops. ----

// The product of shape[from, to) (1 for an empty range).
int64_t shapeProduct(const Shape& shape, int64_t from, int64_t to);
// A FlopsFn for ops that only move or select elements.
double zeroFlops(const Node&, const std::vector<TensorType>&, const std::vector<TensorType>&);
// Throws Error unless `type` is int32 or int64; `what` names the input ("indices").
void requireIndexType(const Node& node, const TensorType& type, const std::string& what);
// An index in [-dim, dim) made non-negative; throws Error naming the node,
// the input `what` and the dimension otherwise (never reads out of bounds).
int64_t normalizeIndex(const Node& node, int64_t index, int64_t dim, const std::string& what);
// The single value of a one-element tensor (a scalar or a [1] tensor), read
// at run time; throws Error naming `what` if it holds another count.
int64_t scalarInt(const Node& node, const Tensor& t, const std::string& what);
double scalarDouble(const Node& node, const Tensor& t, const std::string& what);
// "[1,2,3]"
std::string intsText(const std::vector<int64_t>& v);

}  // namespace collage
