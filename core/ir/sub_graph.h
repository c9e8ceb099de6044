// SubGraph: a set of nodes of a Graph together with what is derived from it
// (inputs, outputs, entry and exit nodes, depth), and the one place where the
// core decides whether such a set may become a kernel.
//
// Every candidate, whether a pattern matched it or the pattern generator grew
// it, is a SubGraph. A backend never judges validity itself: checkSubGraph()
// applies the same rules to all of them, with limits the backend's spec sets.
//
//            outside            inside (the NodeSet)          outside
//   input ──▶ producer ──v──▶ [entry] ──▶ ... ──▶ [exit] ──w──▶ consumer
//                        │                                │
//                  v is an input                   w is an output
//
// Validity:
//   - not empty;
//   - convex: no path leaves the set and comes back into it. A kernel runs all
//     its nodes at once, so an outside node that both needs one of its results
//     and feeds one of its inputs could never be scheduled;
//   - at most maxExits exit nodes, at most maxNodes nodes, a longest internal
//     path of at most maxDepth nodes, and (unless allowTaps) no exit node whose
//     result is also used inside.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/node_set.h"

namespace collage {

// Which nodes reach which, for a finalized Graph: for every node its strict
// descendants and strict ancestors as NodeSets. Built once per graph in
// O(N * E / 64) time and 2 * N * N / 8 bytes (25 MB at 10,000 nodes), after
// which questions about a set of nodes cost a few passes over N / 64 words.
class GraphReachability {
 public:
  explicit GraphReachability(const Graph& graph);

  int32_t numNodes() const { return static_cast<int32_t>(descendants_.size()); }
  // Nodes reachable from n by a path of one or more edges (n itself excluded).
  const NodeSet& descendants(NodeId n) const { return descendants_.at(static_cast<size_t>(n)); }
  // Nodes from which n is reachable (n itself excluded).
  const NodeSet& ancestors(NodeId n) const { return ancestors_.at(static_cast<size_t>(n)); }
  // Whether a path of one or more edges leads from `from` to `to`.
  bool reaches(NodeId from, NodeId to) const { return descendants(from).contains(to); }
  // Nodes outside `set` that lie on a path from one member to another: empty
  // exactly when `set` is convex. See outsidePathNodes() in sub_graph.cc for
  // why this is (descendants of the set) ∩ (ancestors of the set) − set.
  NodeSet outsidePathNodes(const NodeSet& set) const;
  // Every node on some path from `from` to `to`, both included; empty when
  // `to` is not reachable from `from` (and {from} when they are equal).
  NodeSet between(NodeId from, NodeId to) const;

 private:
  std::vector<NodeSet> descendants_;
  std::vector<NodeSet> ancestors_;
};

// Limits a backend sets on the candidates it accepts (the spec file fills
// them). 0 means "no limit" for maxDepth, maxNodes and maxExits.
struct SubGraphLimits {
  int maxDepth = 0;  // longest path inside the group, counted in nodes
  int maxExits = 1;  // members whose results are used outside or are graph outputs
  int maxNodes = 0;
  bool allowTaps = true;  // may an exit's result also feed a member?

  std::string toString() const;
};

enum class SubGraphProblem { None, Empty, NotConvex, TooDeep, TooManyExits, TooManyNodes, Tap };

// The verdict of checkSubGraph: ok(), or the first problem found with a
// message naming the node at fault (for NotConvex, a node on a path that
// leaves the group and re-enters it).
struct SubGraphValidity {
  SubGraphProblem problem = SubGraphProblem::None;
  NodeId witness = kNoNode;  // the outside node on a re-entering path, the tap, ...
  std::string reason;        // empty when ok

  bool ok() const { return problem == SubGraphProblem::None; }
  explicit operator bool() const { return ok(); }
};

std::string_view subGraphProblemName(SubGraphProblem problem);

// The one member of `nodes` that reads `v`, or kNoNode when none or several
// do (readers outside the set do not count): how a backend walks a chain
// from its anchor through a group.
NodeId soleConsumerIn(const Graph& graph, const NodeSet& nodes, ValueId v);

// Decides validity. The first form needs nothing precomputed: it finds
// re-entering paths by a forward walk from the group's outside successors
// that stays below the group's highest node (nodes are in topological order,
// so nothing after it can lead back in). The second form uses a
// GraphReachability and costs O(|set| * N / 64); use it when checking
// thousands of sets of one graph. Both give the same answers.
SubGraphValidity checkSubGraph(const Graph& graph, const NodeSet& set,
                               const SubGraphLimits& limits);
SubGraphValidity checkSubGraph(const Graph& graph, const GraphReachability& reach,
                               const NodeSet& set, const SubGraphLimits& limits);

// A NodeSet of a Graph with its boundary cached. Construction is one pass over
// the members' edges; the Graph must outlive the SubGraph.
class SubGraph {
 public:
  SubGraph(const Graph& graph, NodeSet nodes);

  const Graph& graph() const { return *graph_; }
  const NodeSet& nodes() const { return nodes_; }
  int32_t size() const { return static_cast<int32_t>(members_.size()); }
  // Members in ascending (topological) order.
  const std::vector<NodeId>& members() const { return members_; }
  bool contains(NodeId n) const { return nodes_.contains(n); }

  // Values read by members but not produced inside: graph inputs, constants
  // and results of outside nodes, each once, in the order the members first
  // read them. isConstantInput() tells constants (weights, folded values) apart.
  const std::vector<ValueId>& inputs() const { return inputs_; }
  // The inputs that are not constants: what the kernel receives at run time.
  const std::vector<ValueId>& dataInputs() const { return dataInputs_; }
  bool isConstantInput(ValueId v) const { return graph_->value(v).isConstant(); }
  // Values produced inside and read outside or marked as graph outputs, in
  // producer order (then output position).
  const std::vector<ValueId>& outputs() const { return outputs_; }
  // Members reading a non-constant value produced outside (or a graph input).
  const std::vector<NodeId>& entryNodes() const { return entries_; }
  // Members with a result used outside or that is a graph output.
  const std::vector<NodeId>& exitNodes() const { return exits_; }
  // Longest path inside, counted in nodes (1 for a single node, 0 when empty).
  int depth() const { return depth_; }

  SubGraphValidity check(const SubGraphLimits& limits) const {
    return checkSubGraph(*graph_, nodes_, limits);
  }

  // "{#3 Conv 'conv1', #4 Add 'bias1', #5 Relu 'relu1'}"
  std::string toString() const;

 private:
  const Graph* graph_;
  NodeSet nodes_;
  std::vector<NodeId> members_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> dataInputs_;
  std::vector<ValueId> outputs_;
  std::vector<NodeId> entries_;
  std::vector<NodeId> exits_;
  int depth_ = 0;
};

// Longest path inside `set`, in nodes (shared by SubGraph and checkSubGraph).
int subGraphDepth(const Graph& graph, const NodeSet& set);

}  // namespace collage
