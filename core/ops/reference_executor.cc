#include "core/ops/reference_executor.h"

#include <random>

#include "core/ir/error.h"
#include "core/ir/memory_budget.h"
#include "core/ops/op_registry.h"
#include "core/ops/runtime_inputs.h"

namespace collage {

std::vector<Tensor> evaluateNode(const Node& node, const std::vector<const Tensor*>& inputs) {
  const OpSchema& schema = OpRegistry::instance().get(node.op);
  // Run-time parameter inputs: their values are known now, so the node is
  // evaluated as if they had been constants (attributes) at import; this
  // also gives output shapes that depend on them.
  if (!runtimeInputsOf(schema, node).empty()) {
    BoundNode bound = bindRuntimeInputs(schema, node, inputs);
    return evaluateNode(bound.node, bound.inputs);
  }
  std::vector<TensorType> inTypes;
  inTypes.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor* t = inputs[i];
    if (t && t->isSequence() && !schema.takesSequences)
      throw Error("node '" + node.name + "' (" + node.op + "): input " + std::to_string(i) + " is a " +
                  t->type().toString() + "; " + node.op + " takes tensors");
    inTypes.push_back(t ? t->type() : TensorType{});
  }
  std::vector<TensorType> outTypes = schema.infer(node, inTypes);
  std::vector<Tensor> outputs;
  outputs.reserve(node.outputs.size());
  std::vector<Tensor*> outPtrs(node.outputs.size(), nullptr);
  for (size_t i = 0; i < node.outputs.size(); ++i)
    outputs.emplace_back(i < outTypes.size() ? outTypes[i] : TensorType{});
  for (size_t i = 0; i < node.outputs.size(); ++i)
    if (node.outputs[i] != kNoValue && i < outTypes.size()) outPtrs[i] = &outputs[i];
  schema.reference(node, inputs, outPtrs);
  return outputs;
}

ReferenceExecutor::ReferenceExecutor(const Graph& graph) : graph_(graph) {
  lastUse_.assign(graph.numValues(), -1);
  for (NodeId n = 0; n < graph.numNodes(); ++n)
    for (ValueId v : graph.node(n).inputs)
      if (v != kNoValue) lastUse_[v] = n;
  for (ValueId v : graph.outputs()) lastUse_[v] = graph.numNodes();  // never freed
}

std::vector<Tensor> ReferenceExecutor::run(const std::map<std::string, Tensor>& named) const {
  std::vector<Tensor> inputs;
  for (ValueId v : graph_.inputs()) {
    auto it = named.find(graph_.value(v).name);
    if (it == named.end()) throw Error("no value given for input '" + graph_.value(v).name + "'");
    inputs.push_back(it->second);
  }
  return run(inputs);
}

std::vector<Tensor> ReferenceExecutor::run(const std::vector<Tensor>& inputs) const {
  return valuesOf(inputs, graph_.outputs());
}

std::vector<Tensor> ReferenceExecutor::valuesOf(const std::vector<Tensor>& inputs,
                                                const std::vector<ValueId>& wanted) const {
  std::vector<char> keep(static_cast<size_t>(graph_.numValues()), 0);
  for (ValueId v : wanted) keep[static_cast<size_t>(v)] = 1;
  if (inputs.size() != graph_.inputs().size())
    throw Error("the model has " + std::to_string(graph_.inputs().size()) + " inputs, " +
                std::to_string(inputs.size()) + " given");
  std::vector<Tensor> env(graph_.numValues());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value& v = graph_.value(graph_.inputs()[i]);
    if (!acceptsType(v.type, inputs[i].type()))
      throw Error("input '" + v.name + "' must be " + v.type.toString() + ", got " +
                  inputs[i].type().toString());
    env[graph_.inputs()[i]] = inputs[i];
  }
  for (ValueId v = 0; v < graph_.numValues(); ++v)
    if (graph_.value(v).isConstant()) env[v] = *graph_.value(v).constant;

  for (NodeId n = 0; n < graph_.numNodes(); ++n) {
    const Node& node = graph_.node(n);
    std::vector<const Tensor*> in;
    in.reserve(node.inputs.size());
    for (ValueId v : node.inputs) in.push_back(v == kNoValue ? nullptr : &env[v]);
    std::vector<Tensor> out;
    // A node whose outputs cannot fit stops the run, named, before it
    // allocates (core/ir/memory_budget.h): not std::bad_alloc or a kill.
    if (std::string why = nodeMemoryRefusal(graph_, node); !why.empty())
      throw DoesNotFitInMemory(why + ": the reference executor cannot run it on this machine");
    try {
      out = evaluateNode(node, in);
    } catch (const Unsupported&) {
      throw;
    } catch (const Error& e) {
      std::string what = e.what();
      if (what.find("node '") == std::string::npos)
        what = "node '" + node.name + "' (" + node.op + "): " + what;
      throw Error(what);
    }
    // An output shape decided by a run-time value was planned from the
    // model's declaration: values that give another shape contradict it.
    if (const ConstInput* slot = shapeDecidingRuntimeInput(node))
      for (size_t i = 0; i < node.outputs.size(); ++i) {
        const ValueId v = node.outputs[i];
        if (v == kNoValue || out[i].type() == graph_.value(v).type) continue;
        throw Error("node '" + node.name + "' (" + node.op + "): output '" + graph_.value(v).name +
                    "' is " + out[i].type().toString() + " with the run-time value of input '" +
                    slot->attribute + "' ('" +
                    graph_.value(node.inputs[static_cast<size_t>(slot->index)]).name +
                    "'), but the model declares " + graph_.value(v).type.toString());
      }
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (node.outputs[i] != kNoValue) env[node.outputs[i]] = std::move(out[i]);
    // Release what no later node reads (constants stay: they are shared).
    for (ValueId v : node.inputs)
      if (v != kNoValue && lastUse_[v] == n && !graph_.value(v).isConstant() &&
          !keep[static_cast<size_t>(v)])
        env[v] = Tensor();
  }
  std::vector<Tensor> outputs;
  for (ValueId v : wanted) outputs.push_back(env[v]);
  return outputs;
}

std::vector<Tensor> randomInputs(const Graph& graph, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::uniform_int_distribution<int64_t> integer(0, 9);
  std::vector<Tensor> out;
  for (ValueId id : graph.inputs()) {
    const Value& v = graph.value(id);
    Tensor t(v.type);
    const int64_t n = t.numElements();
    switch (t.elementType()) {
      case ElementType::Float32:
        for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = real(rng);
        break;
      case ElementType::Int64:
        for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = integer(rng);
        break;
      case ElementType::Int32:
        for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(integer(rng));
        break;
      case ElementType::Bool:
        for (int64_t i = 0; i < n; ++i) t.data<bool>()[i] = integer(rng) % 2;
        break;
      default:
        throw Error("cannot make random values for input '" + v.name + "' of type " +
                    v.type.toString());
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace collage
