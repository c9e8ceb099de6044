#include "core/measure/kernel_estimate.h"

#include <algorithm>
#include <cstdio>

#include "core/ops/model_stats.h"
#include "core/ops/op_registry.h"

namespace collage {

namespace {

bool integerProduct(const std::string& op) {
  return op == "ConvInteger" || op == "MatMulInteger" || op == "QLinearConv" || op == "QLinearMatMul";
}

bool floatProduct(const std::string& op) {
  return op == "Conv" || op == "ConvTranspose" || op == "Gemm" || op == "MatMul";
}

// Nodes' FLOPs and bytes, each node's FLOPs at `speed(op)`.
template <class Speed>
KernelEstimate estimate(const Graph& graph, const NodeSet& nodes, Speed speed) {
  KernelEstimate e;
  e.referenceNodes = nodes;
  if (!e.runsReference()) return e;
  e.ns = 0;
  nodes.forEach([&](NodeId n) {
    const double flops = flopsOf(graph, n);
    const Node& node = graph.node(n);
    double bytes = 0;
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (node.inputs[i] != kNoValue) bytes += static_cast<double>(graph.inputType(n, i).byteSize());
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (node.outputs[i] != kNoValue) bytes += static_cast<double>(graph.outputType(n, i).byteSize());
    e.flops += flops;
    e.bytes += bytes;
    // The nodes run one after the other, each bound by its arithmetic or its memory traffic.
    e.ns += 1e9 * std::max(flops / speed(node.op), bytes / kReferenceBytesPerSecond);
  });
  return e;
}

}  // namespace

double referenceFlopsPerSecond(const std::string& op) {
  return integerProduct(op) ? kReferenceIntegerProductFlopsPerSecond : kReferenceFlopsPerSecond;
}

KernelEstimate estimateReferenceNodes(const Graph& graph, const NodeSet& referenceNodes) {
  return estimate(graph, referenceNodes, referenceFlopsPerSecond);
}

KernelEstimate estimateReferenceRun(const Graph& graph) {
  return estimate(graph, NodeSet::all(graph.numNodes()), [](const std::string& op) {
    return floatProduct(op) ? kReferenceGemmFlopsPerSecond : referenceFlopsPerSecond(op);
  });
}

std::string KernelEstimate::describe(const Graph& graph) const {
  std::string nodes;
  int shown = 0;
  const int total = referenceNodes.count();
  referenceNodes.forEach([&](NodeId n) {
    if (shown == 3) return;
    nodes += (shown ? ", '" : "'") + graph.node(n).name + "' (" + graph.node(n).op + ")";
    ++shown;
  });
  if (total > shown) nodes += " and " + std::to_string(total - shown) + " more";
  return formatFlops(flops) + " in " + nodes;
}

std::string formatDuration(Cost ns) {
  if (!isKnown(ns)) return costToString(ns);
  char buf[64];
  if (ns >= 1e9)
    std::snprintf(buf, sizeof buf, "%.1f s", ns / 1e9);
  else
    return costToString(ns);
  return buf;
}

}  // namespace collage
