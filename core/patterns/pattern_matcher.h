// Finds every place in a Graph where a Pattern matches.
//
// A match is a set of op nodes with one exit (the node matched by the
// pattern's root) whose inputs are the values at the pattern's '*' and 'const'
// positions. Overlapping matches are all reported: Relu(Relu(*)) on a chain of
// three Relus matches twice. Two matches with the same nodes and the same
// captures are one (Add(*, *) on Add(a, b) matches once, not once per order).
//
// A candidate is rejected unless
//   - every matched node other than the exit has all its outputs consumed by
//     matched nodes only, and none is a graph output (one exit, which also
//     makes the node set convex);
//   - every input value comes from outside the match.
// See docs/patterns.md for the language and what is not supported.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/node_set.h"
#include "core/patterns/pattern.h"

namespace collage {

struct PatternMatch {
  NodeSet nodes;        // the matched op nodes
  NodeId exit = kNoNode;  // the node matched by the pattern's root
  // Values at '*' and 'const' positions, in pattern order (the order of a
  // commutative op's arguments as the pattern writes them), no duplicates.
  std::vector<ValueId> inputs;
  std::map<std::string, NodeId> captures;        // name=Op(...)  -> the node
  std::map<std::string, ValueId> valueCaptures;  // name=* / name=const -> the value

  // "{3,4,5} exit #5 inputs (x, w, b) conv=#3": node indices and value names.
  std::string toString(const Graph& graph) const;
  // Same without value names.
  std::string toString() const;
};

// Indexes a graph's nodes by op once, for matching many patterns against it.
// The graph must be finalized and must outlive the matcher.
class PatternMatcher {
 public:
  explicit PatternMatcher(const Graph& graph);

  // Every match of `pattern`, ordered by exit node, then in discovery order.
  std::vector<PatternMatch> findMatches(const Pattern& pattern) const;
  // The matches whose exit is `root`.
  std::vector<PatternMatch> matchesAt(const Pattern& pattern, NodeId root) const;

 private:
  const Graph& graph_;
  std::unordered_map<std::string, std::vector<NodeId>> nodesByOp_;
};

std::vector<PatternMatch> findMatches(const Pattern& pattern, const Graph& graph);
std::vector<PatternMatch> matchesAt(const Pattern& pattern, const Graph& graph, NodeId root);

// Whether an op's two inputs may be swapped (Add, Mul, Max, Min, Sum, Mean,
// Equal, And, Or, Xor): the matcher then tries both argument orders.
bool isCommutativeOp(const std::string& op);

}  // namespace collage
