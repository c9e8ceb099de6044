// Ops that only appear in shape computations and are folded into constants at
// import: Shape, Size, ConstantOfShape, Range.
//
// ConstantOfShape and Range have an output shape that depends on input
// *values*, which shape inference (types only) cannot see. Their infer returns
// a placeholder shape of the right rank with zero-sized dimensions, and their
// reference kernel replaces the pre-allocated output with one of the real
// shape. They are meant to be evaluated on constant inputs (folding); take the
// type of the folded tensor, not the inferred one.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/ops/op_registry.h"
#include "core/ops/op_helpers.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

// Shape's [start, end) after ONNX's clamping (negative counts from the back).
std::pair<int64_t, int64_t> shapeRange(const Node& node, int64_t rank) {
  auto clampAxis = [rank](int64_t a) {
    if (a < 0) a += rank;
    return std::clamp<int64_t>(a, 0, rank);
  };
  const int64_t start = clampAxis(node.attrs.getInt("start", 0));
  const int64_t end = clampAxis(node.attrs.getInt("end", rank));
  return {start, std::max(start, end)};
}

void addShape(OpRegistry& r) {
  OpSchema s;
  s.name = "Shape";
  s.kind = OpKind::Opaque;
  s.attributes = {{"start", AttributeType::Int, Attribute(int64_t{0})},
                  {"end", AttributeType::Int, std::nullopt}};
  s.infer = [](const Node& node, const Types& in) {
    auto [start, end] = shapeRange(node, in[0].rank());
    return Types{{ElementType::Int64, {end - start}}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    auto [start, end] = shapeRange(node, in[0]->rank());
    for (int64_t d = start; d < end; ++d) out[0]->data<int64_t>()[d - start] = in[0]->shape()[d];
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

void addSize(OpRegistry& r) {
  OpSchema s;
  s.name = "Size";
  s.kind = OpKind::Opaque;
  s.infer = [](const Node&, const Types&) { return Types{{ElementType::Int64, {}}}; };
  s.reference = [](const Node&, const Inputs& in, const Outputs& out) {
    out[0]->data<int64_t>()[0] = in[0]->numElements();
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

void addConstantOfShape(OpRegistry& r) {
  OpSchema s;
  s.name = "ConstantOfShape";
  s.kind = OpKind::Opaque;
  s.valueShapedInputs = {0};
  s.attributes = {{"value", AttributeType::Tensor, Attribute(Tensor::fromFloats({1}, {0.0f}))}};
  s.infer = [](const Node& node, const Types& in) {
    if (in[0].elementType != ElementType::Int64 || in[0].rank() != 1)
      throw Error(nodeLabel(node) + "the shape input must be a 1-D int64 tensor, not " +
                  in[0].toString());
    const Tensor& value = node.attrs.getTensor("value");
    if (value.numElements() != 1 || elementSize(value.elementType()) == 0)
      throw Error(nodeLabel(node) + "value must hold one element, not " + value.type().toString());
    return Types{{value.elementType(), Shape(static_cast<size_t>(in[0].shape[0]), 0)}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Tensor& value = node.attrs.getTensor("value");
    const Shape shape = in[0]->toInts();
    for (int64_t d : shape)
      if (d < 0)
        throw Error(nodeLabel(node) + "shape " + shapeToString(shape) + " has a negative size");
    Tensor result(value.elementType(), shape);
    const size_t elem = elementSize(value.elementType());
    auto* dst = static_cast<char*>(result.raw());
    for (int64_t i = 0; i < result.numElements(); ++i)
      std::memcpy(dst + i * elem, value.raw(), elem);
    *out[0] = std::move(result);
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

constexpr unsigned kRangeTypes = kFloatTypes | kSignedTypes;

void addRange(OpRegistry& r) {
  OpSchema s;
  s.name = "Range";
  s.kind = OpKind::Opaque;
  s.valueShapedInputs = {0, 1, 2};
  s.minInputs = s.maxInputs = 3;
  s.infer = [](const Node& node, const Types& in) {
    for (const TensorType& t : in) {
      if (t.elementType != in[0].elementType || t.numElements() != 1)
        throw Error(nodeLabel(node) + "start, limit and delta must be scalars of one type, not " +
                    in[0].toString() + ", " + in[1].toString() + ", " + in[2].toString());
    }
    requireTypeIn(node, kRangeTypes, in[0].elementType);
    return Types{{in[0].elementType, {0}}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    visitType<kRangeTypes>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T start = in[0]->data<T>()[0], limit = in[1]->data<T>()[0], delta = in[2]->data<T>()[0];
      if (delta == T(0)) throw Error(nodeLabel(node) + "delta is 0");
      const double steps = std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                                     static_cast<double>(delta));
      const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(steps));
      Tensor result(in[0]->elementType(), {n});
      // start + i * delta, as the ONNX spec's loop computes it.
      T* y = result.data<T>();
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(start + static_cast<T>(i) * delta);
      *out[0] = std::move(result);
    });
  };
  s.flops = zeroFlops;
  r.add(std::move(s));
}

}  // namespace

void registerMiscOps(OpRegistry& r) {
  addShape(r);
  addSize(r);
  addConstantOfShape(r);
  addRange(r);
}

}  // namespace collage
