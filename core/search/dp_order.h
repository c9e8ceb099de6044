// The order the op-level DP walks the nodes in.
//
// The DP (core/search/op_level_optimizer.h) extends a partial cover only with
// candidates whose first node, in its walk order, is the first node not yet
// covered. Every cover is still reached exactly once in any order of the
// nodes (its kernels sorted by first node in that order), so the optimum does
// not depend on the order; the number of states does. A state is the covered
// prefix plus the nodes ahead of the frontier that candidates begun before it
// already took: at a position p, those are the nodes at or after p that share
// a candidate with a node before p. Their number there is the order's width at
// p (the vertex separation of the graph linking nodes that share a
// candidate), and the states at p can number up to 2^width.
//
// The graph's own order comes from the exporter. Where it interleaves
// parallel branches level by level, every branch's candidates cross every
// position of the stage, and the width is the number of branches. A
// depth-first topological order (a node's consumers as soon as they are
// ready, the most recent first) follows one branch to its join before
// starting the next, so the width is that of one branch. Where values hand
// tensors over in a layout or cross devices, a state also carries the values
// with participants on both sides of the frontier (placed and not), so
// those count too: as groups linked by a placed participant, since the
// pending state of values one kernel touches is that kernel's one choice.
// A third order walks depth-first from the outputs (a join before the
// branches it joins); the narrowest of the three is walked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/patterns/candidate.h"

namespace collage {

struct DpOrderWidth {
  int32_t max = 0;  // the most nodes ahead of any position
  int64_t sum = 0;  // over all positions
  bool operator<(const DpOrderWidth& o) const { return max != o.max ? max < o.max : sum < o.sum; }
};

// The width of `order` (a permutation of the graph's nodes) over the
// candidates with usable[c] (empty = all); with `values`, the participants of
// every non-constant value count as sharing one, and the open values' groups
// are added.
DpOrderWidth dpOrderWidth(const Graph& graph, const CandidateSet& candidates,
                          const std::vector<bool>& usable, const std::vector<NodeId>& order, bool values);

// Kahn's algorithm with a stack: the consumers of the last node placed come
// next, so a branch is followed to its end before the next one starts. With
// `fromOutputs`, the same walk over the reversed edges (producers after
// their consumers): a join comes before the branches it joins.
std::vector<NodeId> depthFirstTopologicalOrder(const Graph& graph, bool fromOutputs = false);

struct DpOrder {
  std::vector<NodeId> order;
  DpOrderWidth width;
  std::string name;  // "graph", "depth-first" or "depth-first from the outputs"
};

// The narrowest of the graph's order and the two depth-first ones (the
// graph's on a tie, so plans do not change where its order was already good).
DpOrder chooseDpOrder(const Graph& graph, const CandidateSet& candidates, const std::vector<bool>& usable,
                      bool values);

}  // namespace collage
