// oneDNN's eltwise algorithms as plain functions of one variable, so that a
// function a model writes out with several ops (x * Clip(x + 3, 0, 6) / 6 is
// HardSwish; x * Sigmoid(x) is swish) can be recognised by what it computes
// rather than by the shape of the ops: the chain analysis evaluates those ops
// with the reference kernels at sample points and asks fitEltwise which
// algorithm, if any, gives the same values.
#pragma once

#include <dnnl.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace collage::onednn {

// y = scale * alg(x; alpha, beta) + shift. alg is undef when y is affine in x
// (then only the linear post-op remains).
struct FittedFunction {
  dnnl::algorithm alg = dnnl::algorithm::undef;
  float alpha = 0, beta = 0;
  float scale = 1, shift = 0;
  std::string name;  // "hardswish", "gelu_tanh", ... ("linear" when alg is undef)
};

// Values of the written-out function at the given points; may throw (then
// nothing matches).
using SampledFunction = std::function<std::vector<float>(const std::vector<float>&)>;

// The algorithm that f equals at every sample point in [-10, 10], up to
// float32 rounding (2e-6 of each value plus 2e-7 of the largest), with scale
// and shift fitted by least squares; nullopt when none does or f is not
// finite everywhere there.
std::optional<FittedFunction> fitEltwise(const SampledFunction& f);

// The algorithms fitEltwise tries, for messages: "linear, relu, ...".
std::string eltwiseCatalogueNames();

// Whether an op may be part of such a function: a one-output elementwise or
// broadcasting op of the op registry.
bool isScalarFunctionOp(const std::string& op);

}  // namespace collage::onednn
