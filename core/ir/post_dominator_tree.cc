#include "core/ir/post_dominator_tree.h"

#include <sstream>

#include "core/ir/error.h"

namespace collage {

PostDominatorTree::PostDominatorTree(const Graph& graph) {
  const int32_t n = graph.numNodes();
  const NodeId sinkId = n;
  ipdom_.assign(static_cast<size_t>(n), kNoNode);

  // In the reversed graph the sink is the root and every node's successors
  // (its consumers, or the sink) have higher indices. Visiting nodes from the
  // last to the first therefore meets each node after all of its successors,
  // whose tree positions are final: one sweep suffices for a DAG. Since a
  // post-dominator always has a higher index than the node it post-dominates,
  // the "finger" walk of Cooper-Harvey-Kennedy can compare plain indices.
  auto parent = [&](NodeId v) { return v == sinkId ? sinkId : ipdom_[static_cast<size_t>(v)]; };
  auto intersect = [&](NodeId a, NodeId b) {
    while (a != b) {
      if (a < b)
        a = parent(a);
      else
        b = parent(b);
    }
    return a;
  };
  for (NodeId v = n - 1; v >= 0; --v) {
    NodeId idom = kNoNode;
    auto meet = [&](NodeId s) { idom = idom == kNoNode ? s : intersect(idom, s); };
    const Node& node = graph.node(v);
    bool anyOutput = false;
    for (ValueId out : node.outputs) {
      if (out == kNoValue) continue;
      anyOutput = true;
      const Value& value = graph.value(out);
      if (value.isGraphOutput || value.consumers.empty()) meet(sinkId);
      for (NodeId c : value.consumers) {
        COLLAGE_CHECK(c > v, "graph is not in topological order (call Graph::finalize)");
        meet(c);
      }
    }
    if (!anyOutput) meet(sinkId);
    ipdom_[static_cast<size_t>(v)] = idom;
  }
}

NodeId PostDominatorTree::immediatePostDominator(NodeId n) const {
  if (n == sink()) return kNoNode;
  COLLAGE_CHECK(n >= 0 && n < numNodes(), "node index out of range");
  return ipdom_[static_cast<size_t>(n)];
}

bool PostDominatorTree::postDominates(NodeId p, NodeId n) const {
  if (p == sink() || p == n) return true;
  if (n == sink()) return false;
  // p lies above n in the tree exactly when climbing from n reaches it;
  // indices grow on the way up, so the climb stops once it passes p.
  for (NodeId v = n; v != sink() && v <= p; v = ipdom_[static_cast<size_t>(v)])
    if (v == p) return true;
  return false;
}

std::vector<NodeId> PostDominatorTree::postDominators(NodeId n) const {
  std::vector<NodeId> out;
  for (NodeId v = immediatePostDominator(n); v != sink() && v != kNoNode;
       v = ipdom_[static_cast<size_t>(v)])
    out.push_back(v);
  return out;
}

std::string PostDominatorTree::toString(const Graph& graph) const {
  std::ostringstream os;
  for (NodeId v = 0; v < numNodes(); ++v) {
    os << "#" << v << " '" << graph.node(v).name << "' -> ";
    NodeId p = ipdom_[static_cast<size_t>(v)];
    if (p == sink())
      os << "sink";
    else
      os << "#" << p << " '" << graph.node(p).name << "'";
    os << "\n";
  }
  return os.str();
}

}  // namespace collage
