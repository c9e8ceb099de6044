// SubGraph boundary data, validity (convexity, exits, taps, depth, size), the
// reachability helper and the post-dominator tree.
#include "core/ir/sub_graph.h"

#include <gtest/gtest.h>

#include <random>

#include "core/ir/error.h"
#include "core/ir/graph.h"
#include "core/ir/node_set.h"
#include "core/ir/post_dominator_tree.h"

namespace collage {
namespace {

// Builds graphs by hand: every op node has one output named after the node.
struct Builder {
  Graph g;
  ValueId input(const std::string& name, Shape shape = {4}) {
    return g.addInput(name, {ElementType::Float32, std::move(shape)});
  }
  ValueId constant(const std::string& name, Shape shape = {4}) {
    return g.addConstant(name, Tensor(ElementType::Float32, std::move(shape)));
  }
  ValueId op(const std::string& op, const std::string& name, std::vector<ValueId> inputs,
             Shape shape = {4}) {
    ValueId out = g.addValue(name, {ElementType::Float32, std::move(shape)});
    g.addNode(Node{name, op, {}, std::move(inputs), {out}});
    return out;
  }
  NodeId id(const std::string& name) const { return *g.findNode(name); }
  NodeSet set(const std::vector<std::string>& names) const {
    NodeSet s(g.numNodes());
    for (const auto& n : names) s.insert(id(n));
    return s;
  }
};

// conv feeds relu and add; add also reads relu:  conv -> relu -> add, conv -> add.
Builder diamond() {
  Builder b;
  ValueId x = b.input("x");
  ValueId w = b.constant("w");
  ValueId c = b.op("Conv", "conv", {x, w});
  ValueId r = b.op("Relu", "relu", {c});
  ValueId a = b.op("Add", "add", {c, r});
  b.g.markOutput(a);
  b.g.finalize();
  return b;
}

TEST(SubGraph, DiamondWithoutTheMiddleIsNotConvex) {
  Builder b = diamond();
  SubGraphLimits limits;
  SubGraphValidity v = checkSubGraph(b.g, b.set({"conv", "add"}), limits);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.problem, SubGraphProblem::NotConvex);
  EXPECT_EQ(v.witness, b.id("relu"));
  EXPECT_NE(v.reason.find("'relu' (Relu)"), std::string::npos) << v.reason;

  GraphReachability reach(b.g);
  SubGraphValidity v2 = checkSubGraph(b.g, reach, b.set({"conv", "add"}), limits);
  EXPECT_EQ(v2.problem, SubGraphProblem::NotConvex);
  EXPECT_EQ(v2.witness, b.id("relu"));
  EXPECT_EQ(reach.outsidePathNodes(b.set({"conv", "add"})), b.set({"relu"}));

