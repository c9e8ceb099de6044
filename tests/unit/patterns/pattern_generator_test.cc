// Pattern rules and the pattern generator: the groups TVM's fusion would form
// on a ResNet bottleneck block and a BERT encoder layer must be generated, and
// nothing invalid ever is.
#include "core/patterns/pattern_generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "core/ir/error.h"
#include "core/ir/graph.h"
#include "core/ops/op_registry.h"
#include "core/patterns/pattern_rule.h"
#include "core/ir/post_dominator_tree.h"
#include "core/ir/sub_graph.h"

namespace collage {
namespace {

// Kinds as TVM assigns them, so that these tests do not depend on which ops
// the registry holds today.
OpKind testKind(const std::string& op) {
  static const std::map<std::string, OpKind> kinds = {
      {"Conv", OpKind::Anchor},          {"MatMul", OpKind::Anchor},
      {"Gemm", OpKind::Anchor},          {"Add", OpKind::Broadcast},
      {"Sub", OpKind::Broadcast},        {"Mul", OpKind::Broadcast},
      {"Div", OpKind::Broadcast},        {"Pow", OpKind::Broadcast},
      {"Relu", OpKind::ElemWise},        {"Erf", OpKind::ElemWise},
      {"Sqrt", OpKind::ElemWise},        {"Tanh", OpKind::ElemWise},
      {"Sigmoid", OpKind::ElemWise},     {"Reshape", OpKind::Injective},
      {"Transpose", OpKind::Injective},  {"Softmax", OpKind::Reduction},
      {"ReduceMean", OpKind::Reduction}, {"NonZero", OpKind::Opaque},
  };
  auto it = kinds.find(op);
  return it == kinds.end() ? OpKind::Opaque : it->second;
}

struct Builder {
  Graph g;
  ValueId input(const std::string& name, Shape shape) {
    return g.addInput(name, {ElementType::Float32, std::move(shape)});
  }
  ValueId constant(const std::string& name, Shape shape) {
    return g.addConstant(name, Tensor(ElementType::Float32, std::move(shape)));
  }
  ValueId op(const std::string& op, const std::string& name, std::vector<ValueId> inputs,
             Shape shape, AttributeMap attrs = {}) {
    ValueId out = g.addValue(name, {ElementType::Float32, std::move(shape)});
    g.addNode(Node{name, op, std::move(attrs), std::move(inputs), {out}});
    return out;
  }
  NodeId id(const std::string& name) const {
    auto n = g.findNode(name);
    if (!n) throw Error("test graph has no node '" + name + "'");
    return *n;
  }
  NodeSet set(const std::vector<std::string>& names) const {
    NodeSet s(g.numNodes());
    for (const auto& n : names) s.insert(id(n));
    return s;
  }
};

// Stem Relu, then Conv1x1 -> Add(bias) -> Relu -> Conv3x3 -> Add -> Relu ->
// Conv1x1 -> Add(bias) -> Add(residual from the stem) -> Relu.
Builder resnetBottleneck() {
  Builder b;
  const Shape wide{1, 256, 8, 8}, narrow{1, 64, 8, 8};
  ValueId x = b.input("x", wide);
  ValueId x0 = b.op("Relu", "stem_relu", {x}, wide);
  ValueId c1 = b.op("Conv", "conv1", {x0, b.constant("w1", {64, 256, 1, 1})}, narrow);
  ValueId a1 = b.op("Add", "bias1", {c1, b.constant("b1", {1, 64, 1, 1})}, narrow);
  ValueId r1 = b.op("Relu", "relu1", {a1}, narrow);
  ValueId c2 = b.op("Conv", "conv2", {r1, b.constant("w2", {64, 64, 3, 3})}, narrow);
  ValueId a2 = b.op("Add", "bias2", {c2, b.constant("b2", {1, 64, 1, 1})}, narrow);
  ValueId r2 = b.op("Relu", "relu2", {a2}, narrow);
  ValueId c3 = b.op("Conv", "conv3", {r2, b.constant("w3", {256, 64, 1, 1})}, wide);
  ValueId a3 = b.op("Add", "bias3", {c3, b.constant("b3", {1, 256, 1, 1})}, wide);
  ValueId res = b.op("Add", "residual", {a3, x0}, wide);
  ValueId out = b.op("Relu", "relu3", {res}, wide);
  b.g.markOutput(out);
  b.g.finalize();
  return b;
}

// LayerNorm over the last axis, decomposed as exporters write it.
ValueId layerNorm(Builder& b, const std::string& p, ValueId x, const Shape& shape) {
  Shape reduced = shape;
  reduced.back() = 1;
  const int64_t h = shape.back();
  AttributeMap mean;
  mean.set("axes", std::vector<int64_t>{-1});
  ValueId m = b.op("ReduceMean", p + "_mean", {x}, reduced, mean);
  ValueId d = b.op("Sub", p + "_sub", {x, m}, shape);
  ValueId sq = b.op("Pow", p + "_pow", {d, b.constant(p + "_two", {})}, shape);
  ValueId var = b.op("ReduceMean", p + "_var", {sq}, reduced, mean);
  ValueId ve = b.op("Add", p + "_add_eps", {var, b.constant(p + "_eps", {})}, reduced);
  ValueId sd = b.op("Sqrt", p + "_sqrt", {ve}, reduced);
  ValueId nrm = b.op("Div", p + "_div", {d, sd}, shape);
  ValueId sc = b.op("Mul", p + "_mul", {nrm, b.constant(p + "_gamma", {h})}, shape);
  return b.op("Add", p + "_add", {sc, b.constant(p + "_beta", {h})}, shape);
}

// One BERT encoder layer (post-LN, GELU as Div/Erf/Add/Mul/Mul).
Builder bertLayer() {
  Builder b;
  const int64_t S = 8, H = 32, NH = 4, DH = 8, F = 64;
  const Shape hidden{1, S, H};
  ValueId x = b.input("x", hidden);
  ValueId mask = b.input("mask", {1, 1, 1, S});
  auto projection = [&](const std::string& p, Shape transposed) {
    ValueId mm = b.op("MatMul", p + "_mm", {x, b.constant(p + "_w", {H, H})}, hidden);
    ValueId bias = b.op("Add", p + "_bias", {mm, b.constant(p + "_b", {H})}, hidden);
    ValueId r = b.op("Reshape", p + "_reshape", {bias}, {1, S, NH, DH});
    return b.op("Transpose", p + "_transpose", {r}, std::move(transposed));
  };
  ValueId q = projection("q", {1, NH, S, DH});
  ValueId k = projection("k", {1, NH, DH, S});
  ValueId v = projection("v", {1, NH, S, DH});
  const Shape scoresShape{1, NH, S, S};
  ValueId scores = b.op("MatMul", "scores", {q, k}, scoresShape);
  ValueId scaled = b.op("Div", "scale", {scores, b.constant("sqrt_dh", {})}, scoresShape);
  ValueId masked = b.op("Add", "mask_add", {scaled, mask}, scoresShape);
  ValueId probs = b.op("Softmax", "softmax", {masked}, scoresShape);
  ValueId ctx = b.op("MatMul", "context", {probs, v}, {1, NH, S, DH});
  ValueId ct = b.op("Transpose", "ctx_transpose", {ctx}, {1, S, NH, DH});
  ValueId cr = b.op("Reshape", "ctx_reshape", {ct}, hidden);
  ValueId o = b.op("MatMul", "o_mm", {cr, b.constant("o_w", {H, H})}, hidden);
  ValueId ob = b.op("Add", "o_bias", {o, b.constant("o_b", {H})}, hidden);
  ValueId res1 = b.op("Add", "res1", {ob, x}, hidden);
  ValueId ln1 = layerNorm(b, "ln1", res1, hidden);
  const Shape inner{1, S, F};
  ValueId f1 = b.op("MatMul", "ff1_mm", {ln1, b.constant("ff1_w", {H, F})}, inner);
  ValueId f1b = b.op("Add", "ff1_bias", {f1, b.constant("ff1_b", {F})}, inner);
  ValueId gd = b.op("Div", "gelu_div", {f1b, b.constant("sqrt2", {})}, inner);
  ValueId ge = b.op("Erf", "gelu_erf", {gd}, inner);
  ValueId ga = b.op("Add", "gelu_add", {ge, b.constant("one", {})}, inner);
  ValueId gm = b.op("Mul", "gelu_mul", {f1b, ga}, inner);
  ValueId gh = b.op("Mul", "gelu_half", {gm, b.constant("half", {})}, inner);
  ValueId f2 = b.op("MatMul", "ff2_mm", {gh, b.constant("ff2_w", {F, H})}, hidden);
  ValueId f2b = b.op("Add", "ff2_bias", {f2, b.constant("ff2_b", {H})}, hidden);
  ValueId res2 = b.op("Add", "res2", {f2b, ln1}, hidden);
  ValueId out = layerNorm(b, "ln2", res2, hidden);
  b.g.markOutput(out);
  b.g.finalize();
  return b;
}

// TVM's native backend: runs every op it knows, fuses in its three ways.
DeclarativePatternRule tvmRule(OpKindFn kinds = testKind) {
  OpRuleSpec ops;
  ops.excludedOps = {"NonZero"};
  FusionRuleSpec fusion;
  fusion.styles = {"anchor_elemwise", "elemwise_only", "elemwise_reduction", "injective_chain"};
  return DeclarativePatternRule("tvm", ops, fusion, std::move(kinds));
}

// The label of the generated group equal to `set`, or "" when absent.
std::string labelOf(const std::vector<GeneratedGroup>& groups, const NodeSet& set) {
  for (const auto& g : groups)
    if (g.nodes == set) return g.label;
  return "";
}

std::string dump(const Graph& graph, const std::vector<GeneratedGroup>& groups) {
  std::string s;
  for (const auto& g : groups) s += g.toString(graph) + "\n";
  return s;
}

// Every generated group is convex (checked independently of the generator's
// own reachability), has at most one exit, which is its sink (none when the
// sink's result is unused), no set appears twice, and the SubGraph check
// agrees that it is valid.
void expectAllValid(const Graph& graph, const std::vector<GeneratedGroup>& groups,
                    const SubGraphLimits& limits) {
  std::set<std::string> seen;
  for (const auto& g : groups) {
    SubGraphValidity v = checkSubGraph(graph, g.nodes, limits);
    EXPECT_TRUE(v.ok()) << g.toString(graph) << ": " << v.reason;
    SubGraph sg(graph, g.nodes);
    EXPECT_LE(sg.exitNodes().size(), 1u) << g.toString(graph);
    EXPECT_TRUE(seen.insert(g.nodes.toString()).second) << "twice: " << g.toString(graph);
    // The seed is a member, or the fork a block grew from.
    EXPECT_TRUE(g.nodes.contains(g.seed) || graph.successors(g.seed).size() >= 2)
        << g.toString(graph);
    EXPECT_TRUE(g.nodes.contains(g.sink));
    if (!sg.exitNodes().empty()) {
      EXPECT_EQ(sg.exitNodes().front(), g.sink) << g.toString(graph);
    }
  }
}

TEST(PatternRule, EffectiveKindTreatsShapePreservingBroadcastAsElemWise) {
  Builder b = resnetBottleneck();
  EXPECT_EQ(effectiveOpKind(b.g, b.id("bias1"), OpKind::Broadcast), OpKind::Broadcast);
  EXPECT_EQ(effectiveOpKind(b.g, b.id("residual"), OpKind::Broadcast), OpKind::ElemWise);
  EXPECT_EQ(effectiveOpKind(b.g, b.id("conv1"), OpKind::Anchor), OpKind::Anchor);
}

TEST(PatternRule, OpRuleListsKindsTypesRanksAndAttributes) {
  Builder b;
  ValueId x = b.input("x", {1, 4, 8, 8});
  AttributeMap grouped;
  grouped.set("group", int64_t{4});
  AttributeMap plain;
  plain.set("group", int64_t{1});
  ValueId c1 = b.op("Conv", "conv_plain", {x, b.constant("w1", {4, 4, 3, 3})}, {1, 4, 8, 8}, plain);
  ValueId c2 =
      b.op("Conv", "conv_grouped", {c1, b.constant("w2", {4, 1, 3, 3})}, {1, 4, 8, 8}, grouped);
  ValueId r = b.op("Relu", "relu", {c2}, {1, 4, 8, 8});
  ValueId t = b.op("Transpose", "transpose", {r}, {1, 8, 8, 4});
  ValueId ints = b.g.addValue("idx", {ElementType::Int64, {1, 4, 8, 8}});
  b.g.addNode(Node{"nonzero", "NonZero", {}, {r}, {ints}});
  ValueId big = b.op("Reshape", "reshape5", {t}, {1, 2, 4, 8, 4});
  b.g.markOutput(big);
  b.g.markOutput(ints);
  b.g.finalize();

  OpRuleSpec spec;
  spec.kinds = {OpKind::Anchor, OpKind::ElemWise};
  spec.ops = {"Transpose"};
  spec.excludedOps = {"Sigmoid"};
  spec.elementTypes = {ElementType::Float32};
  spec.maxRank = 4;
  spec.attributes = {AttributeCondition{"Conv", "group", {"1"}}};
  DeclarativePatternRule rule("lib", spec, FusionRuleSpec{}, testKind);
  EXPECT_TRUE(rule.opRule(b.g, b.id("conv_plain")));
  EXPECT_FALSE(rule.opRule(b.g, b.id("conv_grouped")));
  EXPECT_NE(rule.opRuleRefusal(b.g, b.id("conv_grouped")).find("group=4"), std::string::npos)
      << rule.opRuleRefusal(b.g, b.id("conv_grouped"));
  EXPECT_TRUE(rule.opRule(b.g, b.id("relu")));       // by kind
  EXPECT_TRUE(rule.opRule(b.g, b.id("transpose")));  // by name, though Injective
  EXPECT_FALSE(rule.opRule(b.g, b.id("nonzero")));   // Opaque, and an int64 output
  EXPECT_NE(rule.opRuleRefusal(b.g, b.id("nonzero")).find("'nonzero' (NonZero)"),
            std::string::npos);
  EXPECT_FALSE(rule.opRule(b.g, b.id("reshape5")));  // neither listed nor rank <= 4

  // Only types and rank: Reshape to rank 5 is refused for its rank.
  OpRuleSpec loose;
  loose.maxRank = 4;
  DeclarativePatternRule looseRule("lib", loose, FusionRuleSpec{}, testKind);
  EXPECT_NE(looseRule.opRuleRefusal(b.g, b.id("reshape5")).find("rank 5"), std::string::npos);
  EXPECT_TRUE(looseRule.opRule(b.g, b.id("conv_grouped")));
  loose.elementTypes = {ElementType::Float32};
  DeclarativePatternRule typed("lib", loose, FusionRuleSpec{}, testKind);
  EXPECT_NE(typed.opRuleRefusal(b.g, b.id("nonzero")).find("int64"), std::string::npos)
      << typed.opRuleRefusal(b.g, b.id("nonzero"));

  // A shape-preserving Add is both Broadcast (registered) and ElemWise (effective).
  {
    Builder rb = resnetBottleneck();
    OpRuleSpec elemwise;
    elemwise.kinds = {OpKind::ElemWise};
    DeclarativePatternRule ew("ew", elemwise, FusionRuleSpec{}, testKind);
    EXPECT_TRUE(ew.opRule(rb.g, rb.id("residual")));
    EXPECT_FALSE(ew.opRule(rb.g, rb.id("bias1")));
    OpRuleSpec broadcast;
    broadcast.kinds = {OpKind::Broadcast};
    DeclarativePatternRule bc("bc", broadcast, FusionRuleSpec{}, testKind);
    EXPECT_TRUE(bc.opRule(rb.g, rb.id("residual")));
    EXPECT_TRUE(bc.opRule(rb.g, rb.id("bias1")));
    EXPECT_FALSE(bc.opRule(rb.g, rb.id("relu1")));
  }

  // An attribute condition without an op applies only where the attribute exists.
  OpRuleSpec anyGroup;
  anyGroup.attributes = {AttributeCondition{"", "group", {"1"}}};
  DeclarativePatternRule anyRule("lib", anyGroup, FusionRuleSpec{}, testKind);
  EXPECT_TRUE(anyRule.opRule(b.g, b.id("relu")));
  EXPECT_FALSE(anyRule.opRule(b.g, b.id("conv_grouped")));
  EXPECT_NE(rule.toString().find("Conv.group in [1]"), std::string::npos) << rule.toString();
}

TEST(PatternRule, UnknownFusionStyleIsAnErrorNamingIt) {
  FusionRuleSpec fusion;
  fusion.styles = {"anchor_elemwise", "everything_goes"};
  try {
    DeclarativePatternRule rule("lib", OpRuleSpec{}, fusion, testKind);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'everything_goes'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("injective_chain"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fusionStyleFromName("elemwise_reduction"), FusionStyle::ElemwiseReduction);
  EXPECT_EQ(fusionStyleNames().size(), 5u);
}

TEST(PatternGenerator, ResNetBottleneckGetsTvmsGroups) {
  Builder b = resnetBottleneck();
  SubGraphLimits limits;
  PatternGeneratorStats stats;
  std::vector<GeneratedGroup> groups = PatternGenerator(b.g).generate(tvmRule(), limits, &stats);
  const std::string all = dump(b.g, groups);
  expectAllValid(b.g, groups, limits);

  // Every op alone.
  for (NodeId n = 0; n < b.g.numNodes(); ++n) {
    NodeSet single(b.g.numNodes());
    single.insert(n);
    EXPECT_EQ(labelOf(groups, single), "op") << b.g.node(n).name << "\n" << all;
  }
  EXPECT_EQ(labelOf(groups, b.set({"conv1", "bias1"})), "fusion:anchor_elemwise") << all;
  EXPECT_EQ(labelOf(groups, b.set({"conv1", "bias1", "relu1"})), "fusion:anchor_elemwise") << all;
  EXPECT_EQ(labelOf(groups, b.set({"conv2", "bias2", "relu2"})), "fusion:anchor_elemwise") << all;
  EXPECT_EQ(labelOf(groups, b.set({"conv3", "bias3", "residual", "relu3"})),
            "fusion:anchor_elemwise")
      << all;
  EXPECT_EQ(labelOf(groups, b.set({"bias1", "relu1"})), "fusion:elemwise_only") << all;
  // No group holds two convolutions, and the stem never joins the block.
  for (const auto& g : groups) {
    int convs = 0;
    g.nodes.forEach([&](NodeId n) { convs += b.g.node(n).op == "Conv"; });
    EXPECT_LE(convs, 1) << g.toString(b.g);
    if (g.nodes.count() > 1) {
      EXPECT_FALSE(g.nodes.contains(b.id("stem_relu"))) << g.toString(b.g);
    }
  }
  EXPECT_EQ(stats.seeds, b.g.numNodes());
  EXPECT_EQ(stats.emitted, static_cast<int>(groups.size()));
  EXPECT_GT(stats.fusionRuleStops, 0);
}

// The groups TVM's FuseOps (and Collage's TVM rule) forms on one BERT layer.
void expectBertGroups(const Builder& b, const std::vector<GeneratedGroup>& groups) {
  const std::string all = dump(b.g, groups);
  const std::string anchor = "fusion:anchor_elemwise";
  for (const char* p : {"q", "k", "v"}) {
    std::string s = p;
    EXPECT_EQ(labelOf(groups, b.set({s + "_mm", s + "_bias"})), anchor) << all;
    // TVM lets an anchor group end in one injective op.
    EXPECT_EQ(labelOf(groups, b.set({s + "_mm", s + "_bias", s + "_reshape"})), anchor) << all;
    EXPECT_EQ(labelOf(groups, b.set({s + "_reshape", s + "_transpose"})), "fusion:injective_chain")
        << all;
    EXPECT_EQ(labelOf(groups, b.set({s + "_mm", s + "_bias", s + "_reshape", s + "_transpose"})),
              "")
        << all;
  }
  EXPECT_EQ(labelOf(groups, b.set({"scores", "scale", "mask_add"})), anchor) << all;
  EXPECT_EQ(labelOf(groups, b.set({"scale", "mask_add", "softmax"})), "fusion:elemwise_reduction")
      << all;
  EXPECT_EQ(labelOf(groups, b.set({"ctx_transpose", "ctx_reshape"})), "fusion:injective_chain")
      << all;
  EXPECT_EQ(labelOf(groups, b.set({"o_mm", "o_bias", "res1"})), anchor) << all;
  EXPECT_EQ(labelOf(groups, b.set({"ff2_mm", "ff2_bias", "res2"})), anchor) << all;
  // MatMul + bias + the whole decomposed GELU.
  EXPECT_EQ(labelOf(groups, b.set({"ff1_mm", "ff1_bias", "gelu_div", "gelu_erf", "gelu_add",
                                   "gelu_mul", "gelu_half"})),
            anchor)
      << all;
  // The residual Add with its decomposed LayerNorm: elementwise work around two reductions.
  for (const char* p : {"1", "2"}) {
    std::string ln = std::string("ln") + p;
    std::vector<std::string> names = {
        std::string("res") + p, ln + "_mean", ln + "_sub", ln + "_pow", ln + "_var",
        ln + "_add_eps",        ln + "_sqrt", ln + "_div", ln + "_mul", ln + "_add"};
    EXPECT_EQ(labelOf(groups, b.set(names)), "fusion:elemwise_reduction") << all;
    names.erase(names.begin());
    EXPECT_EQ(labelOf(groups, b.set(names)), "fusion:elemwise_reduction")
        << all;  // LayerNorm alone
  }
  // The anchor group stops before the reduction.
  EXPECT_EQ(labelOf(groups, b.set({"o_mm", "o_bias", "res1", "ln1_mean", "ln1_sub"})), "") << all;
  for (const auto& g : groups) {
    int anchors = 0;
    g.nodes.forEach([&](NodeId n) { anchors += b.g.node(n).op == "MatMul"; });
    EXPECT_LE(anchors, 1) << g.toString(b.g);
  }
}

TEST(PatternGenerator, BertLayerGetsTvmsGroups) {
  Builder b = bertLayer();
  SubGraphLimits limits;
  std::vector<GeneratedGroup> groups = generateGroups(b.g, tvmRule(), limits);
  expectAllValid(b.g, groups, limits);
  expectBertGroups(b, groups);
}

TEST(PatternGenerator, DiamondNeverYieldsTheNonConvexGroup) {
  Builder b;
  ValueId x = b.input("x", {1, 4, 8, 8});
  ValueId c = b.op("Conv", "conv", {x, b.constant("w", {4, 4, 3, 3})}, {1, 4, 8, 8});
  ValueId r = b.op("Relu", "relu", {c}, {1, 4, 8, 8});
  ValueId a = b.op("Add", "add", {c, r}, {1, 4, 8, 8});
  b.g.markOutput(a);
  b.g.finalize();
  FusionRuleSpec fusion;
  fusion.styles = {"any"};
  std::vector<GeneratedGroup> groups = generateGroups(
      b.g, DeclarativePatternRule("all", OpRuleSpec{}, fusion, testKind), SubGraphLimits{});
  EXPECT_EQ(labelOf(groups, b.set({"conv", "add"})), "");
  EXPECT_EQ(labelOf(groups, b.set({"conv", "relu", "add"})), "fusion:any");
  EXPECT_EQ(labelOf(groups, b.set({"relu", "add"})), "fusion:any");
  EXPECT_EQ(groups.size(), 5u) << dump(b.g, groups);  // three singles and two grown groups
}

TEST(PatternGenerator, LimitsOpRuleAndSizeStopTheGrowth) {
  Builder b = resnetBottleneck();
  // Depth 2: Conv + bias, but not Conv + bias + Relu.
  SubGraphLimits shallow;
  shallow.maxDepth = 2;
  PatternGeneratorStats stats;
  PatternGenerator gen(b.g);
  std::vector<GeneratedGroup> groups = gen.generate(tvmRule(), shallow, &stats);
  EXPECT_EQ(labelOf(groups, b.set({"conv1", "bias1"})), "fusion:anchor_elemwise");
  EXPECT_EQ(labelOf(groups, b.set({"conv1", "bias1", "relu1"})), "");
  EXPECT_GT(stats.validityStops, 0);
  for (const auto& g : groups) EXPECT_LE(subGraphDepth(b.g, g.nodes), 2) << g.toString(b.g);

  // The same through the rule's own size limit.
  FusionRuleSpec two;
  two.styles = {"anchor_elemwise"};
  two.maxNodes = 2;
  groups =
      gen.generate(DeclarativePatternRule("small", OpRuleSpec{}, two, testKind), SubGraphLimits{});
  EXPECT_EQ(labelOf(groups, b.set({"conv1", "bias1"})), "fusion:anchor_elemwise");
  EXPECT_EQ(labelOf(groups, b.set({"conv1", "bias1", "relu1"})), "");

  // A backend without Relu: no Relu alone, and no group reaching across one.
  OpRuleSpec noRelu;
  noRelu.excludedOps = {"Relu"};
  FusionRuleSpec fusion;
  fusion.styles = {"anchor_elemwise"};
  groups = gen.generate(DeclarativePatternRule("no-relu", noRelu, fusion, testKind),
                        SubGraphLimits{}, &stats);
  EXPECT_EQ(labelOf(groups, b.set({"conv1", "bias1"})), "fusion:anchor_elemwise");
  EXPECT_EQ(labelOf(groups, b.set({"conv1", "bias1", "relu1"})), "");
  for (const auto& g : groups)
    g.nodes.forEach([&](NodeId n) { EXPECT_NE(b.g.node(n).op, "Relu") << g.toString(b.g); });
  EXPECT_GT(stats.opRuleStops, 0);

  // No fusion styles: single ops only.
  groups = gen.generate(DeclarativePatternRule("ops", OpRuleSpec{}, FusionRuleSpec{}, testKind),
                        SubGraphLimits{});
  EXPECT_EQ(groups.size(), static_cast<size_t>(b.g.numNodes()));
  for (const auto& g : groups) EXPECT_EQ(g.label, "op");
}

TEST(PatternGenerator, CppRuleSeesSeedAndSinkAndNamesItsFusions) {
  Builder b = resnetBottleneck();
  PostDominatorTree pdom(b.g);
  GraphReachability reach(b.g);
  int calls = 0;
  FunctionPatternRule rule(
      "pairs", [](const Graph& g, NodeId n) { return g.node(n).name != "conv3"; },
      [&](const Graph& g, const NodeSet& group, NodeId seed,
          NodeId sink) -> std::optional<std::string> {
        ++calls;
        // What the generator promises: the sink post-dominates the seed and
        // the group is everything on the paths between them.
        EXPECT_TRUE(pdom.postDominates(sink, seed));
        EXPECT_EQ(group, reach.between(seed, sink));
        if (group.count() == 2) return std::string("pair");
        return std::nullopt;
      });
  std::vector<GeneratedGroup> groups = generateGroups(b.g, rule, SubGraphLimits{});
  EXPECT_GT(calls, 0);
  int pairs = 0;
  for (const auto& g : groups) {
    if (g.label == "fusion:pair") {
      ++pairs;
      EXPECT_EQ(g.nodes.count(), 2);
    } else {
      EXPECT_EQ(g.label, "op");
      EXPECT_EQ(g.nodes.count(), 1);
    }
  }
  // conv3 fails the op rule: no single, no pair starting or passing there.
  NodeSet conv3(b.g.numNodes());
  conv3.insert(b.id("conv3"));
  EXPECT_EQ(labelOf(groups, conv3), "");
  EXPECT_EQ(labelOf(groups, b.set({"relu2", "conv3"})), "");
  EXPECT_EQ(labelOf(groups, b.set({"conv1", "bias1"})), "fusion:pair");
  // conv1, bias1, relu1, conv2, bias2, bias3 and residual grow into a pair;
  // the stem's first growth is the whole block, relu2's reaches conv3.
  EXPECT_EQ(pairs, 7);
}

// A rule that grows from forks: the block between the stem's fork and the
// residual Add comes as one group without the fork itself, then grows on;
// emitsGroup keeps a group out of the candidates but not out of the growth.
TEST(PatternGenerator, ForkGrowthTakesTheBlockWithoutTheForkAndHonoursEmitsGroup) {
  Builder b = resnetBottleneck();
  const NodeId stem = b.id("stem_relu");
  struct BlockRule : PatternRule {
    NodeId fork = kNoNode, residual = kNoNode;
    std::vector<std::pair<NodeSet, NodeId>> asked;  // (group, seed) of fork growth
    std::string name() const override { return "blocks"; }
    bool opRule(const Graph&, NodeId) const override { return false; }  // no seeds at all
    bool memberRule(const Graph&, NodeId) const override { return true; }
    std::optional<std::string> fusionRule(const Graph&, const NodeSet& group, NodeId seed,
                                          NodeId) const override {
      const_cast<BlockRule*>(this)->asked.emplace_back(group, seed);
      return std::string("block");
    }
    bool growsFromForks() const override { return true; }
    bool emitsGroup(const Graph&, const NodeSet&, NodeId, NodeId sink) const override {
      return sink != residual;
    }
  } rule;
  rule.fork = stem;
  rule.residual = b.id("residual");
  PatternGeneratorStats stats;
  std::vector<GeneratedGroup> groups = PatternGenerator(b.g).generate(rule, {}, &stats);
  EXPECT_EQ(stats.seeds, 0);
  EXPECT_EQ(stats.forks, 1);  // only the stem's result feeds two nodes
  const NodeSet block = b.set({"conv1", "bias1", "relu1", "conv2", "bias2", "relu2", "conv3",
                               "bias3", "residual"});
  ASSERT_EQ(rule.asked.size(), 2u);
  EXPECT_EQ(rule.asked[0].first, block);
  EXPECT_EQ(rule.asked[0].second, stem);
  EXPECT_FALSE(rule.asked[0].first.contains(stem));
  // The block itself ends before the Relu its Add feeds: not emitted; the
  // growth goes on to relu3, which is.
  ASSERT_EQ(groups.size(), 1u) << dump(b.g, groups);
  NodeSet withRelu = block;
  withRelu.insert(b.id("relu3"));
  EXPECT_EQ(groups[0].nodes, withRelu);
  EXPECT_EQ(groups[0].seed, stem);
  EXPECT_EQ(groups[0].label, "fusion:block");
  expectAllValid(b.g, groups, SubGraphLimits{});
}

// On random DAGs with the most permissive rule, every group the generator
// emits is valid, and every seed's growth is exactly its chain of
// post-dominators.
TEST(PatternGenerator, RandomDagsYieldOnlyValidGroupsAlongThePostDominatorChain) {
  std::mt19937 rng(4242);
  FusionRuleSpec any;
  any.styles = {"any"};
  DeclarativePatternRule rule("any", OpRuleSpec{}, any, testKind);
  for (int trial = 0; trial < 40; ++trial) {
    Builder b;
    ValueId x = b.input("x", {4});
    std::vector<ValueId> outs;
    const int n = 5 + trial;
    for (int i = 0; i < n; ++i) {
      std::vector<ValueId> ins;
      for (int k = 1 + static_cast<int>(rng() % 2); k > 0; --k)
        ins.push_back(outs.empty() || rng() % 6 == 0 ? x : outs[rng() % outs.size()]);
      outs.push_back(b.op(rng() % 2 ? "Add" : "Relu", "n" + std::to_string(i), ins, {4}));
    }
    for (ValueId v : outs)
      if (rng() % 7 == 0) b.g.markOutput(v);
    b.g.markOutput(outs.back());
    b.g.finalize();
    SubGraphLimits limits;
    std::vector<GeneratedGroup> groups = generateGroups(b.g, rule, limits);
    expectAllValid(b.g, groups, limits);
    PostDominatorTree pdom(b.g);
    size_t expected = 0;
    for (NodeId s = 0; s < n; ++s) expected += 1 + pdom.postDominators(s).size();
    EXPECT_EQ(groups.size(), expected) << b.g.toString();
  }
}

// With the op registry's own kinds, once the ops these graphs use are registered.
TEST(PatternGenerator, ResNetBottleneckWithRegistryKinds) {
  for (const char* op : {"Conv", "Add", "Relu"})
    if (!OpRegistry::instance().find(op)) GTEST_SKIP() << op << " is not registered yet";
  Builder b = resnetBottleneck();
  std::vector<GeneratedGroup> groups =
      generateGroups(b.g, tvmRule(registryOpKind), SubGraphLimits{});
  EXPECT_EQ(labelOf(groups, b.set({"conv1", "bias1", "relu1"})), "fusion:anchor_elemwise")
      << dump(b.g, groups);
  EXPECT_EQ(labelOf(groups, b.set({"conv3", "bias3", "residual", "relu3"})),
            "fusion:anchor_elemwise")
      << dump(b.g, groups);
}

TEST(PatternGenerator, BertLayerWithRegistryKinds) {
  for (const char* op : {"MatMul", "Add", "Reshape", "Transpose", "Div", "Softmax", "ReduceMean",
                         "Sub", "Pow", "Sqrt", "Mul", "Erf"})
    if (!OpRegistry::instance().find(op)) GTEST_SKIP() << op << " is not registered yet";
  Builder b = bertLayer();
  std::vector<GeneratedGroup> groups =
      generateGroups(b.g, tvmRule(registryOpKind), SubGraphLimits{});
  expectBertGroups(b, groups);
}

}  // namespace
}  // namespace collage
