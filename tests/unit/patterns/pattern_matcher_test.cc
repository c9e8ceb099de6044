#include <gtest/gtest.h>

#include <algorithm>

#include "core/ir/graph.h"
#include "core/patterns/pattern_matcher.h"
#include "core/patterns/pattern_parser.h"

namespace collage {
namespace {

const TensorType kF32{ElementType::Float32, {1, 4, 8, 8}};

// Builds small graphs by hand (no op registry needed): every op has one
// output of the given type, named after the node.
class GraphBuilder {
 public:
  ValueId input(const std::string& name, TensorType type = kF32) {
    return g.addInput(name, std::move(type));
  }
  ValueId constant(const std::string& name, Shape shape = {4, 4, 3, 3}) {
    return g.addConstant(name, Tensor(ElementType::Float32, std::move(shape)));
  }
  ValueId op(const std::string& name, const std::string& op, std::vector<ValueId> inputs,
             AttributeMap attrs = {}, TensorType type = kF32) {
    ValueId out = g.addValue(name, std::move(type));
    g.addNode(Node{name, op, std::move(attrs), std::move(inputs), {out}});
    return out;
  }
  Graph& finish(std::vector<ValueId> outputs) {
    for (ValueId v : outputs) g.markOutput(v);
    g.finalize();
    return g;
  }
  Graph g;
};

NodeId nodeOf(const Graph& g, const std::string& name) { return *g.findNode(name); }

// The node names of each match, sorted, e.g. {"conv1 relu1", "conv2"}.
std::vector<std::string> matchNames(const Graph& g, const std::vector<PatternMatch>& ms) {
  std::vector<std::string> out;
  for (const auto& m : ms) {
    std::vector<std::string> names;
    m.nodes.forEach([&](NodeId n) { names.push_back(g.node(n).name); });
    std::sort(names.begin(), names.end());
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : " ") + n;
    out.push_back(s);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> matchNames(const Graph& g, const std::string& pattern) {
  return matchNames(g, findMatches(parsePattern(pattern), g));
}

using Names = std::vector<std::string>;

TEST(PatternMatcher, OverlappingMatchesAreAllReported) {
  GraphBuilder b;
  ValueId x = b.input("x");
  ValueId r1 = b.op("r1", "Relu", {x});
  ValueId r2 = b.op("r2", "Relu", {r1});
  ValueId r3 = b.op("r3", "Relu", {r2});
  Graph& g = b.finish({r3});
  auto ms = findMatches(parsePattern("Relu(Relu(*))"), g);
  ASSERT_EQ(ms.size(), 2u);
  EXPECT_EQ(ms[0].exit, nodeOf(g, "r2"));
  EXPECT_EQ(ms[0].inputs, std::vector<ValueId>{x});
  EXPECT_EQ(ms[1].exit, nodeOf(g, "r3"));
  EXPECT_EQ(ms[1].inputs, std::vector<ValueId>{r1});
  EXPECT_EQ(matchNames(g, ms), (Names{"r1 r2", "r2 r3"}));
  EXPECT_EQ(matchNames(g, "Relu"), (Names{"r1", "r2", "r3"}));
  EXPECT_EQ(matchNames(g, "Relu(Relu(Relu(*)))"), (Names{"r1 r2 r3"}));
  EXPECT_EQ(matchNames(g, "Relu(Relu(Relu(Relu(*))))"), Names{});
}

TEST(PatternMatcher, CommutativeOpsMatchEitherArgumentOrder) {
  for (bool convFirst : {true, false}) {
    SCOPED_TRACE(convFirst);
    GraphBuilder b;
    ValueId x = b.input("x"), y = b.input("y");
    ValueId w = b.constant("w");
    ValueId conv = b.op("conv", "Conv", {x, w});
    ValueId add = b.op("add", "Add", convFirst ? std::vector{conv, y} : std::vector{y, conv});
    ValueId sub = b.op("sub", "Sub", convFirst ? std::vector{add, y} : std::vector{y, add});
    Graph& g = b.finish({sub});
    auto ms = findMatches(parsePattern("Add(*, Conv(*, *))"), g);
    ASSERT_EQ(ms.size(), 1u);
    // Inputs follow the pattern's order, whatever the graph's order.
    EXPECT_EQ(ms[0].inputs, (std::vector<ValueId>{y, x, w}));
    EXPECT_EQ(matchNames(g, "Add(Conv(*, *), *)"), (Names{"add conv"}));
    // Sub is not commutative: only one order matches.
    EXPECT_EQ(matchNames(g, "Sub(Add(*, *), *)").size(), convFirst ? 1u : 0u);
    EXPECT_EQ(matchNames(g, "Sub(*, Add(*, *))").size(), convFirst ? 0u : 1u);
  }
}

TEST(PatternMatcher, TheSameBindingsFoundTwiceAreOneMatch) {
  GraphBuilder b;
  ValueId p = b.input("p"), q = b.input("q");
  ValueId add = b.op("add", "Add", {p, q});
  ValueId twice = b.op("twice", "Add", {add, add});
  Graph& g = b.finish({twice});
  auto ms = matchesAt(parsePattern("Add(*, *)"), g, nodeOf(g, "add"));
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].inputs, (std::vector<ValueId>{p, q}));
  // Different captures are different matches: a=p,b=q and a=q,b=p.
  auto named = matchesAt(parsePattern("Add(a=*, b=*)"), g, nodeOf(g, "add"));
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].valueCaptures.at("a"), p);
  EXPECT_EQ(named[1].valueCaptures.at("a"), q);
  // A value used twice is one input.
  auto same = matchesAt(parsePattern("Add(*, *)"), g, nodeOf(g, "twice"));
  ASSERT_EQ(same.size(), 1u);
  EXPECT_EQ(same[0].inputs, std::vector<ValueId>{add});
}

