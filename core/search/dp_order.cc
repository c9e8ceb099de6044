#include "core/search/dp_order.h"

#include <algorithm>
#include <numeric>

#include "core/ir/error.h"

namespace collage {

DpOrderWidth dpOrderWidth(const Graph& graph, const CandidateSet& candidates,
                          const std::vector<bool>& usable, const std::vector<NodeId>& order, bool values) {
  const int32_t n = graph.numNodes();
  COLLAGE_CHECK(static_cast<int32_t>(order.size()) == n, "dpOrderWidth: not an order of the graph's nodes");
  std::vector<int32_t> pos(static_cast<size_t>(n), -1);
  for (int32_t i = 0; i < n; ++i) pos[static_cast<size_t>(order[static_cast<size_t>(i)])] = i;
  // Per node: the earliest position of a node it shares a candidate (or a
  // value) with. It is ahead of every position after that one, up to its own.
  std::vector<int32_t> earliest(pos);
  std::vector<NodeId> members;
  auto share = [&](const std::vector<NodeId>& group) {
    int32_t lo = n;
    for (NodeId m : group) lo = std::min(lo, pos[static_cast<size_t>(m)]);
    for (NodeId m : group) earliest[static_cast<size_t>(m)] = std::min(earliest[static_cast<size_t>(m)], lo);
  };
  for (size_t c = 0; c < candidates.size(); ++c) {
    if (!usable.empty() && !usable[c]) continue;
    members = candidates[c].nodes.members();
    share(members);
  }
  if (values) {
    for (ValueId v = 0; v < graph.numValues(); ++v) {
      const Value& value = graph.value(v);
      if (value.isConstant() || value.producer == kNoNode || value.consumers.empty()) continue;
      members = value.consumers;
      members.push_back(value.producer);
      share(members);
    }
  }
  std::vector<int32_t> delta(static_cast<size_t>(n) + 1, 0);
  for (NodeId m = 0; m < n; ++m) {
    const int32_t from = earliest[static_cast<size_t>(m)] + 1, to = pos[static_cast<size_t>(m)];
    if (from > to) continue;
    ++delta[static_cast<size_t>(from)];
    --delta[static_cast<size_t>(to) + 1];
  }
  // With values: after each position, the open values (some participants
  // placed, some not) in groups linked by a placed participant; each group's
  // pending state is one factor of the states' number.
  std::vector<int32_t> groups(static_cast<size_t>(n), 0);
  if (values) {
    std::vector<std::vector<NodeId>> participants(static_cast<size_t>(graph.numValues()));
    std::vector<std::vector<ValueId>> touches(static_cast<size_t>(n));
    for (ValueId v = 0; v < graph.numValues(); ++v) {
      const Value& value = graph.value(v);
      if (value.isConstant() || value.producer == kNoNode || value.consumers.empty()) continue;
      std::vector<NodeId>& part = participants[static_cast<size_t>(v)];
      part = value.consumers;
      part.push_back(value.producer);
      std::sort(part.begin(), part.end());
      part.erase(std::unique(part.begin(), part.end()), part.end());
      for (NodeId m : part) touches[static_cast<size_t>(m)].push_back(v);
    }
    std::vector<int32_t> placedOf(static_cast<size_t>(graph.numValues()), 0);
    std::vector<ValueId> open;
    std::vector<int32_t> openAt(static_cast<size_t>(graph.numValues()), -1);
    std::vector<NodeId> parent(static_cast<size_t>(n));
    std::vector<int32_t> stamp(static_cast<size_t>(n), -1), counted(static_cast<size_t>(n), -1);
    auto find = [&](NodeId a, int32_t p) {
      if (stamp[static_cast<size_t>(a)] != p) {
        stamp[static_cast<size_t>(a)] = p;
        parent[static_cast<size_t>(a)] = a;
      }
      while (parent[static_cast<size_t>(a)] != a) a = parent[static_cast<size_t>(a)] = parent[static_cast<size_t>(parent[static_cast<size_t>(a)])];
      return a;
    };
    for (int32_t p = 0; p < n; ++p) {
      for (ValueId v : touches[static_cast<size_t>(order[static_cast<size_t>(p)])]) {
        const auto size = static_cast<int32_t>(participants[static_cast<size_t>(v)].size());
        const int32_t placed = ++placedOf[static_cast<size_t>(v)];
        if (placed < size && openAt[static_cast<size_t>(v)] < 0) {
          openAt[static_cast<size_t>(v)] = static_cast<int32_t>(open.size());
          open.push_back(v);
        } else if (placed == size && openAt[static_cast<size_t>(v)] >= 0) {
          const int32_t at = openAt[static_cast<size_t>(v)];
          open[static_cast<size_t>(at)] = open.back();
          openAt[static_cast<size_t>(open.back())] = at;
          open.pop_back();
          openAt[static_cast<size_t>(v)] = -1;
        }
      }
      for (ValueId v : open) {
        NodeId root = kNoNode;
        for (NodeId m : participants[static_cast<size_t>(v)]) {
          if (pos[static_cast<size_t>(m)] > p) continue;
          const NodeId r = find(m, p);
          if (root == kNoNode)
            root = r;
          else if (r != root)
            parent[static_cast<size_t>(r)] = root;
        }
      }
      int32_t count = 0;
      for (ValueId v : open)
        for (NodeId m : participants[static_cast<size_t>(v)]) {
          if (pos[static_cast<size_t>(m)] > p) continue;
          const NodeId r = find(m, p);
          if (counted[static_cast<size_t>(r)] != p) {
            counted[static_cast<size_t>(r)] = p;
            ++count;
          }
          break;  // every placed participant of v has the same root
        }
      groups[static_cast<size_t>(p)] = count;
    }
  }
  DpOrderWidth w;
  int32_t running = 0;
  for (int32_t p = 0; p < n; ++p) {
    running += delta[static_cast<size_t>(p)];
    const int32_t here = running + (p > 0 ? groups[static_cast<size_t>(p) - 1] : 0);
    w.max = std::max(w.max, here);
    w.sum += here;
  }
  return w;
}

std::vector<NodeId> depthFirstTopologicalOrder(const Graph& graph, bool fromOutputs) {
  const int32_t n = graph.numNodes();
  std::vector<int32_t> waiting(static_cast<size_t>(n), 0);
  std::vector<std::vector<NodeId>> next(static_cast<size_t>(n));
  for (NodeId m = 0; m < n; ++m) {
    std::vector<NodeId> producers;
    for (ValueId v : graph.node(m).inputs)
      if (v != kNoValue && graph.value(v).producer != kNoNode) producers.push_back(graph.value(v).producer);
    std::sort(producers.begin(), producers.end());
    producers.erase(std::unique(producers.begin(), producers.end()), producers.end());
    for (NodeId p : producers) {
      // An edge p -> m, walked backwards from the outputs when asked.
      const NodeId from = fromOutputs ? m : p, to = fromOutputs ? p : m;
      next[static_cast<size_t>(from)].push_back(to);
      ++waiting[static_cast<size_t>(to)];
    }
  }
  if (fromOutputs)
    for (auto& out : next) std::sort(out.rbegin(), out.rend());
  // Ready nodes on a stack; the first in the walk's direction on top among
  // those pushed together, so a graph already in depth-first order keeps it.
  std::vector<NodeId> stack, order;
  for (NodeId i = 0; i < n; ++i) {
    const NodeId m = fromOutputs ? i : n - 1 - i;
    if (waiting[static_cast<size_t>(m)] == 0) stack.push_back(m);
  }
  while (!stack.empty()) {
    const NodeId m = stack.back();
    stack.pop_back();
    order.push_back(m);
    std::vector<NodeId>& out = next[static_cast<size_t>(m)];
    for (auto it = out.rbegin(); it != out.rend(); ++it)
      if (--waiting[static_cast<size_t>(*it)] == 0) stack.push_back(*it);
  }
  COLLAGE_CHECK(static_cast<int32_t>(order.size()) == n, "depthFirstTopologicalOrder: the graph has a cycle");
  return order;
}

DpOrder chooseDpOrder(const Graph& graph, const CandidateSet& candidates, const std::vector<bool>& usable,
                      bool values) {
  DpOrder best;
  best.order.resize(static_cast<size_t>(graph.numNodes()));
  std::iota(best.order.begin(), best.order.end(), 0);
  best.width = dpOrderWidth(graph, candidates, usable, best.order, values);
  best.name = "graph";
  for (const bool fromOutputs : {false, true}) {
    std::vector<NodeId> deep = depthFirstTopologicalOrder(graph, fromOutputs);
    const DpOrderWidth w = dpOrderWidth(graph, candidates, usable, deep, values);
    if (w < best.width) best = DpOrder{std::move(deep), w, fromOutputs ? "depth-first from the outputs" : "depth-first"};
  }
  return best;
}

}  // namespace collage
