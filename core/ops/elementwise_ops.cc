// Elementwise and broadcasting ops: unary math (Relu ... Gelu, trigonometric
// and hyperbolic functions), Clip, IsNaN/IsInf, Cast/CastLike, Identity,
// Dropout (inference), Not, the numpy-broadcasting binary ops (Add ... Mod,
// comparisons, logic, BitShift), the variadic Sum/Mean/Max/Min, PRelu, Where.
// Float16 is computed through float32 (see half_float.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/ops/op_registry.h"
#include "core/ops/elementwise_kernels.h"
#include "core/ops/half_float.h"
#include "core/ops/logistic.h"
#include "core/ops/op_helpers.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

constexpr int kVariadic = std::numeric_limits<int>::max();

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

AttributeSpec floatAttr(const std::string& name, float value) {
  return {name, AttributeType::Float, Attribute(value)};
}
AttributeSpec intAttr(const std::string& name, int64_t value) {
  return {name, AttributeType::Int, Attribute(value)};
}

// Wraps a stateless scalar function as a maker (node -> function).
template <class F>
auto plain(F f) {
  return [f](const Node&) { return f; };
}

// Types an op accepts in inference: float16 along with the float
// types, computed through float32 by withHalfSupport().
constexpr unsigned withHalf(unsigned set) { return (set & kFloatTypes) ? set | kHalfTypes : set; }

// Wraps a reference kernel: float16 inputs are given to it as
// float32 copies, and its float32 results are rounded into half outputs.
template <class Kernel>
ReferenceFn withHalfSupport(Kernel kernel) {
  return [kernel](const Node& node, const Inputs& in, const Outputs& out) {
    bool half = false;
    for (const Tensor* t : in) half = half || (t && isHalfType(t->elementType()));
    if (!half) return kernel(node, in, out);
    std::vector<Tensor> inStore, outStore;
    inStore.reserve(in.size());
    outStore.reserve(out.size());
    Inputs in32;
    Outputs out32;
    for (const Tensor* t : in) {
      if (t && isHalfType(t->elementType())) {
        inStore.push_back(halfToFloat32(*t));
        in32.push_back(&inStore.back());
      } else {
        in32.push_back(t);
      }
    }
    for (Tensor* t : out) {
      if (t && isHalfType(t->elementType())) {
        outStore.emplace_back(ElementType::Float32, t->shape());
        out32.push_back(&outStore.back());
      } else {
        out32.push_back(t);
      }
    }
    kernel(node, in32, out32);
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] && out32[i] != out[i]) float32ToHalf(*out32[i], *out[i]);
  };
}

// ---------------------------------------------------------------------------
// Unary ops: the output has the input's type; `maker(node)` returns the scalar
// function (reading the node's attributes once, not per element).

template <unsigned Set, class Maker>
void addUnary(OpRegistry& r, const std::string& name, std::vector<AttributeSpec> attrs, Maker maker,
              std::vector<ConstInput> constInputs = {}) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::ElemWise;
  s.attributes = std::move(attrs);
  s.constInputs = std::move(constInputs);
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, withHalf(Set), in[0].elementType);
    return Types{in[0]};
  };
  s.reference = withHalfSupport([maker](const Node& node, const Inputs& in, const Outputs& out) {
    const auto f = maker(node);
    visitType<Set>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      mapUnary<T, T>(*in[0], *out[0], f);
    });
  });
  r.add(std::move(s));
}

// float32 (and float16, computed through it) as ONNX Runtime rounds it
// (logistic.h); double exactly.
template <class T>
T sigmoid(T x) {
  if constexpr (std::is_same_v<T, float>)
    return ortLogistic(x);
  else
    return T(1) / (T(1) + std::exp(-x));
}

