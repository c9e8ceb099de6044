// Every rewrite is checked before it is kept: the source nodes and the
// target nodes are cut out of the graphs before and after (with the model's
// shapes and constants), run on the same random inputs with the reference
// executor, and each value the rewrite replaced must match (ONNX's test
// tolerance). Only the rewritten region runs, so the check costs a few
// kernels even on a full-size model. A site that fails is not applied, and
// the note says which rule and where: never a wrong plan.
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

// "" when the rewrite from `before` (where `site` held) to `after` (with
// `effect`) computes the same values on `trials` random inputs; else why.
std::string checkRewrite(const Graph& before, const Graph& after, const SubstitutionSite& site,
                         const RewriteEffect& effect, int trials = 2);

// `graph` with `site` applied, when the rule applies and the check passes;
// else nothing, with `note` saying why ("merge-siblings at a, b: output 'y'
// differs: ..."). `effect` (optional) receives what the rewrite did.
std::optional<Graph> applyChecked(const Graph& graph, const SubstitutionSite& site, std::string* note,
                                  RewriteEffect* effect = nullptr);

// Re-applies `sites` in order (a plan's substitutions on its original
// model), each checked; `effects` (optional) receives what each did, one per
// site. Error naming the substitution's position, rule and nodes when a rule
// is unknown, a site does not hold on this graph, or a check fails.
Graph replaySubstitutions(const Graph& graph, const std::vector<SubstitutionSite>& sites,
                          std::vector<RewriteEffect>* effects = nullptr);

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
