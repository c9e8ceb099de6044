// fold-scale-shift, sink-transpose and hoist-transpose: where each applies
// and where it refuses, what the rewrite makes, and the property every rule
// keeps: the whole graph computes the same outputs before and after
// (reference executor, random inputs), on hand-made graphs, random graphs
// and every small zoo model, with the rule applied at every site.
#include <gtest/gtest.h>

#include <random>

#include "core/ir/tensor_compare.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "core/rewrite/equivalence_check.h"
#include "core/rewrite/substitution.h"
#include "core/search/substitution_search.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/rewrite/rewrite_test_support.h"

namespace collage {
namespace {

using rewrite_test::applyOne;
using rewrite_test::countOp;
using rewrite_test::expectSameOutputs;
using rewrite_test::sitesOf;





// Applies `rule` at every site it finds, again on what that makes, until
// none is left (or `rounds` passes); every application must pass the check.
Graph applyRuleEverywhere(const Graph& g, const std::string& rule, int* applied, int rounds = 30) {
  Graph current = g;
  for (int round = 0; round < rounds; ++round) {
    const auto sites = sitesOf(current, rule);
    if (sites.empty()) break;
    for (const SubstitutionSite& site : sites) {
      const auto now = sitesOf(current, rule);  // an earlier site may have used this one's nodes
      if (std::find(now.begin(), now.end(), site) == now.end()) continue;
      std::string note;
      auto next = applyChecked(current, site, &note);
      EXPECT_TRUE(next.has_value()) << note;
      if (!next) continue;
      current = std::move(*next);
      ++*applied;
    }
  }
  return current;
}

const AttributeMap kPad1 = attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}});

// ---- fold-scale-shift ------------------------------------------------------

TEST(FoldScaleShift, PerChannelScaleThenShiftFoldIntoAConv) {
  GraphBuilder b;
  const ValueId x = b.input({1, 4, 6, 6});
  const ValueId y = b.op("Conv", {x, b.constant({5, 4, 3, 3}), b.constant({5})}, kPad1);
  const ValueId m = b.op("Mul", {y, b.constant({5, 1, 1}, 0.5f, 2.0f)});
  const ValueId a = b.op("Add", {b.constant({1, 5, 1, 1}), m});
  b.finish(b.op("Relu", {a}));
  const Graph& g = b.graph();
  auto sites = sitesOf(g, "fold-scale-shift");
  ASSERT_EQ(sites.size(), 1u);  // the Add is next to the Mul, not the Conv, yet
  EXPECT_EQ(sites[0].nodes, (std::vector<std::string>{g.node(0).name, g.node(1).name}));
  const Graph once = applyOne(g, sites[0]);
  EXPECT_EQ(countOp(once, "Mul"), 0);
  EXPECT_EQ(countOp(once, "Conv"), 1);
  expectSameOutputs(g, once);
  sites = sitesOf(once, "fold-scale-shift");
  ASSERT_EQ(sites.size(), 1u);
  const Graph twice = applyOne(once, sites[0]);
  EXPECT_EQ(countOp(twice, "Add"), 0);
  EXPECT_EQ(twice.numNodes(), 2);  // Conv, Relu
  expectSameOutputs(g, twice);
}

TEST(FoldScaleShift, ShiftAndDivideIntoAConvWithoutBias) {
  GraphBuilder b;
  const ValueId x = b.input({1, 3, 5, 5});
  const ValueId y = b.op("Conv", {x, b.constant({4, 3, 1, 1})});
  const ValueId s = b.op("Sub", {y, b.scalar(0.25f)});
  const ValueId y2 = b.op("Conv", {s, b.constant({2, 4, 1, 1})});
  b.finish(b.op("Div", {y2, b.constant({2, 1, 1}, 1.0f, 2.0f)}));
  Graph g = b.graph();
  // The Div's output is the graph's output: the Conv makes it now, under its name.
  const auto sites = sitesOf(g, "fold-scale-shift");
  ASSERT_EQ(sites.size(), 2u);
  int applied = 0;
  const Graph after = applyRuleEverywhere(g, "fold-scale-shift", &applied);
  EXPECT_EQ(applied, 2);
  EXPECT_EQ(countOp(after, "Sub") + countOp(after, "Div"), 0);
  ASSERT_EQ(countOp(after, "Conv"), 2);
  int withBias = 0;
  for (const Node& n : after.nodes()) withBias += n.inputs.size() == 3;
  EXPECT_EQ(withBias, 1);  // the shifted one; a scale needs no bias
  expectSameOutputs(g, after);
}

TEST(FoldScaleShift, ScaleAfterAMatMulAndItsBias) {
  GraphBuilder b;
  const ValueId x = b.input({2, 8, 16});
  const ValueId y = b.op("MatMul", {x, b.constant({16, 12})});
  const ValueId a = b.op("Add", {y, b.constant({12})});
  const ValueId m = b.op("Mul", {b.constant({1, 1, 12}), a});  // a layer scale
  const ValueId s = b.op("Sub", {m, b.constant({12})});
  b.finish(b.op("Tanh", {s}));
  const Graph& g = b.graph();
  auto sites = sitesOf(g, "fold-scale-shift");
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].nodes.size(), 3u);  // MatMul, its bias Add, the Mul
  Graph after = applyOne(g, sites[0]);
  EXPECT_EQ(countOp(after, "Mul"), 0);
  expectSameOutputs(g, after);
  sites = sitesOf(after, "fold-scale-shift");  // the Sub folds into the bias
  ASSERT_EQ(sites.size(), 1u);
  after = applyOne(after, sites[0]);
  EXPECT_EQ(countOp(after, "Sub"), 0);
  EXPECT_EQ(countOp(after, "Add"), 1);
  expectSameOutputs(g, after);
}

