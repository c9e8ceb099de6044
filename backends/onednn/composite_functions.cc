#include "backends/onednn/composite_functions.h"

#include <algorithm>
#include <cmath>

#include "core/ops/op_registry.h"

namespace collage::onednn {

namespace {

using dnnl::algorithm;

struct Entry {
  const char* name;
  algorithm alg;
  float alpha, beta;  // as oneDNN 2.6 reads them for this algorithm
  double (*g)(double);
};

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplus(double x) { return std::log1p(std::exp(x)); }

// Simplest first: a function that is affine in x is one linear post-op.
const Entry kCatalogue[] = {
    {"linear", algorithm::undef, 0, 0, [](double x) { return x; }},
    {"relu", algorithm::eltwise_relu, 0, 0, [](double x) { return x > 0 ? x : 0.0; }},
    {"abs", algorithm::eltwise_abs, 0, 0, [](double x) { return std::abs(x); }},
    {"square", algorithm::eltwise_square, 0, 0, [](double x) { return x * x; }},
    {"logistic", algorithm::eltwise_logistic, 0, 0, sigmoid},
    {"tanh", algorithm::eltwise_tanh, 0, 0, [](double x) { return std::tanh(x); }},
    {"exp", algorithm::eltwise_exp, 0, 0, [](double x) { return std::exp(x); }},
    {"elu", algorithm::eltwise_elu, 1, 0, [](double x) { return x > 0 ? x : std::expm1(x); }},
    {"soft_relu", algorithm::eltwise_soft_relu, 0, 0, softplus},
    {"logsigmoid", algorithm::eltwise_logsigmoid, 0, 0, [](double x) { return -softplus(-x); }},
    {"swish", algorithm::eltwise_swish, 1, 0, [](double x) { return x * sigmoid(x); }},
    {"mish", algorithm::eltwise_mish, 0, 0, [](double x) { return x * std::tanh(softplus(x)); }},
    {"hardswish", algorithm::eltwise_hardswish, 0, 0,
     [](double x) { return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }},
    {"gelu_erf", algorithm::eltwise_gelu_erf, 0, 0,
     [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }},
    {"gelu_tanh", algorithm::eltwise_gelu_tanh, 0, 0,
     [](double x) {
       return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
     }},
};

// Sample points: a fine grid over [-10, 10], where every catalogue function
// has its features (the kinks of relu and hardswish, the knees of the
// sigmoids), so two different functions differ at some point by far more
// than float32 rounding (GELU's two forms differ by up to 5e-4 near x = 2).
std::vector<float> samplePoints() {
  std::vector<float> xs;
  for (int i = -80; i <= 80; ++i) xs.push_back(static_cast<float>(i) / 8.0f);
  for (float x : {0.01f, -0.01f, 0.1f, -0.1f, 2.7f, -2.7f}) xs.push_back(x);
  return xs;
}

// What float32 rounding of the few ops a written-out function runs leaves:
// relative to each value, plus a floor relative to the function's largest
// value over the samples, for cancellation (1 + erf(x) at x = -3.4 keeps
// 2e-7 of a GELU whose values reach 10). A bias of 2.7e-6 after a HardSwish
// scaled to 0.33 is no rounding: 1e-5 relative to 1 + |y| once dropped it,
// and a whole OCR model drifted from ONNX Runtime by 1e-4.
constexpr double kRelative = 2e-6, kOfScale = 2e-7;

bool within(double want, double got, double scale) {
  return std::abs(want - got) <= kRelative * std::abs(want) + kOfScale * scale;
}

// Snaps a fitted coefficient to `to` when they differ only by rounding at
// this `scale`; a coefficient that means something is kept.
double snap(double v, double to, double scale) { return std::abs(v - to) <= kOfScale * scale ? to : v; }

}  // namespace

std::optional<FittedFunction> fitEltwise(const SampledFunction& f) {
  static const std::vector<float> xs = samplePoints();
  std::vector<float> ys;
  try {
    ys = f(xs);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (ys.size() != xs.size()) return std::nullopt;
  double scale = 0;  // the function's largest value over the samples
  for (float y : ys) {
    if (!std::isfinite(y)) return std::nullopt;
    scale = std::max(scale, static_cast<double>(std::abs(y)));
  }
  const double n = static_cast<double>(xs.size());
  for (const Entry& e : kCatalogue) {
    std::vector<double> gs(xs.size());
    double sg = 0, sy = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      gs[i] = e.g(xs[i]);
      sg += gs[i];
      sy += ys[i];
    }
    const double mg = sg / n, my = sy / n;
    double cov = 0, var = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      cov += (gs[i] - mg) * (ys[i] - my);
      var += (gs[i] - mg) * (gs[i] - mg);
    }
    if (var <= 0) continue;
    const double a = snap(cov / var, 1.0, 1.0), b = snap(my - a * mg, 0.0, scale);
    if (std::abs(a) < 1e-6) continue;  // constant: not a function of x worth a post-op
    bool same = true;
    for (size_t i = 0; i < xs.size() && same; ++i) same = within(ys[i], a * gs[i] + b, scale);
    if (!same) continue;
    FittedFunction fit;
    fit.alg = e.alg;
    fit.alpha = e.alpha;
    fit.beta = e.beta;
    fit.scale = static_cast<float>(a);
    fit.shift = static_cast<float>(b);
    fit.name = e.name;
    return fit;
  }
  return std::nullopt;
}

std::string eltwiseCatalogueNames() {
  std::string s;
  for (const Entry& e : kCatalogue) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

bool isScalarFunctionOp(const std::string& op) {
  const OpSchema* schema = OpRegistry::instance().find(op);
  return schema && schema->maxOutputs == 1 &&
         (schema->kind == OpKind::ElemWise || schema->kind == OpKind::Broadcast);
}

}  // namespace collage::onednn
