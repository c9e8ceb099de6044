// ONNX Runtime's quantised contrib ops (domain com.microsoft), which its
// quantiser writes in QOperator form around QLinearConv / QLinearMatMul:
//
//   com.microsoft.QLinearAdd, QLinearMul        A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale, C_zp?
//   com.microsoft.QLinearGlobalAveragePool      X, x_scale, x_zp?, y_scale, y_zp?   (channels_last)
//   com.microsoft.QLinearAveragePool            the same, AveragePool's attributes and channels_last
//   com.microsoft.QLinearLeakyRelu              X, X_scale, X_zp?, Y_scale, Y_zp?   (alpha)
//   com.microsoft.QLinearSigmoid                X, X_scale, X_zp?, Y_scale, Y_zp?
//   com.microsoft.QLinearConcat                 Y_scale, Y_zp?, (X, X_scale, X_zp?)...   (axis)
//   com.microsoft.QGemm                         A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?
//
// The registry knows them under the domain-qualified name that the importer
// gives every node outside the default domain (core/onnx/importer.h,
// qualifiedOpName). Scales and zero points are per tensor (QGemm's B's also
// per column); a missing zero point is 0; the quantised type (uint8 or int8)
// is A's / X's.
//
// The arithmetic is ONNX Runtime's x86 kernels' (MLAS), in float32, so that
// the integers agree with it, halfway cases included:
//
//   Add:  rA = A_scale / C_scale, rB = B_scale / C_scale,
//         base = C_zp - (rA * A_zp + rB * B_zp),
//         C = saturate(round_half_even(fma(a, rA, fma(b, rB, base))))
//         where an operand is one value along the innermost run (a
//         broadcast scalar), MLAS folds it into the base first, unfused:
//         base' = base + a * rA, C = fma(b, rB, base') (and so for b).
//   Mul:  C = saturate(round_half_even(((a - A_zp) * (b - B_zp)) * r + C_zp)),
//         r = A_scale * B_scale / C_scale (the product exact in int32).
//   GlobalAveragePool: acc = sum(x) - x_zp * n over the n spatial values,
//         y = saturate(round_half_even(acc * (x_scale / (y_scale * n))) + y_zp)
//         (requantize.h, as QLinearConv).
//   LeakyRelu, Sigmoid: v = f((x - X_zp) * X_scale),
//         y = saturate(round_half_even(v / Y_scale) + Y_zp) (ORT builds a
//         256-entry table of these values; its Sigmoid is MLAS's logistic
//         approximation, which may differ from 1 / (1 + exp(-v)) in the last
//         bit, and so by one step at a halfway case).
//
// This file is compiled with -ffp-contract=off (core/CMakeLists.txt): the
// fused multiply-adds above are written as std::fma, every other product is
// rounded on its own, as in MLAS's intrinsics.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/broadcast.h"
#include "core/ops/conv_geometry.h"
#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/requantize.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

constexpr int kVariadic = std::numeric_limits<int>::max();

bool quantizedType(ElementType t) { return t == ElementType::UInt8 || t == ElementType::Int8; }

bool present(const Types& in, size_t i) {
  return i < in.size() && in[i].elementType != ElementType::Undefined;
}

template <class F>
void visitQuantized(const Node& node, ElementType t, F f) {
  if (t == ElementType::UInt8) return f(TypeTag<uint8_t>{});
  if (t == ElementType::Int8) return f(TypeTag<int8_t>{});
  throw unsupportedType(node, t);
}

// A per-tensor scale (float32) or zero point (of type q): one value.
void requireScalar(const Node& node, const Types& in, size_t i, ElementType type, const char* what) {
  if (!present(in, i)) return;
  if (in[i].elementType != type || in[i].numElements() != 1 || in[i].rank() > 1)
    throw Unsupported(nodeLabel(node) + what + " " + in[i].toString() + " must be a " +
                      std::string(elementTypeName(type)) + " scalar (per-tensor quantisation)");
}

