#include "core/ops/reference_executor.h"

#include <random>

#include "core/ir/error.h"
#include "core/ops/op_registry.h"

namespace collage {

std::vector<Tensor> evaluateNode(const Node& node, const std::vector<const Tensor*>& inputs) {
  const OpSchema& schema = OpRegistry::instance().get(node.op);
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
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (node.outputs[i] != kNoValue) env[node.outputs[i]] = std::move(out[i]);
    // Release what no later node reads (constants stay: they are shared).
    for (ValueId v : node.inputs)
      if (v != kNoValue && lastUse_[v] == n && !graph_.value(v).isConstant()) env[v] = Tensor();
  }
  std::vector<Tensor> outputs;
  for (ValueId v : graph_.outputs()) outputs.push_back(env[v]);
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