TEST(PatternMatcher, AttributeConstraints) {
  GraphBuilder b;
  ValueId x = b.input("x");
  ValueId w = b.constant("w");
  auto conv = [&](const std::string& name, int64_t group, std::vector<int64_t> kernel,
                  const std::string& pad, std::vector<int64_t> dilations) {
    AttributeMap a;
    a.set("group", group);
    a.set("kernel_shape", kernel);
    a.set("auto_pad", pad);
    a.set("dilations", dilations);
    return b.op(name, "Conv", {x, w}, a);
  };
  ValueId c1 = conv("c1", 1, {3, 3}, "NOTSET", {1, 1});
  ValueId c2 = conv("c2", 4, {1, 1}, "SAME_UPPER", {1, 1});
  ValueId c3 = conv("c3", 2, {3, 3}, "VALID", {2, 2});
  AttributeMap leaky;
  leaky.set("alpha", 0.1f);
  ValueId l = b.op("leaky", "LeakyRelu", {x}, leaky);
  ValueId noAttrs = b.op("c4", "Conv", {x, w});
  Graph& g = b.finish({c1, c2, c3, l, noAttrs});
  EXPECT_EQ(matchNames(g, "Conv[group > 1]"), (Names{"c2", "c3"}));
  EXPECT_EQ(matchNames(g, "Conv[group == 1]"), (Names{"c1"}));
  EXPECT_EQ(matchNames(g, "Conv[group != 1]"), (Names{"c2", "c3"}));  // c4 has no group
  EXPECT_EQ(matchNames(g, "Conv[group >= 2, group <= 2.5]"), (Names{"c3"}));
  EXPECT_EQ(matchNames(g, "Conv[group in [1, 4]]"), (Names{"c1", "c2"}));
  EXPECT_EQ(matchNames(g, "Conv[kernel_shape == [3,3]]"), (Names{"c1", "c3"}));
  EXPECT_EQ(matchNames(g, "Conv[kernel_shape != [3,3]]"), (Names{"c2"}));
  EXPECT_EQ(matchNames(g, "Conv[kernel_shape == [3]]"), Names{});
  EXPECT_EQ(matchNames(g, "Conv[kernel_shape in [[1,1],[5,5]]]"), (Names{"c2"}));
  EXPECT_EQ(matchNames(g, "Conv[auto_pad in [NOTSET, VALID]]"), (Names{"c1", "c3"}));
  EXPECT_EQ(matchNames(g, "Conv[auto_pad == \"SAME_UPPER\"]"), (Names{"c2"}));
  EXPECT_EQ(matchNames(g, "Conv[auto_pad > 1]"), Names{});  // a string is not a number
  // A list compared with a number: every element.
  EXPECT_EQ(matchNames(g, "Conv[dilations == 1]"), (Names{"c1", "c2"}));
  EXPECT_EQ(matchNames(g, "Conv[dilations > 1, kernel_shape in [1, 3]]"), (Names{"c3"}));
  // A float attribute compares in float precision.
  EXPECT_EQ(matchNames(g, "LeakyRelu[alpha == 0.1]"), (Names{"leaky"}));
  EXPECT_EQ(matchNames(g, "LeakyRelu[alpha <= 0.1, alpha > 0.09]"), (Names{"leaky"}));
  EXPECT_EQ(matchNames(g, "LeakyRelu[alpha < 0.1]"), Names{});
}

