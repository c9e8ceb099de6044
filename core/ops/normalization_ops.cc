// BatchNormalization (inference), InstanceNormalization, LayerNormalization,
// Softmax, LogSoftmax, Hardmax, LRN and MeanVarianceNormalization.
// Statistics are accumulated in double: these kernels are cheap next to the
// convolutions and the reference should be tight.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/op_registry.h"
#include "core/ops/op_helpers.h"

namespace collage {

namespace {

bool present(const std::vector<TensorType>& in, size_t i) {
  return in.size() > i && in[i].elementType != ElementType::Undefined;
}

bool outputWanted(const Node& node, size_t i) {
  return node.outputs.size() > i && node.outputs[i] != kNoValue;
}

// Checks that input `i` is float32 of shape `want`.
void requireShape(const Node& node, const std::vector<TensorType>& in, size_t i,
                  const char* name, const Shape& want) {
  requireFloat32(node, in[i]);
  if (in[i].shape != want)
    throw Error(nodeLabel(node) + "input " + name + " is " + shapeToString(in[i].shape) +
                ", expected " + shapeToString(want));
}

// ---- BatchNormalization (inference form) ----

std::vector<TensorType> inferBatchNorm(const Node& node, const std::vector<TensorType>& in) {
  if (in.size() < 5) throw Error(nodeLabel(node) + "needs inputs X, scale, B, mean and var");
  if (node.attrs.getInt("training_mode", 0) != 0)
    throw Unsupported(nodeLabel(node) + "training_mode=1 is not supported (inference only)");
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (node.outputs[i] != kNoValue)
      throw Unsupported(nodeLabel(node) +
                        "running mean/var outputs are not supported (inference only)");
  const TensorType& x = in[0];
  requireFloat32(node, x);
  if (x.rank() < 2)
    throw Error(nodeLabel(node) + "X must have rank >= 2 (N, C, ...), got " +
                shapeToString(x.shape));
  const Shape c{x.shape[1]};
  requireShape(node, in, 1, "scale", c);
  requireShape(node, in, 2, "B", c);
  requireShape(node, in, 3, "input_mean", c);
  requireShape(node, in, 4, "input_var", c);
  return {x};
}

void runBatchNorm(const Node& node, const std::vector<const Tensor*>& in,
                  const std::vector<Tensor*>& out) {
  const Shape& s = in[0]->shape();
  const int64_t N = s[0], C = s[1];
  const int64_t inner = in[0]->numElements() / std::max<int64_t>(N * C, 1);
  const float eps = node.attrs.getFloat("epsilon", 1e-5f);
  const float* x = in[0]->data<float>();
  const float* scale = in[1]->data<float>();
  const float* bias = in[2]->data<float>();
  const float* mean = in[3]->data<float>();
  const float* var = in[4]->data<float>();
  float* y = out[0]->data<float>();
  for (int64_t c = 0; c < C; ++c) {
    // y = x * a + b with a = scale / sqrt(var + eps), b = B - mean * a.
    const float a = scale[c] / std::sqrt(var[c] + eps);
    const float b = bias[c] - mean[c] * a;
    for (int64_t n = 0; n < N; ++n) {
      const float* xp = x + (n * C + c) * inner;
      float* yp = y + (n * C + c) * inner;
      for (int64_t i = 0; i < inner; ++i) yp[i] = xp[i] * a + b;
    }
  }
}

// ---- InstanceNormalization ----

std::vector<TensorType> inferInstanceNorm(const Node& node, const std::vector<TensorType>& in) {
  if (in.size() < 3) throw Error(nodeLabel(node) + "needs inputs input, scale and B");
  const TensorType& x = in[0];
  requireFloat32(node, x);
  if (x.rank() < 3)
    throw Error(nodeLabel(node) + "input must have rank >= 3 (N, C, spatial...), got " +
                shapeToString(x.shape));
  requireShape(node, in, 1, "scale", {x.shape[1]});
  requireShape(node, in, 2, "B", {x.shape[1]});
  return {x};
}

void runInstanceNorm(const Node& node, const std::vector<const Tensor*>& in,
                     const std::vector<Tensor*>& out) {
  const Shape& s = in[0]->shape();
  const int64_t N = s[0], C = s[1];
  const int64_t inner = in[0]->numElements() / std::max<int64_t>(N * C, 1);
  const double eps = node.attrs.getFloat("epsilon", 1e-5f);
  const float* x = in[0]->data<float>();
  const float* scale = in[1]->data<float>();
  const float* bias = in[2]->data<float>();
  float* y = out[0]->data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const float* xp = x + (n * C + c) * inner;
      float* yp = y + (n * C + c) * inner;
      double sum = 0;
      for (int64_t i = 0; i < inner; ++i) sum += xp[i];
      const double mean = inner ? sum / static_cast<double>(inner) : 0.0;
      double sq = 0;
      for (int64_t i = 0; i < inner; ++i) sq += (xp[i] - mean) * (xp[i] - mean);
      const double var = inner ? sq / static_cast<double>(inner) : 0.0;
      const double a = scale[c] / std::sqrt(var + eps);
      for (int64_t i = 0; i < inner; ++i)
        yp[i] = static_cast<float>((xp[i] - mean) * a + bias[c]);
    }
}

// ---- LayerNormalization ----

// Outer (rows) and inner (normalised) extents for the node's axis.
struct LayerNormDims {
  int64_t axis, rows, cols;
};

LayerNormDims layerNormDims(const Node& node, const Shape& x) {
  const int64_t rank = static_cast<int64_t>(x.size());
  const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", -1), rank);
  LayerNormDims d{axis, 1, 1};
  for (int64_t i = 0; i < rank; ++i) (i < axis ? d.rows : d.cols) *= x[i];
  return d;
}

// Scale and B broadcast unidirectionally to X's normalised dims (x[axis:]).
void checkLayerNormParam(const Node& node, const TensorType& p, const char* name, const Shape& x,
                         int64_t axis) {
  requireFloat32(node, p);
  const Shape normalized(x.begin() + axis, x.end());
  bool ok = p.shape.size() <= normalized.size();
  for (size_t i = 0; ok && i < p.shape.size(); ++i) {
    const int64_t want = normalized[normalized.size() - p.shape.size() + i];
    ok = p.shape[i] == want || p.shape[i] == 1;
  }
  if (!ok)
    throw Error(nodeLabel(node) + name + " " + shapeToString(p.shape) +
                " does not broadcast to the normalised shape " + shapeToString(normalized));
}

std::vector<TensorType> inferLayerNorm(const Node& node, const std::vector<TensorType>& in) {
  if (in.size() < 2) throw Error(nodeLabel(node) + "needs inputs X and Scale");
  const TensorType& x = in[0];
  requireFloat32(node, x);
  if (x.rank() < 1) throw Error(nodeLabel(node) + "X must have rank >= 1");
  const LayerNormDims d = layerNormDims(node, x.shape);
  checkLayerNormParam(node, in[1], "Scale", x.shape, d.axis);
  if (present(in, 2)) checkLayerNormParam(node, in[2], "B", x.shape, d.axis);
  std::vector<TensorType> out{x};
  if (outputWanted(node, 1) || outputWanted(node, 2)) {
    // Mean and InvStdDev: X's shape with the normalised dims set to 1.
    Shape stat = x.shape;
    for (size_t i = static_cast<size_t>(d.axis); i < stat.size(); ++i) stat[i] = 1;
    out.push_back({ElementType::Float32, stat});
    out.push_back({ElementType::Float32, stat});
  }
  return out;
}

// Expands a parameter broadcastable to `normalized` into `count` values.
std::vector<float> expandParam(const Tensor& p, const Shape& normalized) {
  const int64_t count = numElements(normalized);
  std::vector<float> out(static_cast<size_t>(count));
  const Shape& ps = p.shape();
  const size_t offset = normalized.size() - ps.size();
  const std::vector<int64_t> pStrides = stridesOf(ps);
  const float* src = p.data<float>();
  std::vector<int64_t> index(normalized.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t at = 0;
    for (size_t k = 0; k < ps.size(); ++k)
      if (ps[k] != 1) at += index[offset + k] * pStrides[k];
    out[static_cast<size_t>(i)] = src[at];
    for (size_t k = normalized.size(); k-- > 0;) {
      if (++index[k] < normalized[k]) break;
      index[k] = 0;
    }
  }
  return out;
}

void runLayerNorm(const Node& node, const std::vector<const Tensor*>& in,
                  const std::vector<Tensor*>& out) {
  const Shape& xs = in[0]->shape();
  const LayerNormDims d = layerNormDims(node, xs);
  const Shape normalized(xs.begin() + d.axis, xs.end());
  const double eps = node.attrs.getFloat("epsilon", 1e-5f);
  const std::vector<float> scale = expandParam(*in[1], normalized);
  const std::vector<float> bias = in.size() > 2 && in[2] ? expandParam(*in[2], normalized)
                                                         : std::vector<float>(scale.size(), 0.0f);
  const float* x = in[0]->data<float>();
  float* y = out[0]->data<float>();
  float* meanOut = out.size() > 1 && out[1] ? out[1]->data<float>() : nullptr;
  float* invStdOut = out.size() > 2 && out[2] ? out[2]->data<float>() : nullptr;
  for (int64_t r = 0; r < d.rows; ++r) {
    const float* xr = x + r * d.cols;
    float* yr = y + r * d.cols;
    double sum = 0;
    for (int64_t i = 0; i < d.cols; ++i) sum += xr[i];
    const double mean = d.cols ? sum / static_cast<double>(d.cols) : 0.0;
    double sq = 0;
    for (int64_t i = 0; i < d.cols; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
    const double invStd = 1.0 / std::sqrt((d.cols ? sq / static_cast<double>(d.cols) : 0.0) + eps);
    for (int64_t i = 0; i < d.cols; ++i)
      yr[i] = static_cast<float>((xr[i] - mean) * invStd * scale[i] + bias[i]);
    if (meanOut) meanOut[r] = static_cast<float>(mean);
    if (invStdOut) invStdOut[r] = static_cast<float>(invStd);
  }
}

// ---- Softmax / LogSoftmax (opset-13 semantics: one axis) ----

struct AxisDims {
  int64_t outer = 1, len = 1, inner = 1;
};

AxisDims axisDims(const Node& node, const Shape& x) {
  const int64_t rank = static_cast<int64_t>(x.size());
  const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", -1), rank);
  AxisDims d;
  for (int64_t i = 0; i < rank; ++i) {
    if (i < axis) d.outer *= x[i];
    else if (i == axis) d.len = x[i];
    else d.inner *= x[i];
  }
  return d;
}

std::vector<TensorType> inferSoftmax(const Node& node, const std::vector<TensorType>& in) {
  requireFloat32(node, in.at(0));
  axisDims(node, in[0].shape);  // validates the axis
  return {in[0]};
}

template <bool kLog>
void runSoftmax(const Node& node, const std::vector<const Tensor*>& in,
                const std::vector<Tensor*>& out) {
  const AxisDims d = axisDims(node, in[0]->shape());
  const float* x = in[0]->data<float>();
  float* y = out[0]->data<float>();
  for (int64_t o = 0; o < d.outer; ++o)
    for (int64_t i = 0; i < d.inner; ++i) {
      const float* xp = x + o * d.len * d.inner + i;
      float* yp = y + o * d.len * d.inner + i;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t k = 0; k < d.len; ++k) m = std::max(m, xp[k * d.inner]);
      // exp(x - max) in float (<= 1, so no overflow), summed in double.
      double sum = 0;
      for (int64_t k = 0; k < d.len; ++k) {
        const float e = std::exp(xp[k * d.inner] - m);
        if constexpr (!kLog) yp[k * d.inner] = e;
        sum += e;
      }
      if constexpr (kLog) {
        const float logSum = static_cast<float>(std::log(sum));
        for (int64_t k = 0; k < d.len; ++k) yp[k * d.inner] = xp[k * d.inner] - m - logSum;
      } else {
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t k = 0; k < d.len; ++k) yp[k * d.inner] *= inv;
      }
    }
}