void registerUnaryOps(OpRegistry& r) {
  addUnary<kSignedNumeric>(r, "Relu", {},
                           plain([](auto x) { return x > decltype(x)(0) ? x : decltype(x)(0); }));
  addUnary<kSignedNumeric>(r, "Neg", {}, plain([](auto x) { return -x; }));
  addUnary<kNumeric>(r, "Abs", {}, plain([](auto x) {
                       using T = decltype(x);
                       if constexpr (std::is_unsigned_v<T>)
                         return x;
                       else
                         return x < T(0) ? T(-x) : x;
                     }));
  addUnary<kNumeric>(r, "Sign", {}, plain([](auto x) {
                       using T = decltype(x);
                       return static_cast<T>((T(0) < x) - (x < T(0)));
                     }));
  addUnary<kFloatTypes>(r, "Sigmoid", {}, plain([](auto x) { return sigmoid(x); }));
  addUnary<kFloatTypes>(r, "Tanh", {}, plain([](auto x) { return std::tanh(x); }));
  addUnary<kFloatTypes>(r, "Exp", {}, plain([](auto x) { return std::exp(x); }));
  addUnary<kFloatTypes>(r, "Log", {}, plain([](auto x) { return std::log(x); }));
  addUnary<kFloatTypes>(r, "Sqrt", {}, plain([](auto x) { return std::sqrt(x); }));
  addUnary<kFloatTypes>(r, "Reciprocal", {}, plain([](auto x) { return decltype(x)(1) / x; }));
  addUnary<kFloatTypes>(r, "Erf", {}, plain([](auto x) { return std::erf(x); }));
  addUnary<kFloatTypes>(r, "Floor", {}, plain([](auto x) { return std::floor(x); }));
  addUnary<kFloatTypes>(r, "Ceil", {}, plain([](auto x) { return std::ceil(x); }));
  addUnary<kFloatTypes>(r, "Sin", {}, plain([](auto x) { return std::sin(x); }));
  addUnary<kFloatTypes>(r, "Cos", {}, plain([](auto x) { return std::cos(x); }));
  addUnary<kFloatTypes>(r, "Softplus", {}, plain([](auto x) {
                          using T = decltype(x);
                          // log(1 + e^x) without overflowing e^x for large x.
                          return x > T(30) ? x : std::log1p(std::exp(x));
                        }));
  addUnary<kFloatTypes>(r, "Softsign", {},
                        plain([](auto x) { return x / (decltype(x)(1) + std::abs(x)); }));
  addUnary<kFloatTypes>(r, "HardSwish", {}, plain([](auto x) {
                          using T = decltype(x);
                          return x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5)));
                        }));
  addUnary<kBoolType>(r, "Not", {}, plain([](bool x) { return !x; }));
  addUnary<kFloatTypes>(r, "Tan", {}, plain([](auto x) { return std::tan(x); }));
  addUnary<kFloatTypes>(r, "Asin", {}, plain([](auto x) { return std::asin(x); }));
  addUnary<kFloatTypes>(r, "Acos", {}, plain([](auto x) { return std::acos(x); }));
  addUnary<kFloatTypes>(r, "Atan", {}, plain([](auto x) { return std::atan(x); }));
  addUnary<kFloatTypes>(r, "Sinh", {}, plain([](auto x) { return std::sinh(x); }));
  addUnary<kFloatTypes>(r, "Cosh", {}, plain([](auto x) { return std::cosh(x); }));
  addUnary<kFloatTypes>(r, "Asinh", {}, plain([](auto x) { return std::asinh(x); }));
  addUnary<kFloatTypes>(r, "Acosh", {}, plain([](auto x) { return std::acosh(x); }));
  addUnary<kFloatTypes>(r, "Atanh", {}, plain([](auto x) { return std::atanh(x); }));
  // Halves round to even, as ONNX specifies (nearbyint in the default rounding mode).
  addUnary<kFloatTypes>(r, "Round", {}, plain([](auto x) { return std::nearbyint(x); }));
  addUnary<kFloatTypes>(r, "Celu", {floatAttr("alpha", 1.0f)}, [](const Node& node) {
    const float alpha = node.attrs.getFloat("alpha");
    return [alpha](auto x) {
      using T = decltype(x);
      return std::max(T(0), x) + std::min(T(0), T(alpha) * (std::exp(x / T(alpha)) - T(1)));
    };
  });
  addUnary<kFloatTypes>(r, "ThresholdedRelu", {floatAttr("alpha", 1.0f)}, [](const Node& node) {
    const float alpha = node.attrs.getFloat("alpha");
    return [alpha](auto x) {
      using T = decltype(x);
      return x > T(alpha) ? x : T(0);
    };
  });
  addUnary<kSignedNumeric>(
      r, "Shrink", {floatAttr("bias", 0.0f), floatAttr("lambd", 0.5f)}, [](const Node& node) {
        const double bias = node.attrs.getFloat("bias");
        const double lambd = node.attrs.getFloat("lambd");
        return [bias, lambd](auto x) {
          using T = decltype(x);
          const double v = static_cast<double>(x);
          return static_cast<T>(v < -lambd ? v + bias : v > lambd ? v - bias : 0.0);
        };
      });

  addUnary<kFloatTypes>(r, "LeakyRelu", {floatAttr("alpha", 0.01f)}, [](const Node& node) {
    const float alpha = node.attrs.getFloat("alpha");
    return [alpha](auto x) {
      using T = decltype(x);
      return x < T(0) ? T(alpha) * x : x;
    };
  });
  addUnary<kFloatTypes>(r, "Elu", {floatAttr("alpha", 1.0f)}, [](const Node& node) {
    const float alpha = node.attrs.getFloat("alpha");
    return [alpha](auto x) {
      using T = decltype(x);
      return x < T(0) ? T(alpha) * (std::exp(x) - T(1)) : x;
    };
  });
  addUnary<kFloatTypes>(r, "Selu",
                        {floatAttr("alpha", 1.67326319217681884765625f),
                         floatAttr("gamma", 1.05070102214813232421875f)},
                        [](const Node& node) {
                          const float alpha = node.attrs.getFloat("alpha");
                          const float gamma = node.attrs.getFloat("gamma");
                          return [alpha, gamma](auto x) {
                            using T = decltype(x);
                            return x > T(0) ? T(gamma) * x
                                            : T(gamma) * (T(alpha) * std::exp(x) - T(alpha));
                          };
                        });
  addUnary<kFloatTypes>(r, "HardSigmoid", {floatAttr("alpha", 0.2f), floatAttr("beta", 0.5f)},
                        [](const Node& node) {
                          const float alpha = node.attrs.getFloat("alpha");
                          const float beta = node.attrs.getFloat("beta");
                          return [alpha, beta](auto x) {
                            using T = decltype(x);
                            return std::max(T(0), std::min(T(1), T(alpha) * x + T(beta)));
                          };
                        });
  addUnary<kFloatTypes>(
      r, "Gelu", {{"approximate", AttributeType::String, Attribute(std::string("none"))}},
      [](const Node& node) {
        const std::string mode = node.attrs.getString("approximate");
        if (mode != "none" && mode != "tanh")
          throw Error(nodeLabel(node) + "approximate must be 'none' or 'tanh', not '" + mode + "'");
        const bool useTanh = mode == "tanh";
        return [useTanh](auto x) {
          using T = decltype(x);
          if (useTanh) {
            const T c = T(0.7978845608028654);  // sqrt(2 / pi)
            return T(0.5) * x * (T(1) + std::tanh(c * (x + T(0.044715) * x * x * x)));
          }
          return T(0.5) * x * (T(1) + std::erf(x * T(0.7071067811865476)));
        };
      });

  // Clip: an absent min or max is no bound (opset 11+ passes them as optional
  // inputs, which the importer turns into these attributes).
  addUnary<kNumeric>(
      r, "Clip",
      {{"min", AttributeType::Float, std::nullopt}, {"max", AttributeType::Float, std::nullopt}},
      [](const Node& node) {
        const float inf = std::numeric_limits<float>::infinity();
        const double lo = node.attrs.getFloat("min", -inf);
        const double hi = node.attrs.getFloat("max", inf);
        // Compared in double so that integer bounds stay exact.
        return [lo, hi](auto x) {
          using T = decltype(x);
          double v = static_cast<double>(x);
          if (v < lo) v = lo;
          if (v > hi) v = hi;
          return static_cast<T>(v);
        };
      },
      {{1, "min", AttributeType::Float, false}, {2, "max", AttributeType::Float, false}});
}

