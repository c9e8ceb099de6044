#include "core/search/canonical_rewrites.h"

#include <algorithm>
#include <set>

#include "core/rewrite/substitution.h"

namespace collage {

const std::vector<std::string>& canonicalRuleNames() {
  static const std::vector<std::string> names{"cancel-transposes"};
  return names;
}

SubstitutionSearchResult applyCanonicalRewrites(const Graph& model, const ValueRanges* ranges) {
  SubstitutionSearchResult result;
  result.graph = model;
  for (const std::string& name : canonicalRuleNames()) {
    const Substitution* rule = findSubstitution(name);
    if (!rule) continue;  // not registered in this build: nothing to apply
    SubstitutionStep step{name, {}, kUnknownCost, kUnknownCost};
    std::set<std::string> refused;  // sites whose check failed: not tried again
    // A site's rewrite can make another (a region joined to the next); the
    // rule strictly removes Transposes, so the rounds end; 100 is a guard.
    for (int round = 0; round < 100; ++round) {
      bool any = false;
      for (const SubstitutionSite& site : rule->find(result.graph)) {
        if (refused.count(site.toString())) continue;
        // An earlier site of this round may have used this one's nodes.
        const std::vector<SubstitutionSite> now = rule->find(result.graph);
        if (std::find(now.begin(), now.end(), site) == now.end()) continue;
        std::string note;
        ++result.checks;
        std::optional<Graph> after = applyChecked(result.graph, site, &note, nullptr, ranges);
        if (!after) {
          refused.insert(site.toString());
          result.notes.push_back(note);
          continue;
        }
        result.graph = std::move(*after);
        step.sites.push_back(site);
        result.applied.push_back(site);
        any = true;
      }
      if (!any) break;
    }
    if (!step.sites.empty()) result.steps.push_back(std::move(step));
  }
  return result;
}

std::string describeCanonicalRewrites(const Graph& model, const SubstitutionSearchResult& result) {
  const auto transposes = [](const Graph& g) {
    return std::count_if(g.nodes().begin(), g.nodes().end(), [](const Node& n) { return n.op == "Transpose"; });
  };
  std::string text = "canonical rewrites: ";
  if (result.steps.empty()) text += "none apply";
  for (size_t i = 0; i < result.steps.size(); ++i)
    text += (i ? ", " : "") + result.steps[i].rule + " at " + std::to_string(result.steps[i].sites.size()) +
            " site(s)";
  if (!result.steps.empty())
    text += " (Transposes " + std::to_string(transposes(model)) + " -> " + std::to_string(transposes(result.graph)) +
            "; off with --no-canonical-rewrites)";
  for (const std::string& n : result.notes) text += "\n  note: " + n;
  return text;
}

}  // namespace collage