float scaleAt(const Inputs& in, size_t i) { return in[i]->toFloats()[0]; }

int32_t zeroPointAt(const Inputs& in, size_t i) {
  return i < in.size() && in[i] ? static_cast<int32_t>(in[i]->toInts()[0]) : 0;
}

template <class Q>
Q saturateRounded(float v) {
  const float lo = static_cast<float>(std::numeric_limits<Q>::min());
  const float hi = static_cast<float>(std::numeric_limits<Q>::max());
  return static_cast<Q>(std::min(std::max(std::nearbyint(v), lo), hi));
}

// ---- QLinearAdd, QLinearMul: two quantised operands, numpy broadcasting ----

enum class Binary { Add, Mul };

Types inferBinary(const Node& node, const Types& in) {
  const ElementType q = in[0].elementType;
  if (!quantizedType(q)) throw unsupportedType(node, q);
  if (in[3].elementType != q)
    throw Error(nodeLabel(node) + "B " + in[3].toString() + " must have A's type " +
                std::string(elementTypeName(q)));
  requireScalar(node, in, 1, ElementType::Float32, "A_scale");
  requireScalar(node, in, 2, q, "A_zero_point");
  requireScalar(node, in, 4, ElementType::Float32, "B_scale");
  requireScalar(node, in, 5, q, "B_zero_point");
  requireScalar(node, in, 6, ElementType::Float32, "C_scale");
  requireScalar(node, in, 7, q, "C_zero_point");
  return Types{{q, broadcastShapes(node, {in[0].shape, in[3].shape})}};
}

void runBinary(Binary op, const Node& node, const Inputs& in, const Outputs& out) {
  const float sa = scaleAt(in, 1), sb = scaleAt(in, 4), sc = scaleAt(in, 6);
  const int32_t za = zeroPointAt(in, 2), zb = zeroPointAt(in, 5), zc = zeroPointAt(in, 7);
  const StridedPlan plan = makeBroadcastPlan(out[0]->shape(), {in[0]->shape(), in[3]->shape()});
  visitQuantized(node, out[0]->elementType(), [&](auto tag) {
    using Q = typename decltype(tag)::type;
    const Q* a = in[0]->data<Q>();
    const Q* b = in[3]->data<Q>();
    Q* c = out[0]->data<Q>();
    const int64_t sa1 = plan.innerStride(0), sb1 = plan.innerStride(1);
    if (op == Binary::Add) {
      const float ra = sa / sc, rb = sb / sc;
      const float base = static_cast<float>(zc) - (ra * static_cast<float>(za) + rb * static_cast<float>(zb));
      forEachRow(plan, [&](int64_t o, const int64_t* off, int64_t n) {
        const Q* ar = a + off[0];
        const Q* br = b + off[1];
        if (sa1 == 0 && n > 1) {
          const float fixed = base + static_cast<float>(ar[0]) * ra;
          for (int64_t j = 0; j < n; ++j)
            c[o + j] = saturateRounded<Q>(std::fma(static_cast<float>(br[j * sb1]), rb, fixed));
        } else if (sb1 == 0 && n > 1) {
          const float fixed = base + static_cast<float>(br[0]) * rb;
          for (int64_t j = 0; j < n; ++j)
            c[o + j] = saturateRounded<Q>(std::fma(static_cast<float>(ar[j * sa1]), ra, fixed));
        } else {
          for (int64_t j = 0; j < n; ++j) {
            const float v = std::fma(static_cast<float>(br[j * sb1]), rb, base);
            c[o + j] = saturateRounded<Q>(std::fma(static_cast<float>(ar[j * sa1]), ra, v));
          }
        }
      });
    } else {
      const float r = requantizeScale(sa, sb, sc);
      forEachRow(plan, [&](int64_t o, const int64_t* off, int64_t n) {
        for (int64_t j = 0; j < n; ++j) {
          const int32_t p = (static_cast<int32_t>(a[off[0] + j * sa1]) - za) *
                            (static_cast<int32_t>(b[off[1] + j * sb1]) - zb);
          c[o + j] = saturateRounded<Q>(static_cast<float>(p) * r + static_cast<float>(zc));
        }
      });
    }
  });
}

