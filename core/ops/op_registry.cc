#include "core/ops/op_registry.h"

#include "core/ops/runtime_inputs.h"

namespace collage {

std::string_view opKindName(OpKind kind) {
  switch (kind) {
    case OpKind::ElemWise: return "ElemWise";
    case OpKind::Broadcast: return "Broadcast";
    case OpKind::Injective: return "Injective";
    case OpKind::Reduction: return "Reduction";
    case OpKind::Anchor: return "Anchor";
    case OpKind::Opaque: return "Opaque";
  }
  return "?";
}

std::optional<OpKind> opKindFromName(std::string_view name) {
  for (OpKind k : {OpKind::ElemWise, OpKind::Broadcast, OpKind::Injective, OpKind::Reduction,
                   OpKind::Anchor, OpKind::Opaque})
    if (opKindName(k) == name) return k;
  return std::nullopt;
}

const AttributeSpec* OpSchema::findAttribute(const std::string& attr) const {
  for (const auto& a : attributes)
    if (a.name == attr) return &a;
  return nullptr;
}

const ConstInput* OpSchema::findConstInput(int index) const {
  for (const auto& c : constInputs)
    if (c.index == index) return &c;
  return nullptr;
}

const OpRegistry& OpRegistry::instance() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    registerElementwiseOps(r);
    registerReductionOps(r);
    registerShapeOps(r);
    registerConvOps(r);
    registerMatMulOps(r);
    registerPoolOps(r);
    registerNormalizationOps(r);
    registerMiscOps(r);
    registerSpatialOps(r);
    registerControlFlowOps(r);
    registerSequenceOps(r);
    registerIndexOps(r);
    registerLossOps(r);
    registerRecurrentOps(r);
    registerDetectionOps(r);
    registerSamplingOps(r);
    registerQuantizeOps(r);
    registerQLinearContribOps(r);
    registerEinsumOps(r);
    registerSignalOps(r);
    registerRandomOps(r);
    registerLayoutOps(r);
    return r;
  }();
  return registry;
}

void OpRegistry::add(OpSchema schema) {
  COLLAGE_CHECK(!schemas_.count(schema.name), "op registered twice: " + schema.name);
  COLLAGE_CHECK(schema.infer && schema.reference, "op without infer/reference: " + schema.name);
  acceptRuntimeInputs(schema);
  std::string name = schema.name;
  schemas_.emplace(std::move(name), std::move(schema));
}

const OpSchema* OpRegistry::find(const std::string& op) const {
  auto it = schemas_.find(op);
  return it == schemas_.end() ? nullptr : &it->second;
}

const OpSchema& OpRegistry::get(const std::string& op) const {
  const OpSchema* s = find(op);
  if (!s) throw Error("unsupported op '" + op + "'");
  return *s;
}

std::vector<std::string> OpRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : schemas_) out.push_back(k);
  return out;
}

OpKind opKindOf(const std::string& op) { return OpRegistry::instance().get(op).kind; }

std::vector<TensorType> inferNode(const Node& node, const std::vector<TensorType>& inputs) {
  return OpRegistry::instance().get(node.op).infer(node, inputs);
}

double flopsOf(const Graph& graph, NodeId id) {
  const Node& node = graph.node(id);
  const OpSchema& s = OpRegistry::instance().get(node.op);
  std::vector<TensorType> in, out;
  for (size_t i = 0; i < node.inputs.size(); ++i) in.push_back(graph.inputType(id, i));
  for (size_t i = 0; i < node.outputs.size(); ++i) out.push_back(graph.outputType(id, i));
  if (s.flops) return s.flops(node, in, out);
  double total = 0;
  for (const auto& t : out) total += static_cast<double>(t.numElements());
  return total;
}

}  // namespace collage