// ---------------------------------------------------------------------------
// Identity, Dropout, Cast.

void copyBytes(const Tensor& in, Tensor& out) {
  if (in.byteSize()) std::memcpy(out.raw(), in.raw(), in.byteSize());
}

void requireMovable(const Node& node, ElementType t) {
  if (elementSize(t) == 0) throw unsupportedType(node, t);
}

void castInto(const Node& node, const Tensor& in, Tensor& out) {
  visitType<kAllTypes>(node, in.elementType(), [&](auto from) {
    using F = typename decltype(from)::type;
    visitType<kAllTypes>(node, out.elementType(), [&](auto to) {
      using T = typename decltype(to)::type;
      if constexpr (std::is_same_v<T, bool>)
        mapUnary<F, T>(in, out, [](F x) { return x != F(0); });
      else
        mapUnary<F, T>(in, out, [](F x) { return static_cast<T>(x); });
    });
  });
}

// IsNaN, IsInf: float -> bool.
template <class Maker>
void addPredicate(OpRegistry& r, const std::string& name, std::vector<AttributeSpec> attrs,
                  Maker maker) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::ElemWise;
  s.attributes = std::move(attrs);
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, withHalf(kFloatTypes), in[0].elementType);
    return Types{{ElementType::Bool, in[0].shape}};
  };
  s.reference = withHalfSupport([maker](const Node& node, const Inputs& in, const Outputs& out) {
    const auto f = maker(node);
    visitType<kFloatTypes>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      mapUnary<T, bool>(*in[0], *out[0], f);
    });
  });
  r.add(std::move(s));
}

