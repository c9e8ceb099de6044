// The pattern generator (Collage paper, §3 and Figure 4): turns a PatternRule
// into the groups of one Graph that the backend could run as kernels.
//
//   for each seed node that passes the op rule:
//     emit {seed}                                        label "op"
//     p := seed
//     loop:
//       p := immediate post-dominator of p; stop at the virtual sink
//       group += every node on a path from the previous p to the new one
//       stop if a new node fails the member rule, the fusion rule refuses the
//         group, or the group is not a valid SubGraph under the limits
//       emit group                                       label "fusion:<style>"
//   if the rule grows from forks (PatternRule::growsFromForks):
//     for each node f whose result feeds several nodes:
//       group := every node on a path from f to its immediate post-dominator,
//                f excluded; emit it and grow on as above
//
// A group the rule accepts but does not want measured (emitsGroup) is not
// emitted; growth goes on through it.
//
// Because every member lies on a path from the seed to a post-dominator p of
// the seed, every path out of the group runs through p: the grown groups are
// convex and have one exit by construction. They are still passed through
// checkSubGraph, which alone decides validity (depth, size, a backend's own
// limits), so no backend ever sees a group the core would refuse.
#pragma once

#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/node_set.h"
#include "core/patterns/pattern_rule.h"
#include "core/ir/post_dominator_tree.h"
#include "core/ir/sub_graph.h"

namespace collage {

struct GeneratedGroup {
  NodeSet nodes;
  NodeId seed = kNoNode;  // for a group grown from a fork, the fork (not a member)
  NodeId sink = kNoNode;  // the post-dominator it grew to (== seed for a single op)
  std::string label;      // "op" or "fusion:<name the fusion rule gave>"

  // "fusion:anchor_elemwise {#3 Conv 'conv1', #4 Add 'bias1'}"
  std::string toString(const Graph& graph) const;
};

// Counts of what a generate() call did, for logs and tests.
struct PatternGeneratorStats {
  int seeds = 0;            // nodes that passed the op rule
  int forks = 0;            // forks grown from (rules that grow from forks)
  int opRuleStops = 0;      // growths stopped by a node failing the op rule
  int fusionRuleStops = 0;  // growths stopped by the fusion rule
  int validityStops = 0;    // growths stopped by checkSubGraph
  int emitted = 0;

  std::string toString() const;
};

// Holds what is computed once per graph (post-dominator tree, reachability),
// so that one generator can serve the rules of several backends.
class PatternGenerator {
 public:
  explicit PatternGenerator(const Graph& graph);

  // Groups in seed order, each seed's groups from small to large, no set twice.
  std::vector<GeneratedGroup> generate(const PatternRule& rule, const SubGraphLimits& limits,
                                       PatternGeneratorStats* stats = nullptr) const;

  const Graph& graph() const { return *graph_; }
  const PostDominatorTree& postDominatorTree() const { return pdom_; }
  const GraphReachability& reachability() const { return reach_; }

 private:
  const Graph* graph_;
  PostDominatorTree pdom_;
  GraphReachability reach_;
};

// One-shot convenience over PatternGenerator.
std::vector<GeneratedGroup> generateGroups(const Graph& graph, const PatternRule& rule,
                                           const SubGraphLimits& limits);

}  // namespace collage
