#include "core/measure/kernel_estimate.h"

#include <algorithm>
#include <cstdio>

#include "core/ops/model_stats.h"
#include "core/ops/op_registry.h"

namespace collage {

KernelEstimate estimateReferenceNodes(const Graph& graph, const NodeSet& referenceNodes) {
  KernelEstimate e;
  e.referenceNodes = referenceNodes;
  if (!e.runsReference()) return e;
  referenceNodes.forEach([&](NodeId n) {
    e.flops += flopsOf(graph, n);
    const Node& node = graph.node(n);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      if (node.inputs[i] != kNoValue) e.bytes += static_cast<double>(graph.inputType(n, i).byteSize());
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (node.outputs[i] != kNoValue) e.bytes += static_cast<double>(graph.outputType(n, i).byteSize());
  });
  e.ns = 1e9 * std::max(e.flops / kReferenceFlopsPerSecond, e.bytes / kReferenceBytesPerSecond);
  return e;
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
