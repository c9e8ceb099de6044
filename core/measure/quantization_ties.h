// Where float32 reordering can change an integer. A quantizer
// (QuantizeLinear, DynamicQuantizeLinear) rounds x / scale to the nearest
// integer, half to even. When x is computed (a Conv, an Add), a plan sums it
// in another order than the reference does and may get it a few ulps away;
// an x whose x / scale lies that close to a half-integer then rounds to the
// neighbouring step, and every value after it inherits the step. Neither
// result is wrong: ONNX leaves the summation order open, and ONNX Runtime's
// fused and unfused runs of one QDQ ResNet-50 differ by 0.156 this way.
//
// "That close" is the plan's bound (every float value of a plan may be off
// the reference's by bound x its tensor's largest |value|, compareScaled,
// docs/measurement.md), applied to x / scale: |x/s - (k + 1/2)| <= bound
// max|x| / |s|. A DynamicQuantizeLinear also takes its scale from x's range,
// so a reordered x moves every x / scale by about that much too, and its
// zero point, -min / scale rounded, may itself sit at a tie (then every
// element may move). Being near a tie excuses nothing by itself: the plan
// check replays the plan with the reference's values there (plan_check.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/tensor.h"
#include "core/ir/tensor_compare.h"

namespace collage {

bool isQuantizer(const Node& node);

// Per element of quantizer `node`'s quantized output: whether the
// reference's x / scale lies within `bound` (above) of a rounding tie whose two
// neighbours do not saturate to the same value. `values` holds the reference's
// values of the node's inputs and outputs (indexed by ValueId).
std::vector<bool> nearRoundingTies(const Graph& graph, NodeId node,
                                   const std::vector<const Tensor*>& values, double bound);

// A quantizer whose x is computed by another node (not a graph input or a
// constant): a place where the plan's own summation order reaches an integer.
bool quantizesComputedFloats(const Graph& graph, const Node& node);

struct QuantizerTies {
  NodeId node = kNoNode;
  int64_t nearTies = 0;  // elements within the bound of a rounding tie
  int64_t elements = 0;
};

}  // namespace collage
