#include "core/ops/model_stats.h"

#include <cstdio>
#include <sstream>

#include "core/ops/op_registry.h"

namespace collage {

ModelStats computeModelStats(const Graph& graph) {
  ModelStats s;
  s.numNodes = graph.numNodes();
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    ++s.opCounts[graph.node(n).op];
    s.totalFlops += flopsOf(graph, n);
  }
  for (const Value& v : graph.values()) {
    if (!v.isConstant()) continue;
    s.parameterBytes += static_cast<int64_t>(v.constant->byteSize());
    s.parameterCount += v.constant->numElements();
  }
  return s;
}

namespace {
std::string scaled(double v, const char* const* units, int count, double step) {
  int i = 0;
  while (v >= step && i + 1 < count) {
    v /= step;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, i == 0 ? "%.0f %s" : "%.2f %s", v, units[i]);
  return buf;
}
}  // namespace

std::string formatFlops(double flops) {
  static const char* const units[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP"};
  return scaled(flops, units, 5, 1000.0);
}

std::string formatBytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  return scaled(bytes, units, 5, 1024.0);
}

std::string describeModel(const Graph& graph, const std::string& modelPath) {
  ModelStats stats = computeModelStats(graph);
  std::ostringstream out;
  out << "model:   " << modelPath << "\n";
  out << "graph:   " << (graph.name.empty() ? "(unnamed)" : graph.name) << ", opset";
  for (const auto& [domain, version] : graph.opsetImports)
    out << " " << (domain.empty() ? "ai.onnx" : domain) << ":" << version;
  out << "\ninputs:\n";
  for (ValueId v : graph.inputs())
    out << "  " << graph.value(v).name << "  " << graph.value(v).type.toString() << "\n";
  out << "outputs:\n";
  for (ValueId v : graph.outputs())
    out << "  " << graph.value(v).name << "  " << graph.value(v).type.toString() << "\n";
  out << "nodes:   " << stats.numNodes << "\n";
  out << "flops:   " << formatFlops(stats.totalFlops) << "\n";
  out << "params:  " << stats.parameterCount << " (" << formatBytes(stats.parameterBytes) << ")\n";
  // The largest tensor a node makes: what a runtime that keeps every node's
  // output in memory must hold at least once (a long prompt's attention
  // scores; bench/decode_bench.py reads this line to say when ONNX Runtime's
  // prompt pass cannot fit).
  const Node* largestNode = nullptr;
  ValueId largest = kNoValue;
  for (const Node& node : graph.nodes())
    for (ValueId v : node.outputs)
      if (v != kNoValue && (largest == kNoValue || graph.value(v).type.byteSize() > graph.value(largest).type.byteSize())) {
        largest = v;
        largestNode = &node;
      }
  if (largestNode)
    out << "largest: " << graph.value(largest).name << "  " << graph.value(largest).type.toString() << ", "
        << graph.value(largest).type.byteSize() << " bytes (" << formatBytes(static_cast<double>(graph.value(largest).type.byteSize()))
        << "), the output of " << largestNode->op << " '" << largestNode->name << "'\n";
  out << "ops:\n";
  for (const auto& [op, count] : stats.opCounts) {
    char line[64];
    std::snprintf(line, sizeof line, "  %-24s %6d\n", op.c_str(), count);
    out << line;
  }
  return out.str();
}

}  // namespace collage
