// The substitution rules: where each applies, what it makes, and the
// property every rule must keep: the rewritten graph computes the same
// outputs (reference executor, random inputs), on hand-made graphs, random
// graphs and the small zoo models.
#include <gtest/gtest.h>

#include <random>

#include "core/ir/tensor_compare.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "core/plan/plan.h"
#include "core/rewrite/equivalence_check.h"
#include "core/rewrite/substitution.h"
#include "core/search/substitution_search.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/rewrite/rewrite_test_support.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using rewrite_test::applyOne;
using rewrite_test::countOp;
using rewrite_test::expectSameOutputs;
using rewrite_test::sitesOf;

using test_support::expectError;





// Three projections of one input, each with a bias Add, feeding a sum.
Graph qkvGraph(bool withBias) {
  GraphBuilder b;
  const ValueId x = b.input({1, 16, 32});
  std::vector<ValueId> ys;
  for (int i = 0; i < 3; ++i) {
    ValueId y = b.op("MatMul", {x, b.constant({32, 24})});
    if (withBias) y = b.op("Add", {y, b.constant({24})});
    ys.push_back(y);
  }
  const ValueId s = b.op("Add", {b.op("Add", {ys[0], ys[1]}), ys[2]});
  b.finish(s);
  return b.graph();
}

TEST(MergeSiblings, MatMulsWithBiasBecomeOneMatMulAddAndSplit) {
  const Graph g = qkvGraph(true);
  const auto sites = sitesOf(g, "merge-siblings");
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].nodes.size(), 6u);  // 3 MatMuls, then their 3 Adds
  const Graph after = applyOne(g, sites[0]);
  EXPECT_EQ(countOp(after, "MatMul"), 1);
  EXPECT_EQ(countOp(after, "Split"), 1);
  EXPECT_EQ(countOp(after, "Add"), 3);  // the merged bias + the two sums
  expectSameOutputs(g, after);
}

TEST(MergeSiblings, MatMulsWithoutBias) {
  const Graph g = qkvGraph(false);
  const auto sites = sitesOf(g, "merge-siblings");
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].nodes.size(), 3u);
  const Graph after = applyOne(g, sites[0]);
  EXPECT_EQ(countOp(after, "MatMul"), 1);
  expectSameOutputs(g, after);
}

TEST(MergeSiblings, GemmsWithBiasAndTransB) {
  GraphBuilder b;
  const ValueId x = b.input({4, 16});
  const ValueId y1 = b.op("Gemm", {x, b.constant({8, 16}), b.constant({8})}, attrs({{"transB", int64_t{1}}}));
  const ValueId y2 = b.op("Gemm", {x, b.constant({12, 16}), b.constant({12})}, attrs({{"transB", int64_t{1}}}));
  const ValueId y3 = b.op("Gemm", {x, b.constant({16, 5})});  // another kind: no bias, no transB
  const ValueId c = b.op("Concat", {y1, y2, y3}, attrs({{"axis", int64_t{1}}}));
  b.finish(c);
  const Graph& g = b.graph();
  const auto sites = sitesOf(g, "merge-siblings");
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].nodes.size(), 2u);
  const Graph after = applyOne(g, sites[0]);
  EXPECT_EQ(countOp(after, "Gemm"), 2);
  expectSameOutputs(g, after);
}

TEST(MergeSiblings, ConvsWithBias) {
  GraphBuilder b;
  const ValueId x = b.input({1, 8, 10, 10});
  const AttributeMap a = attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}});
  const ValueId y1 = b.op("Conv", {x, b.constant({4, 8, 3, 3}), b.constant({4})}, a);
  const ValueId y2 = b.op("Conv", {x, b.constant({6, 8, 3, 3}), b.constant({6})}, a);
  b.finish(b.op("Concat", {y1, y2}, attrs({{"axis", int64_t{1}}})));
  const Graph& g = b.graph();
  const auto sites = sitesOf(g, "merge-siblings");
  ASSERT_EQ(sites.size(), 1u);
  const Graph after = applyOne(g, sites[0]);
  EXPECT_EQ(countOp(after, "Conv"), 1);
  expectSameOutputs(g, after);
}

