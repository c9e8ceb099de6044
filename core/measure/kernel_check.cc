#include "core/measure/kernel_check.h"

#include <algorithm>
#include <cmath>
#include <random>

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

std::vector<GroupError> groupErrors(const Session& session, const std::vector<Tensor>& inputs) {
  const Graph& graph = session.graph();
  const std::vector<Tensor> env = referenceValues(graph, inputs);
  std::vector<GroupError> errors;
  for (size_t g = 0; g < session.plan().groups.size(); ++g) {
    const PlanGroup& group = session.plan().groups[g];
    const KernelRequest& request = session.request(g);
    GroupError e;
    e.group = g;
    e.backend = group.backend;
    e.what = request.toString();
    // Compiled again rather than taken from the Session: there its inputs
    // and outputs may be in a backend's own layout or on a device.
    Backend* backend = session.groupBackend(g);
    if (session.groupDevice(g).type != DeviceType::CPU) {
      e.notRun = "runs on " + session.groupDevice(g).toString();
    } else if (CompileResult compiled = backend->compile(request); !compiled) {
      e.notRun = compiled.refusal;
    } else {
      std::vector<Tensor> kernelInputs;
      for (ValueId v : request.inputs) kernelInputs.push_back(env[v].clone());
      const std::vector<Tensor> outputs = runKernel(*compiled.kernel, request, kernelInputs);
      for (size_t i = 0; i < outputs.size(); ++i) {
        const Tensor& expected = env[request.outputs[i]];
        if (!isFloatingPoint(expected.elementType()) || expected.isSequence()) continue;
        const CompareResult c = compareTensors(outputs[i], expected, Tolerance{0, 0});
        double scale = 0;
        for (double x : expected.toDoubles()) scale = std::max(scale, std::fabs(x));
        const double scaled = scale > 0 ? c.maxAbsError / scale : c.maxAbsError;
        if (scaled >= e.scaledError) {
          e.scaledError = scaled;
          e.maxAbsError = c.maxAbsError;
          e.worstOutput = graph.value(request.outputs[i]).name;
        }
      }
    }
    errors.push_back(std::move(e));
  }
  return errors;
}

}  // namespace collage