TEST(PatternMatcher, TypeConstraints) {
  GraphBuilder b;
  ValueId x = b.input("x", {ElementType::Float32, {1, 3, 8, 8}});
  ValueId i = b.input("i", {ElementType::Int64, {2, 8}});
  ValueId r1 = b.op("r1", "Relu", {x}, {}, {ElementType::Float32, {1, 3, 8, 8}});
  ValueId r2 = b.op("r2", "Relu", {i}, {}, {ElementType::Int64, {2, 8}});
  Graph& g = b.finish({r1, r2});
  EXPECT_EQ(matchNames(g, "Relu(*:float32)"), (Names{"r1"}));
  EXPECT_EQ(matchNames(g, "Relu:int64"), (Names{"r2"}));
  EXPECT_EQ(matchNames(g, "Relu(*:[1,*,*,*])"), (Names{"r1"}));
  EXPECT_EQ(matchNames(g, "Relu(*:float32[1,3,8,8])"), (Names{"r1"}));
  EXPECT_EQ(matchNames(g, "Relu(*:float32[1,4,8,8])"), Names{});
  EXPECT_EQ(matchNames(g, "Relu(*:rank(2))"), (Names{"r2"}));
  EXPECT_EQ(matchNames(g, "Relu(*:[...,8])"), (Names{"r1", "r2"}));
  EXPECT_EQ(matchNames(g, "Relu(*:[2,...])"), (Names{"r2"}));
  EXPECT_EQ(matchNames(g, "Relu(*:[1,...,8,8])"), (Names{"r1"}));
  EXPECT_EQ(matchNames(g, "Relu(*:[...,3,8,8])"), (Names{"r1"}));
  EXPECT_EQ(matchNames(g, "Relu(*:[...,1,3,8,8])"), (Names{"r1"}));  // '...' may be empty
  EXPECT_EQ(matchNames(g, "Relu(*:[...,*,1,3,8,8])"), Names{});
  EXPECT_EQ(matchNames(g, "Relu(*:[])"), Names{});
  EXPECT_EQ(matchNames(g, "(Relu(*) | Tanh(*)):int64"), (Names{"r2"}));
  EXPECT_EQ(matchNames(g, "Relu?(Relu(*):int64):float32"), (Names{}));
  EXPECT_EQ(matchNames(g, "Relu?(Relu(*):int64)"), (Names{"r2"}));
}

TEST(PatternMatcher, OptionalInput) {
  GraphBuilder b;
  ValueId x = b.input("x");
  ValueId w = b.constant("w"), bias = b.constant("bias", {4});
  ValueId withBias = b.op("with_bias", "Conv", {x, w, bias});
  ValueId noBias = b.op("no_bias", "Conv", {x, w});
  ValueId absent = b.op("absent_bias", "Conv", {x, w, kNoValue});
  Graph& g = b.finish({withBias, noBias, absent});
  EXPECT_EQ(matchNames(g, "Conv(*, const, ?const)"), (Names{"absent_bias", "no_bias", "with_bias"}));
  EXPECT_EQ(matchNames(g, "Conv(*, const)"), (Names{"absent_bias", "no_bias"}));
  EXPECT_EQ(matchNames(g, "Conv(*, const, const)"), (Names{"with_bias"}));
  auto ms = matchesAt(parsePattern("Conv(*, w=const, ?b=const)"), g, nodeOf(g, "no_bias"));
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].inputs, (std::vector<ValueId>{x, w}));
  EXPECT_EQ(ms[0].valueCaptures.count("b"), 0u);  // absent: not captured
  // A bare op name takes any inputs, each one a match input.
  auto bare = matchesAt(parsePattern("Conv"), g, nodeOf(g, "with_bias"));
  ASSERT_EQ(bare.size(), 1u);
  EXPECT_EQ(bare[0].inputs, (std::vector<ValueId>{x, w, bias}));
}

TEST(PatternMatcher, OptionalWrapper) {
  GraphBuilder b;
  ValueId x = b.input("x");
  ValueId w = b.constant("w");
  ValueId conv1 = b.op("conv1", "Conv", {x, w});
  ValueId relu1 = b.op("relu1", "Relu", {conv1});
  ValueId conv2 = b.op("conv2", "Conv", {relu1, w});
  ValueId add = b.op("add", "Add", {conv2, x});
  Graph& g = b.finish({add});
  // The exit may be the Relu or (Relu absent) the Conv; a Conv's output may
  // leave the match when it is the exit.
  EXPECT_EQ(matchNames(g, "Relu?(Conv(*, const))"), (Names{"conv1", "conv1 relu1", "conv2"}));
  EXPECT_EQ(matchNames(g, "Relu?(Add?(Conv(*, const), *))"),
            (Names{"add conv2", "conv1", "conv1 relu1", "conv2"}));
  // Inside a pattern: Add(Relu?(Conv(*, const)), *) with the Relu absent.
  auto ms = findMatches(parsePattern("Add(Relu?(c=Conv(*, const)), *)"), g);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].captures.at("c"), nodeOf(g, "conv2"));
  EXPECT_EQ(ms[0].inputs, (std::vector<ValueId>{relu1, w, x}));
}