TEST(MergeSiblings, ElementwiseFollowersRunBeforeTheSplit) {
  GraphBuilder b;
  const ValueId x = b.input({1, 8, 10, 10});
  const ValueId y1 = b.op("Relu", {b.op("Conv", {x, b.constant({4, 8, 1, 1}), b.constant({4})})});
  const ValueId y2 = b.op("Relu", {b.op("Conv", {x, b.constant({6, 8, 1, 1}), b.constant({6})})});
  const ValueId y3 = b.op("Conv", {x, b.constant({5, 8, 1, 1}), b.constant({5})});  // no Relu: not merged
  b.finish(b.op("Concat", {y1, y2, y3}, attrs({{"axis", int64_t{1}}})));
  const Graph& g = b.graph();
  const auto sites = sitesOf(g, "merge-siblings");
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].nodes.size(), 4u);
  const Graph after = applyOne(g, sites[0]);
  EXPECT_EQ(countOp(after, "Conv"), 2);
  EXPECT_EQ(countOp(after, "Relu"), 1);
  expectSameOutputs(g, after);
}

TEST(MergeSiblings, NotWhenWeightsAreInputsOrAttributesDiffer) {
  GraphBuilder b;
  const ValueId x = b.input({1, 8, 10, 10});
  const ValueId w = b.input({4, 8, 1, 1});  // not constant
  const ValueId y1 = b.op("Conv", {x, w});
  const ValueId y2 = b.op("Conv", {x, b.constant({4, 8, 1, 1})});
  const ValueId y3 = b.op("Conv", {x, b.constant({4, 8, 1, 1})}, attrs({{"strides", Ints{2, 2}}}));
  const ValueId s = b.op("Add", {y1, y2});
  b.finish(b.op("Concat", {s, b.op("Resize", {y3}, attrs({{"scales", std::vector<float>{1, 1, 2, 2}}}))},
                attrs({{"axis", int64_t{1}}})));
  EXPECT_TRUE(sitesOf(b.graph(), "merge-siblings").empty());
}

TEST(EnlargeConvKernel, OneByOneGrowsToThreeByThreeThenMerges) {
  GraphBuilder b;
  const ValueId x = b.input({1, 4, 8, 8});
  const ValueId y1 = b.op("Conv", {x, b.constant({3, 4, 1, 1})});
  const ValueId y3 = b.op("Conv", {x, b.constant({5, 4, 3, 3})},
                          attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}));
  b.finish(b.op("Concat", {y1, y3}, attrs({{"axis", int64_t{1}}})));
  const Graph& g = b.graph();
  EXPECT_TRUE(sitesOf(g, "merge-siblings").empty());
  const auto sites = sitesOf(g, "enlarge-conv-kernel");
  ASSERT_EQ(sites.size(), 1u);
  const Graph enlarged = applyOne(g, sites[0]);
  expectSameOutputs(g, enlarged);
  const auto merges = sitesOf(enlarged, "merge-siblings");
  ASSERT_EQ(merges.size(), 1u);
  const Graph merged = applyOne(enlarged, merges[0]);
  EXPECT_EQ(countOp(merged, "Conv"), 1);
  expectSameOutputs(g, merged);
}

TEST(CollapseTransposes, ChainComposesAndInverseVanishes) {
  GraphBuilder b;
  const ValueId x = b.input({2, 3, 4, 5});
  const ValueId t1 = b.op("Transpose", {x}, attrs({{"perm", Ints{0, 2, 1, 3}}}));
  const ValueId t2 = b.op("Transpose", {t1}, attrs({{"perm", Ints{3, 1, 2, 0}}}));
  const ValueId r = b.op("Relu", {t2});
  const ValueId u1 = b.op("Transpose", {r}, attrs({{"perm", Ints{1, 0, 2, 3}}}));
  const ValueId u2 = b.op("Transpose", {u1}, attrs({{"perm", Ints{1, 0, 2, 3}}}));
  b.finish(b.op("Relu", {u2}));
  Graph g = b.graph();
  const auto sites = sitesOf(g, "collapse-transposes");
  ASSERT_EQ(sites.size(), 2u);
  Graph after = applyOne(g, sites[0]);
  EXPECT_EQ(countOp(after, "Transpose"), 3);
  after = applyOne(after, sitesOf(after, "collapse-transposes").at(0));
  EXPECT_EQ(countOp(after, "Transpose"), 1);
  expectSameOutputs(g, after);
}

