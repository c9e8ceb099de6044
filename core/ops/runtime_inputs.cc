#include "core/ops/runtime_inputs.h"

#include <algorithm>

#include "core/ir/error.h"
#include "core/ops/half_float.h"
#include "core/ops/op_helpers.h"

namespace collage {

namespace {

// The slots of `node` holding a run-time tensor, from a copy of the schema's
// slots (the wrappers capture one: the registry is still being built then).
std::vector<const ConstInput*> runtimeSlots(const std::vector<ConstInput>& slots,
                                            const Node& node) {
  std::vector<const ConstInput*> out;
  for (const ConstInput& c : slots) {
    const size_t i = static_cast<size_t>(c.index);
    if (c.index >= 0 && i < node.inputs.size() && node.inputs[i] != kNoValue) out.push_back(&c);
  }
  std::sort(out.begin(), out.end(),
            [](const ConstInput* a, const ConstInput* b) { return a->index < b->index; });
  return out;
}

// Data inputs come before every slot (the importer rejects a node with data
// inputs after one), so they are the inputs before the lowest slot.
size_t dataInputCount(const std::vector<ConstInput>& slots, size_t numInputs) {
  size_t first = numInputs;
  for (const ConstInput& c : slots) first = std::min(first, static_cast<size_t>(std::max(c.index, 0)));
  return first;
}

const ConstInput* firstDecidingShape(const std::vector<const ConstInput*>& slots) {
  for (const ConstInput* c : slots)
    if (c->decidesShape) return c;
  return nullptr;
}

BoundNode bind(const std::vector<ConstInput>& slots, const Node& node,
               const std::vector<const Tensor*>& inputs) {
  BoundNode b;
  b.node = node;
  for (const ConstInput* c : runtimeSlots(slots, node)) {
    const size_t i = static_cast<size_t>(c->index);
    const Tensor* t = i < inputs.size() ? inputs[i] : nullptr;
    if (!t)
      throw Error(nodeLabel(node) + "input '" + c->attribute + "' is connected but has no value");
    b.node.attrs.set(c->attribute, constInputToAttribute(node, *c, *t));
  }
  const size_t data = std::min(dataInputCount(slots, node.inputs.size()), inputs.size());
  b.node.inputs.resize(data);
  b.inputs.assign(inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(data));
  // Absent trailing data inputs are left out, as the importer leaves them out.
  while (!b.node.inputs.empty() && b.node.inputs.back() == kNoValue) {
    b.node.inputs.pop_back();
    b.inputs.pop_back();
  }
  return b;
}

}  // namespace

std::vector<const ConstInput*> runtimeInputsOf(const OpSchema& schema, const Node& node) {
  return runtimeSlots(schema.constInputs, node);
}

std::vector<const ConstInput*> runtimeInputsOf(const Node& node) {
  const OpSchema* schema = OpRegistry::instance().find(node.op);
  return schema ? runtimeInputsOf(*schema, node) : std::vector<const ConstInput*>{};
}

const ConstInput* shapeDecidingRuntimeInput(const OpSchema& schema, const Node& node) {
  return firstDecidingShape(runtimeInputsOf(schema, node));
}

const ConstInput* shapeDecidingRuntimeInput(const Node& node) {
  return firstDecidingShape(runtimeInputsOf(node));
}

Attribute constInputToAttribute(const Node& node, const ConstInput& slot, const Tensor& t) {
  const std::string what = nodeLabel(node) + "input '" + slot.attribute + "' ";
  auto ints = [&] {
    if (isFloatingPoint(t.elementType()))
      throw Error(what + "must be an integer tensor, got " + t.type().toString());
    return t.toInts();
  };
  auto floats = [&] {
    const int64_t n = t.numElements();
    std::vector<float> f(static_cast<size_t>(n));
    if (t.elementType() == ElementType::Float16 || t.elementType() == ElementType::BFloat16) {
      const bool half = t.elementType() == ElementType::Float16;
      for (int64_t i = 0; i < n; ++i)
        f[static_cast<size_t>(i)] =
            half ? halfToFloat(t.data<uint16_t>()[i]) : bfloat16ToFloat(t.data<uint16_t>()[i]);
      return f;
    }
    return t.toFloats();
  };
  switch (slot.type) {
    case AttributeType::Ints:
      return ints();
    case AttributeType::Int: {
      auto v = ints();
      if (v.size() != 1) throw Error(what + "must hold one value, got " + t.type().toString());
      return v[0];
    }
    case AttributeType::Floats:
      return floats();
    case AttributeType::Float: {
      auto v = floats();
      if (v.size() != 1) throw Error(what + "must hold one value, got " + t.type().toString());
      return v[0];
    }
    case AttributeType::Tensor:
      return t;
    default:
      throw Error(what + "cannot become a " + std::string(attributeTypeName(slot.type)) +
                  " attribute");
  }
}

BoundNode bindRuntimeInputs(const OpSchema& schema, const Node& node,
                            const std::vector<const Tensor*>& inputs) {
  return bind(schema.constInputs, node, inputs);
}

std::string runtimeInputRefusal(const Graph& graph, const std::vector<NodeId>& nodes,
                                const std::string& backend) {
  for (NodeId n : nodes) {
    const Node& node = graph.node(n);
    for (const ConstInput* slot : runtimeInputsOf(node)) {
      const ValueId v = node.inputs[static_cast<size_t>(slot->index)];
      if (graph.value(v).isConstant()) continue;
      return nodeLabel(node) + "input '" + slot->attribute + "' ('" + graph.value(v).name +
             "') is a run-time tensor; " + backend + " takes it only as a constant, at compile time";
    }
  }
  return {};
}

void acceptRuntimeInputs(OpSchema& schema) {
  const std::vector<ConstInput> slots = schema.constInputs;
  if (slots.empty()) return;
  InferFn infer = schema.infer;
  ReferenceFn reference = schema.reference;

  schema.infer = [slots, infer](const Node& node, const std::vector<TensorType>& in) {
    const auto runtime = runtimeSlots(slots, node);
    if (runtime.empty()) return infer(node, in);
    if (const ConstInput* c = firstDecidingShape(runtime))
      throw Error(nodeLabel(node) + "the output shape depends on the run-time value of input '" +
                  c->attribute + "': types alone do not give it");
    // Values only: infer as if the slot were an absent attribute.
    Node stripped = node;
    const size_t data = std::min(dataInputCount(slots, node.inputs.size()), in.size());
    stripped.inputs.resize(data);
    std::vector<TensorType> types(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(data));
    while (!stripped.inputs.empty() && stripped.inputs.back() == kNoValue) {
      stripped.inputs.pop_back();
      types.pop_back();
    }
    return infer(stripped, types);
  };

  schema.reference = [slots, infer, reference](const Node& node,
                                               const std::vector<const Tensor*>& in,
                                               const std::vector<Tensor*>& out) {
    const auto runtime = runtimeSlots(slots, node);
    if (runtime.empty()) return reference(node, in, out);
    BoundNode b = bind(slots, node, in);
    if (const ConstInput* c = firstDecidingShape(runtime)) {
      // The caller allocated the outputs with the planned (declared) types;
      // a kernel writing another shape into them would overrun them.
      std::vector<TensorType> types;
      for (const Tensor* t : b.inputs) types.push_back(t ? t->type() : TensorType{});
      const std::vector<TensorType> want = infer(b.node, types);
      for (size_t i = 0; i < out.size() && i < want.size(); ++i) {
        if (!out[i] || out[i]->type() == want[i]) continue;
        const Tensor& value = *in[static_cast<size_t>(c->index)];
        throw Error(nodeLabel(node) + "with the run-time value of input '" + c->attribute +
                    "' (" + value.toString() + ") output " + std::to_string(i) + " is " +
                    want[i].toString() + ", not the planned " + out[i]->type().toString() +
                    " (the shape the model declares)");
      }
    }
    reference(b.node, b.inputs, out);
  };
}

}  // namespace collage
