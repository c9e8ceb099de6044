// The graph-level search's pieces that need no measuring: graph libraries
// restricted by the user's pins and forbids, and the model key that plan
// runs are stored under. (The measured search runs end to end in
// tests/e2e/graph_level_roundtrip.sh; its logic on a test double in
// evolutionary_search_test.cc.)
#include "core/search/graph_level_search.h"

#include <gtest/gtest.h>

#include "core/ir/error.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

// relu -> sigmoid -> tanh -> exp
struct Chain {
  GraphBuilder b;
  Chain() { b.finish(b.op("Exp", {b.op("Tanh", {b.op("Sigmoid", {b.op("Relu", {b.input({4})})})})})); }
  const Graph& g() { return b.graph(); }
};

std::vector<GraphLibrary> anything() {
  return {{"fuser", [](const NodeSet&) { return std::string(); }},
          {"other", [](const NodeSet&) { return std::string(); }}};
}

TEST(GraphLevelSearch, RegionsHonourPinsAndForbids) {
  Chain c;
  const Graph& g = c.g();
  PlacementConstraints constraints;
  constraints.pins.push_back(PlacementConstraints::parsePin(g.node(1).name + "=fuser"));
  constraints.pins.push_back(PlacementConstraints::parsePin(g.node(3).name + "=native"));
  constraints.forbids.push_back(PlacementConstraints::parseForbid("op:Relu=other"));
  const std::vector<GraphLibrary> libs = honouringConstraints(g, anything(), constraints);
  ASSERT_EQ(libs.size(), 2u);
  const NodeSet first3 = NodeSet::of(g.numNodes(), {0, 1, 2});
  EXPECT_EQ(libs[0].refusal(first3), "");  // the Sigmoid is pinned to fuser: fuser may take it
  EXPECT_NE(libs[1].refusal(first3).find("must not run on other"), std::string::npos) << libs[1].refusal(first3);
  EXPECT_NE(libs[1].refusal(NodeSet::of(g.numNodes(), {1, 2})).find("is pinned to fuser"), std::string::npos);
  const std::string last = libs[0].refusal(NodeSet::of(g.numNodes(), {2, 3}));
  EXPECT_NE(last.find("node '" + g.node(3).name + "' is pinned to native"), std::string::npos) << last;
  // A pinned group stays a kernel of its own.
  PlacementConstraints group;
  group.pins.push_back(PlacementConstraints::parsePin(g.node(0).name + "+" + g.node(1).name + "=fuser"));
  const std::vector<GraphLibrary> grouped = honouringConstraints(g, anything(), group);
  EXPECT_NE(grouped[0].refusal(NodeSet::of(g.numNodes(), {1, 2})).find("pinned group"), std::string::npos);
  EXPECT_EQ(grouped[0].refusal(NodeSet::of(g.numNodes(), {2, 3})), "");
  // A selector that matches nothing is an error naming it.
  PlacementConstraints bad;
  bad.forbids.push_back(PlacementConstraints::parseForbid("nosuchnode=fuser"));
  EXPECT_THROW(honouringConstraints(g, anything(), bad), Error);
}

TEST(GraphLevelSearch, PlanRunsAreKeyedByTheModelAndItsShapes) {
  Plan p;
  p.modelSha256 = "abc";
  p.inputShapes = {{"x", {1, 3, 8, 8}}, {"mask", {1, 8}}};
  EXPECT_EQ(graphLevelModelKey(p), "sha256:abc;mask=1x8;x=1x3x8x8");
  p.inputShapes["x"] = {2, 3, 8, 8};
  EXPECT_EQ(graphLevelModelKey(p), "sha256:abc;mask=1x8;x=2x3x8x8");
}

}  // namespace
}  // namespace collage
