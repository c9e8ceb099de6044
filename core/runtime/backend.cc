#include "core/runtime/backend.h"

#include "core/ir/sub_graph.h"

namespace collage {

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

NativeLayout channelsLastLayout(const Shape& dims, ElementType type) {
  return {"channels-last " + std::string(elementTypeName(type)) + " " + shapeToString(dims),
          static_cast<size_t>(numElements(dims)) * elementSize(type)};
}

}  // namespace collage