TEST(CollapseTransposes, KeepsAGraphOutputAndASharedFirst) {
  GraphBuilder b;
  const ValueId x = b.input({2, 3});
  const ValueId t1 = b.op("Transpose", {x}, attrs({{"perm", Ints{1, 0}}}));
  const ValueId t2 = b.op("Transpose", {t1}, attrs({{"perm", Ints{1, 0}}}));
  b.finish(t2);  // the identity's output is the graph's output: stays
  EXPECT_TRUE(sitesOf(b.graph(), "collapse-transposes").empty());
}

TEST(CollapseReshapes, ChainBecomesOneReshapeAndIdentityVanishes) {
  GraphBuilder b;
  const ValueId x = b.input({2, 12});
  const ValueId r1 = b.op("Reshape", {x}, attrs({{"shape", Ints{2, 3, 4}}}));
  const ValueId r2 = b.op("Unsqueeze", {r1}, attrs({{"axes", Ints{0}}}));
  const ValueId a = b.op("Relu", {r2});
  const ValueId r3 = b.op("Flatten", {a}, attrs({{"axis", int64_t{2}}}));
  const ValueId r4 = b.op("Reshape", {r3}, attrs({{"shape", Ints{1, 2, 3, 4}}}));
  b.finish(b.op("Relu", {r4}));
  Graph g = b.graph();
  const auto sites = sitesOf(g, "collapse-reshapes");
  ASSERT_EQ(sites.size(), 2u);
  Graph after = g;
  while (!sitesOf(after, "collapse-reshapes").empty()) after = applyOne(after, sitesOf(after, "collapse-reshapes")[0]);
  EXPECT_EQ(countOp(after, "Reshape") + countOp(after, "Unsqueeze") + countOp(after, "Flatten"), 1);
  expectSameOutputs(g, after);
}

// Merged projections then per-head layout, as attention has it.
Graph splitHeadsGraph() {
  GraphBuilder b;
  const ValueId x = b.input({1, 16, 192});
  const ValueId q = b.input({1, 4, 16, 16});
  ValueId outs[3];
  b.op("Split", {x}, attrs({{"axis", int64_t{2}}, {"split", Ints{64, 64, 64}}}), 3);
  Graph& g = b.graph();
  const Node& split = g.nodes().back();
  const std::vector<ValueId> parts = split.outputs;
  const Ints perms[3] = {{0, 2, 1, 3}, {0, 2, 3, 1}, {0, 2, 1, 3}};
  for (int i = 0; i < 3; ++i) {
    const ValueId r = b.op("Reshape", {parts[static_cast<size_t>(i)]}, attrs({{"shape", Ints{1, 16, 4, 16}}}));
    outs[i] = b.op("Transpose", {r}, attrs({{"perm", perms[i]}}));
  }
  const ValueId scores = b.op("MatMul", {b.op("Add", {outs[0], q}), outs[1]});
  b.finish(b.op("MatMul", {scores, outs[2]}));
  return b.graph();
}

TEST(SinkSplit, ReshapesThenTransposesMoveAboveTheSplit) {
  const Graph g = splitHeadsGraph();
  auto sites = sitesOf(g, "sink-split");
  ASSERT_EQ(sites.size(), 1u);
  const Graph once = applyOne(g, sites[0]);
  EXPECT_EQ(countOp(once, "Reshape"), 1);
  expectSameOutputs(g, once);
  sites = sitesOf(once, "sink-split");
  ASSERT_EQ(sites.size(), 1u);
  const Graph twice = applyOne(once, sites[0]);
  EXPECT_EQ(countOp(twice, "Transpose"), 2);  // the shared one, and K's rest
  expectSameOutputs(g, twice);
}