void registerPredicates(OpRegistry& r) {
  addPredicate(r, "IsNaN", {}, plain([](auto x) { return std::isnan(x); }));
  addPredicate(r, "IsInf", {intAttr("detect_negative", 1), intAttr("detect_positive", 1)},
               [](const Node& node) {
                 const bool negative = node.attrs.getInt("detect_negative") != 0;
                 const bool positive = node.attrs.getInt("detect_positive") != 0;
                 return [negative, positive](auto x) {
                   return std::isinf(x) && (x < 0 ? negative : positive);
                 };
               });
}

void registerIdentityLikeOps(OpRegistry& r) {
  {
    OpSchema s;
    s.name = "Identity";
    s.kind = OpKind::ElemWise;
    s.takesSequences = true;
    s.infer = [](const Node& node, const Types& in) {
      requireMovable(node, in[0].elementType);
      return Types{in[0]};
    };
    s.reference = [](const Node&, const Inputs& in, const Outputs& out) {
      if (in[0]->isSequence()) {  // a sequence is a value: share its items
        *out[0] = *in[0];
        return;
      }
      copyBytes(*in[0], *out[0]);
    };
    s.flops = [](const Node&, const Types&, const Types&) { return 0.0; };
    r.add(std::move(s));
  }
  {
    // Inference only: the output is the input, the optional mask all true.
    // Training mode with a non-zero ratio is random and not covered.
    OpSchema s;
    s.name = "Dropout";
    s.kind = OpKind::ElemWise;
    s.maxOutputs = 2;
    s.attributes = {floatAttr("ratio", 0.5f),
                    intAttr("training_mode", 0),
                    {"seed", AttributeType::Int, std::nullopt}};
    s.constInputs = {{1, "ratio", AttributeType::Float, false},
                     {2, "training_mode", AttributeType::Int, false}};
    s.infer = [](const Node& node, const Types& in) {
      requireMovable(node, in[0].elementType);
      if (node.attrs.getInt("training_mode", 0) != 0 && node.attrs.getFloat("ratio", 0.5f) != 0)
        throw Unsupported(nodeLabel(node) + "training mode (random dropout) is not supported");
      Types out{in[0]};
      if (node.outputs.size() > 1) out.push_back({ElementType::Bool, in[0].shape});
      return out;
    };
    s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
      // training_mode and ratio may be run-time tensors, read into the
      // attributes only now: the import could not refuse them.
      if (node.attrs.getInt("training_mode", 0) != 0 && node.attrs.getFloat("ratio", 0.5f) != 0)
        throw Unsupported(nodeLabel(node) + "training mode (random dropout) is not supported");
      copyBytes(*in[0], *out[0]);
      if (out.size() > 1 && out[1]) {
        bool* mask = out[1]->data<bool>();
        for (int64_t i = 0; i < out[1]->numElements(); ++i) mask[i] = true;
      }
    };
    s.flops = [](const Node&, const Types&, const Types&) { return 0.0; };
    r.add(std::move(s));
  }
  {
    OpSchema s;
    s.name = "Cast";
    s.kind = OpKind::ElemWise;
    s.attributes = {{"to", AttributeType::Int, std::nullopt, true}};
    s.infer = [](const Node& node, const Types& in) {
      const int64_t code = node.attrs.getInt("to");
      const ElementType to = elementTypeFromOnnx(static_cast<int32_t>(code));
      if (to == ElementType::Undefined)
        throw Error(nodeLabel(node) + "'to' = " + std::to_string(code) +
                    " is not an ONNX element type");
      requireTypeIn(node, kAllTypes | kHalfTypes, in[0].elementType);
      requireTypeIn(node, kAllTypes | kHalfTypes, to);
      return Types{{to, in[0].shape}};
    };
    s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
      if (in[0]->elementType() == out[0]->elementType()) return copyBytes(*in[0], *out[0]);
      // Half types go through float32.
      Tensor in32, out32;
      const Tensor* src = in[0];
      if (isHalfType(src->elementType())) {
        in32 = halfToFloat32(*src);
        src = &in32;
      }
      Tensor* dst = out[0];
      if (isHalfType(dst->elementType())) {
        out32 = Tensor(ElementType::Float32, dst->shape());
        dst = &out32;
      }
      castInto(node, *src, *dst);
      if (dst != out[0]) float32ToHalf(*dst, *out[0]);
    };
    ReferenceFn cast = s.reference;
    r.add(std::move(s));

    // CastLike: Cast to the element type of the second input.
    OpSchema like;
    like.name = "CastLike";
    like.kind = OpKind::ElemWise;
    like.minInputs = like.maxInputs = 2;
    like.infer = [](const Node& node, const Types& in) {
      requireTypeIn(node, kAllTypes | kHalfTypes, in[0].elementType);
      requireTypeIn(node, kAllTypes | kHalfTypes, in[1].elementType);
      return Types{{in[1].elementType, in[0].shape}};
    };
    like.reference = [cast](const Node& node, const Inputs& in, const Outputs& out) {
      cast(node, {in[0]}, out);
    };
    r.add(std::move(like));
  }
}

