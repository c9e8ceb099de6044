// Loss ops that PyTorch exports with its training graphs and with models
// that compute their own loss: NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss (= LogSoftmax over the class axis, then NLL).
//
//   input  [N, C, d1..dk]   (log-probabilities; SCE: raw scores)
//   target [N, d1..dk]      int32/int64 class per element, or ignore_index
//   weight [C]              optional per-class weight
//   loss   reduction none: [N, d1..dk]; sum / mean: a scalar, where mean
//          divides by the summed weights of the elements not ignored.
//
// Sums are accumulated in double. A target outside [0, C) that is not
// ignore_index is an Error naming the node (never a read past the input).
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

enum class LossReduction { None, Sum, Mean };

LossReduction lossReduction(const Node& node) {
  const std::string r = node.attrs.getString("reduction", "mean");
  if (r == "none") return LossReduction::None;
  if (r == "sum") return LossReduction::Sum;
  if (r == "mean") return LossReduction::Mean;
  throw Error(nodeLabel(node) + "unknown reduction '" + r + "' (none, sum or mean)");
}

// Checks input/target/weight and returns the loss's type.
TensorType inferLoss(const Node& node, const Types& in) {
  requireTypeIn(node, kFloatTypes, in[0].elementType);
  requireIndexType(node, in[1], "target");
  const TensorType& x = in[0];
  const TensorType& t = in[1];
  bool ok = x.rank() >= 2 && t.rank() == x.rank() - 1 && t.shape[0] == x.shape[0];
  for (int64_t d = 2; ok && d < x.rank(); ++d) ok = t.shape[d - 1] == x.shape[d];
  if (!ok)
    throw Error(nodeLabel(node) + "target " + t.toString() + " does not match input " +
                x.toString() + " (expected [N, d1..dk] for input [N, C, d1..dk])");
  if (in.size() > 2 && in[2].elementType != ElementType::Undefined &&
      (in[2].elementType != x.elementType || in[2].shape != Shape{x.shape[1]}))
    throw Error(nodeLabel(node) + "weight must be " +
                TensorType{x.elementType, {x.shape[1]}}.toString() + ", not " + in[2].toString());
  if (lossReduction(node) == LossReduction::None) return {x.elementType, t.shape};
  return {x.elementType, {}};
}

// NLL over log-probabilities `logp` laid out as [N, C, inner].
template <class T>
void nllLoss(const Node& node, const T* logp, const Shape& xshape, const std::vector<int64_t>& target,
             const T* weight, Tensor& out) {
  const int64_t n = xshape[0], classes = xshape[1];
  const int64_t inner = shapeProduct(xshape, 2, static_cast<int64_t>(xshape.size()));
  const bool hasIgnore = node.attrs.has("ignore_index");
  const int64_t ignore = node.attrs.getInt("ignore_index", 0);
  const LossReduction red = lossReduction(node);
  T* y = out.data<T>();
  double sum = 0, weights = 0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t at = b * inner + i;
      const int64_t c = target[at];
      double loss = 0, w = 0;
      if (!(hasIgnore && c == ignore)) {
        if (c < 0 || c >= classes)
          throw Error(nodeLabel(node) + "target " + std::to_string(c) + " at position " +
                      std::to_string(at) + " is not a class in [0, " + std::to_string(classes) +
                      ") nor ignore_index");
        w = weight ? static_cast<double>(weight[c]) : 1.0;
        loss = -static_cast<double>(logp[(b * classes + c) * inner + i]) * w;
      }
      if (red == LossReduction::None) y[at] = static_cast<T>(loss);
      sum += loss;
      weights += w;
    }
  if (red == LossReduction::Sum) y[0] = static_cast<T>(sum);
  // Every element ignored gives 0/0: NaN, as the spec's division does.
  if (red == LossReduction::Mean)
    y[0] = static_cast<T>(weights != 0 ? sum / weights : std::numeric_limits<double>::quiet_NaN());
}

std::vector<AttributeSpec> lossAttributes() {
  return {{"reduction", AttributeType::String, Attribute(std::string("mean"))},
          {"ignore_index", AttributeType::Int, std::nullopt}};
}

void addNegativeLogLikelihoodLoss(OpRegistry& r) {
  OpSchema s;
  s.name = "NegativeLogLikelihoodLoss";
  s.kind = OpKind::Opaque;
  s.minInputs = 2;
  s.maxInputs = 3;
  s.attributes = lossAttributes();
  s.infer = [](const Node& node, const Types& in) { return Types{inferLoss(node, in)}; };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const std::vector<int64_t> target = in[1]->toInts();
    visitType<kFloatTypes>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* weight = in.size() > 2 && in[2] ? in[2]->data<T>() : nullptr;
      nllLoss<T>(node, in[0]->data<T>(), in[0]->shape(), target, weight, *out[0]);
    });
  };
  r.add(std::move(s));
}

void addSoftmaxCrossEntropyLoss(OpRegistry& r) {
  OpSchema s;
  s.name = "SoftmaxCrossEntropyLoss";
  s.kind = OpKind::Opaque;
  s.minInputs = 2;
  s.maxInputs = 3;
  s.maxOutputs = 2;  // the loss, and optionally log_prob
  s.attributes = lossAttributes();
  s.infer = [](const Node& node, const Types& in) {
    return Types{inferLoss(node, in), in[0]};
  };
  s.reference = [](const Node& node, const Inputs& in, const Outputs& out) {
    const std::vector<int64_t> target = in[1]->toInts();
    const Shape& shape = in[0]->shape();
    const int64_t n = shape[0], classes = shape[1];
    const int64_t inner = shapeProduct(shape, 2, in[0]->rank());
    visitType<kFloatTypes>(node, in[0]->elementType(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      // log_softmax over the class axis, written into the optional output
      // when there is one.
      Tensor scratch;
      Tensor* logp = out.size() > 1 && out[1] ? out[1] : nullptr;
      if (!logp) {
        scratch = Tensor(in[0]->type());
        logp = &scratch;
      }
      const T* x = in[0]->data<T>();
      T* lp = logp->data<T>();
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t base = b * classes * inner + i;
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t c = 0; c < classes; ++c) m = std::max(m, static_cast<double>(x[base + c * inner]));
          double sum = 0;
          for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(x[base + c * inner]) - m);
          const double logSum = std::log(sum) + m;
          for (int64_t c = 0; c < classes; ++c)
            lp[base + c * inner] = static_cast<T>(static_cast<double>(x[base + c * inner]) - logSum);
        }
      const T* weight = in.size() > 2 && in[2] ? in[2]->data<T>() : nullptr;
      nllLoss<T>(node, lp, shape, target, weight, *out[0]);
    });
  };
  r.add(std::move(s));
}

}  // namespace

void registerLossOps(OpRegistry& r) {
  addNegativeLogLikelihoodLoss(r);
  addSoftmaxCrossEntropyLoss(r);
}

}  // namespace collage
