#include "core/ir/sub_graph.h"

#include <algorithm>
#include <sstream>

#include "core/ir/error.h"

namespace collage {

namespace {

std::string nodeLabel(const Graph& graph, NodeId n) {
  const Node& node = graph.node(n);
  return "'" + node.name + "' (" + node.op + ")";
}

// The node producing input `v`, or kNoNode for graph inputs, constants and absent inputs.
NodeId producerOf(const Graph& graph, ValueId v) {
  return v == kNoValue ? kNoNode : graph.value(v).producer;
}

// Whether member n has a result that leaves the set: read by an outside node
// or marked as a graph output. `usedInside` reports whether a result also
// feeds a member (a "tap" when n is an exit).
bool isExit(const Graph& graph, const NodeSet& set, NodeId n, bool* usedInside) {
  bool exit = false;
  for (ValueId v : graph.node(n).outputs) {
    if (v == kNoValue) continue;
    const Value& value = graph.value(v);
    if (value.isGraphOutput) exit = true;
    for (NodeId c : value.consumers) {
      if (set.contains(c)) {
        if (usedInside) *usedInside = true;
      } else {
        exit = true;
      }
    }
  }
  return exit;
}

// Convexity without precomputation. Nodes are in topological order, so a path
// that leaves the set and re-enters it runs entirely between the lowest and the
// highest member. One forward pass over that window marks every outside node
// that some member reaches ("tainted"); the set is convex exactly when no
// member reads from a tainted node. Returns a tainted node feeding a member,
// or kNoNode when convex.
NodeId findReenteringPath(const Graph& graph, const NodeSet& set) {
  std::vector<NodeId> members = set.members();
  if (members.size() < 2) return kNoNode;
  const NodeId lo = members.front();
  const NodeId hi = members.back();
  std::vector<char> tainted(static_cast<size_t>(hi - lo + 1), 0);
  auto isTainted = [&](NodeId p) {
    return p > lo && p <= hi && tainted[static_cast<size_t>(p - lo)];
  };
  for (NodeId n = lo + 1; n <= hi; ++n) {
    const bool member = set.contains(n);
    for (ValueId v : graph.node(n).inputs) {
      NodeId p = producerOf(graph, v);
      if (p == kNoNode || p < lo) continue;
      if (member) {
        if (isTainted(p)) return p;
      } else if (set.contains(p) || isTainted(p)) {
        tainted[static_cast<size_t>(n - lo)] = 1;
        break;
      }
    }
  }
  return kNoNode;
}

// Everything but convexity, shared by both checkSubGraph forms.
SubGraphValidity checkLimits(const Graph& graph, const NodeSet& set, const SubGraphLimits& limits) {
  SubGraphValidity result;
  const int count = set.count();
  if (limits.maxNodes > 0 && count > limits.maxNodes) {
    result.problem = SubGraphProblem::TooManyNodes;
    result.reason = "too many nodes: " + std::to_string(count) + ", the limit is " +
                    std::to_string(limits.maxNodes);
    return result;
  }
  std::vector<NodeId> exits;
  NodeId tap = kNoNode;
  set.forEach([&](NodeId n) {
    bool usedInside = false;
    if (isExit(graph, set, n, &usedInside)) {
      exits.push_back(n);
      if (usedInside && tap == kNoNode) tap = n;
    }
  });
  if (limits.maxExits > 0 && static_cast<int>(exits.size()) > limits.maxExits) {
    result.problem = SubGraphProblem::TooManyExits;
    result.witness = exits[static_cast<size_t>(limits.maxExits)];
    std::string names;
    for (size_t i = 0; i < exits.size(); ++i) names += (i ? ", " : "") + nodeLabel(graph, exits[i]);
    result.reason = "too many exits: " + std::to_string(exits.size()) +
                    " nodes have results used outside the group (" + names + "), the limit is " +
                    std::to_string(limits.maxExits);
    return result;
  }
  if (!limits.allowTaps && tap != kNoNode) {
    result.problem = SubGraphProblem::Tap;
    result.witness = tap;
    result.reason = "node " + nodeLabel(graph, tap) +
                    " has a result used both inside and outside the group (taps are not allowed)";
    return result;
  }
  if (limits.maxDepth > 0) {
    int depth = subGraphDepth(graph, set);
    if (depth > limits.maxDepth) {
      result.problem = SubGraphProblem::TooDeep;
      result.reason = "too deep: the longest path inside has " + std::to_string(depth) +
                      " nodes, the limit is " + std::to_string(limits.maxDepth);
      return result;
    }
  }
  return result;
}

SubGraphValidity emptyVerdict() {
  SubGraphValidity result;
  result.problem = SubGraphProblem::Empty;
  result.reason = "the group is empty";
  return result;
}

SubGraphValidity notConvexVerdict(const Graph& graph, NodeId witness) {
  SubGraphValidity result;
  result.problem = SubGraphProblem::NotConvex;
  result.witness = witness;
  result.reason = "not convex: node " + nodeLabel(graph, witness) +
                  " lies on a path that leaves the group and re-enters it";
  return result;
}

void checkCapacity(const Graph& graph, const NodeSet& set) {
  COLLAGE_CHECK(set.capacity() == graph.numNodes(),
                "NodeSet capacity " + std::to_string(set.capacity()) +
                    " does not match the graph's " + std::to_string(graph.numNodes()) + " nodes");
}

}  // namespace

// ---------------------------------------------------------------------------
// GraphReachability

GraphReachability::GraphReachability(const Graph& graph) {
  const int32_t n = graph.numNodes();
  descendants_.assign(static_cast<size_t>(n), NodeSet(n));
  ancestors_.assign(static_cast<size_t>(n), NodeSet(n));
  // Topological order: a node's producers come before it, so one forward pass
  // completes ancestors and one backward pass completes descendants.
  for (NodeId v = 0; v < n; ++v) {
    NodeSet& anc = ancestors_[static_cast<size_t>(v)];
    for (ValueId in : graph.node(v).inputs) {
      NodeId p = producerOf(graph, in);
      if (p == kNoNode || anc.contains(p)) continue;
      COLLAGE_CHECK(p < v, "graph is not in topological order (call Graph::finalize)");
      anc.insert(p);
      anc |= ancestors_[static_cast<size_t>(p)];
    }
  }
  for (NodeId v = n - 1; v >= 0; --v) {
    NodeSet& desc = descendants_[static_cast<size_t>(v)];
    for (ValueId out : graph.node(v).outputs) {
      if (out == kNoValue) continue;
      for (NodeId c : graph.value(out).consumers) {
        if (desc.contains(c)) continue;
        desc.insert(c);
        desc |= descendants_[static_cast<size_t>(c)];
      }
    }
  }
}

// A node w outside S lies on a path that leaves S and comes back exactly when
// some member reaches w (w ∈ D(S), the union of the members' descendants) and
// w reaches some member (w ∈ A(S), the union of their ancestors): the path
// u ⇝ w ⇝ v with u, v ∈ S leaves S at or before w and re-enters after it.
// Conversely, on any leaving-and-re-entering path the first outside node is in
// both. So S is convex ⇔ D(S) ∩ A(S) ⊆ S, and the nodes to blame are
// D(S) ∩ A(S) − S. Neither half alone will do: D(S) holds every downstream
// consumer and A(S) every upstream producer, which are harmless.
NodeSet GraphReachability::outsidePathNodes(const NodeSet& set) const {
  const int32_t n = numNodes();
  COLLAGE_CHECK(set.capacity() == n, "NodeSet capacity does not match the graph");
  NodeSet down(n), up(n);
  set.forEach([&](NodeId m) {
    down |= descendants_[static_cast<size_t>(m)];
    up |= ancestors_[static_cast<size_t>(m)];
  });
  return (down & up) - set;
}

NodeSet GraphReachability::between(NodeId from, NodeId to) const {
  NodeSet result(numNodes());
  if (from == to) {
    result.insert(from);
    return result;
  }
  if (!reaches(from, to)) return result;
  result = descendants(from) & ancestors(to);
  result.insert(from);
  result.insert(to);
  return result;
}

// ---------------------------------------------------------------------------
// Validity

std::string SubGraphLimits::toString() const {
  auto limit = [](int v) { return v > 0 ? std::to_string(v) : std::string("none"); };
  return "{maxDepth=" + limit(maxDepth) + ", maxExits=" + limit(maxExits) +
         ", maxNodes=" + limit(maxNodes) + ", allowTaps=" + (allowTaps ? "true" : "false") + "}";
}

std::string_view subGraphProblemName(SubGraphProblem problem) {
  switch (problem) {
    case SubGraphProblem::None:
      return "ok";
    case SubGraphProblem::Empty:
      return "empty";
    case SubGraphProblem::NotConvex:
      return "not convex";
    case SubGraphProblem::TooDeep:
      return "too deep";
    case SubGraphProblem::TooManyExits:
      return "too many exits";
    case SubGraphProblem::TooManyNodes:
      return "too many nodes";
    case SubGraphProblem::Tap:
      return "tap";
  }
  return "?";
}

SubGraphValidity checkSubGraph(const Graph& graph, const NodeSet& set,
                               const SubGraphLimits& limits) {
  checkCapacity(graph, set);
  if (set.empty()) return emptyVerdict();
  NodeId witness = findReenteringPath(graph, set);
  if (witness != kNoNode) return notConvexVerdict(graph, witness);
  return checkLimits(graph, set, limits);
}

SubGraphValidity checkSubGraph(const Graph& graph, const GraphReachability& reach,
                               const NodeSet& set, const SubGraphLimits& limits) {
  checkCapacity(graph, set);
  if (set.empty()) return emptyVerdict();
  NodeSet outside = reach.outsidePathNodes(set);
  if (!outside.empty()) return notConvexVerdict(graph, outside.first());
  return checkLimits(graph, set, limits);
}

int subGraphDepth(const Graph& graph, const NodeSet& set) {
  std::vector<NodeId> members = set.members();
  std::vector<int> depth(members.size(), 1);
  int best = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    for (ValueId v : graph.node(members[i]).inputs) {
      NodeId p = producerOf(graph, v);
      if (p == kNoNode || !set.contains(p)) continue;
      size_t j = static_cast<size_t>(std::lower_bound(members.begin(), members.end(), p) -
                                     members.begin());
      depth[i] = std::max(depth[i], depth[j] + 1);
    }
    best = std::max(best, depth[i]);
  }
  return best;
}

