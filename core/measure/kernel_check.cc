#include "core/measure/kernel_check.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/ir/memory_budget.h"
#include "core/ops/reference_executor.h"

namespace collage {

std::vector<Tensor> runKernel(Kernel& kernel, const KernelRequest& request,
                              std::vector<Tensor>& inputs) {
  const Graph& g = *request.graph;
  std::vector<Tensor> outputs;
  for (ValueId v : request.outputs) outputs.emplace_back(g.value(v).type);
  std::vector<DLTensor> inViews, outViews;
  for (Tensor& t : inputs) inViews.push_back(t.toDLTensor());
  for (Tensor& t : outputs) outViews.push_back(t.toDLTensor());
  std::vector<const DLTensor*> in;
  std::vector<DLTensor*> out;
  for (auto& d : inViews) in.push_back(&d);
  for (auto& d : outViews) out.push_back(&d);
  kernel.run(in, out);
  return outputs;
}

std::vector<Tensor> referenceValues(const Graph& graph, const std::vector<Tensor>& inputs) {
  // Node by node (nodes are in topological order), keeping every value.
  std::vector<Tensor> env(static_cast<size_t>(graph.numValues()));
  for (size_t i = 0; i < graph.inputs().size(); ++i) env[graph.inputs()[i]] = inputs.at(i);
  for (ValueId v = 0; v < graph.numValues(); ++v)
    if (graph.value(v).isConstant()) env[v] = *graph.value(v).constant;
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    const Node& node = graph.node(n);
    if (std::string why = nodeMemoryRefusal(graph, node); !why.empty())
      throw DoesNotFitInMemory(why + ": the reference executor cannot run it on this machine");
    std::vector<const Tensor*> in;
    for (ValueId v : node.inputs) in.push_back(v == kNoValue ? nullptr : &env[v]);
    std::vector<Tensor> out = evaluateNode(node, in);
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (node.outputs[i] != kNoValue) env[node.outputs[i]] = std::move(out[i]);
  }
  return env;
}

KernelCheckResult checkKernelAgainstReference(Backend& backend, const Graph& graph,
                                              const NodeSet& nodes, uint64_t seed,
                                              Tolerance tolerance) {
  KernelCheckResult result;
  KernelRequest request = KernelRequest::of(graph, nodes, "check");
  CompileResult compiled = backend.compile(request);
  if (!compiled) {
    result.refusal = compiled.refusal;
    return result;
  }
  result.compiled = true;

  // Reference values of every tensor, on random inputs.
  const std::vector<Tensor> env = referenceValues(graph, randomInputs(graph, seed));

  std::vector<Tensor> kernelInputs;
  for (ValueId v : request.inputs) kernelInputs.push_back(env[v].clone());
  std::vector<Tensor> outputs = runKernel(*compiled.kernel, request, kernelInputs);
  result.ok = true;
  for (size_t i = 0; i < outputs.size(); ++i) {
    CompareResult c = compareTensors(outputs[i], env[request.outputs[i]], tolerance);
    if (!c.ok) {
      result.ok = false;
      result.message = backend.name() + " on " + request.toString() + ", output '" +
                       graph.value(request.outputs[i]).name + "': " + c.message;
      break;
    }
  }
  return result;
}

}  // namespace collage
