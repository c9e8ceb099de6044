// The series-parallel decomposition: exact on series-parallel graphs, and on
// graphs that are not (the N shape, a bridge inside a diamond, random DAGs)
// a valid decomposition: every node in one leaf, every edge forward.
#include "core/pipeline/series_parallel.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "core/ir/error.h"

namespace collage {
namespace {

PipeGraph graphOf(const std::vector<std::string>& names,
                  const std::vector<std::pair<int, int>>& edges) {
  PipeGraph g;
  for (const auto& n : names) g.addNode(n);
  for (const auto& [a, b] : edges) g.addEdge(a, b, 1);
  return g;
}

// The invariants of series_parallel.h; "" when they hold.
std::string violation(const PipeGraph& g, const SeriesParallelTree& t) {
  if (t.root < 0) return g.size() == 0 ? "" : "no root";
  std::vector<int> leafOf(g.size(), -1), parent(t.nodes.size(), -1),
      indexInParent(t.nodes.size(), -1);
  std::vector<int> seen(t.nodes.size(), 0);
  std::function<std::string(int)> walk = [&](int i) -> std::string {
    if (seen[i]++) return "tree node reached twice";
    const SpNode& n = t.nodes[i];
    std::vector<int> under;
    if (n.kind == SpNode::Kind::Leaf) {
      if (n.graphNode < 0 || n.graphNode >= g.size()) return "leaf without a node";
      if (leafOf[n.graphNode] >= 0) return "node " + g.name(n.graphNode) + " in two leaves";
      leafOf[n.graphNode] = i;
      under = {n.graphNode};
    } else {
      if (n.children.size() < 2) return "an inner node with fewer than two children";
      for (size_t c = 0; c < n.children.size(); ++c) {
        const int child = n.children[c];
        if (t.nodes[child].kind == n.kind) return "a child of the same kind as its parent";
        parent[child] = i;
        indexInParent[child] = static_cast<int>(c);
        if (auto v = walk(child); !v.empty()) return v;
        under.insert(under.end(), t.nodes[child].nodes.begin(), t.nodes[child].nodes.end());
      }
    }
    std::sort(under.begin(), under.end());
    if (under != n.nodes) return "a tree node's node list differs from its leaves'";
    return "";
  };
  if (auto v = walk(t.root); !v.empty()) return v;
  for (int v = 0; v < g.size(); ++v)
    if (leafOf[v] < 0) return "node " + g.name(v) + " in no leaf";
  auto ancestry = [&](int i) {
    std::vector<int> path;
    for (; i >= 0; i = parent[i]) path.insert(path.begin(), i);
    return path;
  };
  for (const auto& e : g.edges()) {
    const auto pu = ancestry(leafOf[e.from]), pv = ancestry(leafOf[e.to]);
    size_t k = 0;
    while (k < pu.size() && k < pv.size() && pu[k] == pv[k]) ++k;
    // pu[k-1] is the lowest common ancestor; pu[k], pv[k] its children on each side.
    const SpNode& lca = t.nodes[pu[k - 1]];
    if (lca.kind != SpNode::Kind::Series || indexInParent[pu[k]] >= indexInParent[pv[k]])
      return "edge " + g.name(e.from) + " -> " + g.name(e.to) +
             " does not point forward in a series";
  }
  return "";
}

TEST(SeriesParallel, DiamondWithATailIsSeriesOfParallel) {
  const PipeGraph g = graphOf({"a", "b", "c", "d", "e"}, {{0, 1}, {0, 2}, {1, 3}, {2, 3}, {3, 4}});
  const auto t = decomposeSeriesParallel(g);
  EXPECT_EQ(t.toString(g), "S(a, P(b, c), d, e)");
  EXPECT_TRUE(t.addedOrder.empty());
  EXPECT_EQ(violation(g, t), "");
}

TEST(SeriesParallel, SkipEdgeKeepsTheSeries) {
  // x -> f -> g -> add, x -> add: a residual block is a chain with a skip.
  const PipeGraph g = graphOf({"x", "f", "g", "add"}, {{0, 1}, {1, 2}, {2, 3}, {0, 3}});
  const auto t = decomposeSeriesParallel(g);
  EXPECT_EQ(t.toString(g), "S(x, f, g, add)");
  EXPECT_EQ(violation(g, t), "");
}

TEST(SeriesParallel, TowersAndDisconnectedInputs) {
  // Two towers from two inputs into one head: P(S(a1, a2), S(b1, b2)) then head.
  const PipeGraph g = graphOf({"a1", "b1", "a2", "b2", "head"}, {{0, 2}, {1, 3}, {2, 4}, {3, 4}});
  const auto t = decomposeSeriesParallel(g);
  EXPECT_EQ(t.toString(g), "S(P(S(a1, a2), S(b1, b2)), head)");
  EXPECT_EQ(violation(g, t), "");
}

TEST(SeriesParallel, NShapeIsMadeSeriesParallel) {
  // a -> c, a -> d, b -> d: connected, no cut where all before reach all after.
  const PipeGraph g = graphOf({"a", "b", "c", "d"}, {{0, 2}, {0, 3}, {1, 3}});
  const auto t = decomposeSeriesParallel(g);
  EXPECT_EQ(t.toString(g), "S(P(a, b), P(c, d))");
  ASSERT_EQ(t.addedOrder.size(), 1u);
  EXPECT_EQ(t.addedOrder[0], std::make_pair(1, 2));  // b before c: the order the graph lacked
  EXPECT_EQ(violation(g, t), "");
}

TEST(SeriesParallel, BridgeInsideADiamond) {
  // s -> {a, b}; a -> c, a -> d, b -> d (the N); {c, d} -> t. Only the middle is not SP.
  const PipeGraph g = graphOf({"s", "a", "b", "c", "d", "t"},
                              {{0, 1}, {0, 2}, {1, 3}, {1, 4}, {2, 4}, {3, 5}, {4, 5}});
  const auto t = decomposeSeriesParallel(g);
  EXPECT_EQ(t.toString(g), "S(s, P(a, b), P(c, d), t)");
  EXPECT_EQ(t.addedOrder, (std::vector<std::pair<int, int>>{{2, 3}}));
  EXPECT_EQ(violation(g, t), "");
}

TEST(SeriesParallel, WheatstoneBridgeOfOperators) {
  // s -> a, s -> b, a -> b (the bridge), a -> t, b -> t: as an operator graph
  // it is a chain s, a, b, t with skips, which the series cuts find.
  const PipeGraph g = graphOf({"s", "a", "b", "t"}, {{0, 1}, {0, 2}, {1, 2}, {1, 3}, {2, 3}});
  const auto t = decomposeSeriesParallel(g);
  EXPECT_EQ(t.toString(g), "S(s, a, b, t)");
  EXPECT_TRUE(t.addedOrder.empty());
  EXPECT_EQ(violation(g, t), "");
}

TEST(SeriesParallel, RandomDagsDecomposeValidly) {
  std::mt19937 rng(41);
  int notSeriesParallel = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 11);
    PipeGraph g;
    for (int i = 0; i < n; ++i) g.addNode("n" + std::to_string(i));
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b)
        if (rng() % 100 < 30) g.addEdge(a, b, 1);
    const auto t = decomposeSeriesParallel(g);
    notSeriesParallel += !t.addedOrder.empty();
    ASSERT_EQ(violation(g, t), "") << "trial " << trial << ": " << t.toString(g);
  }
  EXPECT_GT(notSeriesParallel, 20);  // the random graphs do exercise the repair
}

TEST(SeriesParallel, ChainIsOneSeries) {
  const PipeGraph g = graphOf({"a", "b", "c"}, {{0, 1}, {0, 2}});
  const auto t = chainDecomposition(g, g.topologicalOrder());
  EXPECT_EQ(t.toString(g), "S(a, b, c)");
  EXPECT_EQ(violation(g, t), "");
}

TEST(SeriesParallel, CycleIsRefusedByName) {
  const PipeGraph g = graphOf({"a", "b", "c"}, {{0, 1}, {1, 2}, {2, 1}});
  try {
    decomposeSeriesParallel(g);
    FAIL() << "a cycle was decomposed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node b is on a cycle"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collage