// ---------------------------------------------------------------------------
// Broadcasting binary ops.

Shape broadcastInputs(const Node& node, const Types& in) {
  std::vector<Shape> shapes;
  for (const auto& t : in) shapes.push_back(t.shape);
  return broadcastShapes(node, shapes);
}

void requireSameTypes(const Node& node, const Types& in) {
  for (size_t i = 1; i < in.size(); ++i)
    if (in[i].elementType != in[0].elementType)
      throw Error(nodeLabel(node) + "inputs have different element types: " + in[0].toString() +
                  " and " + in[i].toString());
}

// out = f(a, b) over Set, the output type is In (the inputs' type) or Bool.
template <unsigned Set, bool BoolOut, class Maker>
void addBinary(OpRegistry& r, const std::string& name, std::vector<AttributeSpec> attrs,
               Maker maker) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::Broadcast;
  s.minInputs = s.maxInputs = 2;
  s.attributes = std::move(attrs);
  s.infer = [](const Node& node, const Types& in) {
    requireSameTypes(node, in);
    requireTypeIn(node, withHalf(Set), in[0].elementType);
    return Types{{BoolOut ? ElementType::Bool : in[0].elementType, broadcastInputs(node, in)}};
  };
  s.reference = withHalfSupport([maker](const Node& node, const Inputs& in, const Outputs& out) {
    const auto f = maker(node);
    visitType<Set>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using O = std::conditional_t<BoolOut, bool, T>;
      broadcastBinary<T, T, O>(*in[0], *in[1], *out[0], [&f](T a, T b) -> O { return f(a, b); });
    });
  });
  r.add(std::move(s));
}

// Sum, Mean, Max, Min: any number of inputs folded left to right.
template <unsigned Set, class F>
void addVariadic(OpRegistry& r, const std::string& name, F f, bool mean) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::Broadcast;
  s.minInputs = 1;
  s.maxInputs = kVariadic;
  s.infer = [](const Node& node, const Types& in) {
    requireSameTypes(node, in);
    requireTypeIn(node, withHalf(Set), in[0].elementType);
    return Types{{in[0].elementType, broadcastInputs(node, in)}};
  };
  s.reference = withHalfSupport([f, mean](const Node& node, const Inputs& in, const Outputs& out) {
    visitType<Set>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Tensor& y = *out[0];
      if (in.size() == 1) {
        copyBytes(*in[0], y);
      } else {
        broadcastBinary<T, T, T>(*in[0], *in[1], y, f);
        for (size_t k = 2; k < in.size(); ++k) broadcastBinary<T, T, T>(y, *in[k], y, f);
      }
      if (mean) {
        T* p = y.data<T>();
        const T n = static_cast<T>(in.size());
        for (int64_t i = 0; i < y.numElements(); ++i) p[i] /= n;
      }
    });
  });
  s.flops = [](const Node&, const Types& in, const Types& out) {
    return static_cast<double>(out[0].numElements()) * static_cast<double>(in.size() - 1);
  };
  r.add(std::move(s));
}