TEST(FoldScaleShift, GemmKeepsAlphaAndBeta) {
  for (bool withC : {true, false}) {
    SCOPED_TRACE(withC ? "with C" : "without C");
    GraphBuilder b;
    const ValueId x = b.input({3, 6});
    std::vector<ValueId> in = {x, b.constant({5, 6})};
    if (withC) in.push_back(b.constant({1, 5}));
    const ValueId y =
        b.op("Gemm", in, attrs({{"transB", int64_t{1}}, {"alpha", 0.5f}, {"beta", 2.0f}}));
    const ValueId m = b.op("Div", {y, b.constant({5}, 1.0f, 2.0f)});
    b.finish(b.op("Relu", {b.op("Add", {m, b.constant({1, 5})})}));
    const Graph& g = b.graph();
    int applied = 0;
    const Graph after = applyRuleEverywhere(g, "fold-scale-shift", &applied);
    EXPECT_EQ(applied, 2);
    EXPECT_EQ(after.numNodes(), 2);  // Gemm, Relu
    expectSameOutputs(g, after);
  }
}

TEST(FoldScaleShift, ScalarScaleBeforeAnAnchor) {
  GraphBuilder b;
  const ValueId x = b.input({1, 16, 32});
  const ValueId q = b.op("Mul", {x, b.scalar(0.125f)});
  const ValueId y = b.op("MatMul", {q, b.constant({32, 8})});
  const ValueId img = b.input({1, 2, 4, 4});
  const ValueId d = b.op("Div", {img, b.constant({1}, 2.0f, 3.0f)});
  const ValueId c =
      b.op("Conv", {d, b.constant({3, 2, 3, 3}), b.constant({3})}, kPad1);  // zero pads scale too
  b.graph().markOutput(c);
  b.finish(y);
  const Graph& g = b.graph();
  const auto sites = sitesOf(g, "fold-scale-shift");
  ASSERT_EQ(sites.size(), 2u);
  for (const auto& s : sites) EXPECT_EQ(s.nodes.size(), 2u) << s.toString();
  int applied = 0;
  const Graph after = applyRuleEverywhere(g, "fold-scale-shift", &applied);
  EXPECT_EQ(applied, 2);
  EXPECT_EQ(countOp(after, "Mul") + countOp(after, "Div"), 0);
  expectSameOutputs(g, after);
}

TEST(FoldScaleShift, AttentionScaleGoesIntoTheQueryProjection) {
  GraphBuilder b;
  const ValueId x = b.input({1, 8, 16});
  auto heads = [&](ValueId v, const Ints& perm) {
    const ValueId r = b.op("Reshape", {v}, attrs({{"shape", Ints{1, 8, 2, 8}}}));
    return b.op("Transpose", {r}, attrs({{"perm", perm}}));
  };
  const ValueId q = heads(
      b.op("Add", {b.op("MatMul", {x, b.constant({16, 16})}), b.constant({16})}), {0, 2, 1, 3});
  const ValueId k = heads(b.op("MatMul", {x, b.constant({16, 16})}), {0, 2, 3, 1});
  const ValueId scores = b.op("MatMul", {q, k});
  const ValueId scaled = b.op("Div", {scores, b.scalar(2.8284f)});
  b.finish(b.op("Softmax", {scaled}, attrs({{"axis", int64_t{-1}}})));
  const Graph& g = b.graph();
  const auto sites = sitesOf(g, "fold-scale-shift");
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].nodes.size(), 6u);  // MatMul, Add, Reshape, Transpose, MatMul, Div
  const Graph after = applyOne(g, sites[0]);
  EXPECT_EQ(countOp(after, "Div"), 0);
  EXPECT_EQ(after.numNodes(), g.numNodes() - 1);
  expectSameOutputs(g, after);
  // Not when a value on the way has another reader: then the key side.
  GraphBuilder b2;
  const ValueId x2 = b2.input({1, 8, 16});
  const ValueId p = b2.op("MatMul", {x2, b2.constant({16, 16})});
  const ValueId kk = b2.op("Transpose", {b2.op("MatMul", {x2, b2.constant({16, 16})})},
                           attrs({{"perm", Ints{0, 2, 1}}}));
  const ValueId s2 = b2.op("Mul", {b2.op("MatMul", {p, kk}), b2.scalar(0.5f)});
  b2.graph().markOutput(p);
  b2.finish(s2);
  const auto sites2 = sitesOf(b2.graph(), "fold-scale-shift");
  ASSERT_EQ(sites2.size(), 1u);
  EXPECT_EQ(sites2[0].nodes.size(), 4u);  // the key's MatMul, Transpose, the MatMul, the Mul
  EXPECT_EQ(b2.graph().node(*b2.graph().findNode(sites2[0].nodes[1])).op, "Transpose");
  expectSameOutputs(b2.graph(), applyOne(b2.graph(), sites2[0]));
}

// The importer keeps BatchNormalization as an op: it folds like a scale
// and a shift together.
TEST(FoldScaleShift, BatchNormalizationFoldsIntoAConvOrAGemm) {
  GraphBuilder b;
  const ValueId x = b.input({1, 3, 5, 5});
  auto bn = [&](ValueId y, int64_t c) {
    return b.op("BatchNormalization",
                {y, b.constant({c}, 0.5f, 1.5f), b.constant({c}), b.constant({c}),
                 b.constant({c}, 0.5f, 2.0f)},
                attrs({{"epsilon", 1e-3f}}));
  };
  const ValueId y1 = bn(b.op("Conv", {x, b.constant({4, 3, 3, 3})}, kPad1), 4);  // no bias
  const ValueId y2 = bn(b.op("Conv", {y1, b.constant({4, 4, 1, 1}), b.constant({4})}), 4);
  const ValueId f = b.op("Flatten", {b.op("Relu", {y2})}, attrs({{"axis", int64_t{1}}}));
  const ValueId y3 =
      bn(b.op("Gemm", {f, b.constant({100, 6}), b.constant({6})}, attrs({{"beta", 0.5f}})), 6);
  // A MatMul of rank 3: its channels are the last axis, not the normalised one.
  const ValueId y4 = b.op(
      "MatMul", {b.op("Reshape", {y3}, attrs({{"shape", Ints{1, 2, 3}}})), b.constant({3, 3})});
  b.finish(bn(y4, 2));
  const Graph& g = b.graph();
  const auto sites = sitesOf(g, "fold-scale-shift");
  ASSERT_EQ(sites.size(), 3u);
  int applied = 0;
  const Graph after = applyRuleEverywhere(g, "fold-scale-shift", &applied);
  EXPECT_EQ(applied, 3);
  EXPECT_EQ(countOp(after, "BatchNormalization"), 1);
  expectSameOutputs(g, after);
}

