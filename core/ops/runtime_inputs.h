// Run-time parameter inputs: a ConstInput slot (Clip's min, Pad's pads,
// Slice's starts, Resize's scales, ...) fed by a tensor that is only known
// when the model runs.
//
// The canonical form (op_registry.h) turns a constant parameter input into
// an attribute and drops the input. That stays the normal case, an
// optimisation every backend relies on; but ONNX allows a run-time tensor
// there, so a canonical node may keep such an input at its slot's position:
//
//   Clip(x, min = computed, max = 6.0)   ->  Clip  inputs [x, min]   attrs {max: 6}
//   Pad(x, pads = const, value = input)  ->  Pad   inputs [x, -, value]  attrs {pads: ...}
//
// (data inputs first, then the slots; a slot whose value became an
// attribute is kNoValue). The registry wraps every op's shape inference and
// reference kernel (OpRegistry::add) so that neither sees this form:
// the reference binds the run-time tensors into attributes and runs on the
// data inputs, exactly as if they had been constants at import.
//
// Output shapes. Some slots only change values (Clip min/max, Pad's
// constant_value, Dropout's ratio): the output shape is inferred without
// them. The others decide the output shape, or inference reads them
// (ConstInput::decidesShape: Pad's pads, Slice's starts, Resize's sizes and
// roi, Reshape's shape, ...). Collage plans with
// static shapes, so such a node's output types come from the model's own
// declaration (the importer requires one), and the reference kernel checks
// at run time that the values give the declared shape.
#pragma once

#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ops/op_registry.h"

namespace collage {

// The slots of `node` that hold a run-time tensor, in slot order.
std::vector<const ConstInput*> runtimeInputsOf(const OpSchema& schema, const Node& node);
// Same, looking the op up in the registry (none for an unknown op).
std::vector<const ConstInput*> runtimeInputsOf(const Node& node);
// The first run-time slot whose value decides an output shape, or null.
const ConstInput* shapeDecidingRuntimeInput(const OpSchema& schema, const Node& node);
const ConstInput* shapeDecidingRuntimeInput(const Node& node);

// A constant (or run-time) tensor as the attribute a slot becomes: Ints or
// Int for integer tensors, Floats or Float for any numeric one. Throws Error
// naming the node and the slot.
Attribute constInputToAttribute(const Node& node, const ConstInput& slot, const Tensor& value);

// `node` with the values of its run-time slots as attributes and only its
// data inputs: the form shape inference and the kernels take.
struct BoundNode {
  Node node;
  std::vector<const Tensor*> inputs;
};
BoundNode bindRuntimeInputs(const OpSchema& schema, const Node& node,
                            const std::vector<const Tensor*>& inputs);

// Why a backend that reads these parameters as constants (at compile time)
// cannot take the group `nodes` of `graph`: the first member with a run-time
// slot, naming the node, the slot and the tensor. Empty when there is none.
// A slot fed by a constant value (a graph built by hand rather than
// imported) is not run-time: the backend reads the constant.
std::string runtimeInputRefusal(const Graph& graph, const std::vector<NodeId>& nodes,
                                const std::string& backend);

// Wraps schema.infer and schema.reference to accept run-time slots (see the
// top of this file). Called by OpRegistry::add for every op.
void acceptRuntimeInputs(OpSchema& schema);

}  // namespace collage
