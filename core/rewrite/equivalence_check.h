// Every rewrite is checked before it is kept: the source nodes and the
// target nodes are cut out of the graphs before and after (with the model's
// shapes and constants), run on the same inputs with the reference
// executor, and each value the rewrite replaced must match (ONNX's test
// tolerance). Only the rewritten region runs, so the check costs a few
// kernels even on a full-size model. A site that fails is not applied, and
// the note says which rule (a spec rule's FILE:LINE:COLUMN), where, and the
// input values that tell the two apart: never a wrong plan.
//
// The inputs are not only uniform [-1, 1]: a rule that holds there and
// nowhere else (Clip(min=-6, max=6) -> its input, Relu6 -> Relu) would pass.
// Each check also runs the region on
//  - values just beyond and around every float bound the source nodes hold
//    (their float attributes, their small float constants: Clip's min/max),
//  - the range each input value really took in a reference run of the
//    model the user gave (ValueRanges, when the caller has them),
//  - large magnitudes, uniform in [-1e3, 1e3] and [-1e4, 1e4];
// compared there with an absolute floor scaled to the output's largest
// value (rounding grows with the magnitude; a changed value does more).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/rewrite/substitution.h"

namespace collage {

// The sub-graph of `graph` made of the named nodes: the values they read
// from outside become inputs (constants stay constants), `outputs` (value
// names) its outputs. Error for an unknown name.
Graph extractRegion(const Graph& graph, const std::vector<std::string>& nodes,
                    const std::vector<std::string>& outputs);

// The range [lo, hi] a float value took in a reference run, by value name.
struct ValueRange {
  double lo = 0, hi = 0;
};
using ValueRanges = std::map<std::string, ValueRange>;
// The ranges of the float values named `values` (names the graph lacks, or
// non-float values, skipped; NaN and inf ignored) when `graph` runs on
// `inputs` with the reference executor; `outputs` (optional) receives the
// graph's outputs of the same run, in graph.outputs() order.
ValueRanges observeValueRanges(const Graph& graph, const std::vector<Tensor>& inputs,
                               const std::vector<std::string>& values, std::vector<Tensor>* outputs = nullptr);
// The values the source nodes of `sites` read (what a check draws inputs
// for): the names observeValueRanges needs.
std::vector<std::string> siteInputValues(const Graph& graph, const std::vector<SubstitutionSite>& sites);

// "" when the rewrite from `before` (where `site` held) to `after` (with
// `effect`) computes the same values on every trial's inputs (above); else
// why, with the counterexample: the trial, the output element that differs
// and the input values there. `ranges` (optional): the model's value ranges.
std::string checkRewrite(const Graph& before, const Graph& after, const SubstitutionSite& site,
                         const RewriteEffect& effect, const ValueRanges* ranges = nullptr);

// What a check's verdict depends on: the rule, and each source node's op,
// attributes, inputs (a constant by its type and contents, never by its
// name: two branches of a search can each make a different constant of one
// name) and output types. Equal keys, the same verdict.
std::string rewriteCheckKey(const Graph& graph, const SubstitutionSite& site);

// "FILE:LINE:COLUMN: " for a rule from a spec file (where it is written;
// a plan's carried rule: the plan and its substitution_rules[i]), "" for a
// C++ rule: notes about a rule start with it.
std::string ruleOrigin(const Substitution& rule);

// `graph` with `site` applied, when the rule applies and the check passes;
// else nothing, with `note` saying why ("merge-siblings at a, b: output 'y'
// differs: ..."). `effect` (optional) receives what the rewrite did.
std::optional<Graph> applyChecked(const Graph& graph, const SubstitutionSite& site, std::string* note,
                                  RewriteEffect* effect = nullptr, const ValueRanges* ranges = nullptr);

// Re-applies `sites` in order (a plan's substitutions on its original
// model), each checked; `effects` (optional) receives what each did, one per
// site. Error naming the substitution's position, rule and nodes when a rule
// is unknown, a site does not hold on this graph, or a check fails.
// `ranges` (optional): the model's value ranges, for the checks.
Graph replaySubstitutions(const Graph& graph, const std::vector<SubstitutionSite>& sites,
                          std::vector<RewriteEffect>* effects = nullptr, const ValueRanges* ranges = nullptr);

// The nodes of `rewritten` that a replay created or changed, each with the
// index of the site that last did (what the views mark as rewritten).
std::map<std::string, size_t> rewrittenNodeSites(const Graph& rewritten,
                                                 const std::vector<RewriteEffect>& effects);

// A list of sites as JSON, [{"rule": ..., "nodes": [...]}, ...], for the
// measurement worker of a rewritten graph (`measure-worker --substitutions`).
std::string sitesToJson(const std::vector<SubstitutionSite>& sites);
// Error starting with `displayPath` for text that is not such a list.
std::vector<SubstitutionSite> sitesFromJson(const std::string& text, const std::string& displayPath);

}  // namespace collage
