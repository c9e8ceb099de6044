#include "views/graph_layout.h"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <iomanip>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

#include "core/ir/error.h"
#include "core/ir/hashing.h"

namespace collage {
namespace {

constexpr const char* kInputHeader = "collage-layout-input";
constexpr const char* kLayoutHeader = "collage-layout";
constexpr int kFormatVersion = 1;

std::mutex& graphvizMutex() {
  static std::mutex m;
  return m;
}

char* cstr(const char* s) { return const_cast<char*>(s); }

// Graphviz's y axis points up; ours points down.
LayoutPoint toScene(pointf p, double height) { return LayoutPoint{p.x, height - p.y}; }

// "/layer1/layer1.0/conv1/Conv" -> "/layer1/layer1.0"; "" without a directory.
std::string namePrefix(const std::string& name) {
  size_t last = name.rfind('/');
  if (last == std::string::npos || last == 0) return {};
  std::string prefix;
  int components = 0;
  size_t i = 0;
  while (i < last && components < 2) {
    size_t start = name.find_first_not_of('/', i);
    if (start == std::string::npos || start >= last) break;
    size_t end = std::min(name.find('/', start), last);
    prefix += "/" + name.substr(start, end - start);
    ++components;
    i = end;
  }
  return prefix;
}

template <typename T>
T readValue(std::istream& in, const char* what) {
  T v{};
  if (!(in >> v)) throw Error(std::string("layout data: cannot read ") + what);
  return v;
}

void expectHeader(std::istream& in, const char* header) {
  std::string word = readValue<std::string>(in, "header");
  int version = readValue<int>(in, "version");
  if (word != header || version != kFormatVersion)
    throw Error(std::string("layout data: expected '") + header + " " +
                std::to_string(kFormatVersion) + "', got '" + word + " " + std::to_string(version) + "'");
}

}  // namespace

NodeGrouping groupNodes(const Graph& graph, int maxGroupNodes) {
  NodeGrouping g;
  const int n = graph.numNodes();
  g.groupOf.assign(static_cast<size_t>(n), -1);
  std::string currentPrefix;
  // Runs of nodes with a common prefix, in topological order.
  for (NodeId id = 0; id < n; ++id) {
    std::string prefix = namePrefix(graph.node(id).name);
    bool startNew = g.members.empty() || prefix != currentPrefix ||
                    static_cast<int>(g.members.back().size()) >= maxGroupNodes;
    if (startNew) {
      std::string name = prefix.empty() ? "nodes" : prefix;
      g.names.push_back(name);
      g.members.emplace_back();
      currentPrefix = prefix;
    }
    g.members.back().push_back(id);
  }
  // Runs of a few nodes would each become a box as small as a node: merge
  // neighbouring small runs, so a group always saves boxes.
  constexpr size_t kSmall = 6;
  NodeGrouping merged;
  for (size_t i = 0; i < g.members.size(); ++i) {
    auto& run = g.members[i];
    if (!merged.members.empty()) {
      auto& last = merged.members.back();
      bool bothSmall = last.size() < kSmall || run.size() < kSmall;
      if (bothSmall && static_cast<int>(last.size() + run.size()) <= maxGroupNodes) {
        last.insert(last.end(), run.begin(), run.end());
        if (merged.names.back() != g.names[i]) merged.names.back() = "nodes";
        continue;
      }
    }
    merged.members.push_back(run);
    merged.names.push_back(g.names[i]);
  }
  merged.groupOf.assign(static_cast<size_t>(n), -1);
  for (size_t k = 0; k < merged.members.size(); ++k) {
    auto& m = merged.members[k];
    for (NodeId id : m) merged.groupOf[static_cast<size_t>(id)] = static_cast<int>(k);
    std::string range = "#" + std::to_string(m.front()) + "-" + std::to_string(m.back());
    merged.names[k] = merged.names[k] == "nodes" ? "nodes " + range : merged.names[k] + " " + range;
  }
  return merged;
}

LayoutPlan planLayout(const Graph& graph, const LayoutOptions& options) {
  LayoutPlan plan;
  const int n = graph.numNodes();
  plan.grouped = options.mode == LayoutOptions::Mode::Auto && n > kGroupLayoutNodes;
  if (plan.grouped) plan.grouping = groupNodes(graph);
  plan.nodeItem.assign(static_cast<size_t>(n), -1);
  std::vector<int> groupItem(plan.grouping.members.size(), -1);
  for (NodeId id = 0; id < n; ++id) {
    int g = plan.grouped ? plan.grouping.groupOf[static_cast<size_t>(id)] : -1;
    bool collapsed = g >= 0 && plan.grouping.members[static_cast<size_t>(g)].size() >= 2 &&
                     !options.expandedGroups.count(g);
    if (collapsed) {
      int& item = groupItem[static_cast<size_t>(g)];
      if (item < 0) {
        item = static_cast<int>(plan.input.items.size());
        const auto& members = plan.grouping.members[static_cast<size_t>(g)];
        plan.input.items.push_back({"group " + plan.grouping.names[static_cast<size_t>(g)] + " " +
                                        std::to_string(members.size()),
                                    kGroupBoxWidth, kGroupBoxHeight});
        plan.itemNode.push_back(kNoNode);
        plan.itemGroup.push_back(g);
      }
      plan.nodeItem[static_cast<size_t>(id)] = item;
    } else {
      plan.nodeItem[static_cast<size_t>(id)] = static_cast<int>(plan.input.items.size());
      plan.input.items.push_back({graph.node(id).op, kNodeBoxWidth, kNodeBoxHeight});
      plan.itemNode.push_back(id);
      plan.itemGroup.push_back(-1);
    }
  }
  // One edge per (producer, consumer, input slot); edges touching a collapsed
  // group are merged per pair of boxes.
  std::map<std::pair<int, int>, size_t> groupEdges;
  for (NodeId id = 0; id < n; ++id) {
    for (ValueId v : graph.node(id).inputs) {
      if (v < 0) continue;
      NodeId from = graph.value(v).producer;
      if (from == kNoNode) continue;
      int a = plan.nodeItem[static_cast<size_t>(from)];
      int b = plan.nodeItem[static_cast<size_t>(id)];
      if (a == b) continue;
      if (plan.itemGroup[static_cast<size_t>(a)] >= 0 || plan.itemGroup[static_cast<size_t>(b)] >= 0) {
        auto [it, inserted] = groupEdges.emplace(std::make_pair(a, b), plan.input.edges.size());
        if (!inserted) {
          ++plan.edgeTensors[it->second];
          continue;
        }
      }
      plan.input.edges.push_back({a, b, v});
      plan.edgeNodes.emplace_back(from, id);
      plan.edgeTensors.push_back(1);
    }
  }
  switch (options.mode) {
    case LayoutOptions::Mode::Full: plan.input.settings.cheap = false; break;
    case LayoutOptions::Mode::Cheap: plan.input.settings.cheap = true; break;
    case LayoutOptions::Mode::Auto:
      plan.input.settings.cheap = static_cast<int>(plan.input.items.size()) > kCheapLayoutNodes;
      break;
  }
  return plan;
}

GraphLayout layoutItems(const LayoutInput& input) {
  std::lock_guard<std::mutex> lock(graphvizMutex());
  GraphLayout layout;
  GVC_t* gvc = gvContext();
  Agraph_t* g = agopen(cstr("g"), Agdirected, nullptr);
  agattr(g, AGRAPH, cstr("rankdir"), cstr("TB"));
  agattr(g, AGRAPH, cstr("nodesep"), cstr("0.25"));
  agattr(g, AGRAPH, cstr("ranksep"), cstr("0.35"));
  if (input.settings.cheap) {
    // Measured on a 1,000-node chain with skip connections: default dot 3.9 s,
    // these 0.8 s. Network simplex (ranking and x positions) dominates, and
    // nslimit / nslimit1 = 0 keep its first feasible solution (no overlaps,
    // less compact); no edge routing (straight centre-to-centre lines are
    // drawn instead) and fewer crossing-minimisation passes save the rest.
    agattr(g, AGRAPH, cstr("splines"), cstr("false"));
    agattr(g, AGRAPH, cstr("nslimit"), cstr("0"));
    agattr(g, AGRAPH, cstr("nslimit1"), cstr("0"));
    agattr(g, AGRAPH, cstr("mclimit"), cstr("0.1"));
    agattr(g, AGRAPH, cstr("searchsize"), cstr("10"));
    agattr(g, AGRAPH, cstr("remincross"), cstr("false"));
  }
  agattr(g, AGNODE, cstr("shape"), cstr("box"));
  agattr(g, AGNODE, cstr("fixedsize"), cstr("true"));
  agattr(g, AGNODE, cstr("label"), cstr(""));
  agattr(g, AGNODE, cstr("width"), cstr(std::to_string(kNodeBoxWidth / 72).c_str()));
  agattr(g, AGNODE, cstr("height"), cstr(std::to_string(kNodeBoxHeight / 72).c_str()));

  std::vector<Agnode_t*> nodes(input.items.size());
  for (size_t i = 0; i < input.items.size(); ++i) {
    Agnode_t* node = agnode(g, cstr(("n" + std::to_string(i)).c_str()), 1);
    const auto& item = input.items[i];
    if (item.width != kNodeBoxWidth)
      agsafeset(node, cstr("width"), cstr(std::to_string(item.width / 72).c_str()), cstr(""));
    if (item.height != kNodeBoxHeight)
      agsafeset(node, cstr("height"), cstr(std::to_string(item.height / 72).c_str()), cstr(""));
    nodes[i] = node;
  }
  std::vector<Agedge_t*> edges;
  edges.reserve(input.edges.size());
  for (size_t i = 0; i < input.edges.size(); ++i) {
    const auto& e = input.edges[i];
    if (e.from < 0 || e.to < 0 || static_cast<size_t>(e.from) >= nodes.size() ||
        static_cast<size_t>(e.to) >= nodes.size()) {
      agclose(g);
      gvFreeContext(gvc);
      throw Error("layout data: edge " + std::to_string(i) + " names a missing box");
    }
    std::string key = "e" + std::to_string(i);
    edges.push_back(agedge(g, nodes[static_cast<size_t>(e.from)], nodes[static_cast<size_t>(e.to)],
                           cstr(key.c_str()), 1));
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
  for (size_t i = 0; i < edges.size(); ++i) {
    const auto& e = input.edges[i];
    EdgePath path{e.from, e.to, e.tag, -1, -1, 1, {}};
    splines* spl = ED_spl(edges[i]);
    if (spl && spl->size > 0) {
      const bezier& bz = spl->list[0];
      for (int k = 0; k < bz.size; ++k) path.points.push_back(toScene(bz.list[k], h));
    }
    if (path.points.size() < 2) {
      const NodeBox& a = layout.nodes[static_cast<size_t>(e.from)];
      const NodeBox& b = layout.nodes[static_cast<size_t>(e.to)];
      path.points = {{a.cx, a.cy}, {a.cx, a.cy}, {b.cx, b.cy}, {b.cx, b.cy}};
    }
    layout.edges.push_back(std::move(path));
  }
  gvFreeLayout(gvc, g);
  agclose(g);
  gvFreeContext(gvc);
  return layout;
}

GraphLayout assembleLayout(const LayoutPlan& plan, const GraphLayout& itemLayout) {
  COLLAGE_CHECK(itemLayout.nodes.size() == plan.input.items.size() &&
                    itemLayout.edges.size() == plan.input.edges.size(),
                "item layout does not match its plan");
  GraphLayout out;
  out.width = itemLayout.width;
  out.height = itemLayout.height;
  out.fromCache = itemLayout.fromCache;
  out.nodes.resize(plan.nodeItem.size());
  for (size_t n = 0; n < plan.nodeItem.size(); ++n) {
    int item = plan.nodeItem[n];
    out.nodes[n] = itemLayout.nodes[static_cast<size_t>(item)];
    out.nodes[n].collapsed = plan.itemGroup[static_cast<size_t>(item)] >= 0;
  }
  for (size_t i = 0; i < plan.itemGroup.size(); ++i) {
    int g = plan.itemGroup[i];
    if (g < 0) continue;
    out.groups.push_back(GroupBox{g, plan.grouping.names[static_cast<size_t>(g)],
                                  plan.grouping.members[static_cast<size_t>(g)], itemLayout.nodes[i]});
  }
  for (size_t i = 0; i < itemLayout.edges.size(); ++i) {
    EdgePath e = itemLayout.edges[i];
    const auto& in = plan.input.edges[i];
    e.from = plan.edgeNodes[i].first;
    e.to = plan.edgeNodes[i].second;
    e.fromGroup = plan.itemGroup[static_cast<size_t>(in.from)];
    e.toGroup = plan.itemGroup[static_cast<size_t>(in.to)];
    e.tensorCount = plan.edgeTensors[i];
    out.edges.push_back(std::move(e));
  }
  return out;
}

GraphLayout computeLayout(const Graph& graph, const LayoutOptions& options) {
  LayoutPlan plan = planLayout(graph, options);
  return assembleLayout(plan, layoutItems(plan.input));
}

GraphLayout computeLayout(const Graph& graph, const std::atomic<bool>* cancel) {
  if (cancel && cancel->load()) {
    GraphLayout layout;
    layout.cancelled = true;
    return layout;
  }
  LayoutOptions options;
  options.mode = graph.numNodes() > kCheapLayoutNodes ? LayoutOptions::Mode::Cheap
                                                      : LayoutOptions::Mode::Full;
  return computeLayout(graph, options);
}

void writeLayoutInput(const LayoutInput& input, std::ostream& out) {
  out << kInputHeader << ' ' << kFormatVersion << '\n'
      << "cheap " << (input.settings.cheap ? 1 : 0) << '\n'
      << input.items.size() << '\n';
  out << std::setprecision(10);
  for (const auto& item : input.items)
    out << std::quoted(item.label) << ' ' << item.width << ' ' << item.height << '\n';
  out << input.edges.size() << '\n';
  for (const auto& e : input.edges) out << e.from << ' ' << e.to << ' ' << e.tag << '\n';
}

LayoutInput readLayoutInput(std::istream& in) {
  expectHeader(in, kInputHeader);
  LayoutInput input;
  if (readValue<std::string>(in, "settings") != "cheap") throw Error("layout data: expected 'cheap'");
  input.settings.cheap = readValue<int>(in, "cheap") != 0;
  size_t items = readValue<size_t>(in, "item count");
  input.items.resize(items);
  for (auto& item : input.items) {
    if (!(in >> std::quoted(item.label))) throw Error("layout data: cannot read an item label");
    item.width = readValue<double>(in, "item width");
    item.height = readValue<double>(in, "item height");
  }
  size_t edges = readValue<size_t>(in, "edge count");
  input.edges.resize(edges);
  for (auto& e : input.edges) {
    e.from = readValue<int>(in, "edge");
    e.to = readValue<int>(in, "edge");
    e.tag = readValue<int32_t>(in, "edge tag");
  }
  return input;
}

void writeItemLayout(const GraphLayout& layout, std::ostream& out) {
  out << kLayoutHeader << ' ' << kFormatVersion << '\n' << std::setprecision(10);
  out << layout.width << ' ' << layout.height << '\n' << layout.nodes.size() << '\n';
  for (const auto& b : layout.nodes) out << b.cx << ' ' << b.cy << ' ' << b.width << ' ' << b.height << '\n';
  out << layout.edges.size() << '\n';
  for (const auto& e : layout.edges) {
    out << e.from << ' ' << e.to << ' ' << e.value << ' ' << e.points.size();
    for (const auto& p : e.points) out << ' ' << p.x << ' ' << p.y;
    out << '\n';
  }
  out << "end\n";
}

GraphLayout readItemLayout(std::istream& in) {
  expectHeader(in, kLayoutHeader);
  GraphLayout layout;
  layout.width = readValue<double>(in, "width");
  layout.height = readValue<double>(in, "height");
  layout.nodes.resize(readValue<size_t>(in, "box count"));
  for (auto& b : layout.nodes) {
    b.cx = readValue<double>(in, "box");
    b.cy = readValue<double>(in, "box");
    b.width = readValue<double>(in, "box");
    b.height = readValue<double>(in, "box");
  }
  layout.edges.resize(readValue<size_t>(in, "edge count"));
  for (auto& e : layout.edges) {
    e.from = readValue<int>(in, "edge");
    e.to = readValue<int>(in, "edge");
    e.value = readValue<int32_t>(in, "edge");
    e.points.resize(readValue<size_t>(in, "point count"));
    for (auto& p : e.points) {
      p.x = readValue<double>(in, "point");
      p.y = readValue<double>(in, "point");
    }
  }
  // A truncated stream (a killed worker, a half-written cache file) must not
  // pass as a layout.
  if (readValue<std::string>(in, "end marker") != "end") throw Error("layout data: missing end marker");
  return layout;
}

std::string layoutKey(const LayoutInput& input) {
  std::ostringstream text;
  // Bumped whenever layoutItems() draws the same input differently, so a
  // cached layout of the old settings is never reused.
  text << "graphviz-settings 2\n";
  writeLayoutInput(input, text);
  return stableHashHex(text.str());
}

int runLayoutWorker(std::istream& in, std::ostream& out, std::ostream& err) {
  try {
    LayoutInput input = readLayoutInput(in);
    GraphLayout layout = layoutItems(input);
    writeItemLayout(layout, out);
    out.flush();
    return out ? 0 : 1;
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace collage
