#include "core/measure/quantization_ties.h"

#include <algorithm>
#include <cmath>

#include "core/ops/op_helpers.h"

namespace collage {
namespace {

// Whether q = x / scale, plus the zero point, lies within `within` (in
// steps) of a tie whose neighbours stay distinct after saturation into
// [lo, hi].
bool nearTie(float q, float zeroPoint, double within, float lo, float hi) {
  const float below = std::floor(q);
  const double distance = std::fabs(static_cast<double>(q) - below - 0.5);
  if (distance > within) return false;
  const float a = below + zeroPoint, b = a + 1;
  return !(b <= lo || a >= hi);  // both neighbours saturate to one value: no flip
}

}  // namespace

bool isQuantizer(const Node& node) {
  return node.op == "QuantizeLinear" || node.op == "DynamicQuantizeLinear";
}

bool quantizesComputedFloats(const Graph& graph, const Node& node) {
  if (!isQuantizer(node) || node.inputs.empty() || node.inputs[0] == kNoValue) return false;
  const Value& x = graph.value(node.inputs[0]);
  return x.producer != kNoNode && x.type.elementType == ElementType::Float32;
}

std::vector<bool> nearRoundingTies(const Graph& graph, NodeId id,
                                   const std::vector<const Tensor*>& values, double bound) {
  const Node& node = graph.node(id);
  const Tensor& xt = *values[static_cast<size_t>(node.inputs[0])];
  const std::vector<float> x = xt.toFloats();
  std::vector<bool> near(x.size(), false);
  double largest = 0;  // how far the plan may move any x: bound * largest
  for (float v : x)
    if (std::isfinite(v)) largest = std::max(largest, static_cast<double>(std::fabs(v)));
  const double moves = bound * largest;
  if (node.op == "DynamicQuantizeLinear") {
    const float scale = values[static_cast<size_t>(node.outputs[1])]->toFloats()[0];
    if (scale == 0) return near;  // a range too narrow for float32 (all zeros give scale 1): y is 0
    float min = 0;
    for (float v : x) min = std::min(min, v);
    const float zeroPoint = std::nearbyint(std::min(std::max(-min / scale, 0.0f), 255.0f));
    // The scale itself moves by about `bound` relative: x / scale by bound |x/scale|.
    const double within = 2 * moves / std::fabs(scale);
    if (nearTie(-min / scale, 0, within, 0, 255)) return std::vector<bool>(x.size(), true);
    for (size_t i = 0; i < x.size(); ++i)
      near[i] = nearTie(x[i] / scale, zeroPoint, within, 0, 255);
    return near;
  }
  // QuantizeLinear: a scalar scale or one per index of `axis`.
  const std::vector<float> scale = values[static_cast<size_t>(node.inputs[1])]->toFloats();
  const bool hasZeroPoint = node.inputs.size() > 2 && node.inputs[2] != kNoValue;
  const std::vector<int64_t> zeroPoint =
      hasZeroPoint ? values[static_cast<size_t>(node.inputs[2])]->toInts() : std::vector<int64_t>{0};
  const ElementType out = graph.value(node.outputs[0]).type.elementType;
  const float lo = out == ElementType::Int8 ? -128 : out == ElementType::UInt8 ? 0 : -INFINITY;
  const float hi = out == ElementType::Int8 ? 127 : out == ElementType::UInt8 ? 255 : INFINITY;
  int64_t len = 1, inner = 1;
  if (scale.size() > 1) {
    const Shape& shape = xt.shape();
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 1), static_cast<int64_t>(shape.size()));
    len = shape[static_cast<size_t>(axis)];
    for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
    if (static_cast<int64_t>(scale.size()) != len) return near;  // blocked scales: no tie is claimed
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t p = scale.size() > 1 ? static_cast<size_t>((static_cast<int64_t>(i) / inner) % len) : 0;
    const float z = static_cast<float>(zeroPoint[zeroPoint.size() > 1 ? p : 0]);
    near[i] = nearTie(x[i] / scale[p], z, moves / std::fabs(scale[p]), lo, hi);
  }
  return near;
}

}  // namespace collage
