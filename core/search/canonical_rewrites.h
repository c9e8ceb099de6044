// Canonical rewrites: substitution rules that `collage optimize` applies by
// default, wherever they hold, before the op-level search, without costing
// them. A rule is canonical when it is exact (every site passes the
// equivalence check, as any substitution does) and never loses on any
// placement: it only removes work. Today one rule: cancel-transposes, which
// fires only where the graph loses Transposes (an exporter's NHWC stretches
// moved into the layout of their NCHW neighbours), so a model that has none
// of those sites is left exactly as given.
//
// The sites go into the plan as its substitutions (savedNs not known: they
// were not costed), so `collage run --plan` replays them like the
// substitution search's.
#pragma once

#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/rewrite/equivalence_check.h"
#include "core/search/substitution_search.h"

namespace collage {

// The names of the canonical rules, in the order they are applied.
const std::vector<std::string>& canonicalRuleNames();

// `model` with every canonical rule applied wherever it holds, round after
// round until none is found (each site checked: one that fails is noted
// and skipped). The result's graph/applied/steps as searchSubstitutions
// fills them (one step per rule that applied, costs unknown); the model
// itself, with no steps, when nothing applied. `ranges` (optional): the
// model's value ranges, for the checks.
SubstitutionSearchResult applyCanonicalRewrites(const Graph& model, const ValueRanges* ranges = nullptr);

// "canonical rewrites: cancel-transposes at 1 site(s) (Transposes 9 -> 2)",
// or "canonical rewrites: none apply"; notes on their own lines.
std::string describeCanonicalRewrites(const Graph& model, const SubstitutionSearchResult& result);

}  // namespace collage
