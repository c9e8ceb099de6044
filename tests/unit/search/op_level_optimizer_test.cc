// The op-level optimizer against brute force, with a deterministic cost model
// standing in for the measurer (a test double for the search, never used by
// the product).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "core/patterns/candidate.h"
#include "core/ir/error.h"
#include "core/search/op_level_optimizer.h"
#include "core/search/placement_constraints.h"
#include "core/ir/sub_graph.h"

namespace collage {
namespace {

// A random DAG of unary/binary elementwise nodes over one input.
Graph randomGraph(std::mt19937& rng, int numNodes) {
  Graph g;
  std::vector<ValueId> values = {g.addInput("x", {ElementType::Float32, {4}})};
  for (int i = 0; i < numNodes; ++i) {
    ValueId out = g.addValue("v" + std::to_string(i), {ElementType::Float32, {4}});
    std::uniform_int_distribution<size_t> pick(0, values.size() - 1);
    // Prefer recent values so the graph is deep, not a star.
    auto recent = [&]() {
      size_t lo = values.size() > 3 ? values.size() - 3 : 0;
      return values[std::uniform_int_distribution<size_t>(lo, values.size() - 1)(rng)];
    };
    if (rng() % 3 == 0 && values.size() > 1)
      g.addNode(Node{"n" + std::to_string(i), "Add", {}, {recent(), values[pick(rng)]}, {out}});
    else
      g.addNode(Node{"n" + std::to_string(i), "Relu", {}, {recent()}, {out}});
    values.push_back(out);
  }
  // Every value nobody reads is an output.
  g.finalize();
  for (ValueId v = 0; v < g.numValues(); ++v)
    if (g.value(v).consumers.empty() && !g.value(v).isGraphInput) g.markOutput(v);
  g.finalize();
  return g;
}

// Random valid candidates on several backends; every single node on backend 0.
CandidateSet randomCandidates(const Graph& g, std::mt19937& rng) {
  CandidateSet set(g.numNodes());
  const char* backends[] = {"a", "b", "c"};
  for (NodeId n = 0; n < g.numNodes(); ++n) set.add(Candidate{NodeSet::of(g.numNodes(), {n}), "a", "op", {}});
  GraphReachability reach(g);
  SubGraphLimits limits{0, 2, 4, true};
  for (int tries = 0; tries < 200; ++tries) {
    NodeId start = static_cast<NodeId>(rng() % g.numNodes());
    NodeSet s = NodeSet::of(g.numNodes(), {start});
    int size = 1 + static_cast<int>(rng() % 4);
    for (NodeId n = start + 1; n < g.numNodes() && s.count() < size; ++n)
      if (rng() % 2) s.insert(n);
    if (!checkSubGraph(g, reach, s, limits)) continue;
    set.add(Candidate{s, backends[rng() % 3], "test", {}});
  }
  return set;
}

// Deterministic costs: a function of the candidate's nodes and backend.
std::vector<Cost> deterministicCosts(const CandidateSet& set, std::mt19937& rng) {
  std::vector<Cost> costs;
  for (size_t i = 0; i < set.size(); ++i) {
    int r = static_cast<int>(rng() % 100);
    costs.push_back(r < 5 ? kInvalidCost : 10.0 + set[i].nodes.count() * (5 + r % 37));
  }
  return costs;
}

// Every set of disjoint candidates covering all nodes, cheapest total.
Cost bruteForce(const Graph& g, const CandidateSet& set, const std::vector<Cost>& costs,
                const std::vector<bool>& allowed, double epsilon) {
  Cost best = kInvalidCost;
  std::function<void(size_t, NodeSet, Cost)> go = [&](size_t i, NodeSet covered, Cost total) {
    if (covered.count() == g.numNodes()) {
      best = std::min(best, total);
      return;
    }
    if (i == set.size() || total >= best) return;
    go(i + 1, covered, total);
    if ((allowed.empty() || allowed[i]) && isKnown(costs[i]) && !set[i].nodes.intersects(covered))
      go(i + 1, covered | set[i].nodes, total + costs[i] + epsilon);
  };
  go(0, NodeSet(g.numNodes()), 0);
  return best;
}

TEST(OpLevelOptimizer, EqualsBruteForceOnRandomGraphs) {
  std::mt19937 rng(7);
  int checked = 0;
  for (int trial = 0; trial < 40; ++trial) {
    Graph g = randomGraph(rng, 3 + trial % 10);  // up to 12 nodes
    CandidateSet set = randomCandidates(g, rng);
    std::vector<Cost> costs = deterministicCosts(set, rng);
    for (NodeId n = 0; n < g.numNodes(); ++n) costs[n] = 100;  // singles always valid
    const double epsilon = trial % 2 ? 3.0 : 0.0;
    OpLevelProblem p{&g, &set, costs, [&](const std::string&) { return epsilon; }, {}};
    OpLevelResult r = optimizeOpLevel(p);
    Cost expected = bruteForce(g, set, costs, {}, epsilon);
    ASSERT_DOUBLE_EQ(r.total, expected) << "trial " << trial << "\n" << g.toString();
    // The result is a real cover: disjoint, complete, and its cost adds up.
    NodeSet covered(g.numNodes());
    Cost sum = 0;
    for (int32_t c : r.chosen) {
      ASSERT_FALSE(set[c].nodes.intersects(covered));
      covered |= set[c].nodes;
      sum += costs[c] + epsilon;
    }
    EXPECT_EQ(covered.count(), g.numNodes());
    EXPECT_DOUBLE_EQ(sum, r.total);
    ++checked;
  }
  EXPECT_EQ(checked, 40);
}

// The DP walks the nodes in an order of its choosing (dp_order.h); any
// permutation of the nodes, topological or not, gives the brute-force optimum.
TEST(OpLevelOptimizer, AnyWalkOrderEqualsBruteForce) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 40; ++trial) {
    Graph g = randomGraph(rng, 3 + trial % 10);
    CandidateSet set = randomCandidates(g, rng);
    std::vector<Cost> costs = deterministicCosts(set, rng);
    for (NodeId n = 0; n < g.numNodes(); ++n) costs[n] = 100;
    const double epsilon = trial % 2 ? 3.0 : 0.0;
    OpLevelProblem p{&g, &set, costs, [&](const std::string&) { return epsilon; }, {}};
    const Cost expected = bruteForce(g, set, costs, {}, epsilon);
    p.order.resize(static_cast<size_t>(g.numNodes()));
    for (NodeId n = 0; n < g.numNodes(); ++n) p.order[static_cast<size_t>(n)] = n;
    for (int shuffle = 0; shuffle < 3; ++shuffle) {
      if (shuffle == 1) std::reverse(p.order.begin(), p.order.end());
      if (shuffle == 2) std::shuffle(p.order.begin(), p.order.end(), rng);
      const OpLevelResult r = optimizeOpLevel(p);
      ASSERT_DOUBLE_EQ(r.total, expected) << "trial " << trial << " order " << shuffle;
      NodeSet covered(g.numNodes());
      for (int32_t c : r.chosen) {
        ASSERT_FALSE(set[c].nodes.intersects(covered));
        covered |= set[c].nodes;
      }
      EXPECT_EQ(covered.count(), g.numNodes());
    }
  }
}

