// Reductions: Reduce{Sum,Mean,Max,Min,Prod,L1,L2,SumSquare,LogSumExp} over
// the `axes` attribute (opset 13's ReduceSum and opset 18's Reduce* pass axes
// as an input; the importer turns it into the attribute), and ArgMax/ArgMin.
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/ops/op_registry.h"
#include "core/ops/broadcast.h"
#include "core/ops/op_helpers.h"
#include "core/ops/type_dispatch.h"

namespace collage {
namespace {

using Inputs = std::vector<const Tensor*>;
using Outputs = std::vector<Tensor*>;
using Types = std::vector<TensorType>;

struct ReduceShape {
  std::vector<bool> reduced;  // per input dim
  Shape kept;                 // the output shape with keepdims=1
  Shape out;                  // the output shape as the node asks
};

ReduceShape reduceShape(const Node& node, const Shape& in, const std::vector<int64_t>& axes,
                        bool keepdims, bool noopWithEmptyAxes) {
  const int64_t rank = static_cast<int64_t>(in.size());
  ReduceShape r;
  r.reduced.assign(in.size(), axes.empty() && !noopWithEmptyAxes);
  for (int64_t a : axes) {
    const int64_t d = normalizeAxis(node, a, rank);
    if (r.reduced[d]) throw Error(nodeLabel(node) + "axis " + std::to_string(a) + " is repeated");
    r.reduced[d] = true;
  }
  for (size_t d = 0; d < in.size(); ++d) {
    r.kept.push_back(r.reduced[d] ? 1 : in[d]);
    if (!r.reduced[d] || keepdims) r.out.push_back(r.kept.back());
  }
  return r;
}

ReduceShape reduceShapeOf(const Node& node, const Shape& in) {
  return reduceShape(node, in, node.attrs.getInts("axes", {}), node.attrs.getInt("keepdims", 1),
                     node.attrs.getInt("noop_with_empty_axes", 0));
}

// The accumulator type: double for floating point (sums of many float32
// values stay accurate), 64-bit for integers.
template <class T>
using AccumulatorOf =
    std::conditional_t<std::is_floating_point_v<T>, double,
                       std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;

// A reduction: acc starts at init(), takes each element by fold(acc, x), and
// finish(acc, count) gives the output element.
template <class T, class Init, class Fold, class Finish>
void reduce(const Tensor& in, Tensor& out, const ReduceShape& shape, Init init, Fold fold,
            Finish finish) {
  using Acc = AccumulatorOf<T>;
  const int64_t outCount = out.numElements();
  std::vector<Acc> acc(static_cast<size_t>(outCount), init());
  const T* x = in.data<T>();
  const StridedPlan plan = makeStridedPlan(in.shape(), {broadcastStrides(shape.kept, in.shape())});
  const int64_t s = plan.innerStride(0);
  forEachRow(plan, [&](int64_t inOff, const int64_t* off, int64_t n) {
    const T* row = x + inOff;
    if (s == 0) {
      Acc a = acc[off[0]];
      for (int64_t j = 0; j < n; ++j) fold(a, row[j]);
      acc[off[0]] = a;
    } else {
      Acc* a = acc.data() + off[0];
      for (int64_t j = 0; j < n; ++j) fold(a[j], row[j]);
    }
  });
  const int64_t count = outCount ? in.numElements() / outCount : 0;
  T* y = out.data<T>();
  for (int64_t i = 0; i < outCount; ++i) y[i] = static_cast<T>(finish(acc[i], count));
}

// Registers a Reduce* op. Ops supplies, for a type T, init/fold/finish.
template <unsigned Set, class Ops>
void addReduce(OpRegistry& r, const std::string& name, Ops ops) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::Reduction;
  s.attributes = {{"axes", AttributeType::Ints, std::nullopt},
                  {"keepdims", AttributeType::Int, Attribute(int64_t{1})},
                  {"noop_with_empty_axes", AttributeType::Int, Attribute(int64_t{0})}};
  s.constInputs = {{1, "axes", AttributeType::Ints}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, Set, in[0].elementType);
    return Types{{in[0].elementType, reduceShapeOf(node, in[0].shape).out}};
  };
  s.reference = [ops](const Node& node, const Inputs& in, const Outputs& out) {
    const ReduceShape shape = reduceShapeOf(node, in[0]->shape());
    visitType<Set>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using Acc = AccumulatorOf<T>;
      ops(TypeTag<T>{}, TypeTag<Acc>{}, [&](auto init, auto fold, auto finish) {
        reduce<T>(*in[0], *out[0], shape, init, fold, finish);
      });
    });
  };
  s.flops = [](const Node&, const Types& in, const Types&) {
    return static_cast<double>(in[0].numElements());
  };
  r.add(std::move(s));
}

