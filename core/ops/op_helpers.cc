#include "core/ops/op_helpers.h"

#include <algorithm>

namespace collage {

std::string nodeLabel(const Node& node) {
  return "node '" + node.name + "' (" + node.op + "): ";
}

std::string intsToString(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

int64_t normalizeAxis(const Node& node, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1))
    throw Error(nodeLabel(node) + "axis " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(rank));
  return a;
}

PadAmounts padAmounts(const Node& node, int64_t rank) {
  const std::vector<int64_t> pads = node.attrs.getInts("pads", {});
  std::vector<int64_t> axes = node.attrs.getInts("axes", {});
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  if (pads.size() != 2 * axes.size())
    throw Error(nodeLabel(node) + "pads has " + std::to_string(pads.size()) +
                " values, expected " + std::to_string(2 * axes.size()) + " (2 per padded axis)");
  PadAmounts p{std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 0)};
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = normalizeAxis(node, axes[i], rank);
    if (seen[a]) throw Error(nodeLabel(node) + "axis " + std::to_string(axes[i]) + " repeated");
    seen[a] = true;
    p.begin[a] = pads[i];
    p.end[a] = pads[i + axes.size()];
  }
  return p;
}

Shape broadcastShapes(const Node& node, const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const auto& s : shapes) {
    size_t offset = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t d = s[i];
      int64_t& o = out[offset + i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      std::string msg = nodeLabel(node) + "shapes cannot broadcast:";
      for (const auto& t : shapes) msg += " " + shapeToString(t);
      throw Error(msg);
    }
  }
  return out;
}

void requireFloat32(const Node& node, const TensorType& type) {
  if (type.elementType != ElementType::Float32)
    throw Unsupported(nodeLabel(node) + "element type " +
                      std::string(elementTypeName(type.elementType)) + " is not supported");
}

int64_t shapeProduct(const Shape& shape, int64_t from, int64_t to) {
  int64_t p = 1;
  for (int64_t d = from; d < to; ++d) p *= shape[static_cast<size_t>(d)];
  return p;
}

double zeroFlops(const Node&, const std::vector<TensorType>&, const std::vector<TensorType>&) {
  return 0.0;
}

void requireIndexType(const Node& node, const TensorType& type, const std::string& what) {
  if (type.elementType != ElementType::Int64 && type.elementType != ElementType::Int32)
    throw Error(nodeLabel(node) + what + " must be int32 or int64, not " + type.toString());
}

int64_t normalizeIndex(const Node& node, int64_t index, int64_t dim, const std::string& what) {
  if (index < -dim || index >= dim)
    throw Error(nodeLabel(node) + what + " index " + std::to_string(index) +
                " is out of range for a dimension of size " + std::to_string(dim));
  return index < 0 ? index + dim : index;
}

int64_t scalarInt(const Node& node, const Tensor& t, const std::string& what) {
  if (t.numElements() != 1)
    throw Error(nodeLabel(node) + what + " must hold one value, not " + t.type().toString());
  if (isFloatingPoint(t.elementType())) return static_cast<int64_t>(t.toDoubles()[0]);
  return t.toInts()[0];
}

double scalarDouble(const Node& node, const Tensor& t, const std::string& what) {
  if (t.numElements() != 1)
    throw Error(nodeLabel(node) + what + " must hold one value, not " + t.type().toString());
  return t.toDoubles()[0];
}

std::string intsText(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace collage
