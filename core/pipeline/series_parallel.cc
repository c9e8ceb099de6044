#include "core/pipeline/series_parallel.h"

#include <algorithm>
#include <cstdint>
#include <functional>

#include "core/ir/error.h"

namespace collage {

namespace {

// A set of graph nodes as 64-bit words (the reachability closure needs n^2 bits).
struct Bits {
  std::vector<uint64_t> w;
  explicit Bits(int n = 0) : w((n + 63) / 64, 0) {}
  void set(int i) { w[i / 64] |= uint64_t{1} << (i % 64); }
  bool test(int i) const { return (w[i / 64] >> (i % 64)) & 1; }
  void orWith(const Bits& o) {
    for (size_t i = 0; i < w.size(); ++i) w[i] |= o.w[i];
  }
  void andWith(const Bits& o) {
    for (size_t i = 0; i < w.size(); ++i) w[i] &= o.w[i];
  }
};

class Decomposer {
 public:
  explicit Decomposer(const PipeGraph& g) : g_(g), position_(g.size()), ancestors_() {
    const auto order = g.topologicalOrder();  // throws on a cycle
    for (int i = 0; i < g.size(); ++i) position_[order[i]] = i;
    // ancestors_[v]: the nodes with a path to v (v excluded). In topological
    // order each node's set is its predecessors' sets plus the predecessors.
    ancestors_.assign(g.size(), Bits(g.size()));
    for (int v : order)
      for (int p : g.predecessors(v)) {
        ancestors_[v].orWith(ancestors_[p]);
        ancestors_[v].set(p);
      }
  }

  SeriesParallelTree run() {
    std::vector<int> all(g_.size());
    for (int i = 0; i < g_.size(); ++i) all[i] = i;
    if (!all.empty()) tree_.root = build(all);
    return std::move(tree_);
  }

 private:
  bool reaches(int a, int b) const { return ancestors_[b].test(a); }

  int add(SpNode node) {
    std::sort(node.nodes.begin(), node.nodes.end());
    tree_.nodes.push_back(std::move(node));
    return static_cast<int>(tree_.nodes.size()) - 1;
  }

  // A Series of `parts` (each already built); Series children are spliced in
  // (series composition is associative), so no Series has a Series child.
  int series(const std::vector<int>& parts) {
    SpNode s;
    s.kind = SpNode::Kind::Series;
    for (int p : parts) {
      const SpNode& child = tree_.nodes[p];
      if (child.kind == SpNode::Kind::Series)
        s.children.insert(s.children.end(), child.children.begin(), child.children.end());
      else
        s.children.push_back(p);
      s.nodes.insert(s.nodes.end(), child.nodes.begin(), child.nodes.end());
    }
    return add(std::move(s));
  }

  // `set`: sorted graph nodes, convex in the graph (every path between two of
  // them stays inside), which holds for the whole graph, for its weakly
  // connected components and for predecessor-closed prefixes, and so for
  // every set this recursion makes. Hence reachability in the whole graph
  // equals reachability inside `set`.
  int build(const std::vector<int>& set) {
    if (set.size() == 1) {
      SpNode leaf;
      leaf.graphNode = set[0];
      leaf.nodes = set;
      return add(std::move(leaf));
    }
    const auto components = weakComponents(set);
    if (components.size() > 1) {
      SpNode par;
      par.kind = SpNode::Kind::Parallel;
      par.nodes = set;
      for (const auto& c : components) par.children.push_back(build(c));
      return add(std::move(par));
    }
    std::vector<int> order = set;
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return position_[a] < position_[b]; });
    const int n = static_cast<int>(order.size());

    // Natural series cuts: a cut before order[p] is one when every node
    // before it is an ancestor of every node after it, i.e. when the prefix
    // lies inside the intersection of the suffix's ancestor sets.
    std::vector<int> cuts;
    Bits common(g_.size());
    std::fill(common.w.begin(), common.w.end(), ~uint64_t{0});
    std::vector<Bits> suffixCommon(n + 1, Bits(g_.size()));
    suffixCommon[n] = common;
    for (int p = n - 1; p >= 1; --p) {
      common.andWith(ancestors_[order[p]]);
      suffixCommon[p] = common;
    }
    for (int p = 1; p < n; ++p) {
      bool all = true;
      for (int q = 0; q < p && all; ++q) all = suffixCommon[p].test(order[q]);
      if (all) cuts.push_back(p);
    }
    if (!cuts.empty()) {
      std::vector<int> parts;
      int begin = 0;
      cuts.push_back(n);
      for (int end : cuts) {
        std::vector<int> piece(order.begin() + begin, order.begin() + end);
        std::sort(piece.begin(), piece.end());
        parts.push_back(build(piece));
        begin = end;
      }
      return series(parts);
    }
    return forcedSeries(set, order);
  }