// Helpers to build the (init, fold, finish) triples.
template <class Acc>
auto zero() {
  return [] { return Acc(0); };
}
auto identityFinish() {
  return [](auto a, int64_t) { return a; };
}

void registerReduceOps(OpRegistry& r) {
  addReduce<kNumeric>(r, "ReduceSum", [](auto, auto acc, auto run) {
    using Acc = typename decltype(acc)::type;
    run(
        zero<Acc>(), [](Acc& a, auto x) { a += static_cast<Acc>(x); }, identityFinish());
  });
  addReduce<kNumeric>(r, "ReduceMean", [](auto, auto acc, auto run) {
    using Acc = typename decltype(acc)::type;
    run(
        zero<Acc>(), [](Acc& a, auto x) { a += static_cast<Acc>(x); },
        [](Acc a, int64_t n) { return n ? a / static_cast<Acc>(n) : a; });
  });
  addReduce<kNumeric>(r, "ReduceProd", [](auto, auto acc, auto run) {
    using Acc = typename decltype(acc)::type;
    run([] { return Acc(1); }, [](Acc& a, auto x) { a *= static_cast<Acc>(x); }, identityFinish());
  });
  addReduce<kNumeric>(r, "ReduceMax", [](auto t, auto acc, auto run) {
    using T = typename decltype(t)::type;
    using Acc = typename decltype(acc)::type;
    run(
        [] {
          return std::numeric_limits<T>::has_infinity ? -Acc(std::numeric_limits<T>::infinity())
                                                      : Acc(std::numeric_limits<T>::lowest());
        },
        [](Acc& a, auto x) {
          if (static_cast<Acc>(x) > a || x != x) a = static_cast<Acc>(x);
        },
        identityFinish());
  });
  addReduce<kNumeric>(r, "ReduceMin", [](auto t, auto acc, auto run) {
    using T = typename decltype(t)::type;
    using Acc = typename decltype(acc)::type;
    run(
        [] {
          return std::numeric_limits<T>::has_infinity ? Acc(std::numeric_limits<T>::infinity())
                                                      : Acc(std::numeric_limits<T>::max());
        },
        [](Acc& a, auto x) {
          if (static_cast<Acc>(x) < a || x != x) a = static_cast<Acc>(x);
        },
        identityFinish());
  });
  addReduce<kNumeric>(r, "ReduceL1", [](auto t, auto acc, auto run) {
    using T = typename decltype(t)::type;
    using Acc = typename decltype(acc)::type;
    run(
        zero<Acc>(),
        [](Acc& a, auto x) {
          if constexpr (std::is_unsigned_v<T>)
            a += static_cast<Acc>(x);
          else
            a += static_cast<Acc>(x < T(0) ? -x : x);
        },
        identityFinish());
  });
  addReduce<kNumeric>(r, "ReduceSumSquare", [](auto, auto acc, auto run) {
    using Acc = typename decltype(acc)::type;
    run(
        zero<Acc>(), [](Acc& a, auto x) { a += static_cast<Acc>(x) * static_cast<Acc>(x); },
        identityFinish());
  });
  addReduce<kFloatTypes>(r, "ReduceL2", [](auto, auto acc, auto run) {
    using Acc = typename decltype(acc)::type;
    run(
        zero<Acc>(), [](Acc& a, auto x) { a += static_cast<Acc>(x) * static_cast<Acc>(x); },
        [](Acc a, int64_t) { return std::sqrt(a); });
  });
  addReduce<kFloatTypes>(r, "ReduceLogSum", [](auto, auto acc, auto run) {
    using Acc = typename decltype(acc)::type;
    run(
        zero<Acc>(), [](Acc& a, auto x) { a += static_cast<Acc>(x); },
        [](Acc a, int64_t) { return std::log(a); });
  });
  addReduce<kFloatTypes>(r, "ReduceLogSumExp", [](auto, auto acc, auto run) {
    using Acc = typename decltype(acc)::type;
    run(
        zero<Acc>(), [](Acc& a, auto x) { a += std::exp(static_cast<Acc>(x)); },
        [](Acc a, int64_t) { return std::log(a); });
  });
}

