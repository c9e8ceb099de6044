// Canonicalise: an ONNX node of any supported opset (6 to 18) becomes the one
// form the op registry defines (op_registry.h, "Canonical form"). Legacy
// forms are rewritten (Upsample -> Resize, opset-6 broadcast, coerced-2D
// Softmax), constant parameter inputs become attributes, and missing
// attributes get ONNX's defaults.
//
// Invariant: after applyConstInputs and fillDefaults a node means the same
// at every opset: its op is registered, its data inputs are within the
// schema's count, a parameter is an attribute unless a run-time tensor
// feeds it (then it stays an input, runtime_inputs.h), and every required
// attribute is present.
#pragma once

#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ops/op_registry.h"

namespace collage::onnx_import {

// The op a default-domain node becomes in the canonical form.
std::string canonicalOp(const std::string& op);
// A constant tensor converted to the attribute type a ConstInput asks for.
Attribute constToAttribute(const Node& node, const std::string& attr, AttributeType type,
                           const Tensor& t);
// The constant-input slots of a canonical op at the given opset: position in
// the node as the model writes it, and the ConstInput (attribute) it becomes.
std::vector<ConstInput> constSlotsFor(const std::string& onnxOp, int64_t opset,
                                      const OpSchema& schema);

}  // namespace collage::onnx_import
