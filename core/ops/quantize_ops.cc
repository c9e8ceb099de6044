// The quantise/dequantise pair that QDQ models (ONNX Runtime's quantiser,
// TensorRT's explicit-precision exports) put around every quantised op,
// DynamicQuantizeLinear, and the integer products (MatMulInteger,
// ConvInteger, QLinearMatMul, QLinearConv):
//
//   QuantizeLinear:   y = saturate(round_half_even(x / scale) + zero_point)
//   DequantizeLinear: y = (x - zero_point) * scale
//
// scale and zero_point are scalars (per tensor) or 1-D along `axis` (per
// channel); the zero point's type is the quantised type (uint8 without one).
// The arithmetic is float32, as the spec writes it, so that halfway cases
// round as every runtime does. A NaN quantises to the type's lowest value
// (uint8 0, int8 -128), as in ONNX Runtime on x86 (requantize.h says why).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/conv_geometry.h"
#include "core/ops/integer_products.h"
#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/requantize.h"
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

// v in Q's range; NaN gives Q's lowest value, as ONNX Runtime's and the ONNX
// reference's QuantizeLinear on x86 (requantize.h, saturateToRange).
template <class Q>
Q saturate(float v) {
  const float lo = static_cast<float>(std::numeric_limits<Q>::min());
  const float hi = static_cast<float>(std::numeric_limits<Q>::max());
  return static_cast<Q>(saturateToRange(v, lo, hi));
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
    // All zeros: the spec's scale, 0, would divide by zero; any other gives
    // y = 0 and zero point 0. 1 is ONNX Runtime's (its scale output is 1).
    const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    // A range too narrow for float32 once divided (denormal): the spec's 0 again, y 0.
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


// ---- Integer products: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv ----
// Sums of (a - a_zero_point) * (b - b_zero_point), exact (integer_products.h). The
// *Integer ops store them as int32, as the spec's accumulator is; the
// QLinear* ops rescale them by a_scale * b_scale / y_scale (per row/column
// or per output channel where the scales are 1-D) and requantise with
// y_zero_point, rounding half to even and saturating.

// A per-index parameter's value at i: a scalar, or one value per index.
template <class V>
V paramAt(const std::vector<V>& v, int64_t i, V fallback) {
  return v.empty() ? fallback : v[v.size() > 1 ? static_cast<size_t>(i) : 0];
}

std::vector<int64_t> intsOrEmpty(const Inputs& in, size_t i) {
  return i < in.size() && in[i] ? in[i]->toInts() : std::vector<int64_t>{};
}

void requirePerIndex(const Node& node, const Types& in, size_t i, ElementType type,
                     int64_t perIndex, const char* what) {
  if (!present(in, i)) return;
  if (in[i].elementType != type ||
      !(in[i].numElements() == 1 || (in[i].rank() == 1 && in[i].shape[0] == perIndex)))
    throw Error(nodeLabel(node) + what + " " + in[i].toString() + " must be a " +
                std::string(elementTypeName(type)) + " scalar or hold " + std::to_string(perIndex) +
                " values");
}

// MatMul of two quantised operands (rank >= 2, numpy batch broadcasting).
Shape matMulIntegerShape(const Node& node, const TensorType& a, const TensorType& b) {
  if (!quantizedType(a.elementType)) throw unsupportedType(node, a.elementType);
  if (!quantizedType(b.elementType)) throw unsupportedType(node, b.elementType);
  if (a.rank() < 2 || b.rank() < 2)
    throw Unsupported(nodeLabel(node) + "1-D operands are not supported, got " + a.toString() +
                      " and " + b.toString());
  if (a.shape.back() != b.shape[b.rank() - 2])
    throw Error(nodeLabel(node) + "inner dimensions differ: " + a.toString() + " x " + b.toString());
  Shape out = broadcastShapes(node, {Shape(a.shape.begin(), a.shape.end() - 2),
                                     Shape(b.shape.begin(), b.shape.end() - 2)});
  out.insert(out.end(), {a.shape[a.rank() - 2], b.shape.back()});
  return out;
}

void storeInt32(const std::vector<int64_t>& acc, Tensor& out) {
  int32_t* y = out.data<int32_t>();
  for (size_t i = 0; i < acc.size(); ++i) y[i] = static_cast<int32_t>(acc[i]);
}

// y = saturate(round_half_even(acc * scaleOf(i)) + zero point), into y's
// type, in float32 as every backend does (requantize.h).
template <class ScaleOf>
void requantize(const Node& node, const std::vector<int64_t>& acc, ScaleOf scaleOf,
                const std::vector<int64_t>& yzp, Tensor& out) {
  visitQuantized(node, out.elementType(), [&](auto tag) {
    using Q = typename decltype(tag)::type;
    Q* y = out.data<Q>();
    const float zp = static_cast<float>(paramAt<int64_t>(yzp, 0, 0));
    const float lo = std::numeric_limits<Q>::min(), hi = std::numeric_limits<Q>::max();
    for (size_t i = 0; i < acc.size(); ++i)
      y[i] = static_cast<Q>(requantizeValue(acc[i], scaleOf(static_cast<int64_t>(i)), zp, lo, hi));
  });
}

std::vector<AttributeSpec> convIntegerAttributes() {
  return {{"auto_pad", AttributeType::String, Attribute(std::string("NOTSET"))},
          {"dilations", AttributeType::Ints, std::nullopt},
          {"group", AttributeType::Int, Attribute(int64_t{1})},
          {"kernel_shape", AttributeType::Ints, std::nullopt},
          {"pads", AttributeType::Ints, std::nullopt},
          {"strides", AttributeType::Ints, std::nullopt}};
}

// FLOPs of the integer products, counted as the float ones are (a
// multiply-add = 2), so that a kernel's cost can be estimated before it is
// measured (core/measure/kernel_estimate.h): the default (one op per output
// element) would make a convolution look hundreds of times cheaper than it is.
// A product's every output element sums K terms: K = a's last dim for a
// matrix product, a filter's size (channels per group x kernel) for a convolution.
double integerMatMulFlops(const std::vector<TensorType>& in, size_t a, const std::vector<TensorType>& out) {
  const Shape& s = in[a].shape;
  const double k = s.empty() ? 1.0 : static_cast<double>(s.back());
  return 2.0 * k * static_cast<double>(numElements(out[0].shape));
}
double integerConvFlops(const std::vector<TensorType>& in, size_t w, const std::vector<TensorType>& out) {
  const Shape& s = in[w].shape;
  double filter = 1;
  for (size_t i = 1; i < s.size(); ++i) filter *= static_cast<double>(s[i]);
  return 2.0 * filter * static_cast<double>(numElements(out[0].shape));
}

void addMatMulInteger(OpRegistry& r) {
  OpSchema s;
  s.name = "MatMulInteger";
  s.kind = OpKind::Anchor;
  s.minInputs = 2;
  s.maxInputs = 4;
  s.infer = [](const Node& node, const Types& in) {
    Shape out = matMulIntegerShape(node, in[0], in[1]);
    requirePerIndex(node, in, 2, in[0].elementType, in[0].shape[in[0].rank() - 2], "a_zero_point");
    requirePerIndex(node, in, 3, in[1].elementType, in[1].shape.back(), "b_zero_point");
    return Types{{ElementType::Int32, out}};
  };
  s.reference = [](const Node&, const Inputs& in, const Outputs& out) {
    storeInt32(matMulIntegerAcc(*in[0], *in[1], intsOrEmpty(in, 2), intsOrEmpty(in, 3), out[0]->shape()),
               *out[0]);
  };
  s.flops = [](const Node&, const Types& in, const Types& out) { return integerMatMulFlops(in, 0, out); };
  r.add(std::move(s));
}

void addConvInteger(OpRegistry& r) {
  OpSchema s;
  s.name = "ConvInteger";
  s.kind = OpKind::Anchor;
  s.minInputs = 2;
  s.maxInputs = 4;
  s.attributes = convIntegerAttributes();
  s.infer = [](const Node& node, const Types& in) {
    for (int i = 0; i < 2; ++i)
      if (!quantizedType(in[i].elementType)) throw unsupportedType(node, in[i].elementType);
    const ConvGeometry g = ConvGeometry::conv(node, in[0].shape, in[1].shape);
    requirePerIndex(node, in, 2, in[0].elementType, 1, "x_zero_point");
    requirePerIndex(node, in, 3, in[1].elementType, g.outChannels, "w_zero_point");
    return Types{{ElementType::Int32, g.outputShape()}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const ConvGeometry g = ConvGeometry::conv(node, in[0]->shape(), in[1]->shape());
    storeInt32(convIntegerAcc(g, *in[0], *in[1], intsOrEmpty(in, 2), intsOrEmpty(in, 3)), *out[0]);
  };
  s.flops = [](const Node&, const Types& in, const Types& out) { return integerConvFlops(in, 1, out); };
  r.add(std::move(s));
}

// QLinearMatMul: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
void addQLinearMatMul(OpRegistry& r) {
  OpSchema s;
  s.name = "QLinearMatMul";
  s.kind = OpKind::Anchor;
  s.minInputs = s.maxInputs = 8;
  s.infer = [](const Node& node, const Types& in) {
    Shape out = matMulIntegerShape(node, in[0], in[3]);
    const int64_t M = in[0].shape[in[0].rank() - 2], N = in[3].shape.back();
    requirePerIndex(node, in, 1, ElementType::Float32, M, "a_scale");
    requirePerIndex(node, in, 2, in[0].elementType, M, "a_zero_point");
    requirePerIndex(node, in, 4, ElementType::Float32, N, "b_scale");
    requirePerIndex(node, in, 5, in[3].elementType, N, "b_zero_point");
    requirePerIndex(node, in, 6, ElementType::Float32, 1, "y_scale");
    if (!quantizedType(in[7].elementType)) throw unsupportedType(node, in[7].elementType);
    requirePerIndex(node, in, 7, in[7].elementType, 1, "y_zero_point");
    return Types{{in[7].elementType, out}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& ys = out[0]->shape();
    const int64_t M = ys[ys.size() - 2], N = ys.back();
    const std::vector<int64_t> acc =
        matMulIntegerAcc(*in[0], *in[3], intsOrEmpty(in, 2), intsOrEmpty(in, 5), ys);
    const std::vector<float> as = in[1]->toFloats(), bs = in[4]->toFloats();
    const float yScale = in[6]->toFloats()[0];
    requantize(node, acc, [&](int64_t i) {
      const int64_t row = (i / N) % M, col = i % N;
      return requantizeScale(paramAt<float>(as, row, 1.0f), paramAt<float>(bs, col, 1.0f), yScale);
    }, intsOrEmpty(in, 7), *out[0]);
  };
  s.flops = [](const Node&, const Types& in, const Types& out) { return integerMatMulFlops(in, 0, out); };
  r.add(std::move(s));
}

// QLinearConv: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
// y_zero_point, optional int32 bias B (added to the accumulator).
void addQLinearConv(OpRegistry& r) {
  OpSchema s;
  s.name = "QLinearConv";
  s.kind = OpKind::Anchor;
  s.minInputs = 8;
  s.maxInputs = 9;
  s.attributes = convIntegerAttributes();
  s.infer = [](const Node& node, const Types& in) {
    for (size_t i : {size_t{0}, size_t{3}, size_t{7}})
      if (!quantizedType(in[i].elementType)) throw unsupportedType(node, in[i].elementType);
    const ConvGeometry g = ConvGeometry::conv(node, in[0].shape, in[3].shape);
    requirePerIndex(node, in, 1, ElementType::Float32, 1, "x_scale");
    requirePerIndex(node, in, 2, in[0].elementType, 1, "x_zero_point");
    requirePerIndex(node, in, 4, ElementType::Float32, g.outChannels, "w_scale");
    requirePerIndex(node, in, 5, in[3].elementType, g.outChannels, "w_zero_point");
    requirePerIndex(node, in, 6, ElementType::Float32, 1, "y_scale");
    requirePerIndex(node, in, 7, in[7].elementType, 1, "y_zero_point");
    if (present(in, 8) && (in[8].elementType != ElementType::Int32 || in[8].shape != Shape{g.outChannels}))
      throw Error(nodeLabel(node) + "B must be int32[" + std::to_string(g.outChannels) + "], not " +
                  in[8].toString());
    return Types{{in[7].elementType, g.outputShape()}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const ConvGeometry g = ConvGeometry::conv(node, in[0]->shape(), in[3]->shape());
    std::vector<int64_t> acc = convIntegerAcc(g, *in[0], *in[3], intsOrEmpty(in, 2), intsOrEmpty(in, 5));
    const Shape& ys = out[0]->shape();
    const int64_t M = ys[1], plane = shapeProduct(ys, 2, static_cast<int64_t>(ys.size()));
    const std::vector<int64_t> bias = intsOrEmpty(in, 8);
    if (!bias.empty())
      for (size_t i = 0; i < acc.size(); ++i) acc[i] += bias[(static_cast<int64_t>(i) / plane) % M];
    const float xScale = in[1]->toFloats()[0], yScale = in[6]->toFloats()[0];
    const std::vector<float> ws = in[4]->toFloats();
    requantize(node, acc, [&](int64_t i) {
      return requantizeScale(xScale, paramAt<float>(ws, (i / plane) % M, 1.0f), yScale);
    }, intsOrEmpty(in, 7), *out[0]);
  };
  s.flops = [](const Node&, const Types& in, const Types& out) { return integerConvFlops(in, 3, out); };
  r.add(std::move(s));
}

}  // namespace

void registerQuantizeOps(OpRegistry& r) {
  addMatMulInteger(r);
  addConvInteger(r);
  addQLinearMatMul(r);
  addQLinearConv(r);
  addQuantizeLinear(r);
  addDequantizeLinear(r);
  addDynamicQuantizeLinear(r);
}

}  // namespace collage
