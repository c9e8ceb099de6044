#include "core/ops/op_helpers.h"

#include <algorithm>

namespace collage {

std::string nodeLabel(const Node& node) {
  return "node '" + node.name + "' (" + node.op + "): ";
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

}  // namespace collage