double softmaxFlops(const Node&, const std::vector<TensorType>& in,
                    const std::vector<TensorType>&) {
  return 4.0 * static_cast<double>(in.at(0).numElements());  // max, exp, sum, divide
}


// ---- Hardmax (opset-13 semantics; the importer rewrites older ones) ----

// 1 at the first maximum along the axis, 0 elsewhere.
void runHardmax(const Node& node, const std::vector<const Tensor*>& in,
                const std::vector<Tensor*>& out) {
  const AxisDims d = axisDims(node, in[0]->shape());
  const float* x = in[0]->data<float>();
  float* y = out[0]->data<float>();
  std::fill(y, y + out[0]->numElements(), 0.0f);
  for (int64_t o = 0; o < d.outer; ++o)
    for (int64_t i = 0; i < d.inner; ++i) {
      const int64_t base = o * d.len * d.inner + i;
      int64_t best = 0;
      for (int64_t k = 1; k < d.len; ++k)
        if (x[base + k * d.inner] > x[base + best * d.inner]) best = k;
      if (d.len > 0) y[base + best * d.inner] = 1.0f;
    }
}

// ---- LRN: across-channel local response normalisation (AlexNet, GoogLeNet) ----

std::vector<TensorType> inferLrn(const Node& node, const std::vector<TensorType>& in) {
  requireFloat32(node, in[0]);
  if (in[0].rank() < 3)
    throw Error(nodeLabel(node) + "the input must be [N, C, D1, ...], not " + in[0].toString());
  if (node.attrs.getInt("size") < 1)
    throw Error(nodeLabel(node) + "size must be positive");
  return {in[0]};
}

