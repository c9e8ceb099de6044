// Integer products for oneDNN, step one: a group of nodes read as one int8
// computation. The quantization idioms exporters write all become the same
// description, lowered by one function (onednn_int8_kernel.h):
//
//   dynamic   x -> DynamicQuantizeLinear -> ConvInteger/MatMulInteger(x_q, W, x_zp, W_zp)
//               -> Cast(float) -> Mul(Mul(x_scale, W_scale)) -> [Add bias] -> [post-ops]
//             (or any prefix from the integer product on: its int32 result,
//             a u8 source and zero point that are inputs of the group, a scale
//             that is a constant or an input)
//
//   QDQ       [x -> QuantizeLinear ->] x_q -> DequantizeLinear -> Conv/MatMul(constant weights) -> [post-ops]
//               [-> QuantizeLinear: the output u8/s8]
//             (the import folds the weights' DequantizeLinear into float
//             weights; they are taken back as int8 values times a scale
//             where that reproduces every float weight exactly)
//
//   QOperator [QuantizeLinear ->] QLinearConv / QLinearMatMul [-> DequantizeLinear]:
//             u8/s8 source (or float quantized in the kernel), constant scales
//             and zero points, int32 bias, the output requantized to u8/s8
//             (then dequantized to float when the group ends so)
//
//   description:  source  float quantized in the kernel, or u8/s8 as given
//                 source zero point  from the quantizer, a constant, an input
//                 weights  constant, shifted by their zero point into s8
//                 scale    source scale (quantizer's / none) x weight scale per channel
//                 output   int32 accumulator, float with float post-ops (then
//                          quantized, QDQ's QuantizeLinear), or requantized
//                          (round half to even, saturate)
//
// Like the float chain analysis (onednn_chain.h), it reads the nodes
// generically in topological order; what it cannot express it refuses with a
// reason naming the node, and the backend's rule asks this same analysis, so
// a group is generated exactly when it lowers.
#pragma once

#include <string>
#include <vector>

#include "backends/onednn/onednn_chain.h"
#include "core/runtime/backend.h"

namespace collage::onednn {

struct Int8Product {
  enum class Kind { Conv, MatMul };
  Kind kind = Kind::Conv;
  NodeId anchor = kNoNode;     // ConvInteger / MatMulInteger / QLinearConv / QLinearMatMul
  NodeId quantizer = kNoNode;  // DynamicQuantizeLinear inside the group, or kNoNode
  NodeId dequantizer = kNoNode;  // DequantizeLinear of the source (QDQ), or kNoNode
  // QuantizeLinear of a float source inside the group (constant per-tensor
  // scale and zero point), or kNoNode.
  NodeId staticQuantizer = kNoNode;
  // The source is a float input of the group that an outside
  // DequantizeLinear made (QDQ with the DequantizeLinear shared by several
  // consumers): quantized again in the kernel with that scale and zero
  // point, which gives back its integers exactly.
  bool requantizedSource = false;
  float staticScale = 1.0f;
  int32_t staticZeroPoint = 0;
  float dequantizeScale = 1.0f;  // its scale (its zero point: sourceZeroPoint)

  // Source: the float tensor the quantizer reads (quantizer present), or the
  // quantized tensor itself (u8 or s8).
  Operand source;
  ElementType sourceType = ElementType::UInt8;  // after quantization
  // Source zero point: the quantizer's (quantizer present), else this operand
  // (a constant or an input; absent: 0).
  Operand sourceZeroPoint;

  // Weights in ONNX's layout (Conv [OC, IC/G, k...], MatMul [K, N]) minus
  // their zero point, every value checked to fit int8.
  std::vector<int8_t> weights;
  Shape weightsShape;
  // Weights whose difference from their zero point does not fit int8 (u8
  // weights with a zero point far from 128): `weights` holds w - base, and
  // the accumulator is the product with them plus weightOffset[c] (base -
  // zero point) times the sum of the source minus its zero point over each
  // output's window, computed by a second product with weights of ones.
  // Empty when the weights fit.
  std::vector<int32_t> weightOffset;

  // Float output: the accumulator times scale[c] = sourceScale * weightScale[c]
  // (sourceScale: the quantizer's when scaleFromQuantizer, else 1; one
  // weightScale per output channel or a single one), then postOps. The
  // scale step is absent (hasScale false) when the group has no Mul by the
  // quantizer's scale.
  bool floatOutput = false;
  bool hasScale = false;
  bool scaleFromQuantizer = false;
  std::vector<float> weightScale;
  std::vector<PostOp> postOps;  // operands refer to the group's request

  // Requantized output (QLinear*), as the reference computes it:
  // y = saturate(round_half_even(float(acc + intBias[c]) * requantScale[c]) + outputZeroPoint)
  // with requantScale[c] = source scale * weight scale[c] / output scale, all in float32
  // (core/ops/requantize.h).
  bool requantize = false;
  ElementType outputType = ElementType::Int32;
  int32_t outputZeroPoint = 0;
  std::vector<float> requantScale;  // one per output channel, or a single one
  std::vector<int32_t> intBias;     // one per output channel, or empty
  // A DequantizeLinear of the requantized result in the group: the output is
  // float(q - outputDequantizeZero) * outputDequantizeScale.
  NodeId outputDequantizer = kNoNode;
  float outputDequantizeScale = 1.0f;
  int32_t outputDequantizeZero = 0;

  // A QuantizeLinear ending a group with a float result (QDQ: DequantizeLinear
  // -> Conv/MatMul/Gemm -> post-ops -> QuantizeLinear), constant per-tensor
  // scale and zero point: the kernel writes its u8/s8 (outputType) instead of
  // the float, as saturate(round_half_even(f / scale) + zero point) of the
  // float f it computes otherwise, f / scale a true division (or the
  // multiplication by an exact reciprocal, core/ops/requantize.h), so the
  // bytes are those the float kernel and a QuantizeLinear after it give.
  NodeId outputQuantizer = kNoNode;
  float outputQuantizeScale = 1.0f;
  int32_t outputQuantizeZero = 0;

  Shape shape;  // of the output
  ValueId output = kNoValue;

  int64_t outChannels() const { return shape.size() >= 2 ? (kind == Kind::Conv ? shape[1] : shape.back()) : 1; }
  std::string describe(const Graph& graph) const;  // "DynamicQuantizeLinear + ConvInteger u8s8 -> f32 + ..."
};

struct Int8Analysis {
  Int8Product product;
  std::string refusal;
  // Refused, but a larger group starting so lowers (QuantizeLinear ->
  // DequantizeLinear, before its product): the rule grows it, never emits it.
  bool prefix = false;
  bool ok() const { return refusal.empty(); }
};

// Whether any member is an integer product or a quantizer: such groups are
// the int8 analysis's, not the float chain's.
bool isInt8Group(const KernelRequest& request);
// The group read as one int8 computation, or why it is not one.
Int8Analysis analyzeInt8(const KernelRequest& request);
// A group of float ops (Conv/MatMul/Gemm and post-ops) whose anchor reads
// the result of a DequantizeLinear outside it, and whose weights are int8
// values times a scale: the same group as one int8 kernel, or why not. The
// backend prefers it to the float lowering where it holds (the model asked
// for int8 arithmetic there).
Int8Analysis analyzeDequantizedInput(const KernelRequest& request);
// Ops an int8 group may contain besides float post-ops.
bool isInt8MemberOp(const std::string& op);

}  // namespace collage::onednn