TEST(OpLevelOptimizer, PinsAndForbidsAreHonoured) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    Graph g = randomGraph(rng, 6 + trial % 6);
    CandidateSet set = randomCandidates(g, rng);
    // Singles on every backend, so any pin or forbid leaves a cover.
    for (NodeId n = 0; n < g.numNodes(); ++n)
      for (const char* b : {"b", "c"}) set.add(Candidate{NodeSet::of(g.numNodes(), {n}), b, "op", {}});
    std::vector<Cost> costs = deterministicCosts(set, rng);
    for (size_t i = 0; i < set.size(); ++i)
      if (set[i].nodes.count() == 1) costs[i] = 50 + static_cast<double>(i % 7);
    PlacementConstraints constraints;
    constraints.pins.push_back(PlacementConstraints::parsePin("n1=c"));
    constraints.forbids.push_back(PlacementConstraints::parseForbid("op:Relu=a"));
    std::vector<bool> allowed = allowedCandidates(g, set, constraints);
    OpLevelProblem p{&g, &set, costs, nullptr, allowed};
    OpLevelResult r = optimizeOpLevel(p);
    NodeId pinned = *g.findNode("n1");
    for (int32_t c : r.chosen) {
      if (set[c].nodes.contains(pinned)) EXPECT_EQ(set[c].backend, "c");
      if (set[c].backend == "a")
        set[c].nodes.forEach([&](NodeId n) { EXPECT_NE(g.node(n).op, "Relu"); });
    }
    EXPECT_DOUBLE_EQ(r.total, bruteForce(g, set, costs, allowed, 0));
  }
}