// ---------------------------------------------------------------------------
// SubGraph

SubGraph::SubGraph(const Graph& graph, NodeSet nodes)
    : graph_(&graph), nodes_(std::move(nodes)), members_(nodes_.members()) {
  checkCapacity(graph, nodes_);
  // Values are few per node; a linear "seen" scan over the short input list
  // is cheaper than a hash set for the sizes candidates have.
  auto seen = [](const std::vector<ValueId>& list, ValueId v) {
    return std::find(list.begin(), list.end(), v) != list.end();
  };
  for (NodeId m : members_) {
    const Node& node = graph.node(m);
    bool entry = false;
    for (ValueId v : node.inputs) {
      if (v == kNoValue) continue;
      NodeId p = graph.value(v).producer;
      if (p != kNoNode && nodes_.contains(p)) continue;
      if (!graph.value(v).isConstant()) entry = true;
      if (!seen(inputs_, v)) {
        inputs_.push_back(v);
        if (!graph.value(v).isConstant()) dataInputs_.push_back(v);
      }
    }
    if (entry) entries_.push_back(m);
    bool exit = false;
    for (ValueId v : node.outputs) {
      if (v == kNoValue) continue;
      const Value& value = graph.value(v);
      bool leaves = value.isGraphOutput;
      for (NodeId c : value.consumers)
        if (!nodes_.contains(c)) leaves = true;
      if (leaves) {
        outputs_.push_back(v);
        exit = true;
      }
    }
    if (exit) exits_.push_back(m);
  }
  depth_ = subGraphDepth(graph, nodes_);
}

std::string SubGraph::toString() const {
  std::ostringstream os;
  os << "{";
  for (size_t i = 0; i < members_.size(); ++i) {
    const Node& node = graph_->node(members_[i]);
    os << (i ? ", " : "") << "#" << members_[i] << " " << node.op << " '" << node.name << "'";
  }
  os << "}";
  return os.str();
}

NodeId soleConsumerIn(const Graph& graph, const NodeSet& nodes, ValueId v) {
  NodeId found = kNoNode;
  for (NodeId c : graph.value(v).consumers)
    if (nodes.contains(c)) {
      if (found != kNoNode) return kNoNode;
      found = c;
    }
  return found;
}

}  // namespace collage