  // Connected, no natural cut: not series-parallel. Cut between two depth
  // levels, adding the order that makes the cut a series one (header comment).
  int forcedSeries(const std::vector<int>& set, const std::vector<int>& order) {
    std::vector<int> depth(g_.size(), 0);
    int maxDepth = 0;
    for (int v : order) {
      for (int p : g_.predecessors(v))
        if (std::binary_search(set.begin(), set.end(), p))
          depth[v] = std::max(depth[v], depth[p] + 1);
      maxDepth = std::max(maxDepth, depth[v]);
    }
    COLLAGE_CHECK(maxDepth >= 1, "a connected sub-graph of two or more nodes has an edge");
    int bestLevel = -1;
    long bestAdded = 0, bestImbalance = 0;
    for (int k = 0; k < maxDepth; ++k) {
      long added = 0, before = 0;
      for (int a : set)
        if (depth[a] <= k) {
          ++before;
          for (int b : set)
            if (depth[b] > k && !reaches(a, b)) ++added;
        }
      const long imbalance = std::labs(2 * before - static_cast<long>(set.size()));
      if (bestLevel < 0 || added < bestAdded || (added == bestAdded && imbalance < bestImbalance)) {
        bestLevel = k;
        bestAdded = added;
        bestImbalance = imbalance;
      }
    }
    std::vector<int> first, second;
    for (int v : set) (depth[v] <= bestLevel ? first : second).push_back(v);
    // Report the added order between the last nodes before the cut and the
    // first after it (the rest follows by transitivity).
    auto isSinkOf = [&](int v, const std::vector<int>& part) {
      for (int s : g_.successors(v))
        if (std::binary_search(part.begin(), part.end(), s)) return false;
      return true;
    };
    auto isSourceOf = [&](int v, const std::vector<int>& part) {
      for (int p : g_.predecessors(v))
        if (std::binary_search(part.begin(), part.end(), p)) return false;
      return true;
    };
    for (int a : first)
      if (isSinkOf(a, first))
        for (int b : second)
          if (isSourceOf(b, second) && !reaches(a, b)) tree_.addedOrder.push_back({a, b});
    return series({build(first), build(second)});
  }

  std::vector<std::vector<int>> weakComponents(const std::vector<int>& set) const {
    std::vector<int> comp(g_.size(), -1);
    std::vector<std::vector<int>> out;
    for (int start : set) {
      if (comp[start] >= 0) continue;
      const int id = static_cast<int>(out.size());
      out.emplace_back();
      std::vector<int> stack = {start};
      comp[start] = id;
      while (!stack.empty()) {
        const int v = stack.back();
        stack.pop_back();
        out[id].push_back(v);
        for (const auto* next : {&g_.successors(v), &g_.predecessors(v)})
          for (int u : *next)
            if (comp[u] < 0 && std::binary_search(set.begin(), set.end(), u)) {
              comp[u] = id;
              stack.push_back(u);
            }
      }
      std::sort(out[id].begin(), out[id].end());
    }
    return out;  // ordered by smallest node, since `set` is sorted
  }

  const PipeGraph& g_;
  std::vector<int> position_;
  std::vector<Bits> ancestors_;
  SeriesParallelTree tree_;
};

}  // namespace

SeriesParallelTree decomposeSeriesParallel(const PipeGraph& graph) {
  return Decomposer(graph).run();
}

SeriesParallelTree chainDecomposition(const PipeGraph& graph, const std::vector<int>& order) {
  COLLAGE_CHECK(static_cast<int>(order.size()) == graph.size(), "a chain orders every node");
  SeriesParallelTree t;
  SpNode s;
  s.kind = SpNode::Kind::Series;
  for (int v : order) {
    SpNode leaf;
    leaf.graphNode = v;
    leaf.nodes = {v};
    t.nodes.push_back(leaf);
    s.children.push_back(static_cast<int>(t.nodes.size()) - 1);
    s.nodes.push_back(v);
  }
  std::sort(s.nodes.begin(), s.nodes.end());
  if (order.size() == 1) {
    t.root = 0;
  } else if (!order.empty()) {
    t.nodes.push_back(std::move(s));
    t.root = static_cast<int>(t.nodes.size()) - 1;
  }
  return t;
}

std::string SeriesParallelTree::toString(const PipeGraph& graph) const {
  std::function<std::string(int)> show = [&](int i) -> std::string {
    const SpNode& n = nodes[i];
    if (n.kind == SpNode::Kind::Leaf) return graph.name(n.graphNode);
    std::string out = n.kind == SpNode::Kind::Series ? "S(" : "P(";
    for (size_t c = 0; c < n.children.size(); ++c) out += (c ? ", " : "") + show(n.children[c]);
    return out + ")";
  };
  return root < 0 ? "()" : show(root);
}

}  // namespace collage
