// The graph-level genome: one gene per group of the starting plan, in
// execution order; a maximal run of one library's allele is one region. Any
// genome decodes to a plan that can run (convex groups, no cycle between
// them), runs a library refuses are split into the prefixes it takes, and
// genomes that mean the same plan share one canonical form and key.
#include "core/search/region_genome.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/ir/sub_graph.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

// Two branches that meet: x -> {relu -> sig, tanh -> neg} -> add -> exp -> abs.
struct Branches {
  GraphBuilder b;
  Plan base;
  Branches() {
    const ValueId x = b.input({2, 3});
    const ValueId l = b.op("Sigmoid", {b.op("Relu", {x})});
    const ValueId r = b.op("Neg", {b.op("Tanh", {x})});
    b.finish(b.op("Abs", {b.op("Exp", {b.op("Add", {l, r})})}));
    base = singleNodePlan(b.graph(), "base");
    base.modelSha256 = "m";
  }
  const Graph& g() { return b.graph(); }
  NodeId node(const std::string& op) {
    for (NodeId n = 0; n < g().numNodes(); ++n)
      if (g().node(n).op == op) return n;
    return kNoNode;
  }
};

// "fuser" takes any set without an Exp; "pairs" takes at most two nodes.
std::vector<GraphLibrary> libraries(const Graph& g) {
  return {{"fuser",
           [&g](const NodeSet& s) {
             std::string why;
             s.forEach([&](NodeId n) {
               if (g.node(n).op == "Exp") why = "no Exp";
             });
             return why;
           }},
          {"pairs", [](const NodeSet& s) { return s.count() <= 2 ? "" : std::string("too big"); }}};
}

TEST(RegionGenome, ZerosAreTheStartingPlan) {
  Branches t;
  const RegionEncoding enc(t.g(), t.base, libraries(t.g()));
  EXPECT_EQ(enc.length(), 7u);
  EXPECT_EQ(enc.alleles(), 3);
  const RegionEncoding::Decoded d = enc.decode(enc.zeros());
  EXPECT_EQ(d.regions, 0);
  EXPECT_EQ(d.canonical, enc.zeros());
  EXPECT_EQ(d.key, placementKey(t.base));
  EXPECT_EQ(d.plan.groups.size(), t.base.groups.size());
}

// All genes on "fuser": the run is split where the library refuses (the
// Exp), so the Exp stays where it was and the two sides become regions.
TEST(RegionGenome, RefusedRunsAreSplitIntoAcceptedRegions) {
  Branches t;
  t.base.predictByWholeRun(0.004);  // the starting plan, timed whole
  t.base.kernelsAloneNs = 3000;
  const RegionEncoding enc(t.g(), t.base, libraries(t.g()));
  const RegionEncoding::Decoded d = enc.decode(enc.uniform(1));
  ASSERT_EQ(d.regions, 2);
  // Other groups than the starting plan's: neither its time nor its sum.
  EXPECT_TRUE(std::isnan(d.plan.predictedNs));
  EXPECT_TRUE(std::isnan(d.plan.kernelsAloneNs));
  int regionNodes = 0;
  for (const PlanGroup& g : d.plan.groups) {
    if (g.origin != PlanOrigin::GraphLevel) {
      ASSERT_EQ(g.nodes.size(), 1u);
      EXPECT_EQ(g.nodes[0], t.g().node(t.node("Exp")).name);
      EXPECT_EQ(g.backend, "base");
      continue;
    }
    EXPECT_EQ(g.backend, "fuser");
    EXPECT_EQ(g.pattern, "region");
    regionNodes += static_cast<int>(g.nodes.size());
  }
  EXPECT_EQ(regionNodes, 6);
  // The Exp's gene made nothing: canonically 0.
  for (size_t i = 0; i < enc.length(); ++i)
    EXPECT_EQ(d.canonical[i], enc.groupOfGene(i) == static_cast<size_t>(t.node("Exp")) ? 0 : 1) << i;
  // The same plan from its canonical genome.
  EXPECT_EQ(enc.decode(d.canonical).key, d.key);
}

// A library that takes a group alone with the backend it already has is no
// change (canonical 0); "pairs" packs a run of 7 into regions of two.
TEST(RegionGenome, NoChangeIsCanonicallyZeroAndLongRunsPackGreedily) {
  Branches t;
  Plan base = t.base;
  base.groups[0].backend = "pairs";
  const RegionEncoding enc(t.g(), base, libraries(t.g()));
  Genome one = enc.zeros();
  for (size_t i = 0; i < enc.length(); ++i)
    if (enc.groupOfGene(i) == 0) one[i] = 2;
  const RegionEncoding::Decoded same = enc.decode(one);
  EXPECT_EQ(same.regions, 0);
  EXPECT_EQ(same.canonical, enc.zeros());
  EXPECT_EQ(same.key, placementKey(base));
  const RegionEncoding::Decoded packed = enc.decode(enc.uniform(2));
  EXPECT_EQ(packed.regions, 4);  // 2 + 2 + 2 + 1 (the last alone moves to "pairs")
  for (const PlanGroup& g : packed.plan.groups) EXPECT_EQ(g.backend, "pairs");
}

// Whatever the genes, the plan can run: every group convex, an execution
// order exists, every node in exactly one group; and decoding is stable.
TEST(RegionGenome, EveryGenomeDecodesToARunnablePlan) {
  Branches t;
  const RegionEncoding enc(t.g(), t.base, libraries(t.g()));
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> allele(0, enc.alleles() - 1);
  for (int trial = 0; trial < 300; ++trial) {
    Genome genome(enc.length());
    for (uint8_t& gene : genome) gene = static_cast<uint8_t>(allele(rng));
    const RegionEncoding::Decoded d = enc.decode(genome);
    const std::vector<NodeSet> sets = resolvePlanGroups(d.plan, t.g());  // throws on a bad cover
    for (size_t g = 0; g < sets.size(); ++g)
      EXPECT_TRUE(checkSubGraph(t.g(), sets[g], SubGraphLimits{0, 0, 0, true}).ok()) << d.plan.describeGroup(g);
    EXPECT_NO_THROW(planExecutionOrder(d.plan, t.g(), sets));
    const RegionEncoding::Decoded again = enc.decode(d.canonical);
    EXPECT_EQ(again.key, d.key);
    EXPECT_EQ(again.canonical, d.canonical);
  }
}

TEST(RegionGenome, GenomesReadBackFromText) {
  Branches t;
  const RegionEncoding enc(t.g(), t.base, libraries(t.g()));
  const Genome g{0, 1, 1, 2, 0, 0, 1};
  EXPECT_EQ(enc.toString(g), "0112001");
  EXPECT_EQ(enc.fromString("0112001"), g);
  EXPECT_FALSE(enc.fromString("01120013").has_value());  // wrong length
  EXPECT_FALSE(enc.fromString("0113001").has_value());   // no library 3
}

TEST(RegionGenome, ChangesSayWhatWasMergedFromWhere) {
  Branches t;
  const RegionEncoding enc(t.g(), t.base, libraries(t.g()));
  const RegionEncoding::Decoded d = enc.decode(enc.uniform(1));
  const std::vector<std::string> lines = describeRegionChanges(t.base, d.plan);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("fuser region of"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("merged"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("base "), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace collage