void addBinary(OpRegistry& r, const char* name, Binary op) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::Broadcast;
  s.minInputs = 7;
  s.maxInputs = 8;
  s.infer = inferBinary;
  s.reference = [op](const Node& node, const Inputs& in, const Outputs& out) { runBinary(op, node, in, out); };
  // Per element: two rescales and the sum (Add) or the product and one rescale (Mul).
  s.flops = [op](const Node&, const Types&, const Types& out) {
    return static_cast<double>(out[0].numElements()) * (op == Binary::Add ? 4.0 : 3.0);
  };
  r.add(std::move(s));
}

// ---- QLinearGlobalAveragePool ----

void addQLinearGlobalAveragePool(OpRegistry& r) {
  OpSchema s;
  s.name = "com.microsoft.QLinearGlobalAveragePool";
  s.kind = OpKind::Anchor;  // as GlobalAveragePool
  s.minInputs = 4;
  s.maxInputs = 5;
  s.attributes = {{"channels_last", AttributeType::Int, Attribute(int64_t{0})}};
  s.infer = [](const Node& node, const Types& in) {
    const ElementType q = in[0].elementType;
    if (!quantizedType(q)) throw unsupportedType(node, q);
    if (in[0].rank() < 3)
      throw Error(nodeLabel(node) + "X " + in[0].toString() + " must have rank >= 3 (N, C, spatial...)");
    requireScalar(node, in, 1, ElementType::Float32, "x_scale");
    requireScalar(node, in, 2, q, "x_zero_point");
    requireScalar(node, in, 3, ElementType::Float32, "y_scale");
    requireScalar(node, in, 4, q, "y_zero_point");
    Shape y(in[0].shape.size(), 1);
    y[0] = in[0].shape[0];
    const bool last = node.attrs.getInt("channels_last", 0) != 0;
    if (last) y.back() = in[0].shape.back();
    else y[1] = in[0].shape[1];
    return Types{{q, y}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& xs = in[0]->shape();
    const bool last = node.attrs.getInt("channels_last", 0) != 0;
    const int64_t N = xs[0];
    const int64_t C = last ? xs.back() : xs[1];
    const int64_t image = in[0]->numElements() / std::max<int64_t>(N * C, 1);
    const int64_t zx = zeroPointAt(in, 2);
    const float zy = static_cast<float>(zeroPointAt(in, 4));
    const float scale = scaleAt(in, 1) / (scaleAt(in, 3) * static_cast<float>(image));
    visitQuantized(node, out[0]->elementType(), [&](auto tag) {
      using Q = typename decltype(tag)::type;
      const Q* x = in[0]->data<Q>();
      Q* y = out[0]->data<Q>();
      const float lo = std::numeric_limits<Q>::min(), hi = std::numeric_limits<Q>::max();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c) {
          int64_t acc = -zx * image;
          for (int64_t i = 0; i < image; ++i)
            acc += x[last ? (n * image + i) * C + c : (n * C + c) * image + i];
          y[n * C + c] = static_cast<Q>(requantizeValue(acc, scale, zy, lo, hi));
        }
    });
  };
  s.flops = [](const Node&, const Types& in, const Types&) { return static_cast<double>(in[0].numElements()); };
  r.add(std::move(s));
}

// ---- QLinearAveragePool: X, x_scale, x_zp?, y_scale, y_zp? (AveragePool's attributes, channels_last) ----
// ORT averages in float: v = x_scale * (x - x_zp) summed over the window's
// elements inside X in row-major order, divided by the count (the kernel's
// size with count_include_pad), y = saturate(round_half_even(v / y_scale +
// y_zp)). A window covering all of X without padding is a global pool,
// which ORT computes in integers (QLinearGlobalAveragePool above).