TEST(FoldScaleShift, RefusesWhereTheConditionDoesNotHold) {
  GraphBuilder b;
  const ValueId x = b.input({1, 4, 6, 6});
  // Along a spatial axis, not the channels.
  const ValueId y1 = b.op("Conv", {x, b.constant({4, 4, 1, 1})});
  const ValueId m1 = b.op("Mul", {y1, b.constant({6})});
  // The anchor's output read twice.
  const ValueId y2 = b.op("Conv", {m1, b.constant({4, 4, 1, 1})});
  const ValueId m2 = b.op("Mul", {y2, b.constant({4, 1, 1})});
  const ValueId r2 = b.op("Relu", {y2});
  // A constant minus the output; a computed scale.
  const ValueId y3 = b.op("Conv", {b.op("Add", {m2, r2}), b.constant({4, 4, 1, 1})});
  const ValueId s3 = b.op("Sub", {b.constant({4, 1, 1}), y3});
  const ValueId y4 = b.op("Conv", {s3, b.constant({4, 4, 1, 1})});
  const ValueId m4 = b.op("Mul", {y4, x});
  // A shift after a MatMul (its bias already); weights that are inputs.
  const ValueId f = b.op("Reshape", {m4}, attrs({{"shape", Ints{1, 4, 36}}}));
  const ValueId y5 = b.op("MatMul", {f, b.constant({36, 8})});
  const ValueId a5 = b.op("Add", {y5, b.constant({8})});
  const ValueId y6 = b.op("MatMul", {a5, b.input({8, 8})});
  const ValueId m6 = b.op("Mul", {y6, b.constant({8})});
  // A vector scale before a MatMul (only a scalar folds there); one that widens.
  const ValueId v7 = b.op("Mul", {m6, b.constant({8})});
  const ValueId y7 = b.op("MatMul", {v7, b.constant({8, 8})});
  const ValueId y8 = b.op("MatMul", {y7, b.constant({8, 8})});
  const ValueId m8 = b.op("Mul", {y8, b.constant({3, 1, 8})});
  // A graph output between the anchor and the scale.
  const ValueId y9 = b.op("MatMul", {m8, b.constant({8, 8})});
  b.graph().markOutput(y9);
  b.finish(b.op("Mul", {y9, b.constant({8})}));
  EXPECT_TRUE(sitesOf(b.graph(), "fold-scale-shift").empty())
      << sitesOf(b.graph(), "fold-scale-shift")[0].toString();
}

// ---- sink-transpose / hoist-transpose ---------------------------------------

TEST(SinkTranspose, MovesDownAcrossElementwiseOpsUntilTheInverseCollapses) {
  GraphBuilder b;
  const ValueId x = b.input({2, 3, 4, 5});
  const ValueId t = b.op("Transpose", {x}, attrs({{"perm", Ints{0, 2, 3, 1}}}));  // [2,4,5,3]
  const ValueId r = b.op("Relu", {t});
  const ValueId a = b.op("Add", {r, b.constant({3})});
  const ValueId m = b.op("Mul", {b.constant({5, 1}), a});
  const ValueId c = b.op("Clip", {m}, attrs({{"min", -0.5f}, {"max", 0.5f}}));
  const ValueId u = b.op("Transpose", {c}, attrs({{"perm", Ints{0, 3, 1, 2}}}));
  b.finish(b.op("Softmax", {u}, attrs({{"axis", int64_t{1}}})));
  const Graph& g = b.graph();
  int applied = 0;
  const Graph sunk = applyRuleEverywhere(g, "sink-transpose", &applied);
  EXPECT_EQ(applied, 4);
  expectSameOutputs(g, sunk);
  // The two Transposes meet now: inverse, they vanish.
  const auto collapse = sitesOf(sunk, "collapse-transposes");
  ASSERT_EQ(collapse.size(), 1u);
  const Graph collapsed = applyOne(sunk, collapse[0]);
  EXPECT_EQ(countOp(collapsed, "Transpose"), 0);
  expectSameOutputs(g, collapsed);
}

TEST(HoistTranspose, IsTheInverseOfSink) {
  GraphBuilder b;
  const ValueId x = b.input({2, 3, 4});
  const ValueId t = b.op("Transpose", {x}, attrs({{"perm", Ints{2, 0, 1}}}));  // [4,2,3]
  const ValueId a = b.op("Pow", {b.op("Abs", {t}), b.constant({2, 3}, 1.0f, 2.0f)});
  const ValueId m = b.op("Mul", {a, b.scalar(10.0f)});
  b.finish(b.op("Cast", {m}, attrs({{"to", int64_t{6}}})));  // to int32
  const Graph& g = b.graph();
  const auto sinks = sitesOf(g, "sink-transpose");
  ASSERT_EQ(sinks.size(), 1u);
  const Graph down = applyOne(g, sinks[0]);
  expectSameOutputs(g, down);
  const auto hoists = sitesOf(down, "hoist-transpose");
  ASSERT_EQ(hoists.size(), 1u);
  EXPECT_EQ(hoists[0].nodes, (std::vector<std::string>{sinks[0].nodes[1], sinks[0].nodes[0]}));
  // Down across Abs, Pow (its constant permuted), Mul and Cast: the graph's
  // output keeps its name, a Transpose makes it now.
  int applied = 0;
  const Graph bottom = applyRuleEverywhere(g, "sink-transpose", &applied);
  EXPECT_EQ(applied, 4);
  EXPECT_EQ(bottom.node(bottom.numNodes() - 1).op, "Transpose");
  expectSameOutputs(g, bottom);
  // And all the way back up is the same graph (names, types, constants).
  applied = 0;
  const Graph top = applyRuleEverywhere(bottom, "hoist-transpose", &applied);
  EXPECT_EQ(applied, 4);
  EXPECT_EQ(canonicalGraphKey(top), canonicalGraphKey(g));
  expectSameOutputs(g, top);
}

