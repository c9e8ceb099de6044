// The relaxed substitution search (MetaFlow's Algorithm 2), costed by the
// placement it allows: a graph's cost is the op-level DP over measured
// candidates (the caller's GraphCostFn), so a rewrite that is slow on one
// backend but lets another run the graph faster is kept.
//
//   queue <- {G0};  best <- G0
//   while queue and budget:
//     G <- the cheapest in queue
//     for each move m on G:               (a rule at every site of one shape)
//       G' <- m(G), each site checked equivalent (equivalence_check.h)
//       if hash(G') seen: skip            (canonical: node order does not count)
//       if cost(G') < cost(best): best <- G'
//       if cost(G') < alpha * cost(best): queue <- G'   (relaxed: may be worse)
//
// A move applies one rule at every site whose nodes have the same ops,
// attributes and types (the identical layers of a transformer are
// one move: each layer's rewrite costs the same, the DP being a sum), which
// keeps the branching small. The invariant: the result is the start graph
// with `applied` replayed in order, and every applied site passed the check.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/ir/cost.h"
#include "core/ir/graph.h"
#include "core/ir/search_events.h"
#include "core/rewrite/equivalence_check.h"
#include "core/rewrite/substitution.h"

namespace collage {

struct SubstitutionSearchOptions {
  double alpha = 1.05;         // explore graphs up to alpha x the best cost
  double budgetSeconds = 30;   // stop after this long (the start graph's costing not counted)...
  int maxGraphs = 200;         // ...or after costing this many graphs
  std::vector<const Substitution*> rules;  // empty = standardSubstitutions() + specSubstitutions()
  // Rules applied wherever they hold (each site still checked) before the
  // search, whatever they cost: the user's override, as a pin is for
  // placement; the search goes on from the graph they make. Error for a
  // name no rule has.
  std::vector<std::string> forcedRules;
  // The model's value ranges (observeValueRanges on the user's or seeded
  // inputs): every check also draws its inputs from them. Optional.
  const ValueRanges* valueRanges = nullptr;
};

// The cost of a graph reached by applying `sites` to the start graph (the
// op-level DP's total); +inf when it cannot be placed. May throw Error: the
// graph then counts as +inf, with the message as a note.
using GraphCostFn = std::function<Cost(const Graph& graph, const std::vector<SubstitutionSite>& sites)>;

// One move on the path to the best graph: the sites it applied and the cost
// before and after (after > before for a relaxed step that paid off later).
struct SubstitutionStep {
  std::string rule;
  std::vector<SubstitutionSite> sites;
  Cost before = kUnknownCost;
  Cost after = kUnknownCost;
};

struct SubstitutionSearchResult {
  Graph graph;                            // the best graph found
  std::vector<SubstitutionSite> applied;  // replays the start graph into `graph`
  std::vector<SubstitutionStep> steps;    // the moves that made it, in order
  std::vector<SubstitutionStep> tried;    // every move costed, in the order tried
  Cost startCost = kUnknownCost;
  Cost bestCost = kUnknownCost;
  int graphsCosted = 0;   // GraphCostFn calls
  int graphsExpanded = 0; // graphs whose moves were tried
  int cacheHits = 0;      // graphs reached again (by another order of moves)
  int checks = 0;         // equivalence checks run (cached per site)
  std::vector<std::string> notes;  // rewrites dropped, graphs that could not be costed
  bool budgetSpent = false;        // stopped by the budget, not by an empty queue
  bool cancelled = false;
  double seconds = 0;  // after the start graph was costed
};

SubstitutionSearchResult searchSubstitutions(const Graph& start, const GraphCostFn& cost,
                                             const SubstitutionSearchOptions& options,
                                             SearchObserver* observer = nullptr,
                                             const CancellationToken* cancel = nullptr);

// A key equal for graphs that compute the same way, whatever the order of
// their nodes and the names rewrites gave them: each value is keyed by what
// computes it (a graph input by its name, a constant by its type and
// contents, a node's output by the node's op, attributes, input keys and
// output types), bottom-up; the key is the sorted node hashes and the
// outputs' names and hashes. So a merge undone by an unmerge (new names, the
// same slices of the same weights) is the graph seen before. `constantHashes`
// (optional, one per search) hashes each constant's contents once per
// storage, never by name: two branches can each make a different constant
// of one name.
struct ConstantHash {
  Tensor held;  // keeps the storage alive, so its address names one content
  uint64_t hash = 0;
};
using ConstantHashes = std::map<std::pair<const void*, std::string>, ConstantHash>;
std::string canonicalGraphKey(const Graph& graph, ConstantHashes* constantHashes = nullptr);

// "merge-siblings at 12 sites: 1.234 -> 1.100 ms (-0.134 ms)", one line per step.
std::string describeSubstitutions(const SubstitutionSearchResult& result);

}  // namespace collage