// [N, C, spatial...] <-> [N, spatial..., C].
Shape channelsFirst(Shape s) {
  const int64_t c = s.back();
  s.pop_back();
  s.insert(s.begin() + 1, c);
  return s;
}

Shape channelsLast(Shape s) {
  const int64_t c = s[1];
  s.erase(s.begin() + 1);
  s.push_back(c);
  return s;
}

ConvGeometry averagePoolGeometry(const Node& node, const TensorType& x) {
  if (x.rank() < 3 || x.rank() > 5)
    throw Unsupported(nodeLabel(node) + "X " + x.toString() + " must have 1 to 3 spatial dimensions");
  const bool last = node.attrs.getInt("channels_last", 0) != 0;
  ConvGeometry g = ConvGeometry::pool(node, last ? channelsFirst(x.shape) : x.shape);
  for (int64_t d : g.dilations)
    if (d != 1) throw Unsupported(nodeLabel(node) + "dilations are not supported (ONNX Runtime ignores them)");
  return g;
}

void addQLinearAveragePool(OpRegistry& r) {
  OpSchema s;
  s.name = "com.microsoft.QLinearAveragePool";
  s.kind = OpKind::Anchor;
  s.minInputs = 4;
  s.maxInputs = 5;
  s.attributes = {
      {"auto_pad", AttributeType::String, Attribute(std::string("NOTSET"))},
      {"ceil_mode", AttributeType::Int, Attribute(int64_t{0})},
      {"channels_last", AttributeType::Int, Attribute(int64_t{0})},
      {"count_include_pad", AttributeType::Int, Attribute(int64_t{0})},
      {"kernel_shape", AttributeType::Ints, std::nullopt, true},
      {"pads", AttributeType::Ints, std::nullopt},
      {"strides", AttributeType::Ints, std::nullopt},
  };
  s.infer = [](const Node& node, const Types& in) {
    const ElementType q = in[0].elementType;
    if (!quantizedType(q)) throw unsupportedType(node, q);
    requireScalar(node, in, 1, ElementType::Float32, "x_scale");
    requireScalar(node, in, 2, q, "x_zero_point");
    requireScalar(node, in, 3, ElementType::Float32, "y_scale");
    requireScalar(node, in, 4, q, "y_zero_point");
    const Shape y = averagePoolGeometry(node, in[0]).outputShape();
    return Types{{q, node.attrs.getInt("channels_last", 0) != 0 ? channelsLast(y) : y}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const bool last = node.attrs.getInt("channels_last", 0) != 0;
    const ConvGeometry g0 = averagePoolGeometry(node, in[0]->type());
    const bool global = g0.kernel == g0.inputSpatial &&
                        std::all_of(g0.padsBegin.begin(), g0.padsBegin.end(), [](int64_t p) { return p == 0; }) &&
                        std::all_of(g0.padsEnd.begin(), g0.padsEnd.end(), [](int64_t p) { return p == 0; });
    if (global) {
      Node gap = node;
      gap.op = "com.microsoft.QLinearGlobalAveragePool";
      OpRegistry::instance().get(gap.op).reference(gap, in, out);
      return;
    }
    const ConvGeometry g = g0.expandedTo(3);
    const bool includePad = node.attrs.getInt("count_include_pad", 0) != 0;
    const float sx = scaleAt(in, 1), sy = scaleAt(in, 3);
    const int32_t zx = zeroPointAt(in, 2);
    const float zy = static_cast<float>(zeroPointAt(in, 4));
    const int64_t C = g.inChannels;
    const int64_t ID = g.inputSpatial[0], IH = g.inputSpatial[1], IW = g.inputSpatial[2];
    const int64_t OD = g.outputSpatial[0], OH = g.outputSpatial[1], OW = g.outputSpatial[2];
    // Element (n, c, spatial index i) of X or Y in its layout.
    auto at = [&](int64_t n, int64_t c, int64_t i, int64_t plane) {
      return last ? (n * plane + i) * C + c : (n * C + c) * plane + i;
    };
    visitQuantized(node, out[0]->elementType(), [&](auto tag) {
      using Q = typename decltype(tag)::type;
      const Q* x = in[0]->data<Q>();
      Q* y = out[0]->data<Q>();
      const float lo = std::numeric_limits<Q>::min(), hi = std::numeric_limits<Q>::max();
      for (int64_t n = 0; n < g.batch; ++n)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t od = 0; od < OD; ++od)
            for (int64_t oh = 0; oh < OH; ++oh)
              for (int64_t ow = 0; ow < OW; ++ow) {
                int64_t b[3], e[3];
                const int64_t o[3] = {od, oh, ow}, size[3] = {ID, IH, IW};
                for (int k = 0; k < 3; ++k) {
                  b[k] = o[k] * g.strides[k] - g.padsBegin[k];
                  e[k] = std::min(b[k] + g.kernel[k], size[k]);
                  b[k] = std::max<int64_t>(b[k], 0);
                }
                float sum = 0;
                for (int64_t d = b[0]; d < e[0]; ++d)
                  for (int64_t h = b[1]; h < e[1]; ++h)
                    for (int64_t w = b[2]; w < e[2]; ++w)
                      sum += sx * static_cast<float>(static_cast<int32_t>(x[at(n, c, (d * IH + h) * IW + w, ID * IH * IW)]) - zx);
                const int64_t count = includePad ? g.kernelSize() : (e[0] - b[0]) * (e[1] - b[1]) * (e[2] - b[2]);
                sum /= static_cast<float>(count);
                const float v = std::nearbyint(sum / sy + zy);
                y[at(n, c, (od * OH + oh) * OW + ow, OD * OH * OW)] = static_cast<Q>(std::min(std::max(v, lo), hi));
              }
    });
  };
  s.flops = [](const Node&, const Types&, const Types& out) {
    return static_cast<double>(out[0].numElements());
  };
  r.add(std::move(s));
}