TEST(SinkTranspose, RefusesWhereTheConditionDoesNotHold) {
  GraphBuilder b;
  const ValueId x = b.input({2, 3, 4});
  const ValueId y = b.input({4, 2, 3});
  // Read twice.
  const ValueId t1 = b.op("Transpose", {x}, attrs({{"perm", Ints{2, 0, 1}}}));
  const ValueId r1 = b.op("Relu", {t1});
  const ValueId s1 = b.op("Sigmoid", {t1});
  // Across an Add of two computed tensors, and one that widens.
  const ValueId t2 = b.op("Transpose", {b.op("Add", {r1, s1})}, attrs({{"perm", Ints{1, 2, 0}}}));
  const ValueId a2 = b.op("Add", {t2, b.input({2, 3, 4})});
  const ValueId t3 = b.op("Transpose", {a2}, attrs({{"perm", Ints{2, 0, 1}}}));
  const ValueId a3 = b.op("Add", {t3, b.constant({5, 1, 1, 1})});
  // Not elementwise; a graph output between.
  const ValueId t4 = b.op("Transpose", {y}, attrs({{"perm", Ints{1, 2, 0}}}));
  const ValueId s4 = b.op("Softmax", {t4});
  const ValueId t5 = b.op("Transpose", {s4}, attrs({{"perm", Ints{2, 0, 1}}}));
  b.graph().markOutput(t5);
  b.graph().markOutput(a3);
  b.finish(b.op("Exp", {t5}));
  const Graph& g = b.graph();
  EXPECT_TRUE(sitesOf(g, "sink-transpose").empty()) << sitesOf(g, "sink-transpose")[0].toString();
  // Upwards: t1 and t4 read inputs, the Adds before t2 and t3 read two
  // computed tensors, the Softmax is no elementwise op.
  const auto hoists = sitesOf(g, "hoist-transpose");
  EXPECT_TRUE(hoists.empty()) << hoists[0].toString();
}

TEST(SinkTranspose, BringsALayerScaleNextToItsMatMul) {
  // A channels-last block: MatMul + bias, the permute back, then a scale.
  GraphBuilder b;
  const ValueId x = b.input({1, 3, 3, 8});
  const ValueId y = b.op("Add", {b.op("MatMul", {x, b.constant({8, 8})}), b.constant({8})});
  const ValueId t = b.op("Transpose", {y}, attrs({{"perm", Ints{0, 3, 1, 2}}}));
  const ValueId m = b.op("Mul", {b.constant({8, 1, 1}), t});
  b.finish(b.op("Add", {m, b.input({1, 8, 3, 3})}));
  const Graph& g = b.graph();
  EXPECT_TRUE(sitesOf(g, "fold-scale-shift").empty());
  const auto sinks = sitesOf(g, "sink-transpose");
  ASSERT_EQ(sinks.size(), 1u);
  const Graph sunk = applyOne(g, sinks[0]);
  const auto folds = sitesOf(sunk, "fold-scale-shift");
  ASSERT_EQ(folds.size(), 1u);
  EXPECT_EQ(folds[0].nodes.size(), 3u);  // MatMul, its bias, the scale
  const Graph folded = applyOne(sunk, folds[0]);
  EXPECT_EQ(countOp(folded, "Mul"), 0);
  expectSameOutputs(g, folded);
}

// In the search: sinking costs nothing alone (the same kernels), and then
// the Transposes collapse: a relaxed step the search takes.
TEST(SinkTranspose, TheSearchSinksThenCollapses) {
  GraphBuilder b;
  const ValueId x = b.input({2, 3, 4});
  const ValueId t = b.op("Transpose", {x}, attrs({{"perm", Ints{1, 2, 0}}}));
  const ValueId r = b.op("Sigmoid", {b.op("Mul", {t, b.constant({4, 1})})});
  const ValueId u = b.op("Transpose", {r}, attrs({{"perm", Ints{2, 0, 1}}}));
  b.finish(b.op("Softmax", {u}, attrs({{"axis", int64_t{-1}}})));
  const Graph& g = b.graph();
  const GraphCostFn cost = [](const Graph& gr, const std::vector<SubstitutionSite>&) {
    return Cost(100.0 * gr.numNodes());
  };
  const auto r1 = searchSubstitutions(g, cost, {});
  EXPECT_EQ(r1.bestCost, Cost(300.0)) << describeSubstitutions(r1);  // Mul, Sigmoid, Softmax
  EXPECT_EQ(countOp(r1.graph, "Transpose"), 0) << describeSubstitutions(r1);
  expectSameOutputs(g, r1.graph);
  EXPECT_EQ(canonicalGraphKey(replaySubstitutions(g, r1.applied)), canonicalGraphKey(r1.graph));
}

// ---- cancel-transposes ------------------------------------------------------

const Ints kToNchw{0, 3, 1, 2}, kToNhwc{0, 2, 3, 1};

// A block as tf2onnx writes one in an NHWC model: Transpose into NCHW, the
// convs, Transpose back.
ValueId nhwcBlock(GraphBuilder& b, ValueId x, int64_t cin, int64_t cout, int64_t k,
                  int64_t group = 1, bool relu = true) {
  const ValueId t = b.op("Transpose", {x}, attrs({{"perm", kToNchw}}));
  const int64_t p = k / 2;
  ValueId y =
      b.op("Conv", {t, b.constant({cout, cin / group, k, k}), b.constant({cout})},
           attrs({{"kernel_shape", Ints{k, k}}, {"pads", Ints{p, p, p, p}}, {"group", group}}));
  if (relu) y = b.op("Relu", {y});
  return b.op("Transpose", {y}, attrs({{"perm", kToNhwc}}));
}