// ArgMax / ArgMin: int64 indices along one axis.
template <bool IsMax>
void addArgReduce(OpRegistry& r, const std::string& name) {
  OpSchema s;
  s.name = name;
  s.kind = OpKind::Reduction;
  s.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{0})},
                  {"keepdims", AttributeType::Int, Attribute(int64_t{1})},
                  {"select_last_index", AttributeType::Int, Attribute(int64_t{0})}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kNumeric, in[0].elementType);
    const int64_t axis = node.attrs.getInt("axis", 0);
    return Types{
        {ElementType::Int64,
         reduceShape(node, in[0].shape, {axis}, node.attrs.getInt("keepdims", 1), false).out}};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& shape = in[0]->shape();
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", 0), in[0]->rank());
    const bool last = node.attrs.getInt("select_last_index", 0) != 0;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
    for (int64_t d = axis + 1; d < in[0]->rank(); ++d) inner *= shape[d];
    const int64_t n = shape[axis];
    if (n == 0) throw Error(nodeLabel(node) + "cannot take " + node.op + " over an empty axis");
    int64_t* y = out[0]->data<int64_t>();
    visitType<kNumeric>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = in[0]->data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const T* p = x + o * n * inner + i;
          int64_t best = 0;
          for (int64_t k = 1; k < n; ++k) {
            const T v = p[k * inner], b = p[best * inner];
            const bool better = IsMax ? (last ? v >= b : v > b) : (last ? v <= b : v < b);
            if (better) best = k;
          }
          y[o * inner + i] = best;
        }
    });
  };
  s.flops = [](const Node&, const Types& in, const Types&) {
    return static_cast<double>(in[0].numElements());
  };
  r.add(std::move(s));
}

// CumSum: running sums along `axis` (a constant input in ONNX), optionally
// exclusive (each sum leaves out its own element) and/or from the end.
void addCumSum(OpRegistry& r) {
  OpSchema s;
  s.name = "CumSum";
  s.kind = OpKind::Opaque;
  s.attributes = {{"axis", AttributeType::Int, std::nullopt, true},
                  {"exclusive", AttributeType::Int, Attribute(int64_t{0})},
                  {"reverse", AttributeType::Int, Attribute(int64_t{0})}};
  s.constInputs = {{1, "axis", AttributeType::Int}};
  s.infer = [](const Node& node, const Types& in) {
    requireTypeIn(node, kNumeric, in[0].elementType);
    normalizeAxis(node, node.attrs.getInt("axis"), in[0].rank());
    return Types{in[0]};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const Shape& shape = in[0]->shape();
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis"), in[0]->rank());
    const bool exclusive = node.attrs.getInt("exclusive", 0) != 0;
    const bool reverse = node.attrs.getInt("reverse", 0) != 0;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
    for (int64_t d = axis + 1; d < in[0]->rank(); ++d) inner *= shape[d];
    const int64_t n = in[0]->rank() ? shape[axis] : 1;
    visitType<kNumeric>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* x = in[0]->data<T>();
      T* y = out[0]->data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          AccumulatorOf<T> sum = 0;
          for (int64_t step = 0; step < n; ++step) {
            const int64_t k = reverse ? n - 1 - step : step;
            const int64_t at = (o * n + k) * inner + i;
            if (exclusive) {
              y[at] = static_cast<T>(sum);
              sum += x[at];
            } else {
              sum += x[at];
              y[at] = static_cast<T>(sum);
            }
          }
        }
    });
  };
  r.add(std::move(s));
}

}  // namespace

void registerReductionOps(OpRegistry& r) {
  registerReduceOps(r);
  addArgReduce<true>(r, "ArgMax");
  addArgReduce<false>(r, "ArgMin");
  addCumSum(r);
}

}  // namespace collage
