// Random ops: Bernoulli, RandomUniformLike, RandomNormalLike, RandomUniform,
// RandomNormal. PyTorch exports them for dropout-like sampling and noise.
//
// Their outputs are draws, so nothing can compare them value by value with
// another implementation (ONNX's own test data comes from numpy's
// generator): the conformance runner checks their type, shape and range
// only, and counts such cases as skipped, not passed. The importer never
// folds them (isNondeterministic). With a `seed` attribute the draws are
// reproducible from run to run (std::mt19937_64 seeded with it); without
// one, each run draws afresh.
#include <cstring>
#include <random>

#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

std::mt19937_64 generatorFor(const Node& node) {
  if (node.attrs.has("seed")) {
    // The seed is a float attribute: its bits make the generator's seed.
    const float seed = node.attrs.getFloat("seed");
    uint32_t bits;
    std::memcpy(&bits, &seed, sizeof bits);
    return std::mt19937_64(bits);
  }
  return std::mt19937_64(std::random_device{}());
}

// The dtype attribute's element type, or `fallback` without one.
ElementType dtypeOr(const Node& node, ElementType fallback) {
  if (!node.attrs.has("dtype")) return fallback;
  const ElementType t = elementTypeFromOnnx(static_cast<int32_t>(node.attrs.getInt("dtype")));
  if (t == ElementType::Undefined) throw unsupportedType(node, t);
  return t;
}

template <class Draw>
void fill(const Node& node, Tensor& out, Draw draw) {
  visitType<kNumeric | kBoolType>(node, out.elementType(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* y = out.data<T>();
    for (int64_t i = 0; i < out.numElements(); ++i) y[i] = static_cast<T>(draw(i));
  });
}

void addBernoulli(OpRegistry& r) {
  OpSchema s;
  s.name = "Bernoulli";
  s.kind = OpKind::Opaque;
  s.attributes = {{"dtype", AttributeType::Int, std::nullopt}, {"seed", AttributeType::Float, std::nullopt}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kFloatTypes, in[0].elementType);
    const ElementType t = dtypeOr(node, in[0].elementType);
    requireTypeIn(node, kNumeric | kBoolType, t);
    return Types{{t, in[0].shape}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    std::mt19937_64 gen = generatorFor(node);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const std::vector<double> p = in[0]->toDoubles();
    for (double v : p)
      if (!(v >= 0.0 && v <= 1.0))
        throw Error(nodeLabel(node) + "probability " + std::to_string(v) + " is outside [0, 1]");
    fill(node, *out[0], [&](int64_t i) { return u(gen) < p[i] ? 1.0 : 0.0; });
  };
  r.add(std::move(s));
}

// RandomUniformLike / RandomNormalLike: the input gives the shape (and the
// type, unless dtype says otherwise); RandomUniform / RandomNormal take the
// shape from an attribute.
void addRandom(OpRegistry& r, const std::string& name, bool normal, bool like) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::Opaque;
  s.minInputs = s.maxInputs = like ? 1 : 0;
  s.attributes = {{"dtype", AttributeType::Int, like ? std::nullopt : std::optional<Attribute>(int64_t{1})},
                  {"seed", AttributeType::Float, std::nullopt}};
  if (normal) {
    s.attributes.push_back({"mean", AttributeType::Float, Attribute(0.0f)});
    s.attributes.push_back({"scale", AttributeType::Float, Attribute(1.0f)});
  } else {
    s.attributes.push_back({"low", AttributeType::Float, Attribute(0.0f)});
    s.attributes.push_back({"high", AttributeType::Float, Attribute(1.0f)});
  }
  if (!like) s.attributes.push_back({"shape", AttributeType::Ints, std::nullopt, true});
  s.infer = [like](const Node& node, const Types& in) {
    const ElementType t = dtypeOr(node, like ? in[0].elementType : ElementType::Float32);
    requireTypeIn(node, kFloatTypes, t);
    Shape shape = like ? in[0].shape : node.attrs.getInts("shape");
    for (int64_t d : shape)
      if (d < 0) throw Error(nodeLabel(node) + "shape " + shapeToString(shape) + " is negative");
    return Types{{t, shape}};
  };
  s.reference = [normal](const Node& node, const Inputs&, const Outputs& out) {
    std::mt19937_64 gen = generatorFor(node);
    if (normal) {
      std::normal_distribution<double> d(node.attrs.getFloat("mean", 0.0f), node.attrs.getFloat("scale", 1.0f));
      fill(node, *out[0], [&](int64_t) { return d(gen); });
    } else {
      const double low = node.attrs.getFloat("low", 0.0f), high = node.attrs.getFloat("high", 1.0f);
      if (!(low <= high))
        throw Error(nodeLabel(node) + "low " + std::to_string(low) + " is above high " + std::to_string(high));
      std::uniform_real_distribution<double> d(low, high);
      fill(node, *out[0], [&](int64_t) { return d(gen); });
    }
  };
  r.add(std::move(s));
}

}  // namespace

void registerRandomOps(OpRegistry& r) {
  addBernoulli(r);
  addRandom(r, "RandomUniformLike", false, true);
  addRandom(r, "RandomNormalLike", true, true);
  addRandom(r, "RandomUniform", false, false);
  addRandom(r, "RandomNormal", true, false);
}

}  // namespace collage