// Converts any numeric tensor to float64 (Pow's exponent may be of another type).
Tensor toFloat64(const Node& node, const Tensor& t) {
  Tensor d(ElementType::Float64, t.shape());
  visitType<kNumeric>(node, t.elementType(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    mapUnary<T, double>(t, d, [](T x) { return static_cast<double>(x); });
  });
  return d;
}

// -a in two's complement (defined for the minimum value too).
template <class T>
T wrappingNegate(T a) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(U(0) - static_cast<U>(a));
}

// a mod b with the sign of b (Python's %), or of a when cStyle (C's fmod).
template <class T>
T integerMod(T a, T b, bool cStyle) {
  if (b == T(0)) return T(0);  // undefined in ONNX; avoid the trap
  if constexpr (std::is_signed_v<T>)
    if (b == T(-1)) return T(0);  // MIN % -1 would trap
  T m = static_cast<T>(a % b);
  if constexpr (std::is_signed_v<T>)
    if (!cStyle && m != 0 && ((m < 0) != (b < 0))) m = static_cast<T>(m + b);
  return m;
}

void registerBinaryOps(OpRegistry& r) {
  auto add = [](auto a, auto b) { return static_cast<decltype(a)>(a + b); };
  auto sub = [](auto a, auto b) { return static_cast<decltype(a)>(a - b); };
  auto mul = [](auto a, auto b) { return static_cast<decltype(a)>(a * b); };
  auto max = [](auto a, auto b) { return a < b ? b : a; };
  auto min = [](auto a, auto b) { return b < a ? b : a; };

  addBinary<kNumeric, false>(r, "Add", {}, plain(add));
  addBinary<kNumeric, false>(r, "Sub", {}, plain(sub));
  addBinary<kNumeric, false>(r, "Mul", {}, plain(mul));
  // Integer division truncates toward zero, as ONNX's reference implementation
  // and ONNX Runtime do. Division by zero (undefined in ONNX) gives 0 and
  // MIN / -1 wraps, rather than trapping.
  addBinary<kNumeric, false>(r, "Div", {}, plain([](auto a, auto b) {
                               using T = decltype(a);
                               if constexpr (std::is_integral_v<T>) {
                                 if (b == T(0)) return T(0);
                                 if constexpr (std::is_signed_v<T>)
                                   if (b == T(-1)) return wrappingNegate(a);
                               }
                               return static_cast<T>(a / b);
                             }));
  addBinary<kNumeric, false>(r, "Mod", {intAttr("fmod", 0)}, [](const Node& node) {
    const bool cStyle = node.attrs.getInt("fmod") != 0;
    return [cStyle](auto a, auto b) {
      using T = decltype(a);
      if constexpr (std::is_integral_v<T>) {
        return integerMod<T>(a, b, cStyle);
      } else {
        T m = std::fmod(a, b);
        if (!cStyle && m != T(0) && ((m < T(0)) != (b < T(0)))) m += b;
        return m;
      }
    };
  });

  addBinary<kAllTypes, true>(r, "Equal", {}, plain([](auto a, auto b) { return a == b; }));
  addBinary<kNumeric, true>(r, "Less", {}, plain([](auto a, auto b) { return a < b; }));
  addBinary<kNumeric, true>(r, "Greater", {}, plain([](auto a, auto b) { return a > b; }));
  addBinary<kNumeric, true>(r, "LessOrEqual", {}, plain([](auto a, auto b) { return a <= b; }));
  addBinary<kNumeric, true>(r, "GreaterOrEqual", {}, plain([](auto a, auto b) { return a >= b; }));
  addBinary<kBoolType, true>(r, "And", {}, plain([](bool a, bool b) { return a && b; }));
  addBinary<kBoolType, true>(r, "Or", {}, plain([](bool a, bool b) { return a || b; }));
  addBinary<kBoolType, true>(r, "Xor", {}, plain([](bool a, bool b) { return a != b; }));
  addBinary<kUnsignedTypes, false>(
      r, "BitShift", {{"direction", AttributeType::String, std::nullopt, true}},
      [](const Node& node) {
        const std::string direction = node.attrs.getString("direction");
        if (direction != "LEFT" && direction != "RIGHT")
          throw Error(nodeLabel(node) + "direction must be LEFT or RIGHT, not '" + direction + "'");
        const bool left = direction == "LEFT";
        return [left](auto a, auto b) {
          using T = decltype(a);
          if (b >= sizeof(T) * 8) return T(0);  // a full shift would be undefined in C++
          return static_cast<T>(left ? a << b : a >> b);
        };
      });

  addVariadic<kNumeric>(r, "Sum", add, false);
  addVariadic<kFloatTypes>(r, "Mean", add, true);
  addVariadic<kNumeric>(r, "Max", max, false);
  addVariadic<kNumeric>(r, "Min", min, false);

  {
    // Pow(T, T1) -> T: the exponent may have another numeric type.
    OpSchema s;
    s.name = "Pow";
    s.kind = OpKind::Broadcast;
    s.minInputs = s.maxInputs = 2;
    s.infer = [](const Node& node, const Types& in) {
      requireTypeIn(node, kNumeric, in[0].elementType);
      requireTypeIn(node, kNumeric, in[1].elementType);
      return Types{{in[0].elementType, broadcastInputs(node, in)}};
    };
    s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
      if (in[0]->elementType() == ElementType::Float32 &&
          in[1]->elementType() == ElementType::Float32) {
        broadcastBinary<float, float, float>(*in[0], *in[1], *out[0], [](float a, float b) {
          // Squares are common (variance in layer norms): keep them exact and fast.
          return b == 2.0f ? a * a : std::pow(a, b);
        });
        return;
      }
      const Tensor exponent = toFloat64(node, *in[1]);
      visitType<kNumeric>(node, in[0]->elementType(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        broadcastBinary<T, double, T>(*in[0], exponent, *out[0], [](T a, double b) {
          return static_cast<T>(std::pow(static_cast<double>(a), b));
        });
      });
    };
    r.add(std::move(s));
  }
  {
    // PRelu: slope broadcasts to X (unidirectionally).
    OpSchema s;
    s.name = "PRelu";
    s.kind = OpKind::Broadcast;
    s.minInputs = s.maxInputs = 2;
    s.infer = [](const Node& node, const Types& in) {
      requireSameTypes(node, in);
      requireTypeIn(node, kSignedNumeric, in[0].elementType);
      if (broadcastInputs(node, in) != in[0].shape)
        throw Error(nodeLabel(node) + "slope " + shapeToString(in[1].shape) +
                    " does not broadcast to the input " + shapeToString(in[0].shape));
      return Types{in[0]};
    };
    s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
      visitType<kSignedNumeric>(node, in[0]->elementType(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        broadcastBinary<T, T, T>(*in[0], *in[1], *out[0],
                                 [](T x, T slope) { return x < T(0) ? T(slope * x) : x; });
      });
    };
    r.add(std::move(s));
  }
  {
    OpSchema s;
    s.name = "Where";
    s.kind = OpKind::Broadcast;
    s.minInputs = s.maxInputs = 3;
    s.infer = [](const Node& node, const Types& in) {
      if (in[0].elementType != ElementType::Bool)
        throw Error(nodeLabel(node) + "the condition must be bool, not " + in[0].toString());
      if (in[1].elementType != in[2].elementType)
        throw Error(nodeLabel(node) + "inputs have different element types: " + in[1].toString() +
                    " and " + in[2].toString());
      requireMovable(node, in[1].elementType);
      return Types{{in[1].elementType, broadcastInputs(node, in)}};
    };
    s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
      visitBySize(node, in[1]->elementType(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        const StridedPlan plan =
            makeBroadcastPlan(out[0]->shape(), {in[0]->shape(), in[1]->shape(), in[2]->shape()});
        const bool* c = in[0]->data<bool>();
        const T* x = in[1]->data<T>();
        const T* y = in[2]->data<T>();
        T* z = out[0]->data<T>();
        const int64_t sc = plan.innerStride(0), sx = plan.innerStride(1), sy = plan.innerStride(2);
        forEachRow(plan, [&](int64_t o, const int64_t* off, int64_t n) {
          for (int64_t j = 0; j < n; ++j)
            z[o + j] = c[off[0] + j * sc] ? x[off[1] + j * sx] : y[off[2] + j * sy];
        });
      });
    };
    r.add(std::move(s));
  }
}

}  // namespace

void registerElementwiseOps(OpRegistry& r) {
  registerUnaryOps(r);
  registerPredicates(r);
  registerIdentityLikeOps(r);
  registerBinaryOps(r);
}

}  // namespace collage
