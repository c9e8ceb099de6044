#include "core/ops/logistic.h"

#include <algorithm>
#include <cmath>

namespace collage {

namespace {

// MLAS's MlasLogisticConstants (onnxruntime/core/mlas/lib/logistic.cpp).
constexpr float kLowerRange = -18.0f;
constexpr float kUpperRange = 18.0f;
constexpr float kAlpha9 = 4.37031012579801e-11f;
constexpr float kAlpha7 = 1.15627324459942e-07f;
constexpr float kAlpha5 = 6.08574864600143e-05f;
constexpr float kAlpha3 = 8.51377133304701e-03f;
constexpr float kAlpha1 = 2.48287947061529e-01f;
constexpr float kBeta10 = 6.10247389755681e-13f;
constexpr float kBeta8 = 5.76102136993427e-09f;
constexpr float kBeta6 = 6.29106785017040e-06f;
constexpr float kBeta4 = 1.70198817374094e-03f;
constexpr float kBeta2 = 1.16817656904453e-01f;
constexpr float kBeta0 = 9.93151921023180e-01f;

}  // namespace

float ortLogistic(float x) {
  if (std::isnan(x)) return x;
  // Each multiply-add is one std::fma (one rounding), as the FMA3 and
  // AVX-512 kernels do; the other products and the division round alone.
  const float v = std::min(std::max(x, kLowerRange), kUpperRange);
  const float v2 = v * v;
  float p = std::fma(v2, kAlpha9, kAlpha7);
  p = std::fma(p, v2, kAlpha5);
  p = std::fma(p, v2, kAlpha3);
  p = std::fma(p, v2, kAlpha1);
  p = p * v;
  float q = std::fma(v2, kBeta10, kBeta8);
  q = std::fma(q, v2, kBeta6);
  q = std::fma(q, v2, kBeta4);
  q = std::fma(q, v2, kBeta2);
  q = std::fma(q, v2, kBeta0);
  return std::min(std::max(p / q + 0.5f, 0.0f), 1.0f);
}

}  // namespace collage