TEST(SlicesToSplit, SlicesTilingAnAxisBecomeOneSplit) {
  GraphBuilder b;
  const ValueId x = b.input({16, 1, 24});
  const ValueId s1 = b.op("Slice", {x}, attrs({{"starts", Ints{8}}, {"ends", Ints{16}}, {"axes", Ints{-1}}}));
  const ValueId s0 = b.op("Slice", {x}, attrs({{"starts", Ints{0}}, {"ends", Ints{8}}, {"axes", Ints{2}}}));
  const ValueId s2 = b.op("Slice", {x}, attrs({{"starts", Ints{16}}, {"ends", Ints{100}}, {"axes", Ints{2}}}));
  const ValueId gap = b.op("Slice", {x}, attrs({{"starts", Ints{0}}, {"ends", Ints{4}}, {"axes", Ints{0}}}));
  b.graph().markOutput(b.op("Relu", {gap}));
  b.finish(b.op("Add", {b.op("Mul", {s0, s1}), s2}));
  const Graph& g = b.graph();
  const auto sites = sitesOf(g, "slices-to-split");
  ASSERT_EQ(sites.size(), 1u);  // axis 0 has one slice only: not a tiling
  EXPECT_EQ(sites[0].nodes.size(), 3u);
  const Graph after = applyOne(g, sites[0]);
  EXPECT_EQ(countOp(after, "Slice"), 1);
  EXPECT_EQ(countOp(after, "Split"), 1);
  expectSameOutputs(g, after);
}

// A rule that claims a Relu is a Sigmoid: the check must refuse it.
class WrongRule : public Substitution {
 public:
  std::string name() const override { return "test-wrong"; }
  std::string describe() const override { return "Relu -> Sigmoid (wrong)"; }
  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> s;
    for (const Node& n : g.nodes())
      if (n.op == "Relu") s.push_back({name(), {n.name}});
    return s;
  }
  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    Node& n = g.mutableNode(siteNode(g, site, 0));
    n.op = "Sigmoid";
    RewriteEffect e;
    e.target = {n.name};
    e.outputs.emplace_back(g.value(n.outputs[0]).name, g.value(n.outputs[0]).name);
    g.finalize();
    return e;
  }
};

TEST(EquivalenceCheck, AWrongRewriteIsDroppedWithTheRuleAndNode) {
  GraphBuilder b;
  const ValueId x = b.input({4, 4});
  b.finish(b.op("Relu", {x}));
  const Graph& g = b.graph();
  WrongRule wrong;
  const SubstitutionSite site = wrong.find(g).at(0);
  Graph after = g;
  const RewriteEffect effect = wrong.apply(after, site);
  const std::string why = checkRewrite(g, after, site, effect);
  EXPECT_NE(why.find("differs"), std::string::npos) << why;

  // In the search, the wrong rule is never applied and its note names it.
  SubstitutionSearchOptions o;
  o.rules = {&wrong};
  const auto r = searchSubstitutions(g, [](const Graph& gr, const auto&) { return Cost(gr.numNodes()); }, o);
  EXPECT_TRUE(r.applied.empty());
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes[0].find("test-wrong at " + site.nodes[0]), std::string::npos) << r.notes[0];
  EXPECT_NE(r.notes[0].find("not equivalent"), std::string::npos) << r.notes[0];
}

// The search's "seen" set keys graphs by what they compute, not by names:
// a merge undone by an unmerge (new names, the same weight slices) is the
// graph it started from, so the search does not cost it again; a real change
// is a new key.
TEST(CanonicalGraphKey, AMergeUndoneByAnUnmergeIsTheGraphSeenBefore) {
  const Graph g = qkvGraph(true);
  const Graph merged = applyOne(g, sitesOf(g, "merge-siblings").at(0));
  EXPECT_NE(canonicalGraphKey(merged), canonicalGraphKey(g));
  const auto unmerges = sitesOf(merged, "unmerge-split");
  ASSERT_FALSE(unmerges.empty());
  const Graph back = applyOne(merged, unmerges[0]);
  EXPECT_NE(back.node(0).name + back.node(1).name, g.node(0).name + g.node(1).name);
  EXPECT_EQ(canonicalGraphKey(back), canonicalGraphKey(g));
  // A constant with other contents is another graph, whatever its name.
  Graph scaled = g;
  for (ValueId v = 0; v < scaled.numValues(); ++v)
    if (scaled.value(v).isConstant() && scaled.value(v).constant->numElements() > 1) {
      Tensor t = scaled.value(v).constant->clone();
      static_cast<float*>(t.raw())[0] += 1.0f;
      scaled.mutableValue(v).constant = std::move(t);
      break;
    }
  EXPECT_NE(canonicalGraphKey(scaled), canonicalGraphKey(g));
}