// ---- QLinearLeakyRelu, QLinearSigmoid: a float function between quantisers ----

// y = quantize(f(dequantize(x))); ORT tabulates the 256 values, which is the same.
using FloatFn = float (*)(const Node&, float);

void addQLinearUnary(OpRegistry& r, const char* name, FloatFn fn, std::vector<AttributeSpec> attributes,
                     double flopsPerElement) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::ElemWise;
  s.minInputs = 4;
  s.maxInputs = 5;
  s.attributes = std::move(attributes);
  s.infer = [](const Node& node, const Types& in) {
    const ElementType q = in[0].elementType;
    if (!quantizedType(q)) throw unsupportedType(node, q);
    requireScalar(node, in, 1, ElementType::Float32, "X_scale");
    requireScalar(node, in, 2, q, "X_zero_point");
    requireScalar(node, in, 3, ElementType::Float32, "Y_scale");
    requireScalar(node, in, 4, q, "Y_zero_point");
    return Types{{q, in[0].shape}};
  };
  s.reference = [fn](const Node& node, const Inputs& in, const Outputs& out) {
    const float sx = scaleAt(in, 1), sy = scaleAt(in, 3);
    const int32_t zx = zeroPointAt(in, 2);
    const float zy = static_cast<float>(zeroPointAt(in, 4));
    visitQuantized(node, out[0]->elementType(), [&](auto tag) {
      using Q = typename decltype(tag)::type;
      const Q* x = in[0]->data<Q>();
      Q* y = out[0]->data<Q>();
      const int64_t n = in[0]->numElements();
      for (int64_t i = 0; i < n; ++i) {
        const float v = fn(node, static_cast<float>(static_cast<int32_t>(x[i]) - zx) * sx);
        y[i] = saturateRounded<Q>(std::nearbyint(v / sy) + zy);
      }
    });
  };
  s.flops = [flopsPerElement](const Node&, const Types& in, const Types&) {
    return flopsPerElement * static_cast<double>(in[0].numElements());
  };
  r.add(std::move(s));
}