  EXPECT_TRUE(checkSubGraph(b.g, b.set({"conv", "relu", "add"}), limits).ok());
  EXPECT_TRUE(checkSubGraph(b.g, reach, b.set({"conv", "relu", "add"}), limits).ok());
  EXPECT_TRUE(checkSubGraph(b.g, b.set({"relu", "add"}), limits).ok());
}

TEST(SubGraph, ExitsTapsDepthSizeAndEmpty) {
  Builder b = diamond();
  SubGraphLimits limits;  // one exit, taps allowed
  // conv and relu both feed add, outside: two exits.
  SubGraphValidity v = checkSubGraph(b.g, b.set({"conv", "relu"}), limits);
  EXPECT_EQ(v.problem, SubGraphProblem::TooManyExits);
  EXPECT_NE(v.reason.find("'conv'"), std::string::npos) << v.reason;
  limits.maxExits = 2;
  EXPECT_TRUE(checkSubGraph(b.g, b.set({"conv", "relu"}), limits).ok());
  limits.maxExits = 0;  // no limit
  EXPECT_TRUE(checkSubGraph(b.g, b.set({"conv", "relu"}), limits).ok());
  // conv's result leaves (to add) and also feeds relu inside: a tap.
  limits.allowTaps = false;
  v = checkSubGraph(b.g, b.set({"conv", "relu"}), limits);
  EXPECT_EQ(v.problem, SubGraphProblem::Tap);
  EXPECT_EQ(v.witness, b.id("conv"));

  limits = SubGraphLimits{};
  limits.maxDepth = 2;
  v = checkSubGraph(b.g, b.set({"conv", "relu", "add"}), limits);
  EXPECT_EQ(v.problem, SubGraphProblem::TooDeep);
  limits.maxDepth = 3;
  EXPECT_TRUE(checkSubGraph(b.g, b.set({"conv", "relu", "add"}), limits).ok());
  limits.maxNodes = 2;
  EXPECT_EQ(checkSubGraph(b.g, b.set({"conv", "relu", "add"}), limits).problem,
            SubGraphProblem::TooManyNodes);

  EXPECT_EQ(checkSubGraph(b.g, NodeSet(b.g.numNodes()), SubGraphLimits{}).problem,
            SubGraphProblem::Empty);
  // A set sized for another graph is a bug, not a user error.
  EXPECT_THROW(checkSubGraph(b.g, NodeSet(7), SubGraphLimits{}), Error);
}

// Conv -> Add(bias) -> Relu, with the bias a constant and a second consumer of
// the Add's result outside the group.
TEST(SubGraph, BoundaryDataIsDerivedFromTheMembers) {
  Builder b;
  ValueId x = b.input("x");
  ValueId w = b.constant("w");
  ValueId bias = b.constant("bias");
  ValueId c = b.op("Conv", "conv", {x, w});
  ValueId a = b.op("Add", "add", {c, bias});
  ValueId r = b.op("Relu", "relu", {a});
  ValueId s = b.op("Sigmoid", "sig", {a});
  b.g.markOutput(r);
  b.g.markOutput(s);
  b.g.finalize();

  SubGraph sg(b.g, b.set({"conv", "add", "relu"}));
  EXPECT_EQ(sg.size(), 3);
  EXPECT_EQ(sg.inputs(), (std::vector<ValueId>{x, w, bias}));
  EXPECT_EQ(sg.dataInputs(), (std::vector<ValueId>{x}));
  EXPECT_TRUE(sg.isConstantInput(w));
  EXPECT_FALSE(sg.isConstantInput(x));
  // add's result is read by sig outside; relu's is a graph output.
  EXPECT_EQ(sg.outputs(), (std::vector<ValueId>{a, r}));
  EXPECT_EQ(sg.entryNodes(), (std::vector<NodeId>{b.id("conv")}));
  EXPECT_EQ(sg.exitNodes(), (std::vector<NodeId>{b.id("add"), b.id("relu")}));
  EXPECT_EQ(sg.depth(), 3);
  EXPECT_EQ(sg.check(SubGraphLimits{}).problem, SubGraphProblem::TooManyExits);
  EXPECT_NE(sg.toString().find("Conv 'conv'"), std::string::npos) << sg.toString();
  EXPECT_NE(sg.toString().find("Relu 'relu'"), std::string::npos) << sg.toString();

  // Both members read add's result from outside: both are entries, and the
  // shared value is one input.
  SubGraph tail(b.g, b.set({"relu", "sig"}));
  EXPECT_EQ(tail.entryNodes(), (std::vector<NodeId>{b.id("relu"), b.id("sig")}));
  EXPECT_EQ(tail.inputs(), (std::vector<ValueId>{a}));
  EXPECT_EQ(tail.depth(), 1);
  EXPECT_EQ(SubGraph(b.g, NodeSet(b.g.numNodes())).depth(), 0);

  // A member reading only a constant from outside is not an entry.
  SubGraph mid(b.g, b.set({"conv", "add"}));
  EXPECT_EQ(mid.entryNodes(), (std::vector<NodeId>{b.id("conv")}));
}

TEST(GraphReachability, DescendantsAncestorsAndBetween) {
  Builder b = diamond();
  GraphReachability reach(b.g);
  EXPECT_EQ(reach.descendants(b.id("conv")), b.set({"relu", "add"}));
  EXPECT_EQ(reach.ancestors(b.id("add")), b.set({"conv", "relu"}));
  EXPECT_TRUE(reach.reaches(b.id("conv"), b.id("add")));
  EXPECT_FALSE(reach.reaches(b.id("add"), b.id("conv")));
  EXPECT_EQ(reach.between(b.id("conv"), b.id("add")), b.set({"conv", "relu", "add"}));
  EXPECT_EQ(reach.between(b.id("relu"), b.id("add")), b.set({"relu", "add"}));
  EXPECT_TRUE(reach.between(b.id("add"), b.id("conv")).empty());
}

TEST(PostDominatorTree, Diamond) {
  Builder b = diamond();
  PostDominatorTree pdom(b.g);
  EXPECT_EQ(pdom.sink(), 3);
  EXPECT_EQ(pdom.immediatePostDominator(b.id("conv")), b.id("add"));
  EXPECT_EQ(pdom.immediatePostDominator(b.id("relu")), b.id("add"));
  EXPECT_EQ(pdom.immediatePostDominator(b.id("add")), pdom.sink());
  EXPECT_EQ(pdom.immediatePostDominator(pdom.sink()), kNoNode);
  EXPECT_TRUE(pdom.postDominates(b.id("add"), b.id("conv")));
  EXPECT_FALSE(pdom.postDominates(b.id("relu"), b.id("conv")));
  EXPECT_EQ(pdom.postDominators(b.id("conv")), std::vector<NodeId>{b.id("add")});
  EXPECT_NE(pdom.toString(b.g).find("'conv' -> #2 'add'"), std::string::npos) << pdom.toString(b.g);
}

// a feeds b and c, which are two separate graph outputs: only the sink
// post-dominates a. d's result is read by e and is also a graph output: e does
// not post-dominate d.
TEST(PostDominatorTree, TwoOutputsAndAnOutputThatIsAlsoRead) {
  Builder bld;
  ValueId x = bld.input("x");
  ValueId a = bld.op("Relu", "a", {x});
  ValueId b = bld.op("Relu", "b", {a});
  ValueId c = bld.op("Tanh", "c", {a});
  ValueId d = bld.op("Relu", "d", {x});
  ValueId e = bld.op("Relu", "e", {d});
  ValueId f = bld.op("Relu", "f", {x});  // result unused: leads to the sink too
  ValueId g = bld.op("Relu", "g", {f});
  (void)g;
  bld.g.markOutput(b);
  bld.g.markOutput(c);
  bld.g.markOutput(d);
  bld.g.markOutput(e);
  bld.g.finalize();
  PostDominatorTree pdom(bld.g);
  EXPECT_EQ(pdom.immediatePostDominator(bld.id("a")), pdom.sink());
  EXPECT_EQ(pdom.immediatePostDominator(bld.id("b")), pdom.sink());
  EXPECT_EQ(pdom.immediatePostDominator(bld.id("d")), pdom.sink());
  EXPECT_EQ(pdom.immediatePostDominator(bld.id("f")), bld.id("g"));
  EXPECT_EQ(pdom.immediatePostDominator(bld.id("g")), pdom.sink());
  EXPECT_TRUE(pdom.postDominators(bld.id("a")).empty());
}

// ---------------------------------------------------------------------------
// Property tests on random DAGs against brute force.

struct RandomDag {
  Builder b;
  std::vector<std::vector<bool>> reach;  // reach[u][v]: a path of >= 1 edge from u to v
};

RandomDag randomDag(std::mt19937& rng, int n) {
  RandomDag d;
  ValueId x = d.b.input("x");
  std::vector<ValueId> outs;
  for (int i = 0; i < n; ++i) {
    std::vector<ValueId> ins;
    int k = 1 + static_cast<int>(rng() % 3);
    for (int j = 0; j < k; ++j) {
      if (outs.empty() || rng() % 5 == 0)
        ins.push_back(x);
      else
        ins.push_back(outs[rng() % outs.size()]);
    }
    outs.push_back(d.b.op("Add", "n" + std::to_string(i), ins));
  }
  for (ValueId v : outs)
    if (rng() % 6 == 0) d.b.g.markOutput(v);
  d.b.g.markOutput(outs.back());
  d.b.g.finalize();
  d.reach.assign(n, std::vector<bool>(n, false));
  for (NodeId u = n - 1; u >= 0; --u)
    for (NodeId s : d.b.g.successors(u)) {
      d.reach[u][s] = true;
      for (int v = 0; v < n; ++v)
        if (d.reach[s][v]) d.reach[u][v] = true;
    }
  return d;
}

bool bruteConvex(const RandomDag& d, const NodeSet& s) {
  const int n = d.b.g.numNodes();
  for (int w = 0; w < n; ++w) {
    if (s.contains(w)) continue;
    bool fromInside = false, toInside = false;
    for (int m = 0; m < n; ++m) {
      if (!s.contains(m)) continue;
      fromInside = fromInside || d.reach[m][w];
      toInside = toInside || d.reach[w][m];
    }
    if (fromInside && toInside) return false;
  }
  return true;
}

TEST(SubGraph, ConvexityAgreesWithBruteForceOnRandomDags) {
  std::mt19937 rng(12345);
  int nonConvex = 0, convex = 0;
  for (int trial = 0; trial < 60; ++trial) {
    RandomDag d = randomDag(rng, 6 + trial % 20);
    GraphReachability reach(d.b.g);
    const int n = d.b.g.numNodes();
    SubGraphLimits unlimited;
    unlimited.maxExits = 0;
    for (int k = 0; k < 40; ++k) {
      NodeSet s(n);
      for (int i = 0; i < n; ++i)
        if (rng() % 3 == 0) s.insert(i);
      if (s.empty()) continue;
      bool expected = bruteConvex(d, s);
      SubGraphValidity walk = checkSubGraph(d.b.g, s, unlimited);
      SubGraphValidity bits = checkSubGraph(d.b.g, reach, s, unlimited);
      ASSERT_EQ(walk.ok(), expected) << s.toString() << "\n" << d.b.g.toString();
      ASSERT_EQ(bits.ok(), expected) << s.toString() << "\n" << d.b.g.toString();
      if (!expected) {
        // The witness really is an outside node on a leave-and-re-enter path.
        for (NodeId w : {walk.witness, bits.witness}) {
          ASSERT_FALSE(s.contains(w));
          bool from = false, to = false;
          s.forEach([&](NodeId m) {
            from = from || d.reach[m][w];
            to = to || d.reach[w][m];
          });
          ASSERT_TRUE(from && to) << "witness " << w << " in " << s.toString();
        }
      }
      (expected ? convex : nonConvex)++;
    }
  }
  // The sample exercises both answers.
  EXPECT_GT(convex, 100);
  EXPECT_GT(nonConvex, 100);
}

TEST(PostDominatorTree, AgreesWithBruteForceOnRandomDags) {
  std::mt19937 rng(777);
  for (int trial = 0; trial < 60; ++trial) {
    RandomDag d = randomDag(rng, 5 + trial % 25);
    const Graph& g = d.b.g;
    const int n = g.numNodes();
    PostDominatorTree pdom(g);
    // Does some path from u reach the sink without passing through p?
    auto escapes = [&](NodeId u, NodeId p) {
      std::vector<char> seen(n, 0);
      std::vector<NodeId> stack{u};
      while (!stack.empty()) {
        NodeId v = stack.back();
        stack.pop_back();
        if (v == p || seen[v]) continue;
        seen[v] = 1;
        bool toSink = g.successors(v).empty();
        for (ValueId o : g.node(v).outputs) toSink = toSink || g.value(o).isGraphOutput;
        if (toSink) return true;
        for (NodeId s : g.successors(v)) stack.push_back(s);
      }
      return false;
    };
    for (NodeId u = 0; u < n; ++u) {
      // Strict post-dominators form a chain ordered by index: the nearest is the lowest.
      NodeId expected = pdom.sink();
      for (NodeId p = u + 1; p < n; ++p)
        if (!escapes(u, p)) {
          expected = p;
          break;
        }
      ASSERT_EQ(pdom.immediatePostDominator(u), expected) << "node " << u << "\n" << g.toString();
      for (NodeId p = u + 1; p < n; ++p) ASSERT_EQ(pdom.postDominates(p, u), !escapes(u, p));
    }
  }
}

}  // namespace
}  // namespace collage