// The model of tests/e2e/nhwc_transposed_blocks_models.py, smaller: a skip
// path from the NHWC input, a channel Pad and a spatial Pad in NHWC, a
// Concat on the NHWC channel axis, a per-channel scale (channels last).
Graph exportedNhwcNet() {
  GraphBuilder b;
  const ValueId x = b.input({1, 6, 6, 4});
  const ValueId s1 = b.op("Relu", {b.op("Add", {nhwcBlock(b, x, 4, 4, 3), x})});
  const ValueId dw = nhwcBlock(b, s1, 4, 6, 1, 1, false);
  const ValueId skip = b.op("Pad", {s1}, attrs({{"pads", Ints{0, 0, 0, 0, 0, 0, 0, 2}}}));
  const ValueId s2 = b.op("Relu", {b.op("Add", {dw, skip})});
  const ValueId cat =
      b.op("Concat", {nhwcBlock(b, s2, 6, 3, 1, 1, false), nhwcBlock(b, s2, 6, 3, 3)},
           attrs({{"axis", int64_t{-1}}}));
  const ValueId s3 = b.op("Mul", {b.op("Add", {cat, s2}), b.constant({6})});
  const ValueId s4 = b.op(
      "Pad", {s3}, attrs({{"pads", Ints{0, 1, 1, 0, 0, 1, 1, 0}}, {"mode", std::string("edge")}}));
  b.finish(nhwcBlock(b, s4, 6, 5, 3));
  return b.graph();
}

int transposesAfter(const Graph& g, std::initializer_list<const char*> rules) {
  Graph current = g;
  for (const char* rule : rules) {
    int applied = 0;
    current = applyRuleEverywhere(current, rule, &applied);
  }
  expectSameOutputs(g, current);
  return countOp(current, "Transpose");
}

// The graph offers one cancel-transposes site; applied, it leaves
// `transposes` Transposes and the same outputs.
void expectOneCancelLeaving(const Graph& g, int transposes) {
  const auto sites = sitesOf(g, "cancel-transposes");
  ASSERT_EQ(sites.size(), 1u);
  const Graph after = applyOne(g, sites[0]);
  EXPECT_EQ(countOp(after, "Transpose"), transposes);
  expectSameOutputs(g, after);
}

TEST(CancelTransposes, AnNhwcExportRunsInOneLayoutFromItsInputTransposeOn) {
  const Graph g = exportedNhwcNet();
  ASSERT_EQ(countOp(g, "Transpose"), 10);
  // One region, every block's Transposes at its edges; the input's and the
  // output's Transposes stay (the graph's input and output are NHWC).
  const auto sites = sitesOf(g, "cancel-transposes");
  ASSERT_EQ(sites.size(), 1u);
  int applied = 0;
  const Graph after = applyRuleEverywhere(g, "cancel-transposes", &applied);
  EXPECT_EQ(applied, 1);
  expectSameOutputs(g, after);
  EXPECT_EQ(countOp(after, "Transpose"), 2);
  EXPECT_EQ(after.node(0).op, "Transpose");
  EXPECT_TRUE(after.value(after.node(0).inputs[0]).isGraphInput);
  EXPECT_EQ(after.node(after.numNodes() - 1).op, "Transpose");
  EXPECT_TRUE(after.value(after.node(after.numNodes() - 1).outputs[0]).isGraphOutput);
  // The pads and the Concat's axis follow the layout: channels are axis 1 now.
  for (const Node& n : after.nodes()) {
    if (n.op == "Concat") EXPECT_EQ(n.attrs.getInt("axis"), 1);
    if (n.op == "Pad" && n.attrs.getString("mode", "constant") == "constant")
      EXPECT_EQ(n.attrs.getInts("pads"), (Ints{0, 0, 0, 0, 0, 2, 0, 0}));
  }
  EXPECT_TRUE(sitesOf(after, "cancel-transposes").empty());
  // Moving one Transpose at a time cannot: a join reads two layouts.
  EXPECT_GT(transposesAfter(g, {"sink-transpose", "collapse-transposes"}), 2);
}

TEST(CancelTransposes, PadAxesConstantsAndACastFollowTheLayout) {
  GraphBuilder b;
  const ValueId x = b.input({2, 3, 4, 5});
  const ValueId t = b.op("Transpose", {x}, attrs({{"perm", kToNhwc}}));  // [2,4,5,3]
  const ValueId p = b.op(
      "Pad", {t},
      attrs({{"pads", Ints{1, 0, 2, 1}}, {"axes", Ints{-1, 1}}, {"mode", std::string("reflect")}}));
  const ValueId a = b.op("Add", {p, b.constant({5, 5, 1})});  // [2,5,5,6], broadcast over N and C
  const ValueId c = b.op("Concat", {a, b.constant({2, 5, 5, 2})}, attrs({{"axis", int64_t{3}}}));
  const ValueId m =
      b.op("Mul", {b.op("Clip", {c, b.scalar(-0.5f), b.scalar(0.5f)}), b.scalar(10.0f)});
  const ValueId d = b.op("Cast", {m}, attrs({{"to", int64_t{6}}}));  // to int32
  const ValueId u = b.op("Transpose", {d}, attrs({{"perm", kToNchw}}));
  b.finish(b.op("Softmax", {b.op("Cast", {u}, attrs({{"to", int64_t{1}}}))},
                attrs({{"axis", int64_t{1}}})));
  expectOneCancelLeaving(b.graph(), 0);
}

TEST(CancelTransposes, AValueReadElsewhereKeepsItsTranspose) {
  // The region's value is a graph output and read by a Softmax too: it
  // keeps one Transpose (2 -> 1 with the exit; the entry's other reader
  // keeps the entry).
  GraphBuilder b;
  const ValueId x = b.input({1, 2, 3, 4});
  const ValueId t = b.op("Transpose", {x}, attrs({{"perm", kToNhwc}}));
  const ValueId r = b.op("Relu", {t});
  const ValueId u = b.op("Transpose", {r}, attrs({{"perm", kToNchw}}));
  b.graph().markOutput(r);
  b.graph().markOutput(b.op("Softmax", {r}));
  b.finish(b.op("Sigmoid", {u}));
  expectOneCancelLeaving(b.graph(), 1);
}