float leakyRelu(const Node& node, float v) { return v < 0 ? v * node.attrs.getFloat("alpha", 0.01f) : v; }

float sigmoid(const Node&, float v) { return 1.0f / (1.0f + std::exp(-v)); }

// ---- QLinearConcat: Y_scale, Y_zp?, then (X, X_scale, X_zp?) per input ----
// An input whose scale and zero point are the output's is copied; any other
// is requantised value by value, y = saturate(round_half_even((x - X_zp) *
// X_scale / Y_scale) + Y_zp) (ORT's table of the same values).

void addQLinearConcat(OpRegistry& r) {
  OpSchema s;
  s.name = "com.microsoft.QLinearConcat";
  s.kind = OpKind::Injective;
  s.minInputs = 5;
  s.maxInputs = kVariadic;
  s.attributes = {{"axis", AttributeType::Int, std::nullopt, true}};
  s.infer = [](const Node& node, const Types& in) {
    if ((in.size() - 2) % 3 != 0)
      throw Error(nodeLabel(node) + "takes Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input; got " +
                  std::to_string(in.size()) + " inputs");
    const ElementType q = in[2].elementType;
    if (!quantizedType(q)) throw unsupportedType(node, q);
    requireScalar(node, in, 0, ElementType::Float32, "Y_scale");
    requireScalar(node, in, 1, q, "Y_zero_point");
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis"), in[2].rank());
    Shape out = in[2].shape;
    for (size_t i = 2; i < in.size(); i += 3) {
      if (in[i].elementType != q || in[i].rank() != in[2].rank())
        throw Error(nodeLabel(node) + "input " + in[i].toString() + " must be " +
                    std::string(elementTypeName(q)) + " of rank " + std::to_string(in[2].rank()));
      for (int64_t d = 0; d < in[i].rank(); ++d)
        if (d != axis && in[i].shape[d] != out[d])
          throw Error(nodeLabel(node) + "inputs " + in[2].toString() + " and " + in[i].toString() +
                      " differ off axis " + std::to_string(axis));
      if (i > 2) out[axis] += in[i].shape[axis];
      requireScalar(node, in, i + 1, ElementType::Float32, "X_scale");
      requireScalar(node, in, i + 2, q, "X_zero_point");
    }
    return Types{{q, out}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& ys = out[0]->shape();
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis"), static_cast<int64_t>(ys.size()));
    const int64_t outer = shapeProduct(ys, 0, axis);
    const int64_t inner = shapeProduct(ys, axis + 1, static_cast<int64_t>(ys.size()));
    const float sy = scaleAt(in, 0);
    const int32_t zy = zeroPointAt(in, 1);
    visitQuantized(node, out[0]->elementType(), [&](auto tag) {
      using Q = typename decltype(tag)::type;
      Q* y = out[0]->data<Q>();
      int64_t at = 0;  // this input's first index along the axis
      for (size_t i = 2; i < in.size(); i += 3) {
        const Q* x = in[i]->data<Q>();
        const float sx = scaleAt(in, i + 1);
        const int32_t zx = zeroPointAt(in, i + 2);
        const bool same = sx == sy && zx == zy;
        const int64_t len = in[i]->shape()[static_cast<size_t>(axis)] * inner;
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < len; ++j) {
            const Q v = x[o * len + j];
            y[(o * ys[axis] + at) * inner + j] =
                same ? v
                     : saturateRounded<Q>(std::nearbyint(static_cast<float>(static_cast<int32_t>(v) - zx) * sx / sy) +
                                          static_cast<float>(zy));
          }
        at += in[i]->shape()[static_cast<size_t>(axis)];
      }
    });
  };
  s.flops = [](const Node&, const Types&, const Types&) { return 0.0; };
  r.add(std::move(s));
}