TEST(PatternMatcher, ConstInputMustBeAConstant) {
  GraphBuilder b;
  ValueId x = b.input("x");
  ValueId w = b.constant("w");
  ValueId wIn = b.input("w_in", {ElementType::Float32, {4, 4, 3, 3}});
  ValueId wComputed = b.op("w_computed", "Neg", {w}, {}, {ElementType::Float32, {4, 4, 3, 3}});
  ValueId c1 = b.op("c1", "Conv", {x, w});
  ValueId c2 = b.op("c2", "Conv", {x, wIn});
  ValueId c3 = b.op("c3", "Conv", {x, wComputed});
  Graph& g = b.finish({c1, c2, c3});
  EXPECT_EQ(matchNames(g, "Conv(*, const)"), (Names{"c1"}));
  EXPECT_EQ(matchNames(g, "Conv(*, *)"), (Names{"c1", "c2", "c3"}));
  EXPECT_EQ(matchNames(g, "Conv(*, Neg(const))"), (Names{"c3 w_computed"}));
  EXPECT_EQ(matchNames(g, "Conv(const, *)"), Names{});
}

TEST(PatternMatcher, Alternatives) {
  GraphBuilder b;
  ValueId x = b.input("x");
  ValueId w = b.constant("w"), wm = b.constant("wm", {8, 8});
  ValueId conv = b.op("conv", "Conv", {x, w});
  ValueId sig = b.op("sig", "Sigmoid", {conv});
  ValueId conv2 = b.op("conv2", "Conv", {x, w});
  ValueId tanh = b.op("tanh", "Tanh", {conv2});
  ValueId conv3 = b.op("conv3", "Conv", {x, w});
  ValueId elu = b.op("elu", "Elu", {conv3});
  ValueId mm = b.op("mm", "MatMul", {x, wm});
  ValueId add = b.op("add", "Add", {mm, x});
  Graph& g = b.finish({sig, tanh, elu, add});
  EXPECT_EQ(matchNames(g, "Relu|Sigmoid|Tanh(Conv(*, const))"), (Names{"conv sig", "conv2 tanh"}));
  EXPECT_EQ(matchNames(g, "(Relu | Sigmoid | Tanh)(Conv(*, const))"),
            (Names{"conv sig", "conv2 tanh"}));
  EXPECT_EQ(matchNames(g, "Add((Conv(*, const) | MatMul(*, const)), *)"), (Names{"add mm"}));
  EXPECT_EQ(matchNames(g, "(Elu(Conv(*, const)) | MatMul(*, const))"), (Names{"conv3 elu", "mm"}));
}

TEST(PatternMatcher, CapturesReportWhichNodeIsWhich) {
  GraphBuilder b;
  ValueId x = b.input("x");
  ValueId w = b.constant("w"), bias = b.constant("bias", {4});
  ValueId conv = b.op("conv1", "Conv", {x, w, bias});
  ValueId y = b.input("y");
  ValueId add = b.op("add1", "Add", {y, conv});
  ValueId relu = b.op("relu1", "Relu", {add});
  Graph& g = b.finish({relu});
  auto ms = findMatches(
      parsePattern("act=Relu(sum=Add(conv=Conv(data=*, weight=const, ?bias=const), residual=*))"), g);
  ASSERT_EQ(ms.size(), 1u);
  const PatternMatch& m = ms[0];
  EXPECT_EQ(m.exit, nodeOf(g, "relu1"));
  EXPECT_EQ(m.captures, (std::map<std::string, NodeId>{{"act", nodeOf(g, "relu1")},
                                                       {"sum", nodeOf(g, "add1")},
                                                       {"conv", nodeOf(g, "conv1")}}));
  EXPECT_EQ(m.valueCaptures, (std::map<std::string, ValueId>{
                                 {"data", x}, {"weight", w}, {"bias", bias}, {"residual", y}}));
  EXPECT_EQ(m.inputs, (std::vector<ValueId>{x, w, bias, y}));
  EXPECT_EQ(m.nodes.count(), 3);
  std::string text = m.toString(g);
  EXPECT_NE(text.find("inputs (x, w, bias, y)"), std::string::npos) << text;
  EXPECT_NE(text.find("conv=#"), std::string::npos) << text;
  EXPECT_NE(text.find("'conv1'"), std::string::npos) << text;
  EXPECT_NE(m.toString().find("exit #" + std::to_string(m.exit)), std::string::npos);
}