// Every pad form inside an NHWC region, at odd channel counts: a zero
// channel pad, a spatial pad with a non-zero constant, a cropping
// (negative) pad, edge and reflect, pads given per axis with negative
// axes; each Pad follows the layout (pads or axes permuted), both
// Transposes vanish, and the outputs are the same.
TEST(CancelTransposes, EveryPadFormFollowsTheLayout) {
  const std::vector<std::pair<AttributeMap, std::string>> forms = {
      {attrs({{"pads", Ints{0, 0, 0, 1, 0, 0, 0, 2}}}), "zero, channels (NHWC's last axis)"},
      {attrs({{"pads", Ints{0, 1, 2, 0, 0, 0, 1, 0}}, {"constant_value", 0.75f}}), "constant 0.75, spatial"},
      {attrs({{"pads", Ints{0, -1, 0, 0, 0, 1, -2, 0}}}), "cropping"},
      {attrs({{"pads", Ints{0, 1, 1, 0, 0, 1, 1, 0}}, {"mode", std::string("edge")}}), "edge"},
      {attrs({{"pads", Ints{2, 1, 0, 1}}, {"axes", Ints{-3, -2}}, {"mode", std::string("reflect")}}),
       "reflect, per axis"},
  };
  for (int64_t c : {3, 7})
    for (const auto& [pad, what] : forms) {
      SCOPED_TRACE(std::to_string(c) + " channels, " + what);
      GraphBuilder b;
      const ValueId x = b.input({2, c, 5, 6});
      const ValueId t = b.op("Transpose", {x}, attrs({{"perm", kToNhwc}}));
      const ValueId p = b.op("Pad", {b.op("Relu", {t})}, pad);
      const ValueId u = b.op("Transpose", {b.op("Sigmoid", {p})}, attrs({{"perm", kToNchw}}));
      b.finish(b.op("Softmax", {u}, attrs({{"axis", int64_t{1}}})));
      expectOneCancelLeaving(b.graph(), 0);
    }
}

// A Pad whose constant_value is computed at run time is left outside a
// region (it is not known to be layout free in this form): with it the
// only op between the Transposes, nothing vanishes and no site is offered.
TEST(CancelTransposes, APadWithARunTimeInputStaysOutside) {
  GraphBuilder b;
  const ValueId x = b.input({1, 3, 4, 5});
  const ValueId value = b.input({});
  const ValueId t = b.op("Transpose", {x}, attrs({{"perm", kToNhwc}}));
  const ValueId p = b.op("Pad", {t, kNoValue, value}, attrs({{"pads", Ints{0, 0, 0, 1, 0, 0, 0, 2}}}));
  b.finish(b.op("Transpose", {p}, attrs({{"perm", kToNchw}})));
  EXPECT_TRUE(sitesOf(b.graph(), "cancel-transposes").empty());
}

