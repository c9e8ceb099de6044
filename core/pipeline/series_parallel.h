// A series-parallel decomposition of a PipeGraph: the tree the stage
// partitioner's DP walks (thesis ch. 3, §3.5).
//
//        x                       S( x, P( S(a1, a2), b ), join )
//      /   \   (x fans out)
//    a1     b                    Series: every node of a child reaches every
//     |     |                            node of the children after it.
//    a2     |                    Parallel: the children are not connected
//      \   /                               at all inside this sub-graph.
//      join
//
// Series pieces come from the cuts where *everything* before the cut reaches
// everything after it, so a skip edge (x -> join) does not break a series:
// it becomes a tensor that crosses stage boundaries, priced on the link.
// Parallel pieces are the weakly connected components.
//
// Not every DAG is series-parallel: in the N shape a -> c, a -> d, b -> d,
// there is no cut (b does not reach c) and the graph is connected. The
// thesis makes such a graph series-parallel by adding order that the
// computation does not need but that the stages may respect at no loss of
// correctness, and plans on the result. (The thesis text is not in this
// repository's seeds; the way to choose the order is ours:) the sub-graph is
// cut between two levels of longest-path depth from its sources, {depth <= k}
// before {depth > k}. That prefix is closed under predecessors, so every
// real edge still points forward; the added order is "every node before the
// cut finishes before any node after it starts" (for stages: a stage never
// spans the cut). Among the levels we take the cut that adds the fewest
// (before, after) pairs the graph did not already order, then the most
// balanced, so the planner loses as little freedom as it can. The N shape
// becomes S( P(a, b), P(c, d) ) with b -> c added.
//
// Invariants (checked by tests): every node in exactly one leaf; for every
// edge u -> v, the lowest common ancestor of u's and v's leaves is a Series
// node with u's child before v's; no Series child is a Series, no Parallel
// child a Parallel (so a stage that is a "run of children" is well defined).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/pipeline/pipe_graph.h"

namespace collage {

struct SpNode {
  enum class Kind { Leaf, Series, Parallel };
  Kind kind = Kind::Leaf;
  int graphNode = -1;         // Leaf: the node
  std::vector<int> children;  // Series: in order; Parallel: by smallest node
  std::vector<int> nodes;     // the graph nodes under it, sorted
};

struct SeriesParallelTree {
  std::vector<SpNode> nodes;
  int root = -1;
  // (a, b): a must finish before b starts, an order the graph did not imply.
  // Empty for a graph that is series-parallel already.
  std::vector<std::pair<int, int>> addedOrder;
  // "S(x, P(S(a1, a2), b), join)"
  std::string toString(const PipeGraph& graph) const;
};

SeriesParallelTree decomposeSeriesParallel(const PipeGraph& graph);

// The chain a sequential pipeline plans on: one Series of all nodes in
// `order` (a topological order), as PipeDream and Piper linearise a model.
SeriesParallelTree chainDecomposition(const PipeGraph& graph, const std::vector<int>& order);

}  // namespace collage