TEST(PatternMatcher, OnlyTheExitMayHaveOutsideConsumers) {
  GraphBuilder b;
  ValueId x = b.input("x");
  ValueId w = b.constant("w");
  ValueId conv = b.op("conv", "Conv", {x, w});
  ValueId relu = b.op("relu", "Relu", {conv});
  ValueId neg = b.op("neg", "Neg", {conv});  // a second consumer of conv
  ValueId conv2 = b.op("conv2", "Conv", {x, w});
  ValueId relu2 = b.op("relu2", "Relu", {conv2});
  Graph& g = b.finish({relu, neg, conv2, relu2});  // conv2 is also a graph output
  EXPECT_EQ(matchNames(g, "Relu(Conv(*, *))"), Names{});
  EXPECT_EQ(matchNames(g, "Relu|Neg(Conv(*, *))"), Names{});
  EXPECT_EQ(matchNames(g, "Conv(*, *)"), (Names{"conv", "conv2"}));
  EXPECT_EQ(matchNames(g, "Relu?(Conv(*, *))"), (Names{"conv", "conv2"}));
}

TEST(PatternMatcher, InputsComeFromOutsideTheMatch) {
  GraphBuilder b;
  ValueId x = b.input("x");
  ValueId r = b.op("r", "Relu", {x});
  ValueId add = b.op("add", "Add", {r, r});
  Graph& g = b.finish({add});
  // The second '*' would be the Relu's output, computed inside the match.
  EXPECT_EQ(matchNames(g, "Add(Relu(*), *)"), Names{});
  // Two sub-patterns may match the same shared node.
  auto ms = findMatches(parsePattern("Add(Relu(*), Relu(*))"), g);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(ms[0].nodes.count(), 2);
  EXPECT_EQ(ms[0].inputs, std::vector<ValueId>{x});
}

TEST(PatternMatcher, ReferencesMakeTheSameValue) {
  GraphBuilder b;
  ValueId x = b.input("x"), y = b.input("y");
  ValueId s1 = b.op("s1", "Sigmoid", {x});
  ValueId swish = b.op("swish", "Mul", {s1, x});  // x * sigmoid(x), argument order swapped
  ValueId s2 = b.op("s2", "Sigmoid", {x});
  ValueId notSwish = b.op("not_swish", "Mul", {y, s2});
  ValueId w = b.constant("w");
  ValueId conv = b.op("conv", "Conv", {x, w});
  ValueId s3 = b.op("s3", "Sigmoid", {conv});
  ValueId convSwish = b.op("conv_swish", "Mul", {conv, s3});
  Graph& g = b.finish({swish, notSwish, convSwish});
  EXPECT_EQ(matchNames(g, "Mul(v=*, Sigmoid($v))"), (Names{"conv_swish s3", "s1 swish"}));
  EXPECT_EQ(matchNames(g, "Mul(*, Sigmoid(*))"),
            (Names{"conv_swish s3", "not_swish s2", "s1 swish"}));
  // A reference to an op capture: a DAG with one exit.
  auto ms = findMatches(parsePattern("Mul(c=Conv(*, const), Sigmoid($c))"), g);
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_EQ(matchNames(g, ms), (Names{"conv conv_swish s3"}));
  EXPECT_EQ(ms[0].inputs, (std::vector<ValueId>{x, w}));
}

TEST(PatternMatcher, MatchesAtOneRootAndIndexesByRootOp) {
  GraphBuilder b;
  ValueId x = b.input("x");
  ValueId w = b.constant("w");
  ValueId conv = b.op("conv", "Conv", {x, w});
  ValueId relu = b.op("relu", "Relu", {conv});
  Graph& g = b.finish({relu});
  Pattern p = parsePattern("Relu?(Conv(*, const))");
  PatternMatcher matcher(g);
  EXPECT_EQ(matcher.matchesAt(p, nodeOf(g, "relu")).size(), 1u);
  EXPECT_EQ(matcher.matchesAt(p, nodeOf(g, "conv")).size(), 1u);
  EXPECT_EQ(matcher.findMatches(p).size(), 2u);
  EXPECT_EQ(matcher.findMatches(parsePattern("Tanh(*)")).size(), 0u);
  EXPECT_TRUE(isCommutativeOp("Add"));
  EXPECT_FALSE(isCommutativeOp("Sub"));
}

}  // namespace
}  // namespace collage