// Relu(Mul(x, c)) -> Mul(Relu(x), c): right for c >= 0 only, so its verdict
// depends on the constant's contents.
class ReluBeforeScale : public Substitution {
 public:
  std::string name() const override { return "test-relu-before-scale"; }
  std::string describe() const override { return "Relu(Mul(x, c)) -> Mul(Relu(x), c)"; }
  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> s;
    for (const Node& n : g.nodes()) {
      if (n.op != "Relu") continue;
      const NodeId p = g.value(n.inputs[0]).producer;
      if (p != kNoNode && g.node(p).op == "Mul" && g.value(g.node(p).inputs[1]).isConstant())
        s.push_back({name(), {g.node(p).name, n.name}});
    }
    return s;
  }
  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    Node& mul = g.mutableNode(siteNode(g, site, 0));
    Node& relu = g.mutableNode(siteNode(g, site, 1));
    const ValueId x = mul.inputs[0], c = mul.inputs[1];
    mul.op = "Relu";
    mul.inputs = {x};
    relu.op = "Mul";
    relu.inputs = {mul.outputs[0], c};
    RewriteEffect e;
    e.target = {mul.name, relu.name};
    e.outputs.emplace_back(g.value(relu.outputs[0]).name, g.value(relu.outputs[0]).name);
    g.finalize();
    return e;
  }
};

// Mul(Mul(x, a), b) -> Mul(Mul(x, -a), -b), the constants rewritten in
// place under their names: right, and it makes constants of known names
// with other contents (as two branches of a search can).
class NegateScalePair : public Substitution {
 public:
  std::string name() const override { return "test-negate-scale-pair"; }
  std::string describe() const override { return "Mul(Mul(x, a), b) -> Mul(Mul(x, -a), -b)"; }
  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> s;
    for (const Node& n : g.nodes()) {
      if (n.op != "Mul" || !g.value(n.inputs[1]).isConstant()) continue;
      const NodeId p = g.value(n.inputs[0]).producer;
      if (p != kNoNode && g.node(p).op == "Mul" && g.value(g.node(p).inputs[1]).isConstant())
        s.push_back({name(), {g.node(p).name, n.name}});
    }
    return s;
  }
  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    RewriteEffect e;
    for (size_t i = 0; i < 2; ++i) {
      const Node& n = g.node(siteNode(g, site, i));
      const ValueId c = n.inputs[1];
      Tensor t = g.value(c).constant->clone();
      for (int64_t k = 0; k < t.numElements(); ++k) t.data<float>()[k] = -t.data<float>()[k];
      g.mutableValue(c).constant = std::move(t);
      e.target.push_back(n.name);
    }
    const Node& last = g.node(siteNode(g, site, 1));
    e.outputs.emplace_back(g.value(last.outputs[0]).name, g.value(last.outputs[0]).name);
    g.finalize();
    return e;
  }
};

// x -> Mul(a) -> Mul(b) -> Relu -> Sigmoid, a and b scalars.
Graph scaledReluGraph(float a, float b) {
  GraphBuilder builder;
  const ValueId x = builder.input({4, 8});
  const ValueId m = builder.op("Mul", {builder.op("Mul", {x, builder.scalar(a)}), builder.scalar(b)});
  builder.finish(builder.op("Sigmoid", {builder.op("Relu", {m})}));
  return builder.graph();
}