// y = x / (bias + alpha / size * sum of x^2 over the channels
//          [c - floor((size-1)/2), c + ceil((size-1)/2)])^beta
void runLrn(const Node& node, const std::vector<const Tensor*>& in,
            const std::vector<Tensor*>& out) {
  const Shape& s = in[0]->shape();
  const int64_t n = s[0], channels = s[1];
  int64_t inner = 1;
  for (size_t i = 2; i < s.size(); ++i) inner *= s[i];
  const int64_t size = node.attrs.getInt("size");
  const double alpha = node.attrs.getFloat("alpha", 1e-4f), beta = node.attrs.getFloat("beta", 0.75f);
  const double bias = node.attrs.getFloat("bias", 1.0f);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  const float* x = in[0]->data<float>();
  float* y = out[0]->data<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        double sum = 0;
        for (int64_t k = std::max<int64_t>(0, c - before); k <= std::min(channels - 1, c + after); ++k) {
          const double v = x[(b * channels + k) * inner + i];
          sum += v * v;
        }
        const int64_t at = (b * channels + c) * inner + i;
        y[at] = static_cast<float>(x[at] / std::pow(bias + alpha / static_cast<double>(size) * sum, beta));
      }
}

// ---- MeanVarianceNormalization: (x - mean) / (sqrt(var) + 1e-9) over `axes` ----

