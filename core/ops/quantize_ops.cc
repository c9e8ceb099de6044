// The quantise/dequantise pair that QDQ models (ONNX Runtime's quantiser,
// TensorRT's explicit-precision exports) put around every quantised op,
// and DynamicQuantizeLinear:
//
//   QuantizeLinear:   y = saturate(round_half_even(x / scale) + zero_point)
//   DequantizeLinear: y = (x - zero_point) * scale
//
// scale and zero_point are scalars (per tensor) or 1-D along `axis` (per
// channel); the zero point's type is the quantised type (uint8 without one).
// The arithmetic is float32, as the spec writes it, so that halfway cases
// round as every runtime does.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

bool quantizedType(ElementType t) {
  return t == ElementType::UInt8 || t == ElementType::Int8;
}

bool present(const Types& in, size_t i) {
  return i < in.size() && in[i].elementType != ElementType::Undefined;
}

// Checks a scale / zero point against x: a scalar, or 1-D with one value per
// index of `axis`. Returns the axis the values run along, -1 for per tensor.
int64_t quantAxis(const Node& node, const TensorType& x, const TensorType& param, const char* what) {
  if (param.numElements() == 1 && param.rank() <= 1) return -1;
  const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 1), x.rank());
  if (param.rank() != 1 || param.shape[0] != x.shape[axis])
    throw Error(nodeLabel(node) + what + " " + param.toString() + " must be a scalar or hold one value per index of axis " +
                std::to_string(axis) + " of " + x.toString());
  return axis;
}

// The index into a per-axis parameter for each element of x.
struct ParamIndex {
  int64_t inner = 1, len = 1;
  bool perAxis = false;
  int64_t operator()(int64_t i) const { return perAxis ? (i / inner) % len : 0; }
};

ParamIndex paramIndex(const Shape& x, int64_t axis) {
  ParamIndex p;
  if (axis < 0) return p;
  p.perAxis = true;
  p.len = x[static_cast<size_t>(axis)];
  p.inner = shapeProduct(x, axis + 1, static_cast<int64_t>(x.size()));
  return p;
}

template <class Q>
Q saturate(float v) {
  const float lo = static_cast<float>(std::numeric_limits<Q>::min());
  const float hi = static_cast<float>(std::numeric_limits<Q>::max());
  return static_cast<Q>(std::min(std::max(v, lo), hi));
}

template <class F>
void visitQuantized(const Node& node, ElementType t, F f) {
  if (t == ElementType::UInt8) return f(TypeTag<uint8_t>{});
  if (t == ElementType::Int8) return f(TypeTag<int8_t>{});
  throw unsupportedType(node, t);
}

void addQuantizeLinear(OpRegistry& r) {
  OpSchema s;
  s.name = "QuantizeLinear";
  s.kind = OpKind::ElemWise;
  s.minInputs = 2;
  s.maxInputs = 3;
  s.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{1})}};
  s.infer = [](const Node& node, const Types& in) {
    if (in[0].elementType != ElementType::Float32 && in[0].elementType != ElementType::Int32)
      throw unsupportedType(node, in[0].elementType);
    requireFloat32(node, in[1]);
    quantAxis(node, in[0], in[1], "y_scale");
    ElementType q = ElementType::UInt8;
    if (present(in, 2)) {
      q = in[2].elementType;
      if (!quantizedType(q)) throw unsupportedType(node, q);
      if (in[2].shape != in[1].shape)
        throw Error(nodeLabel(node) + "y_zero_point " + in[2].toString() + " must have y_scale's shape " +
                    shapeToString(in[1].shape));
    }
    return Types{{q, in[0].shape}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const int64_t axis = quantAxis(node, in[0]->type(), in[1]->type(), "y_scale");
    const ParamIndex at = paramIndex(in[0]->shape(), axis);
    const std::vector<float> x = in[0]->toFloats();
    const float* scale = in[1]->data<float>();
    const std::vector<int64_t> zp = in.size() > 2 && in[2] ? in[2]->toInts() : std::vector<int64_t>{0};
    visitQuantized(node, out[0]->elementType(), [&](auto tag) {
      using Q = typename decltype(tag)::type;
      Q* y = out[0]->data<Q>();
      for (size_t i = 0; i < x.size(); ++i) {
        const int64_t p = at(static_cast<int64_t>(i));
        const float q = std::nearbyint(x[i] / scale[p]) + static_cast<float>(zp[zp.size() > 1 ? p : 0]);
        y[i] = saturate<Q>(q);
      }
    });
  };
  r.add(std::move(s));
}

