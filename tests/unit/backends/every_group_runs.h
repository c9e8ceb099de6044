// The check both op-library backends run over their test zoo: every group
// the spec's patterns match and the backend's pattern rule generates
// compiles and matches the reference. The rule asks the lowering, so nothing
// it generates may be refused; every pattern must match somewhere.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/measure/kernel_check.h"
#include "core/patterns/backend_spec.h"
#include "core/patterns/pattern_generator.h"
#include "core/patterns/pattern_matcher.h"

namespace collage {

struct GroupCounts {
  int checked = 0;  // pattern matches plus generated groups
  int fused = 0;    // generated groups of two or more nodes
};

inline GroupCounts expectEveryGroupRuns(Backend& backend, const BackendSpec& spec,
                                        const PatternRule& rule,
                                        const std::vector<const Graph*>& graphs) {
  GroupCounts counts;
  auto check = [&](const Graph& g, const NodeSet& nodes, const std::string& what) {
    ++counts.checked;
    KernelCheckResult r = checkKernelAgainstReference(backend, g, nodes, 11);
    EXPECT_TRUE(r.compiled) << what << ": " << r.refusal;
    EXPECT_TRUE(!r.compiled || r.ok) << what << ": " << r.message;
  };
  for (const PatternEntry& p : spec.patterns) {
    SCOPED_TRACE(p.name + " = " + p.text);
    int matched = 0;
    for (const Graph* g : graphs)
      for (const PatternMatch& m : findMatches(p.pattern, *g)) {
        ++matched;
        check(*g, m.nodes, m.toString(*g));
      }
    EXPECT_GT(matched, 0) << "no graph of the zoo has this pattern";
  }
  for (const Graph* g : graphs)
    for (const GeneratedGroup& gg : PatternGenerator(*g).generate(rule, spec.limits)) {
      if (gg.nodes.count() > 1) ++counts.fused;
      check(*g, gg.nodes, gg.toString(*g));
    }
  return counts;
}

}  // namespace collage
