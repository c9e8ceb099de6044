// Graph substitutions (MetaFlow's relaxed rewrites): a rule is a source
// pattern, a target and a condition, written in op terms (ONNX names and
// fusion kinds), never after a network. A rule finds its sites on a graph
// and rewrites one site in place:
//
//        x                                   x
//     ┌──┼──┐            merge-siblings      │
//   MatMul MatMul   ───────────────────▶   MatMul (W1|W2 concatenated)
//     W1    W2        (W1, W2 constant)      │
//     │     │                              Split
//     y1    y2                             y1  y2   (the same values)
//
// A site names its source nodes by NAME, so a list of applied sites is a
// replayable script: a plan carries it (Plan::substitutions) and re-applying
// it to the original model reproduces the rewritten graph. New nodes get
// names derived from the site (unique in the graph), so a replay gives the
// same names, and the rewritten values downstream keep theirs.
//
// Whether a rewrite is *worth* it is not the rule's business: the search
// (core/search/substitution_search.h) costs each rewritten graph by the
// op-level DP over measured candidates. Whether it is *right* is checked on
// every application (core/rewrite/equivalence_check.h).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/graph.h"

namespace collage {

// One place where a rule applies: the rule's name and its source nodes.
struct SubstitutionSite {
  std::string rule;
  std::vector<std::string> nodes;  // source nodes, by name, in the rule's order

  // "merge-siblings at q_proj, k_proj, v_proj" (long lists shortened).
  std::string toString() const;
  bool operator==(const SubstitutionSite&) const = default;
  bool operator<(const SubstitutionSite& o) const {
    return rule != o.rule ? rule < o.rule : nodes < o.nodes;
  }
};

// What applying a site did, for the equivalence check and the views.
struct RewriteEffect {
  std::vector<std::string> removed;  // source nodes gone from the graph
  std::vector<std::string> target;   // the nodes that now compute it (new or changed)
  // Every value the source computed that is read outside it (or is a graph
  // output): (its name before, the name of the value that holds it after).
  // The names are equal unless the rewrite removed an identity.
  std::vector<std::pair<std::string, std::string>> outputs;
};

class Substitution {
 public:
  virtual ~Substitution() = default;
  // "merge-siblings": what plans and notes call the rule.
  virtual std::string name() const = 0;
  // The source, the target and the condition, in a line or two, for docs
  // and `collage explain`.
  virtual std::string describe() const = 0;
  // Where the rule is written, "FILE:LINE:COLUMN" (a spec file's rule), or
  // "" (a C++ rule): notes about a wrong rule point there.
  virtual std::string origin() const { return ""; }
  // Every site where the condition holds on `graph`, in node order.
  virtual std::vector<SubstitutionSite> find(const Graph& graph) const = 0;
  // Rewrites `site` (one that find() returns on this graph) in place; the
  // graph is finalized again. Throws Error when the site does not hold.
  virtual RewriteEffect apply(Graph& graph, const SubstitutionSite& site) const = 0;
};

// The rules this build knows, in a fixed order.
const std::vector<std::unique_ptr<Substitution>>& standardSubstitutions();
// The rule of that name, C++ or from a spec file (substitution_spec_file.h), or nullptr.
const Substitution* findSubstitution(const std::string& name);

// ---- helpers for rules ----------------------------------------------------

// A node name not yet used in `graph`: `base`, else base#2, base#3, ...
std::string uniqueNodeName(const Graph& graph, const std::string& base);
// The same for value names.
std::string uniqueValueName(const Graph& graph, const std::string& base);
// The node of that name; Error naming the rule and the node otherwise.
NodeId siteNode(const Graph& graph, const SubstitutionSite& site, size_t i);
// Fills the attributes the op registry gives defaults for (as the importer does).
void fillDefaults(Node& node);
// Adds a one-output node whose output (named after `outputBase`, made
// unique) is typed by shape inference; returns that value.
ValueId addNodeWithOutput(Graph& graph, Node node, const std::string& outputBase);
// Makes every reader of `from` read `to` instead (graph not finalized).
void replaceUses(Graph& graph, ValueId from, ValueId to);
// True when a node holding a subgraph (If, Loop, Scan) reads `v`: its body
// refers to it by name, so such a value is never renamed away.
bool readBySubgraphOwner(const Graph& graph, ValueId v);

}  // namespace collage