std::vector<TensorType> inferMvn(const Node& node, const std::vector<TensorType>& in) {
  requireFloat32(node, in[0]);
  for (int64_t a : node.attrs.getInts("axes", {0, 2, 3})) normalizeAxis(node, a, in[0].rank());
  return {in[0]};
}

void runMvn(const Node& node, const std::vector<const Tensor*>& in,
            const std::vector<Tensor*>& out) {
  const Shape& s = in[0]->shape();
  const int64_t rank = in[0]->rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t a : node.attrs.getInts("axes", {0, 2, 3})) reduced[normalizeAxis(node, a, rank)] = true;
  // Group every element by its position on the kept axes.
  const int64_t total = in[0]->numElements();
  std::vector<int64_t> group(static_cast<size_t>(total));
  int64_t groups = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (!reduced[d]) groups *= s[d];
  for (int64_t i = 0; i < total; ++i) {
    int64_t rest = i, g = 0, scale = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t c = rest % s[d];
      rest /= s[d];
      if (!reduced[d]) {
        g += c * scale;
        scale *= s[d];
      }
    }
    group[i] = g;
  }
  std::vector<double> sum(static_cast<size_t>(groups), 0.0), sq(static_cast<size_t>(groups), 0.0);
  std::vector<int64_t> count(static_cast<size_t>(groups), 0);
  const float* x = in[0]->data<float>();
  for (int64_t i = 0; i < total; ++i) {
    sum[group[i]] += x[i];
    sq[group[i]] += static_cast<double>(x[i]) * x[i];
    ++count[group[i]];
  }
  float* y = out[0]->data<float>();
  for (int64_t i = 0; i < total; ++i) {
    const double m = sum[group[i]] / count[group[i]];
    const double var = std::max(0.0, sq[group[i]] / count[group[i]] - m * m);
    y[i] = static_cast<float>((x[i] - m) / (std::sqrt(var) + 1e-9));
  }
}

}  // namespace

