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
#pragma once

namespace collage {

// MLAS's MlasComputeLogistic for one value: p(x) / q(x) + 0.5 with x
// clamped to [-18, 18], then clamped to [0, 1]. NaN stays NaN.
float ortLogistic(float x);

}  // namespace collage
