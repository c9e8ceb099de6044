#include "core/runtime/backend.h"

#include "core/ir/sub_graph.h"

namespace collage {

std::string Device::toString() const {
  return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index);
}

std::string_view backendKindName(BackendKind kind) {
  return kind == BackendKind::OpLibrary ? "op_library" : "graph_library";
}

KernelRequest KernelRequest::of(const Graph& graph, const NodeSet& nodes, std::string origin) {
  SubGraph sub(graph, nodes);
  KernelRequest r;
  r.graph = &graph;
  r.nodes = nodes;
  r.origin = std::move(origin);
  r.inputs = sub.dataInputs();
  r.outputs = sub.outputs();
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
