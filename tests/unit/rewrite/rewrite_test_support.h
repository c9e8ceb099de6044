// What the rewrite rules' tests share: finding a rule's sites, applying
// one checked, counting ops, and the property every rule keeps (the whole
// graphs compute the same outputs, under the same names, on random inputs).
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "core/ir/tensor_compare.h"
#include "core/ops/reference_executor.h"
#include "core/rewrite/equivalence_check.h"
#include "core/rewrite/substitution.h"
#include "tests/unit/test_support.h"

namespace collage::rewrite_test {

inline int countOp(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.op == op;
  return n;
}

inline std::vector<SubstitutionSite> sitesOf(const Graph& g, const std::string& rule) {
  return findSubstitution(rule)->find(g);
}

// The whole graphs compute the same outputs, under the same names.
inline void expectSameOutputs(const Graph& before, const Graph& after, uint64_t seed = 3) {
  ASSERT_EQ(before.outputs().size(), after.outputs().size());
  for (size_t i = 0; i < before.outputs().size(); ++i)
    EXPECT_EQ(before.value(before.outputs()[i]).name, after.value(after.outputs()[i]).name);
  const std::vector<Tensor> inputs = randomInputs(before, seed);
  const std::vector<Tensor> a = ReferenceExecutor(before).run(inputs);
  const std::vector<Tensor> b = ReferenceExecutor(after).run(inputs);
  for (size_t i = 0; i < a.size(); ++i) {
    const CompareResult r = compareTensors(b[i], a[i], Tolerance{1e-3, 1e-5});
    EXPECT_TRUE(r.ok) << "output " << i << ": " << r.message;
  }
}

// `site` applied and checked; the graph unchanged (and a failure) when it is refused.
inline Graph applyOne(const Graph& g, const SubstitutionSite& site) {
  std::string note;
  std::optional<Graph> after = applyChecked(g, site, &note);
  EXPECT_TRUE(after.has_value()) << note;
  return after ? *after : g;
}

}  // namespace collage::rewrite_test