void addDequantizeLinear(OpRegistry& r) {
  OpSchema s;
  s.name = "DequantizeLinear";
  s.kind = OpKind::ElemWise;
  s.minInputs = 2;
  s.maxInputs = 3;
  s.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{1})}};
  s.infer = [](const Node& node, const Types& in) {
    if (!quantizedType(in[0].elementType) && in[0].elementType != ElementType::Int32)
      throw unsupportedType(node, in[0].elementType);
    requireFloat32(node, in[1]);
    quantAxis(node, in[0], in[1], "x_scale");
    if (present(in, 2) && (in[2].elementType != in[0].elementType || in[2].shape != in[1].shape))
      throw Error(nodeLabel(node) + "x_zero_point " + in[2].toString() + " must be " +
                  std::string(elementTypeName(in[0].elementType)) + " with x_scale's shape " +
                  shapeToString(in[1].shape));
    return Types{{ElementType::Float32, in[0].shape}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const int64_t axis = quantAxis(node, in[0]->type(), in[1]->type(), "x_scale");
    const ParamIndex at = paramIndex(in[0]->shape(), axis);
    const std::vector<int64_t> x = in[0]->toInts();
    const float* scale = in[1]->data<float>();
    const std::vector<int64_t> zp = in.size() > 2 && in[2] ? in[2]->toInts() : std::vector<int64_t>{0};
    float* y = out[0]->data<float>();
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t p = at(static_cast<int64_t>(i));
      y[i] = static_cast<float>(x[i] - zp[zp.size() > 1 ? p : 0]) * scale[p];
    }
  };
  r.add(std::move(s));
}

// uint8 quantisation whose range [min(0, min x), max(0, max x)] is measured
// on x itself: y, its scale and its zero point.
void addDynamicQuantizeLinear(OpRegistry& r) {
  OpSchema s;
  s.name = "DynamicQuantizeLinear";
  s.kind = OpKind::Opaque;
  s.minOutputs = s.maxOutputs = 3;
  s.infer = [](const Node& node, const Types& in) {
    requireFloat32(node, in[0]);
    return Types{{ElementType::UInt8, in[0].shape}, {ElementType::Float32, {}}, {ElementType::UInt8, {}}};
  };
  s.reference = [](const Node&, const Inputs& in, const Outputs& out) {
    const float* x = in[0]->data<float>();
    const int64_t n = in[0]->numElements();
    float lo = 0, hi = 0;
    for (int64_t i = 0; i < n; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    const float scale = (hi - lo) / 255.0f;
    // All zeros: any scale works; 0 would divide by zero, so the zero point is 0 and y is 0.
    const float zeroPoint = scale != 0 ? std::nearbyint(std::min(std::max(0.0f - lo / scale, 0.0f), 255.0f)) : 0.0f;
    if (out[0]) {
      uint8_t* y = out[0]->data<uint8_t>();
      for (int64_t i = 0; i < n; ++i)
        y[i] = scale != 0 ? saturate<uint8_t>(std::nearbyint(x[i] / scale) + zeroPoint) : 0;
    }
    if (out[1]) out[1]->data<float>()[0] = scale;
    if (out[2]) out[2]->data<uint8_t>()[0] = static_cast<uint8_t>(zeroPoint);
  };
  r.add(std::move(s));
}

}  // namespace

void registerQuantizeOps(OpRegistry& r) {
  addQuantizeLinear(r);
  addDequantizeLinear(r);
  addDynamicQuantizeLinear(r);
}

}  // namespace collage