// Graph keys and check verdicts are keyed by what a constant holds, never by
// its name: a verdict for b = 3 is not one for b = -3.
TEST(CanonicalGraphKey, ConstantsOfOneNameWithOtherContentsDoNotShareAVerdict) {
  const Graph positive = scaledReluGraph(2, 3), negative = scaledReluGraph(-2, -3);
  // The same names (the builder's), other contents.
  for (ValueId v = 0; v < positive.numValues(); ++v) ASSERT_EQ(positive.value(v).name, negative.value(v).name);
  ConstantHashes hashes;  // one per search
  EXPECT_NE(canonicalGraphKey(positive, &hashes), canonicalGraphKey(negative, &hashes));
  ReluBeforeScale swap;
  const SubstitutionSite site = swap.find(positive).at(0);
  ASSERT_EQ(swap.find(negative).at(0), site);
  EXPECT_NE(rewriteCheckKey(positive, site), rewriteCheckKey(negative, site));
  for (const Graph* g : {&positive, &negative}) {
    Graph after = *g;
    const RewriteEffect effect = swap.apply(after, site);
    EXPECT_EQ(checkRewrite(*g, after, site, effect).empty(), g == &positive);
  }
  // In a search: the swap checked right where b = 3 is checked again after
  // the pair is negated (b = -3, the same name), and dropped there. Every
  // graph costed computes what the start does.
  NegateScalePair negate;
  SubstitutionSearchOptions o;
  o.rules = {&negate, &swap};
  const std::vector<Tensor> inputs = randomInputs(positive, 11);
  const std::vector<Tensor> want = ReferenceExecutor(positive).run(inputs);
  int wrong = 0, costed = 0;
  const auto r = searchSubstitutions(
      positive,
      [&](const Graph& g, const std::vector<SubstitutionSite>&) {
        ++costed;
        const std::vector<Tensor> got = ReferenceExecutor(g).run(inputs);
        wrong += !compareTensors(got[0], want[0], Tolerance{1e-3, 1e-5}).ok;
        return Cost(g.numNodes());
      },
      o);
  EXPECT_GE(costed, 3) << "the start, the swap and the negated pair";
  EXPECT_EQ(wrong, 0) << describeSubstitutions(r);
}

TEST(Replay, ReproducesTheGraphAndRefusesWhatDoesNotHold) {
  const Graph g = qkvGraph(true);
  const auto site = sitesOf(g, "merge-siblings").at(0);
  const Graph once = applyOne(g, site);
  const Graph again = replaySubstitutions(g, {site});
  EXPECT_EQ(canonicalGraphKey(once), canonicalGraphKey(again));
  expectError([&] { replaySubstitutions(g, {{"no-such-rule", {"x"}}}); },
              {"substitution 1 of 1", "no-such-rule", "no such substitution rule"});
  expectError([&] { replaySubstitutions(g, {{"merge-siblings", {"nobody", "else"}}}); },
              {"substitution 1 of 1", "merge-siblings at nobody, else", "does not apply"});
}

// Search with a stand-in cost: the node count, plus a price on big kernels
// that makes enlarging a kernel worse on its own (a relaxed step).
Cost standInCost(const Graph& g) {
  double c = 0;
  for (const Node& n : g.nodes()) {
    c += 100;
    if (n.op == "Conv") c += 10 * static_cast<double>(g.inputType(*g.findNode(n.name), 1).shape.at(2));
  }
  return c;
}

TEST(SubstitutionSearch, RelaxedStepsReachAMergeGreedyMisses) {
  GraphBuilder b;
  const ValueId x = b.input({1, 4, 8, 8});
  const ValueId y1 = b.op("Conv", {x, b.constant({3, 4, 1, 1})});
  const ValueId y3 = b.op("Conv", {x, b.constant({5, 4, 3, 3})},
                          attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}));
  b.finish(b.op("Concat", {y1, y3}, attrs({{"axis", int64_t{1}}})));
  const Graph& g = b.graph();
  const GraphCostFn cost = [](const Graph& gr, const std::vector<SubstitutionSite>&) { return standInCost(gr); };
  SubstitutionSearchOptions greedy;
  greedy.alpha = 1.0;
  const auto r1 = searchSubstitutions(g, cost, greedy);
  EXPECT_TRUE(r1.applied.empty());
  SubstitutionSearchOptions relaxed;
  relaxed.alpha = 1.1;
  const auto r2 = searchSubstitutions(g, cost, relaxed);
  ASSERT_EQ(r2.steps.size(), 2u) << describeSubstitutions(r2);
  EXPECT_EQ(r2.steps[0].rule, "enlarge-conv-kernel");
  EXPECT_GT(r2.steps[0].after, r2.steps[0].before);  // worse for a while
  EXPECT_EQ(r2.steps[1].rule, "merge-siblings");
  EXPECT_LT(r2.bestCost, r2.startCost);
  expectSameOutputs(g, r2.graph);
  EXPECT_EQ(canonicalGraphKey(replaySubstitutions(g, r2.applied)), canonicalGraphKey(r2.graph));
}

