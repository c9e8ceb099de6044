#include "core/backend.h"

#include <algorithm>

namespace collage {

std::string Device::toString() const {
  return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index);
}

std::string_view backendKindName(BackendKind kind) {
  return kind == BackendKind::OpLibrary ? "op_library" : "graph_library";
}

KernelRequest KernelRequest::of(const Graph& graph, const NodeSet& nodes, std::string origin) {
  KernelRequest r;
  r.graph = &graph;
  r.nodes = nodes;
  r.origin = std::move(origin);
  nodes.forEach([&](NodeId n) {
    const Node& node = graph.node(n);
    for (ValueId v : node.inputs) {
      if (v == kNoValue) continue;
      const Value& val = graph.value(v);
      if (val.isConstant() || nodes.contains(val.producer)) continue;
      if (std::find(r.inputs.begin(), r.inputs.end(), v) == r.inputs.end()) r.inputs.push_back(v);
    }
    for (ValueId v : node.outputs) {
      if (v == kNoValue) continue;
      const Value& val = graph.value(v);
      bool escapes = val.isGraphOutput;
      for (NodeId c : val.consumers) escapes = escapes || !nodes.contains(c);
      if (escapes) r.outputs.push_back(v);
    }
  });
  return r;
}

std::string KernelRequest::toString() const {
  std::string s = "{";
  bool first = true;
  nodes.forEach([&](NodeId n) {
    if (!first) s += ", ";
    first = false;
    s += graph->node(n).name + " " + graph->node(n).op;
  });
  return s + "}";
}

}  // namespace collage
