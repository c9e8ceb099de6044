// The post-dominator tree of a Graph's dataflow, which the pattern generator
// climbs to grow a group: node p post-dominates node n when every path from n
// to the end of the graph passes through p. Then everything on the paths from
// n to p forms a group whose only way out is p, so growing a group from a seed
// to its successive post-dominators yields convex, single-exit groups.
//
// "The end of the graph" is a virtual sink that follows every node with a
// result that is a graph output or that no node reads (and every node with no
// results at all). A node whose result is both read inside and a graph output
// therefore has the sink as its immediate post-dominator: a kernel ending
// elsewhere would hide that output.
//
//   graph:  conv -> relu -> add -> (graph output)     tree:  sink
//           conv ---------> add                               |
//                                                            add
//                                                           /   \    (conv and relu
//                                                        conv   relu    both lead to add)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/graph.h"

namespace collage {

class PostDominatorTree {
 public:
  // Built in one backward pass over the topological order (Cooper, Harvey and
  // Kennedy's intersection on the reversed graph, which a DAG settles in a
  // single sweep). The graph must be finalized.
  explicit PostDominatorTree(const Graph& graph);

  int32_t numNodes() const { return static_cast<int32_t>(ipdom_.size()); }
  // The virtual sink's id: numNodes().
  NodeId sink() const { return numNodes(); }
  bool isSink(NodeId n) const { return n == sink(); }

  // The nearest strict post-dominator of n: a node with a higher index, or
  // sink(). The sink itself has none (kNoNode).
  NodeId immediatePostDominator(NodeId n) const;
  // Whether every path from n to the sink passes through p (true for p == n,
  // and for p == sink()).
  bool postDominates(NodeId p, NodeId n) const;
  // n's strict post-dominators from the nearest up to and excluding the sink.
  std::vector<NodeId> postDominators(NodeId n) const;

  // One line per node: "#3 'relu1' -> #5 'add1'" ("-> sink" for the sink).
  std::string toString(const Graph& graph) const;

 private:
  std::vector<NodeId> ipdom_;  // per node: a higher index, or sink()
};

}  // namespace collage
