// The safety net under the reference screen: when the candidates left after
// skipping cover no plan, the skipped reference kernels are measured after
// all. The measure function is a test double recording what reaches it.
#include "core/search/skipped_references.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/search/op_level_optimizer.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

// x -> Relu "a" -> Sigmoid "b" -> Tanh "c", on 2048x2048 (the MatMul-free
// graph's FLOPs do not matter: the screen below declares what is slow).
struct Chain {
  Graph g;
  Chain() {
    const TensorType t{ElementType::Float32, {2048, 2048}};
    ValueId x = g.addInput("x", t);
    ValueId va = g.addValue("va", t), vb = g.addValue("vb", t), vc = g.addValue("vc", t);
    g.addNode(Node{"a", "Relu", {}, {x}, {va}});
    g.addNode(Node{"b", "Sigmoid", {}, {va}, {vb}});
    g.addNode(Node{"c", "Tanh", {}, {vb}, {vc}});
    g.markOutput(vc);
    g.finalize();
  }
};

Measurement ok(double ns) { return test_support::okMeasurement(ns); }

struct Fixture {
  Chain chain;
  CandidateSet set{3};
  std::map<std::string, int> calls;  // by the candidate's origin
  Fixture(bool withSingleB) {
    set.add(Candidate{NodeSet::of(3, {0, 1}), "slow", "rule:ref", {}});   // 0: the reference kernel
    set.add(Candidate{NodeSet::of(3, {0, 2}), "fast", "pattern:ac", {}});  // 1
    set.add(Candidate{NodeSet::of(3, {1, 2}), "fast", "pattern:bc", {}});  // 2
    set.add(Candidate{NodeSet::of(3, {2}), "fast", "rule:op", {}});        // 3
    if (withSingleB) set.add(Candidate{NodeSet::of(3, {1}), "fast", "rule:op", {}});  // 4
  }
  CandidateCoster coster() {
    return CandidateCoster(
        chain.g, nullptr, HardwareFingerprint{}, [](const std::string&) { return "1"; },
        [this](const Candidate& c) {
          ++calls[c.origin];
          return c.backend == "slow" ? ok(5e9) : ok(1e5);
        });
  }
  ReferenceScreen screen() const {
    ReferenceScreen s;
    // The slow backend declares node a as run on the scalar reference
    // kernels: its 32 MiB in and out take ~3 ms at the reference's speed,
    // against 0.2 ms for the faster candidates holding a and b.
    s.factor = 2;
    s.estimate = [this](const Candidate& c) {
      return c.backend == "slow" ? estimateReferenceNodes(chain.g, NodeSet::of(3, {0})) : KernelEstimate{};
    };
    return s;
  }
};

// Nodes a and b are each held by a faster candidate, but only as {a, c} and
// {b, c}, which overlap: without the reference kernel {a, b} there is no cover.
TEST(SkippedReferences, WithNoCoverLeftTheSkippedKernelsAreMeasuredAfterAll) {
  Fixture f(false);
  CandidateCoster coster = f.coster();
  coster.setReferenceScreen(f.screen());
  CostingReport report;
  std::vector<Measurement> ms = coster.costAll(f.set, {}, nullptr, nullptr, &report);
  ASSERT_EQ(report.skipped, 1);
  ASSERT_EQ(ms[0].status, MeasurementStatus::Skipped);
  EXPECT_EQ(f.calls.count("rule:ref"), 0u);  // {a, b} not measured by the screen

  EXPECT_TRUE(measureSkippedIfNoCover(f.chain.g, f.set, {}, coster, ms, report, nullptr, nullptr));
  EXPECT_EQ(f.calls["rule:ref"], 1);
  EXPECT_EQ(ms[0].status, MeasurementStatus::Ok);
  EXPECT_EQ(report.skipped, 0);
  std::vector<Cost> costs;
  for (const auto& m : ms) costs.push_back(m.cost());
  const OpLevelResult plan = optimizeOpLevel(OpLevelProblem{&f.chain.g, &f.set, costs, nullptr, {}});
  std::vector<int32_t> chosen = plan.chosen;
  std::sort(chosen.begin(), chosen.end());
  EXPECT_EQ(chosen, (std::vector<int32_t>{0, 3}));
}

// With b alone on a faster backend, {a, c} + {b} covers: the skip stands.
TEST(SkippedReferences, WithACoverLeftTheSkipStands) {
  Fixture f(true);
  CandidateCoster coster = f.coster();
  coster.setReferenceScreen(f.screen());
  CostingReport report;
  std::vector<Measurement> ms = coster.costAll(f.set, {}, nullptr, nullptr, &report);
  ASSERT_EQ(report.skipped, 1);
  EXPECT_FALSE(measureSkippedIfNoCover(f.chain.g, f.set, {}, coster, ms, report, nullptr, nullptr));
  EXPECT_EQ(f.calls.count("rule:ref"), 0u);
  EXPECT_EQ(ms[0].status, MeasurementStatus::Skipped);
  EXPECT_EQ(report.skipped, 1);
}

}  // namespace
}  // namespace collage
