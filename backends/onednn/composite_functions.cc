#include "backends/onednn/composite_functions.h"

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

constexpr double kTolerance = 1e-5;  // relative to 1 + |y|: float32 rounding of a few ops

bool within(double want, double got) { return std::abs(want - got) <= kTolerance * (1.0 + std::abs(want)); }

// Snaps a fitted coefficient to `to` when it is that up to rounding.
double snap(double v, double to) { return std::abs(v - to) <= 1e-5 * (1.0 + std::abs(to)) ? to : v; }

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
  for (float y : ys)
    if (!std::isfinite(y)) return std::nullopt;
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
    const double a = snap(cov / var, 1.0), b = snap(my - a * mg, 0.0);
    if (std::abs(a) < 1e-6) continue;  // constant: not a function of x worth a post-op
    bool same = true;
    for (size_t i = 0; i < xs.size() && same; ++i) same = within(ys[i], a * gs[i] + b);
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
