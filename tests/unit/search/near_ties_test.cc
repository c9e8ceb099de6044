// Near ties: a fused candidate the DP passed over by a few percent is
// measured again with its parts, the lower medians are kept (and stored), and
// a warm database never measures again. The measure function is a test
// double: the search logic is under test, not the machine.
#include "core/search/near_ties.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "core/search/op_level_optimizer.h"

namespace collage {
namespace {

// x -> relu -> sigmoid -> tanh
struct Chain {
  Graph g;
  Chain() {
    const TensorType t{ElementType::Float32, {64, 64}};
    ValueId x = g.addInput("x", t);
    ValueId a = g.addValue("a", t), b = g.addValue("b", t), c = g.addValue("c", t);
    g.addNode(Node{"relu", "Relu", {}, {x}, {a}});
    g.addNode(Node{"sig", "Sigmoid", {}, {a}, {b}});
    g.addNode(Node{"tanh", "Tanh", {}, {b}, {c}});
    g.markOutput(c);
    g.finalize();
  }
};

Measurement ok(double us, bool cached = false) {
  Measurement m;
  m.status = MeasurementStatus::Ok;
  m.medianNs = us * 1e3;
  m.samples = 10;
  m.fromCache = cached;
  return m;
}

struct Fixture {
  Chain chain;
  CandidateSet set{3};
  std::vector<Measurement> ms;
  Fixture() {
    set.add(Candidate{NodeSet::of(3, {0}), "x", "rule:op", {}});        // 0
    set.add(Candidate{NodeSet::of(3, {1}), "x", "rule:op", {}});        // 1
    set.add(Candidate{NodeSet::of(3, {2}), "x", "rule:op", {}});        // 2
    set.add(Candidate{NodeSet::of(3, {0, 1}), "x", "pattern:ab", {}});  // 3
    set.add(Candidate{NodeSet::of(3, {1, 2}), "y", "pattern:bc", {}});  // 4
    ms = {ok(100), ok(100), ok(100), ok(210), ok(400)};
  }
};

TEST(NearTies, AFusedCandidateAFewPercentDearerThanItsPartsIsATie) {
  Fixture f;
  const std::vector<NearTie> ties = findNearTies(f.set, f.ms, {0, 1, 2}, {});
  ASSERT_EQ(ties.size(), 1u);  // {relu, sig} at 1.05x; {sig, tanh} at 2x is no tie
  EXPECT_EQ(ties[0].fused, 3);
  EXPECT_EQ(ties[0].parts, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(ties[0].ratio, 1.05, 1e-9);
}

TEST(NearTies, NoTieWhenEverythingCameFromTheDatabaseOrIsTooSmallOrNotAllowed) {
  Fixture f;
  for (auto& m : f.ms) m.fromCache = true;
  EXPECT_TRUE(findNearTies(f.set, f.ms, {0, 1, 2}, {}).empty());
  Fixture small;
  NearTieOptions o;
  o.minPartsNs = 500e3;
  EXPECT_TRUE(findNearTies(small.set, small.ms, {0, 1, 2}, {}, o).empty());
  EXPECT_TRUE(findNearTies(small.set, small.ms, {0, 1, 2}, {true, true, true, false, true}).empty());
  // A candidate that is cheaper than its parts is no tie either: the DP took it or had a reason.
  small.ms[3] = ok(150);
  EXPECT_TRUE(findNearTies(small.set, small.ms, {0, 1, 2}, {}).empty());
}

TEST(NearTies, RemeasuringKeepsTheLowerMedianStoresItAndTheDpThenFuses) {
  Fixture f;
  std::map<int, int> calls;  // by first node and size
  MeasureFn measure = [&](const Candidate& c) {
    ++calls[c.nodes.first() * 10 + c.nodes.count()];
    // This time the fused kernel reads faster, the parts slower.
    return c.nodes.count() == 2 ? ok(180) : ok(120);
  };
  auto path = std::filesystem::temp_directory_path() / ("near_ties_" + std::to_string(getpid()) + ".sqlite");
  std::filesystem::remove(path);
  MeasurementDb db(path.string());
  const HardwareFingerprint fp{"v", "m", "avx2", 2, 2, ""};
  CandidateCoster coster(f.chain.g, &db, fp, [](const std::string&) { return "1"; }, measure);

  const std::vector<NearTie> ties = findNearTies(f.set, f.ms, {0, 1, 2}, {});
  const NearTieReport r = remeasureNearTies(f.chain.g, f.set, f.ms, ties, coster);
  EXPECT_EQ(r.ties, 1);
  EXPECT_EQ(r.remeasured, 3);  // the fused kernel and its two parts
  EXPECT_DOUBLE_EQ(f.ms[3].medianNs, 180e3);  // lower: kept
  EXPECT_DOUBLE_EQ(f.ms[0].medianNs, 100e3);  // 120 is higher: the old one stays
  EXPECT_EQ(r.lowered, 1);

  std::vector<Cost> costs;
  for (const auto& m : f.ms) costs.push_back(m.cost());
  OpLevelProblem problem{&f.chain.g, &f.set, costs, nullptr, {}};
  const OpLevelResult plan = optimizeOpLevel(problem);
  EXPECT_EQ(plan.chosen, (std::vector<int32_t>{3, 2}));

  // The kept measurement is in the database: a warm costing reads it and
  // finds no tie to measure again.
  calls.clear();
  CostingReport report;
  std::vector<Measurement> warm = coster.costAll(f.set, {}, nullptr, nullptr, &report);
  EXPECT_DOUBLE_EQ(warm[3].medianNs, 180e3);
  EXPECT_TRUE(warm[3].fromCache);
  EXPECT_TRUE(findNearTies(f.set, warm, plan.chosen, {}).empty());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace collage