// ---- QGemm: A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp? (alpha, transA, transB) ----
// acc = C (int32, broadcast to [M, N]) + sum_k (a - a_zp)(b - b_zp[n]),
// exact; scale[n] = alpha * a_scale * b_scale[n] (per column or per
// tensor), divided by y_scale where given. With y_scale and y_zp the output
// is requantized as QLinearMatMul's (requantize.h); without, it is float32
// acc * scale.

void addQGemm(OpRegistry& r) {
  OpSchema s;
  s.name = "com.microsoft.QGemm";
  s.kind = OpKind::Anchor;
  s.minInputs = 6;
  s.maxInputs = 9;
  s.attributes = {{"alpha", AttributeType::Float, Attribute(1.0f)},
                  {"transA", AttributeType::Int, Attribute(int64_t{0})},
                  {"transB", AttributeType::Int, Attribute(int64_t{0})}};
  s.infer = [](const Node& node, const Types& in) {
    const ElementType qa = in[0].elementType, qb = in[3].elementType;
    if (!quantizedType(qa)) throw unsupportedType(node, qa);
    if (!quantizedType(qb)) throw unsupportedType(node, qb);
    if (in[0].rank() != 2 || in[3].rank() != 2)
      throw Error(nodeLabel(node) + "A " + in[0].toString() + " and B " + in[3].toString() + " must be 2-D");
    const bool ta = node.attrs.getInt("transA", 0) != 0, tb = node.attrs.getInt("transB", 0) != 0;
    const int64_t M = in[0].shape[ta ? 1 : 0], K = in[0].shape[ta ? 0 : 1];
    const int64_t N = in[3].shape[tb ? 0 : 1];
    if (in[3].shape[tb ? 1 : 0] != K)
      throw Error(nodeLabel(node) + "inner dimensions differ: " + in[0].toString() + " x " + in[3].toString());
    if (!present(in, 1) || !present(in, 4)) throw Error(nodeLabel(node) + "a_scale and b_scale are required");
    requireScalar(node, in, 1, ElementType::Float32, "a_scale");
    requireScalar(node, in, 2, qa, "a_zero_point");
    for (size_t i : {size_t{4}, size_t{5}})
      if (present(in, i) && !(in[i].numElements() == 1 || (in[i].rank() == 1 && in[i].shape[0] == N)))
        throw Error(nodeLabel(node) + (i == 4 ? "b_scale " : "b_zero_point ") + in[i].toString() +
                    " must be a scalar or hold " + std::to_string(N) + " values");
    if (present(in, 4) && in[4].elementType != ElementType::Float32) throw unsupportedType(node, in[4].elementType);
    if (present(in, 5) && in[5].elementType != qb) throw unsupportedType(node, in[5].elementType);
    if (present(in, 6)) {
      if (in[6].elementType != ElementType::Int32) throw unsupportedType(node, in[6].elementType);
      broadcastShapes(node, {in[6].shape, Shape{M, N}});
    }
    if (!present(in, 7)) {
      if (present(in, 8)) throw Error(nodeLabel(node) + "y_zero_point without y_scale");
      return Types{{ElementType::Float32, Shape{M, N}}};
    }
    requireScalar(node, in, 7, ElementType::Float32, "y_scale");
    if (!present(in, 8))
      throw Unsupported(nodeLabel(node) + "a y_scale without y_zero_point (ONNX Runtime requantizes only with both)");
    requireScalar(node, in, 8, in[8].elementType, "y_zero_point");
    if (!quantizedType(in[8].elementType)) throw unsupportedType(node, in[8].elementType);
    return Types{{in[8].elementType, Shape{M, N}}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const bool ta = node.attrs.getInt("transA", 0) != 0, tb = node.attrs.getInt("transB", 0) != 0;
    const Shape& as = in[0]->shape();
    const int64_t M = out[0]->shape()[0], N = out[0]->shape()[1], K = as[ta ? 0 : 1];
    const std::vector<int64_t> a = in[0]->toInts(), b = in[3]->toInts();
    const int64_t za = zeroPointAt(in, 2);
    const std::vector<int64_t> zb = in[5] ? in[5]->toInts() : std::vector<int64_t>{0};
    std::vector<int64_t> acc(static_cast<size_t>(M * N), 0);
    if (in.size() > 6 && in[6]) {
      const std::vector<int64_t> c = in[6]->toInts();
      const StridedPlan plan = makeBroadcastPlan({M, N}, {in[6]->shape()});
      forEachRow(plan, [&](int64_t o, const int64_t* off, int64_t n) {
        for (int64_t j = 0; j < n; ++j) acc[static_cast<size_t>(o + j)] = c[static_cast<size_t>(off[0] + j * plan.innerStride(0))];
      });
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const int64_t zbj = zb[zb.size() > 1 ? static_cast<size_t>(j) : 0];
        int64_t sum = 0;
        for (int64_t k = 0; k < K; ++k)
          sum += (a[static_cast<size_t>(ta ? k * M + i : i * K + k)] - za) *
                 (b[static_cast<size_t>(tb ? j * K + k : k * N + j)] - zbj);
        acc[static_cast<size_t>(i * N + j)] += sum;
      }
    const float alpha = node.attrs.getFloat("alpha", 1.0f);
    const float sa = scaleAt(in, 1);
    const std::vector<float> sb = in[4]->toFloats();
    const bool requant = in.size() > 7 && in[7];
    std::vector<float> scale(sb.size());
    for (size_t j = 0; j < sb.size(); ++j) {
      scale[j] = alpha * sa * sb[j];
      if (requant) scale[j] /= scaleAt(in, 7);
    }
    auto scaleOf = [&](int64_t i) { return scale[scale.size() > 1 ? static_cast<size_t>(i % N) : 0]; };
    if (!requant) {
      float* y = out[0]->data<float>();
      for (int64_t i = 0; i < M * N; ++i) y[i] = static_cast<float>(acc[static_cast<size_t>(i)]) * scaleOf(i);
      return;
    }
    const float zy = static_cast<float>(zeroPointAt(in, 8));
    visitQuantized(node, out[0]->elementType(), [&](auto tag) {
      using Q = typename decltype(tag)::type;
      Q* y = out[0]->data<Q>();
      const float lo = std::numeric_limits<Q>::min(), hi = std::numeric_limits<Q>::max();
      for (int64_t i = 0; i < M * N; ++i)
        y[i] = static_cast<Q>(requantizeValue(acc[static_cast<size_t>(i)], scaleOf(i), zy, lo, hi));
    });
  };
  s.flops = [](const Node& node, const Types& in, const Types& out) {
    const int64_t K = in[0].shape[node.attrs.getInt("transA", 0) != 0 ? 0 : 1];
    return 2.0 * static_cast<double>(out[0].numElements()) * static_cast<double>(K);
  };
  r.add(std::move(s));
}

}  // namespace

void registerQLinearContribOps(OpRegistry& r) {
  addBinary(r, "com.microsoft.QLinearAdd", Binary::Add);
  addBinary(r, "com.microsoft.QLinearMul", Binary::Mul);
  addQLinearGlobalAveragePool(r);
  addQLinearAveragePool(r);
  addQLinearUnary(r, "com.microsoft.QLinearLeakyRelu", leakyRelu,
                  {{"alpha", AttributeType::Float, Attribute(0.01f)}}, 3.0);
  addQLinearUnary(r, "com.microsoft.QLinearSigmoid", sigmoid, {}, 6.0);
  addQLinearConcat(r);
  addQGemm(r);
}

}  // namespace collage