void registerNormalizationOps(OpRegistry& r) {
  {
    OpSchema hm;
    hm.name = "Hardmax";
    hm.kind = OpKind::Reduction;
    hm.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{-1})}};
    hm.infer = inferSoftmax;
    hm.reference = runHardmax;
    r.add(std::move(hm));
  }
  {
    OpSchema lrn;
    lrn.name = "LRN";
    lrn.kind = OpKind::Opaque;
    lrn.attributes = {{"alpha", AttributeType::Float, Attribute(1e-4f)},
                      {"beta", AttributeType::Float, Attribute(0.75f)},
                      {"bias", AttributeType::Float, Attribute(1.0f)},
                      {"size", AttributeType::Int, std::nullopt, true}};
    lrn.infer = inferLrn;
    lrn.reference = runLrn;
    r.add(std::move(lrn));
  }
  {
    OpSchema mvn;
    mvn.name = "MeanVarianceNormalization";
    mvn.kind = OpKind::Reduction;
    mvn.attributes = {{"axes", AttributeType::Ints, Attribute(std::vector<int64_t>{0, 2, 3})}};
    mvn.infer = inferMvn;
    mvn.reference = runMvn;
    r.add(std::move(mvn));
  }
  OpSchema bn;
  bn.name = "BatchNormalization";
  bn.kind = OpKind::Broadcast;
  bn.minInputs = 5;
  bn.maxInputs = 5;
  bn.maxOutputs = 3;  // running mean/var exist only in training mode: Unsupported
  bn.attributes = {
      {"epsilon", AttributeType::Float, Attribute(1e-5f)},
      {"momentum", AttributeType::Float, Attribute(0.9f)},
      {"training_mode", AttributeType::Int, Attribute(int64_t{0})},
  };
  bn.infer = inferBatchNorm;
  bn.reference = runBatchNorm;
  bn.flops = [](const Node&, const std::vector<TensorType>& in, const std::vector<TensorType>&) {
    return 2.0 * static_cast<double>(in.at(0).numElements());
  };
  r.add(std::move(bn));

  OpSchema inorm;
  inorm.name = "InstanceNormalization";
  inorm.kind = OpKind::Reduction;
  inorm.minInputs = 3;
  inorm.maxInputs = 3;
  inorm.attributes = {{"epsilon", AttributeType::Float, Attribute(1e-5f)}};
  inorm.infer = inferInstanceNorm;
  inorm.reference = runInstanceNorm;
  inorm.flops = [](const Node&, const std::vector<TensorType>& in, const std::vector<TensorType>&) {
    return 5.0 * static_cast<double>(in.at(0).numElements());
  };
  r.add(std::move(inorm));

  OpSchema lnorm;
  lnorm.name = "LayerNormalization";
  lnorm.kind = OpKind::Reduction;
  lnorm.minInputs = 2;
  lnorm.maxInputs = 3;
  lnorm.maxOutputs = 3;  // Y, optional Mean and InvStdDev
  lnorm.attributes = {
      {"axis", AttributeType::Int, Attribute(int64_t{-1})},
      {"epsilon", AttributeType::Float, Attribute(1e-5f)},
      {"stash_type", AttributeType::Int, Attribute(int64_t{1})},
  };
  lnorm.infer = inferLayerNorm;
  lnorm.reference = runLayerNorm;
  lnorm.flops = [](const Node&, const std::vector<TensorType>& in, const std::vector<TensorType>&) {
    return 5.0 * static_cast<double>(in.at(0).numElements());
  };
  r.add(std::move(lnorm));

  for (const char* name : {"Softmax", "LogSoftmax"}) {
    OpSchema sm;
    sm.name = name;
    sm.kind = OpKind::Reduction;
    sm.attributes = {{"axis", AttributeType::Int, Attribute(int64_t{-1})}};
    sm.infer = inferSoftmax;
    sm.reference = std::string(name) == "Softmax" ? ReferenceFn(runSoftmax<false>)
                                                  : ReferenceFn(runSoftmax<true>);
    sm.flops = softmaxFlops;
    r.add(std::move(sm));
  }
}

}  // namespace collage
