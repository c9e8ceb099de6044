// The float32 logistic function (Sigmoid) as ONNX Runtime computes it on
// x86-64: MLAS's rational approximation, evaluated with fused multiply-adds.
//
// Why not 1 / (1 + exp(-x)): the spec fixes no rounding for Sigmoid, and
// the two differ by a float32 step or two (up to 1.8e-7 absolute) on about
// half of the inputs. That is harmless in a float model but not in a
// dynamically quantised one: a detector's SiLU (x * Sigmoid(x)) feeds each
// DynamicQuantizeLinear, whose scale (the tensor's range) and rounding of
// x / scale the step can move, and every flipped uint8 is amplified by the
// convolutions after it. On a small detector with uint8 weights
// (tests/models/detector) the exact form put 81 of 3,024 box values beyond
// tolerance of ONNX Runtime's (max 0.091); this one reproduces ONNX
// Runtime's every intermediate tensor bit for bit up to the box decode's Exp
// (docs/quantized.md, "Float ops before a dynamic quantizer").
//
// Header-only, arithmetic and std::fma alone (one vfmadd where the target
// has FMA), so that the native backend's vectorised loops compute the same
// bits (backends/native/native_math.h). No sum is left for the compiler to
// contract: every fused step is written as std::fma.
#pragma once

#include <algorithm>
#include <cmath>

namespace collage {

// MLAS's MlasComputeLogistic for one value: p(x) / q(x) + 0.5 with x
// clamped to [-18, 18], then clamped to [0, 1]; the constants are MLAS's
// MlasLogisticConstants (onnxruntime/core/mlas/lib/logistic.cpp). NaN stays
// NaN (std::max / std::min return their first operand when unordered).
__attribute__((always_inline)) inline float ortLogistic(float x) {
  const float v = std::min(std::max(x, -18.0f), 18.0f);
  const float v2 = v * v;
  float p = std::fma(v2, 4.37031012579801e-11f, 1.15627324459942e-07f);
  p = std::fma(p, v2, 6.08574864600143e-05f);
  p = std::fma(p, v2, 8.51377133304701e-03f);
  p = std::fma(p, v2, 2.48287947061529e-01f);
  p = p * v;
  float q = std::fma(v2, 6.10247389755681e-13f, 5.76102136993427e-09f);
  q = std::fma(q, v2, 6.29106785017040e-06f);
  q = std::fma(q, v2, 1.70198817374094e-03f);
  q = std::fma(q, v2, 1.16817656904453e-01f);
  q = std::fma(q, v2, 9.93151921023180e-01f);
  return std::min(std::max(p / q + 0.5f, 0.0f), 1.0f);
}

}  // namespace collage
