// The canonical rewrites (core/search/canonical_rewrites.h): an NHWC export
// loses its exporter's Transposes before any search, the sites replay into
// the same graph (what a plan's substitutions do), and a model with no such
// site is left exactly as given: the zoo models, which never record one.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/onnx/onnx_import.h"
#include "core/rewrite/equivalence_check.h"
#include "core/search/canonical_rewrites.h"
#include "core/search/substitution_search.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/rewrite/rewrite_test_support.h"

namespace collage {
namespace {

using rewrite_test::countOp;
using rewrite_test::expectSameOutputs;

const Ints kToNchw{0, 3, 1, 2}, kToNhwc{0, 2, 3, 1};

// A conv block as tf2onnx writes one in an NHWC model.
ValueId nhwcBlock(GraphBuilder& b, ValueId x, int64_t c) {
  const ValueId t = b.op("Transpose", {x}, attrs({{"perm", kToNchw}}));
  const ValueId y = b.op("Conv", {t, b.constant({c, c, 3, 3}), b.constant({c})},
                         attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}));
  return b.op("Transpose", {b.op("Relu", {y})}, attrs({{"perm", kToNhwc}}));
}

// Three blocks with NHWC skip additions between them: 6 Transposes.
Graph exportedNhwc() {
  GraphBuilder b;
  const ValueId x = b.input({1, 5, 5, 4});
  const ValueId s1 = b.op("Relu", {b.op("Add", {nhwcBlock(b, x, 4), x})});
  const ValueId s2 = b.op("Add", {nhwcBlock(b, s1, 4), s1});
  b.finish(nhwcBlock(b, s2, 4));
  return b.graph();
}

TEST(CanonicalRewrites, AnNhwcExportLosesTheTransposesThatCanVanish) {
  const Graph g = exportedNhwc();
  ASSERT_EQ(countOp(g, "Transpose"), 6);
  const SubstitutionSearchResult r = applyCanonicalRewrites(g);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].rule, "cancel-transposes");
  EXPECT_FALSE(r.applied.empty());
  // The input's and the output's stay: the graph's input and output are NHWC.
  EXPECT_EQ(countOp(r.graph, "Transpose"), 2);
  EXPECT_TRUE(r.notes.empty());
  expectSameOutputs(g, r.graph);
  // What `collage run --plan` does with the plan's substitutions.
  EXPECT_EQ(canonicalGraphKey(replaySubstitutions(g, r.applied)), canonicalGraphKey(r.graph));
  EXPECT_NE(describeCanonicalRewrites(g, r).find("Transposes 6 -> 2"), std::string::npos)
      << describeCanonicalRewrites(g, r);
}

TEST(CanonicalRewrites, AGraphWithNoSiteIsLeftAsGiven) {
  GraphBuilder b;
  const ValueId x = b.input({1, 2, 3, 4});
  // A Transpose that only moves (its region is read by a Softmax): no site.
  const ValueId t = b.op("Transpose", {x}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  b.finish(b.op("Softmax", {b.op("Relu", {t})}));
  const SubstitutionSearchResult r = applyCanonicalRewrites(b.graph());
  EXPECT_TRUE(r.steps.empty());
  EXPECT_TRUE(r.applied.empty());
  EXPECT_EQ(canonicalGraphKey(r.graph), canonicalGraphKey(b.graph()));
  EXPECT_EQ(describeCanonicalRewrites(b.graph(), r), "canonical rewrites: none apply");
}

// Every zoo model: those with no exporter Transposes record no substitution
// and keep their graph (so their plans are what they were); one that did
// would lose Transposes and compute the same outputs.
TEST(CanonicalRewrites, ZooModelsWithoutExporterTransposesAreUnaffected) {
  int models = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(COLLAGE_SOURCE_DIR) + "/resources/models")) {
    if (entry.path().extension() != ".onnx") continue;
    SCOPED_TRACE(entry.path().filename().string());
    Graph g;
    try {
      g = importOnnx(entry.path().string());
    } catch (const Error&) {
      continue;  // a model this test cannot bind (symbolic shapes): not its business
    }
    ++models;
    const SubstitutionSearchResult r = applyCanonicalRewrites(g);
    if (r.applied.empty()) {
      EXPECT_TRUE(r.steps.empty());
      EXPECT_EQ(canonicalGraphKey(r.graph), canonicalGraphKey(g));
      continue;
    }
    EXPECT_LT(countOp(r.graph, "Transpose"), countOp(g, "Transpose"));
    expectSameOutputs(g, r.graph);
  }
  EXPECT_GT(models, 10);
}

}  // namespace
}  // namespace collage
