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
  out << "ops:\n";
  for (const auto& [op, count] : stats.opCounts) {
    char line[64];
    std::snprintf(line, sizeof line, "  %-24s %6d\n", op.c_str(), count);
    out << line;
  }
  return out.str();
}

}  // namespace collage