TEST(SubstitutionSearch, IdenticalSitesAreOneMoveAndTheBudgetHolds) {
  GraphBuilder b;
  ValueId x = b.input({1, 8, 16});
  for (int layer = 0; layer < 4; ++layer) {
    std::vector<ValueId> ys;
    for (int i = 0; i < 3; ++i) ys.push_back(b.op("Add", {b.op("MatMul", {x, b.constant({16, 16})}), b.constant({16})}));
    x = b.op("Add", {b.op("Add", {ys[0], ys[1]}), ys[2]});
  }
  b.finish(x);
  const Graph& g = b.graph();
  int calls = 0;
  const GraphCostFn cost = [&](const Graph& gr, const std::vector<SubstitutionSite>&) {
    ++calls;
    return Cost(gr.numNodes());
  };
  const auto r = searchSubstitutions(g, cost, {});
  ASSERT_EQ(r.steps.size(), 1u) << describeSubstitutions(r);
  EXPECT_EQ(r.steps[0].sites.size(), 4u);
  EXPECT_EQ(calls, r.graphsCosted);
  EXPECT_EQ(countOp(r.graph, "MatMul"), 4);
  expectSameOutputs(g, r.graph);
  SubstitutionSearchOptions tight;
  tight.maxGraphs = 1;
  EXPECT_TRUE(searchSubstitutions(g, cost, tight).applied.empty());
}

// The property over random graphs: every site of every rule, applied one
// after another, keeps the outputs.
Graph randomGraph(uint64_t seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  GraphBuilder b(seed);
  ValueId x = b.input({1, 6, 8});
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  for (int step = 0; step < 6; ++step) {
    switch (pick(5)) {
      case 4: {  // a Split read by layout ops
        const ValueId m = b.op("MatMul", {x, b.constant({8, 24})});
        b.op("Split", {m}, attrs({{"axis", int64_t{2}}, {"split", Ints{8, 8, 8}}}), 3);
        const std::vector<ValueId> parts = b.graph().nodes().back().outputs;
        std::vector<ValueId> ys;
        for (int i = 0; i < 3; ++i) {
          ValueId r = b.op("Reshape", {parts[static_cast<size_t>(i)]}, attrs({{"shape", Ints{1, 6, 2, 4}}}));
          r = b.op("Transpose", {r}, attrs({{"perm", pick(2) ? Ints{0, 2, 1, 3} : Ints{0, 2, 3, 1}}}));
          ys.push_back(b.op("Reshape", {r}, attrs({{"shape", Ints{1, 6, 8}}})));
        }
        x = b.op("Add", {b.op("Add", {ys[0], ys[1]}), ys[2]});
        break;
      }
      case 0: {  // siblings
        const int n = 2 + pick(3);
        std::vector<ValueId> ys;
        const bool bias = pick(2);
        for (int i = 0; i < n; ++i) {
          ValueId y = b.op("MatMul", {x, b.constant({8, 8})});
          if (bias) y = b.op("Add", {b.constant({8}), y});
          ys.push_back(y);
        }
        x = ys[0];
        for (int i = 1; i < n; ++i) x = b.op(pick(2) ? "Add" : "Mul", {x, ys[static_cast<size_t>(i)]});
        break;
      }
      case 1: {  // transposes
        const ValueId t = b.op("Transpose", {x}, attrs({{"perm", Ints{0, 2, 1}}}));
        const ValueId u = b.op("Transpose", {t}, attrs({{"perm", pick(2) ? Ints{0, 2, 1} : Ints{2, 1, 0}}}));
        x = b.shape(u) == Shape{1, 6, 8} ? u : b.op("Reshape", {u}, attrs({{"shape", Ints{1, 6, 8}}}));
        break;
      }
      case 2: {  // reshapes
        const ValueId r = b.op("Reshape", {x}, attrs({{"shape", Ints{6, 8}}}));
        const ValueId s = b.op("Unsqueeze", {b.op("Relu", {r})}, attrs({{"axes", Ints{0}}}));
        x = b.op("Reshape", {b.op("Reshape", {s}, attrs({{"shape", Ints{48}}}))}, attrs({{"shape", Ints{1, 6, 8}}}));
        break;
      }
      default:
        x = b.op("Tanh", {x});
    }
  }
  b.finish(x);
  return b.graph();
}

