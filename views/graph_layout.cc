#include "views/graph_layout.h"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <mutex>
#include <string>

#include "core/error.h"

namespace collage {
namespace {

std::mutex& graphvizMutex() {
  static std::mutex m;
  return m;
}

char* cstr(const char* s) { return const_cast<char*>(s); }

// Graphviz's y axis points up; ours points down.
LayoutPoint toScene(pointf p, double height) { return LayoutPoint{p.x, height - p.y}; }

}  // namespace

GraphLayout computeLayout(const Graph& graph, const std::atomic<bool>* cancel) {
  std::lock_guard<std::mutex> lock(graphvizMutex());
  GraphLayout layout;
  if (cancel && cancel->load()) {
    layout.cancelled = true;
    return layout;
  }
  GVC_t* gvc = gvContext();
  Agraph_t* g = agopen(cstr("g"), Agdirected, nullptr);
  const bool big = graph.numNodes() > 2000;
  agattr(g, AGRAPH, cstr("rankdir"), cstr("TB"));
  agattr(g, AGRAPH, cstr("nodesep"), cstr("0.25"));
  agattr(g, AGRAPH, cstr("ranksep"), cstr("0.35"));
  if (big) {
    agattr(g, AGRAPH, cstr("splines"), cstr("line"));
    agattr(g, AGRAPH, cstr("mclimit"), cstr("0.1"));
  }
  agattr(g, AGNODE, cstr("shape"), cstr("box"));
  agattr(g, AGNODE, cstr("fixedsize"), cstr("true"));
  agattr(g, AGNODE, cstr("label"), cstr(""));
  agattr(g, AGNODE, cstr("width"), cstr(std::to_string(kNodeBoxWidth / 72).c_str()));
  agattr(g, AGNODE, cstr("height"), cstr(std::to_string(kNodeBoxHeight / 72).c_str()));

  std::vector<Agnode_t*> nodes(static_cast<size_t>(graph.numNodes()));
  for (NodeId n = 0; n < graph.numNodes(); ++n)
    nodes[static_cast<size_t>(n)] = agnode(g, cstr(("n" + std::to_string(n)).c_str()), 1);
  // Producer of each value, to draw one edge per (producer, consumer, value).
  std::vector<NodeId> producer(static_cast<size_t>(graph.numValues()), -1);
  for (NodeId n = 0; n < graph.numNodes(); ++n)
    for (ValueId v : graph.node(n).outputs)
      if (v >= 0) producer[static_cast<size_t>(v)] = n;
  struct Pending {
    Agedge_t* edge;
    EdgePath path;
  };
  std::vector<Pending> pending;
  int edgeCount = 0;
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    for (ValueId v : graph.node(n).inputs) {
      if (v < 0) continue;
      NodeId from = producer[static_cast<size_t>(v)];
      if (from < 0) continue;
      std::string key = "e" + std::to_string(edgeCount++);
      Agedge_t* e = agedge(g, nodes[static_cast<size_t>(from)], nodes[static_cast<size_t>(n)],
                           cstr(key.c_str()), 1);
      pending.push_back({e, EdgePath{from, n, v, {}}});
    }
  }

  if (gvLayout(gvc, g, "dot") != 0) {
    agclose(g);
    gvFreeContext(gvc);
    throw Error("graph layout failed (Graphviz dot)");
  }
  boxf bb = GD_bb(g);
  layout.width = bb.UR.x - bb.LL.x;
  layout.height = bb.UR.y - bb.LL.y;
  const double h = bb.UR.y;
  layout.nodes.resize(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    LayoutPoint c = toScene(ND_coord(nodes[i]), h);
    layout.nodes[i] = NodeBox{c.x, c.y, ND_width(nodes[i]) * 72, ND_height(nodes[i]) * 72};
  }
  for (auto& p : pending) {
    splines* spl = ED_spl(p.edge);
    if (spl && spl->size > 0) {
      const bezier& bz = spl->list[0];
      for (int i = 0; i < bz.size; ++i) p.path.points.push_back(toScene(bz.list[i], h));
    }
    if (p.path.points.size() < 2) {
      const NodeBox& a = layout.nodes[static_cast<size_t>(p.path.from)];
      const NodeBox& b = layout.nodes[static_cast<size_t>(p.path.to)];
      p.path.points = {{a.cx, a.cy}, {a.cx, a.cy}, {b.cx, b.cy}, {b.cx, b.cy}};
    }
    layout.edges.push_back(std::move(p.path));
  }
  gvFreeLayout(gvc, g);
  agclose(g);
  gvFreeContext(gvc);
  return layout;
}

}  // namespace collage