TEST(OpLevelOptimizer, UncoverableNodeIsNamed) {
  std::mt19937 rng(3);
  Graph g = randomGraph(rng, 4);
  CandidateSet set(g.numNodes());
  for (NodeId n = 0; n < g.numNodes(); ++n) set.add(Candidate{NodeSet::of(g.numNodes(), {n}), "a", "op", {}});
  std::vector<Cost> costs(set.size(), 1.0);
  costs[2] = kInvalidCost;
  OpLevelProblem p{&g, &set, costs, nullptr, {}};
  try {
    optimizeOpLevel(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + g.node(2).name + "'"), std::string::npos) << e.what();
  }
}

TEST(OpLevelOptimizer, BaselinesUseTheSameCosts) {
  std::mt19937 rng(5);
  Graph g = randomGraph(rng, 8);
  CandidateSet set(g.numNodes());
  for (NodeId n = 0; n < g.numNodes(); ++n) {
    set.add(Candidate{NodeSet::of(g.numNodes(), {n}), "native", "op", {}});
    if (n % 2 == 0) set.add(Candidate{NodeSet::of(g.numNodes(), {n}), "fast", "op", {}});
  }
  std::vector<Cost> costs;
  for (size_t i = 0; i < set.size(); ++i) costs.push_back(set[i].backend == "fast" ? 1.0 : 10.0);
  OpLevelProblem p{&g, &set, costs, nullptr, {}};
  OpLevelResult best = optimizeOpLevel(p);
  OpLevelResult onlyFast = singleBackendPlacement(p, "fast", "native");
  OpLevelResult onlyNative = singleBackendPlacement(p, "native", "native");
  OpLevelResult priority = priorityPlacement(p, {"fast", "native"});
  const int evens = (g.numNodes() + 1) / 2, odds = g.numNodes() / 2;
  EXPECT_DOUBLE_EQ(best.total, evens * 1.0 + odds * 10.0);
  EXPECT_DOUBLE_EQ(onlyFast.total, best.total);  // native covers the odd nodes
  EXPECT_DOUBLE_EQ(onlyNative.total, g.numNodes() * 10.0);
  EXPECT_DOUBLE_EQ(priority.total, best.total);
  EXPECT_LE(best.total, onlyNative.total);
  // The fallback is the first backend that runs every node alone.
  EXPECT_EQ(completeBackend(p, {"fast", "native"}), "native");
  EXPECT_EQ(completeBackend(p, {"fast"}), "");
}

TEST(OpLevelOptimizer, CancelledSearchStillReturnsACover) {
  std::mt19937 rng(9);
  Graph g = randomGraph(rng, 12);
  CandidateSet set = randomCandidates(g, rng);
  std::vector<Cost> costs(set.size(), 5.0);
  CancellationToken cancel;
  cancel.cancel();
  OpLevelResult r = optimizeOpLevel(OpLevelProblem{&g, &set, costs, nullptr, {}}, nullptr, &cancel);
  EXPECT_TRUE(r.cancelled);
  NodeSet covered(g.numNodes());
  for (int32_t c : r.chosen) covered |= set[c].nodes;
  EXPECT_EQ(covered.count(), g.numNodes());
}

}  // namespace
}  // namespace collage