TEST(CancelTransposes, RefusesWhereNoTransposeVanishes) {
  GraphBuilder b;
  const ValueId x = b.input({1, 2, 3, 4});
  // The other side of the Add has no transposed copy.
  const ValueId t1 = b.op("Transpose", {x}, attrs({{"perm", kToNhwc}}));
  const ValueId a1 = b.op("Add", {t1, b.input({1, 3, 4, 2})});
  // A region read only by a non-layout op: the Transpose would move, not vanish.
  const ValueId t2 = b.op("Transpose", {x}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  const ValueId s2 = b.op("Softmax", {b.op("Relu", {t2})});
  // Its own inverse: collapse-transposes' and sink-transpose's business.
  const ValueId t3 = b.op("Transpose", {b.input({3, 4})}, attrs({{"perm", Ints{1, 0}}}));
  const ValueId u3 = b.op("Transpose", {b.op("Relu", {t3})}, attrs({{"perm", Ints{1, 0}}}));
  // Broadcasting between two computed inputs.
  const ValueId t4 = b.op("Transpose", {x}, attrs({{"perm", kToNhwc}}));
  const ValueId a4 =
      b.op("Add", {t4, b.op("Transpose", {b.input({1, 2, 1, 1})}, attrs({{"perm", kToNhwc}}))});
  const ValueId u4 = b.op("Transpose", {a4}, attrs({{"perm", kToNchw}}));
  b.graph().markOutput(a1);
  b.graph().markOutput(s2);
  b.graph().markOutput(u3);
  b.finish(u4);
  const auto sites = sitesOf(b.graph(), "cancel-transposes");
  EXPECT_TRUE(sites.empty()) << sites[0].toString();
}

// ---- unmerge-split ----------------------------------------------------------

TEST(UnmergeSplit, UndoesMergeSiblings) {
  GraphBuilder b;
  const ValueId x = b.input({1, 16, 32});
  std::vector<ValueId> ys;
  for (int i = 0; i < 3; ++i)
    ys.push_back(b.op("Relu", {b.op("Add", {b.op("MatMul", {x, b.constant({32, 8 + 4 * i})}),
                                            b.constant({8 + 4 * i})})}));
  b.graph().markOutput(ys[2]);
  b.finish(b.op("Concat", {ys[0], ys[1]}, attrs({{"axis", int64_t{2}}})));
  const Graph& g = b.graph();
  const Graph merged = applyOne(g, sitesOf(g, "merge-siblings").at(0));
  ASSERT_EQ(countOp(merged, "Split"), 1);
  const auto sites = sitesOf(merged, "unmerge-split");
  ASSERT_EQ(sites.size(), 1u);
  EXPECT_EQ(sites[0].nodes.size(), 4u);  // MatMul, Add, Relu, Split
  const Graph unmerged = applyOne(merged, sites[0]);
  EXPECT_EQ(countOp(unmerged, "Split"), 0);
  EXPECT_EQ(countOp(unmerged, "MatMul"), 3);
  EXPECT_EQ(countOp(unmerged, "Add"), 3);
  EXPECT_EQ(countOp(unmerged, "Relu"), 3);
  expectSameOutputs(g, unmerged);
  // A merge of the pieces again is possible (the search may go both ways).
  EXPECT_EQ(sitesOf(unmerged, "merge-siblings").size(), 1u);
}

TEST(UnmergeSplit, ConvsAndGemmsSharingABroadcastBias) {
  GraphBuilder b;
  const ValueId x = b.input({1, 3, 6, 6});
  const ValueId c = b.op("Conv", {x, b.constant({6, 3, 3, 3}), b.constant({6})}, kPad1);
  b.op("Split", {b.op("Sigmoid", {c})}, attrs({{"axis", int64_t{-3}}, {"split", Ints{2, 4}}}), 2);
  const std::vector<ValueId> parts = b.graph().nodes().back().outputs;
  const ValueId f =
      b.op("Reshape", {b.op("Mul", {parts[0], parts[0]})}, attrs({{"shape", Ints{1, 72}}}));
  const ValueId gm =
      b.op("Gemm", {f, b.constant({10, 72}), b.scalar(0.5f)}, attrs({{"transB", int64_t{1}}}));
  b.op("Split", {gm}, attrs({{"axis", int64_t{1}}, {"split", Ints{3, 3, 4}}}), 3);
  const std::vector<ValueId> pieces = b.graph().nodes().back().outputs;
  b.graph().markOutput(parts[1]);
  b.graph().markOutput(pieces[0]);
  b.graph().markOutput(pieces[1]);
  b.finish(pieces[2]);
  const Graph& g = b.graph();
  ASSERT_EQ(sitesOf(g, "unmerge-split").size(), 2u);
  int applied = 0;
  const Graph after = applyRuleEverywhere(g, "unmerge-split", &applied);
  EXPECT_EQ(applied, 2);
  EXPECT_EQ(countOp(after, "Conv"), 2);
  EXPECT_EQ(countOp(after, "Gemm"), 3);
  EXPECT_EQ(countOp(after, "Split"), 0);
  expectSameOutputs(g, after);
}

TEST(UnmergeSplit, RefusesWhereTheConditionDoesNotHold) {
  GraphBuilder b;
  const ValueId x = b.input({1, 4, 6});
  // Along another axis than the channels.
  const ValueId y1 = b.op("MatMul", {x, b.constant({6, 6})});
  b.op("Split", {y1}, attrs({{"axis", int64_t{1}}, {"split", Ints{2, 2}}}), 2);
  const std::vector<ValueId> a = b.graph().nodes().back().outputs;
  // The anchor's output read twice; computed weights.
  const ValueId y2 = b.op("MatMul", {b.op("Add", {a[0], a[1]}), b.constant({6, 6})});
  b.op("Split", {y2}, attrs({{"axis", int64_t{2}}, {"split", Ints{3, 3}}}), 2);
  const std::vector<ValueId> c = b.graph().nodes().back().outputs;
  const ValueId r2 = b.op("Relu", {y2});
  const ValueId y3 =
      b.op("MatMul",
           {b.op("Add", {b.op("Add", {c[0], c[1]}),
                         b.op("Slice", {r2},
                              attrs({{"starts", Ints{0}}, {"ends", Ints{3}}, {"axes", Ints{2}}}))}),
            b.input({3, 4})});
  b.op("Split", {y3}, attrs({{"axis", int64_t{2}}, {"split", Ints{2, 2}}}), 2);
  const std::vector<ValueId> d = b.graph().nodes().back().outputs;
  // A producer with no inputs at all.
  const ValueId r = b.op("RandomNormal", {}, attrs({{"shape", Ints{1, 4, 2}}}));
  b.op("Split", {r}, attrs({{"axis", int64_t{2}}, {"split", Ints{1, 1}}}), 2);
  const std::vector<ValueId> e = b.graph().nodes().back().outputs;
  b.graph().markOutput(e[0]);
  b.graph().markOutput(e[1]);
  b.finish(b.op("Add", {d[0], d[1]}));
  EXPECT_TRUE(sitesOf(b.graph(), "unmerge-split").empty())
      << sitesOf(b.graph(), "unmerge-split")[0].toString();
}

// ---- the property: every site, zoo and random graphs -------------------------

const char* const kRules[] = {"fold-scale-shift", "sink-transpose", "hoist-transpose",
                              "unmerge-split"};

TEST(FoldAndMoveProperty, ZooModelsKeepTheirOutputsAtEverySite) {
  std::map<std::string, int> applied;
  for (const char* model :
       {"resnet50_small", "resnet50_small_opset9", "resnext50_32x4d_small", "mobilenet_v2_small",
        "inception_v3_small", "r3d_18_small", "dcgan_small", "bert_small", "bert_small_opset13",
        "mobilenet_v3_large_small", "efficientnet_b0_small", "shufflenet_v2_small",
        "regnet_y_400mf_small", "convnext_tiny_small", "vit_b_16_small",
        "deeplabv3_mobilenet_v3_small", "gpt2_small"}) {
    const Graph g =
        importOnnx(std::string(COLLAGE_SOURCE_DIR) + "/resources/models/" + model + ".onnx");
    for (const char* rule : kRules) {
      SCOPED_TRACE(std::string(model) + ", " + rule);
      const int before = applied[rule];
      const Graph after = applyRuleEverywhere(g, rule, &applied[rule]);
      if (applied[rule] > before) expectSameOutputs(g, after);
    }
  }
  for (const char* rule : kRules)
    EXPECT_GT(applied[rule], 0) << rule << " applied nowhere in the zoo";
}

// A packed projection cut back into pieces lets attention's scale fold into
// the query's piece (two rules composing on a model that comes merged).
TEST(FoldAndMoveProperty, UnmergeThenFoldOnGpt2) {
  const Graph g = importOnnx(std::string(COLLAGE_SOURCE_DIR) + "/resources/models/gpt2_small.onnx");
  EXPECT_TRUE(sitesOf(g, "fold-scale-shift").empty());
  int applied = 0;
  const Graph unmerged = applyRuleEverywhere(g, "unmerge-split", &applied);
  EXPECT_EQ(applied, 2);  // one per layer
  applied = 0;
  const Graph folded = applyRuleEverywhere(unmerged, "fold-scale-shift", &applied);
  EXPECT_EQ(applied, 2);  // the scale of each layer
  expectSameOutputs(g, folded);
}

// Anchors with constant scales and shifts around them, Transposes between
// elementwise ops with constants of every broadcastable shape.
Graph randomGraph(uint64_t seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  GraphBuilder b(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  ValueId x = b.input({1, 4, 5, 6});  // [N, C, H, W]
  const Ints perms[] = {{0, 2, 3, 1}, {0, 3, 1, 2}, {3, 2, 1, 0}, {1, 0, 2, 3}};
  const char* unary[] = {"Relu", "Tanh", "Sigmoid", "Erf", "Neg"};
  const char* binary[] = {"Add", "Mul", "Sub", "Max"};
  for (int step = 0; step < 6; ++step) {
    switch (pick(5)) {
      case 0: {  // Conv with scales and shifts after (and a scalar before)
        if (pick(2)) x = b.op("Mul", {x, b.scalar(0.5f)});
        const bool bias = pick(2);
        std::vector<ValueId> in = {x, b.constant({4, 4, 1, 1})};
        if (bias) in.push_back(b.constant({4}));
        x = b.op("Conv", in);
        if (pick(3) == 0)
          x = b.op("BatchNormalization", {x, b.constant({4}, 0.5f, 1.5f), b.constant({4}),
                                          b.constant({4}), b.constant({4}, 0.5f, 2.0f)});
        for (int k = pick(3); k > 0; --k) {
          const Shape shapes[] = {{4, 1, 1}, {1, 4, 1, 1}, {}, {1}};
          const Shape s = shapes[pick(4)];
          const ValueId c = s.empty() ? b.scalar(1.5f) : b.constant(s, 0.5f, 2.0f);
          const char* op = binary[pick(3)];
          x = pick(2) && std::string(op) != "Sub" ? b.op(op, {c, x}) : b.op(op, {x, c});
        }
        break;
      }
      case 1: {  // MatMul over the last axis, bias, scale
        x = b.op("MatMul", {x, b.constant({6, 6})});
        if (pick(2)) x = b.op("Add", {x, b.constant({6})});
        if (pick(2)) x = b.op(pick(2) ? "Mul" : "Div", {x, b.constant({1, 1, 1, 6}, 0.5f, 2.0f)});
        break;
      }
      case 2: {  // a Transpose, elementwise ops, the inverse Transpose
        const Ints& p = perms[pick(4)];
        Ints inv(4);
        for (size_t i = 0; i < 4; ++i) inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
        ValueId t = b.op("Transpose", {x}, attrs({{"perm", p}}));
        const Shape ts = b.shape(t);
        for (int k = 1 + pick(3); k > 0; --k) {
          if (pick(2)) {
            t = b.op(unary[pick(5)], {t});
          } else {  // a constant broadcast along some of the axes
            Shape cs;
            for (size_t i = static_cast<size_t>(pick(4)); i < 4; ++i)
              cs.push_back(pick(2) ? ts[i] : 1);
            t = b.op(binary[pick(4)], {t, b.constant(cs, 0.5f, 1.5f)});
          }
        }
        x = b.op("Transpose", {t}, attrs({{"perm", inv}}));
        break;
      }
      case 3: {  // a merged projection and its Split (the Conv alike)
        const bool conv = pick(2);
        ValueId y = conv ? b.op("Conv", {x, b.constant({4, 4, 1, 1}), b.constant({4})})
                         : b.op("MatMul", {x, b.constant({6, 6})});
        if (!conv && pick(2)) y = b.op("Add", {y, b.constant(pick(2) ? Shape{6} : Shape{5, 1})});
        if (pick(2)) y = b.op(unary[pick(5)], {y});
        b.op("Split", {y},
             attrs({{"axis", int64_t{conv ? 1 : 3}}, {"split", conv ? Ints{1, 3} : Ints{2, 4}}}),
             2);
        const std::vector<ValueId> parts = b.graph().nodes().back().outputs;
        x = b.op("Concat", {b.op("Relu", {parts[1]}), parts[0]},
                 attrs({{"axis", int64_t{conv ? 1 : 3}}}));
        break;
      }
      default:
        x = b.op("Tanh", {x});
    }
  }
  b.finish(x);
  return b.graph();
}

TEST(FoldAndMoveProperty, RandomGraphsKeepTheirOutputsAtEverySite) {
  std::map<std::string, int> applied;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    const Graph g = randomGraph(seed);
    for (const char* rule : kRules) {
      SCOPED_TRACE("seed " + std::to_string(seed) + ", " + rule);
      const Graph after = applyRuleEverywhere(g, rule, &applied[rule]);
      expectSameOutputs(g, after, seed);
      // Then the others on what it made: sink, collapse and fold together.
      int more = 0;
      Graph mixed = applyRuleEverywhere(after, "collapse-transposes", &more);
      mixed = applyRuleEverywhere(mixed, "fold-scale-shift", &more);
      expectSameOutputs(g, mixed, seed);
    }
  }
  for (const char* rule : kRules) EXPECT_GT(applied[rule], 10) << rule;
}

// The random graphs' Transpose, elementwise ops, inverse Transpose: the
// pair cancels wherever its perm is not its own inverse.
TEST(CancelTransposes, RandomGraphsKeepTheirOutputs) {
  int applied = 0;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Graph g = randomGraph(seed);
    const Graph after = applyRuleEverywhere(g, "cancel-transposes", &applied);
    expectSameOutputs(g, after, seed);
    EXPECT_LE(countOp(after, "Transpose"), countOp(g, "Transpose"));
  }
  EXPECT_GT(applied, 5);
}

}  // namespace
}  // namespace collage