Graph applyEverywhere(const Graph& g, int* applied) {
  Graph current = g;
  for (int round = 0; round < 50; ++round) {
    bool any = false;
    for (const auto& rule : standardSubstitutions()) {
      const auto sites = rule->find(current);
      if (sites.empty()) continue;
      std::string note;
      auto next = applyChecked(current, sites[0], &note);
      EXPECT_TRUE(next.has_value()) << note;
      if (!next) continue;
      current = std::move(*next);
      ++*applied;
      any = true;
    }
    if (!any) break;
  }
  return current;
}

TEST(SubstitutionProperty, RandomGraphsKeepTheirOutputs) {
  int applied = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Graph g = randomGraph(seed);
    const Graph after = applyEverywhere(g, &applied);
    expectSameOutputs(g, after, seed);
  }
  EXPECT_GT(applied, 20);
}

TEST(SubstitutionProperty, ZooModelsKeepTheirOutputs) {
  int applied = 0;
  for (const char* model :
       {"resnet50_small", "resnet50_small_opset9", "resnext50_32x4d_small", "mobilenet_v2_small",
        "inception_v3_small", "r3d_18_small", "dcgan_small", "bert_small", "bert_small_opset13",
        "mobilenet_v3_large_small", "efficientnet_b0_small", "shufflenet_v2_small", "regnet_y_400mf_small",
        "convnext_tiny_small", "vit_b_16_small", "deeplabv3_mobilenet_v3_small", "gpt2_small"}) {
    SCOPED_TRACE(model);
    const Graph g = importOnnx(std::string(COLLAGE_SOURCE_DIR) + "/resources/models/" + model + ".onnx");
    const Graph after = applyEverywhere(g, &applied);
    expectSameOutputs(g, after);
  }
  EXPECT_GT(applied, 5);
}

}  // namespace
}  // namespace collage

namespace collage {
namespace {

TEST(PlanSubstitutions, RoundTripAndReplayOnTheModelAndRefusal) {
  const Graph g = qkvGraph(true);
  const SubstitutionSite site = sitesOf(g, "merge-siblings").at(0);
  Plan p = planFromJson(R"({"format": "collage-plan", "version": 1, "model": {"sha256": "abc"},
                            "groups": [{"backend": "native", "nodes": ["a"]}]})",
                        "hand.json");
  p.substitutions.push_back(PlanSubstitution{site, -12});
  p.substitutions.push_back(PlanSubstitution{{"collapse-reshapes", {"r"}}, kUnknownCost});
  const Plan back = planFromJson(planToJson(p), "back.json");
  EXPECT_EQ(back.substitutions, p.substitutions);
  // Without substitutions, the field is absent.
  p.substitutions.clear();
  EXPECT_EQ(planToJson(p).find("substitutions"), std::string::npos);

  Plan one = back;
  one.substitutions.resize(1);
  EXPECT_EQ(canonicalGraphKey(planGraph(one, g)), canonicalGraphKey(applyOne(g, site)));
  // A plan for another model: its sites are not there.
  const Graph other = qkvGraph(false);
  expectError([&] { planGraph(one, other); }, {"back.json", "substitution 1 of 1", "merge-siblings at"});
  expectError([&] {
    planFromJson(R"({"format": "collage-plan", "version": 1, "model": {"sha256": "abc"},
                     "substitutions": [{"rule": "fold-everything", "nodes": ["a"]}],
                     "groups": [{"backend": "native", "nodes": ["a"]}]})",
                 "bad.json");
  }, {"bad.json", "substitutions[0].rule", "fold-everything"});
}

}  // namespace
}  // namespace collage
