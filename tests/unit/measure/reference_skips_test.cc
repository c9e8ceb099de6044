// Reference-only kernels far slower than a faster candidate for the same
// nodes are not measured (core/measure/reference_skips.h). The measure
// function is a test double that records what reaches it, and the backends'
// declaration of what runs on the reference kernels is the screen's
// estimate function: the decision is under test, not the machine.
#include "core/measure/reference_skips.h"

#include <gtest/gtest.h>

#include <map>

#include "core/measure/candidate_costs.h"
#include "core/ops/op_registry.h"
#include "core/search/op_level_optimizer.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

// a, b -> MatMul "mm" (n x n x n) -> Relu "relu"
struct MatMulRelu {
  Graph g;
  explicit MatMulRelu(int64_t n) {
    const TensorType t{ElementType::Float32, {n, n}};
    ValueId a = g.addInput("a", t), b = g.addInput("b", t);
    ValueId c = g.addValue("c", t), d = g.addValue("d", t);
    g.addNode(Node{"mm", "MatMul", {}, {a, b}, {c}});
    g.addNode(Node{"relu", "Relu", {}, {c}, {d}});
    g.markOutput(d);
    g.finalize();
  }
};

Measurement ok(double ns) { return test_support::okMeasurement(ns); }

// Candidates: "fast" runs each node alone; "slow" runs mm alone and mm+relu
// fused, with mm on the reference kernels (as a backend declares it).
struct Fixture {
  MatMulRelu model;
  CandidateSet set{2};
  NodeId mm = 0;
  std::map<std::string, int> calls;  // "backend ops" -> times measured
  bool fastRefusesMatMul = false;
  Fixture(int64_t n) : model(n) {
    mm = model.g.node(0).op == "MatMul" ? 0 : 1;
    const NodeId relu = 1 - mm;
    set.add(Candidate{NodeSet::of(2, {mm}), "fast", "rule:op", {}});          // 0
    set.add(Candidate{NodeSet::of(2, {relu}), "fast", "rule:op", {}});        // 1
    set.add(Candidate{NodeSet::of(2, {mm}), "slow", "rule:op", {}});          // 2
    set.add(Candidate{NodeSet::of(2, {mm, relu}), "slow", "rule:fused", {}});  // 3
  }
  MeasureFn measure() {
    return [this](const Candidate& c) {
      ++calls[c.backend + " " + opsLabel(model.g, c.nodes)];
      if (c.backend == "fast" && c.nodes.contains(mm)) {
        if (fastRefusesMatMul) {
          Measurement m;
          m.status = MeasurementStatus::Invalid;
          m.message = "refused";
          return m;
        }
        return ok(1e6);  // 1 ms
      }
      if (c.backend == "fast") return ok(1e4);
      return ok(9e9);  // the reference kernel, when it is measured at all
    };
  }
  ReferenceScreen screen() const {
    ReferenceScreen s;
    s.timeoutSeconds = 60;
    s.runsPerMeasurement = 8;
    s.estimate = [this](const Candidate& c) {
      if (c.backend != "slow") return KernelEstimate{};
      return estimateReferenceNodes(model.g, c.nodes & NodeSet::of(2, {mm}));
    };
    return s;
  }
};

TEST(ReferenceSkips, EstimateIsTheNodesFlopsAtTheReferenceSpeed) {
  MatMulRelu m(1024);
  const NodeId mm = m.g.node(0).op == "MatMul" ? 0 : 1;
  const KernelEstimate e = estimateReferenceNodes(m.g, NodeSet::of(2, {mm}));
  ASSERT_TRUE(e.runsReference());
  EXPECT_DOUBLE_EQ(e.flops, 2.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(e.bytes, 3.0 * 1024 * 1024 * 4);
  EXPECT_DOUBLE_EQ(e.ns, 1e9 * e.flops / kReferenceFlopsPerSecond);
  EXPECT_NE(e.describe(m.g).find("'mm' (MatMul)"), std::string::npos) << e.describe(m.g);
  EXPECT_FALSE(estimateReferenceNodes(m.g, NodeSet(2)).runsReference());
}

// The integer products count their multiply-adds as the float ones do: an
// estimate from one op per output element would be hundreds of times low.
TEST(ReferenceSkips, IntegerConvolutionCountsItsMultiplyAdds) {
  Graph g;
  ValueId x = g.addInput("x", TensorType{ElementType::UInt8, {1, 4, 8, 8}});
  ValueId w = g.addConstant("w", Tensor(ElementType::Int8, {6, 4, 3, 3}));
  ValueId y = g.addValue("y", TensorType{ElementType::Int32, {1, 6, 6, 6}});
  g.addNode(Node{"conv", "ConvInteger", {}, {x, w}, {y}});
  g.markOutput(y);
  g.finalize();
  EXPECT_DOUBLE_EQ(flopsOf(g, 0), 2.0 * (4 * 3 * 3) * (6 * 6 * 6));
}

// A whole run on the reference executor (the end-to-end check's estimate):
// every node, each at its own kernel's speed: the float products at the
// sgemm's, the integer products at theirs, the rest at the scalar loops'.
TEST(ReferenceSkips, AWholeReferenceRunCountsEachOpAtItsKernelsSpeed) {
  MatMulRelu m(1024);
  const KernelEstimate e = estimateReferenceRun(m.g);
  EXPECT_EQ(e.referenceNodes.count(), 2);
  // Each node bound by its arithmetic or its memory traffic, one after the other.
  const double n2 = 1024.0 * 1024.0;
  const NodeId mm = m.g.node(0).op == "MatMul" ? 0 : 1;
  const double mmNs = std::max(1e9 * flopsOf(m.g, mm) / kReferenceGemmFlopsPerSecond,
                               1e9 * 3 * n2 * 4 / kReferenceBytesPerSecond);
  const double reluNs = std::max(1e9 * flopsOf(m.g, 1 - mm) / kReferenceFlopsPerSecond,
                                 1e9 * 2 * n2 * 4 / kReferenceBytesPerSecond);
  EXPECT_DOUBLE_EQ(e.ns, mmNs + reluNs);
  EXPECT_DOUBLE_EQ(e.bytes, 5 * n2 * 4);

  Graph g;
  ValueId x = g.addInput("x", TensorType{ElementType::UInt8, {1, 64, 64, 64}});
  ValueId w = g.addConstant("w", Tensor(ElementType::Int8, {64, 64, 3, 3}));
  ValueId y = g.addValue("y", TensorType{ElementType::Int32, {1, 64, 62, 62}});
  g.addNode(Node{"conv", "ConvInteger", {}, {x, w}, {y}});
  g.markOutput(y);
  g.finalize();
  const KernelEstimate q = estimateReferenceRun(g);
  EXPECT_DOUBLE_EQ(q.ns, 1e9 * flopsOf(g, 0) / kReferenceIntegerProductFlopsPerSecond);
  EXPECT_DOUBLE_EQ(estimateReferenceNodes(g, NodeSet::of(1, {0})).ns, q.ns);
  EXPECT_EQ(referenceFlopsPerSecond("QLinearConv"), kReferenceIntegerProductFlopsPerSecond);
  EXPECT_EQ(referenceFlopsPerSecond("Relu"), kReferenceFlopsPerSecond);
}

TEST(ReferenceSkips, AReferenceKernelFarSlowerThanAFasterCandidateIsNeverMeasured) {
  Fixture f(1024);  // mm: 2.1 GFLOP, ~0.5 s at the reference's speed, against 1 ms
  CandidateCoster coster(f.model.g, nullptr, HardwareFingerprint{}, [](const std::string&) { return "1"; },
                         f.measure());
  coster.setReferenceScreen(f.screen());
  CostingReport report;
  const std::vector<Measurement> ms = coster.costAll(f.set, {}, nullptr, nullptr, &report);
  EXPECT_EQ(f.calls.count("slow MatMul"), 0u);
  EXPECT_EQ(f.calls.count("slow MatMul+Relu"), 0u);
  EXPECT_EQ(f.calls["fast MatMul"], 1);
  EXPECT_EQ(report.skipped, 2);
  EXPECT_EQ(report.measured, 2);
  for (size_t i : {2u, 3u}) {
    EXPECT_EQ(ms[i].status, MeasurementStatus::Skipped);
    EXPECT_TRUE(isInvalid(ms[i].cost())) << "a skipped kernel is unavailable, never free";
    EXPECT_NE(ms[i].message.find("'mm' (MatMul)"), std::string::npos) << ms[i].message;
    EXPECT_NE(ms[i].message.find("faster candidates"), std::string::npos) << ms[i].message;
  }
  EXPECT_TRUE(report.warnings.empty());

  // The DP still covers every node, with the faster candidates.
  std::vector<Cost> costs;
  for (const auto& m : ms) costs.push_back(m.cost());
  const OpLevelResult plan = optimizeOpLevel(OpLevelProblem{&f.model.g, &f.set, costs, nullptr, {}});
  EXPECT_TRUE(isKnown(plan.total));
  std::vector<int32_t> chosen = plan.chosen;
  std::sort(chosen.begin(), chosen.end());
  EXPECT_EQ(chosen, (std::vector<int32_t>{0, 1}));

  EXPECT_EQ(skippedReferencesSummary(report.skipped, report.skippedEstimateSeconds),
            "skipped 2 reference kernels estimated at 1.1 s per run in all (faster candidates exist)");
  EXPECT_EQ(skippedReferencesSummary(0, 0), "");
}

TEST(ReferenceSkips, WithoutAScreenEveryCandidateIsMeasured) {
  Fixture f(1024);
  CandidateCoster coster(f.model.g, nullptr, HardwareFingerprint{}, [](const std::string&) { return "1"; },
                         f.measure());
  CostingReport report;
  coster.costAll(f.set, {}, nullptr, nullptr, &report);
  EXPECT_EQ(f.calls["slow MatMul"], 1);
  EXPECT_EQ(report.skipped, 0);
}

TEST(ReferenceSkips, ASoleReferenceCandidateIsMeasuredWithAWarningAndAnOverTimeOneIsNot) {
  Fixture f(4096);  // mm: 137 GFLOP, ~34 s per run at the reference's speed
  f.fastRefusesMatMul = true;  // the reference kernel is all there is for mm
  CandidateCoster coster(f.model.g, nullptr, HardwareFingerprint{}, [](const std::string&) { return "1"; },
                         f.measure());
  coster.setReferenceScreen(f.screen());
  CostingReport report;
  const std::vector<Measurement> ms = coster.costAll(f.set, {}, nullptr, nullptr, &report);
  // mm alone on the reference is measured, though slow: the model must run.
  EXPECT_EQ(f.calls["slow MatMul"], 1);
  EXPECT_EQ(ms[2].status, MeasurementStatus::Ok);
  ASSERT_EQ(report.warnings.size(), 1u);
  const std::string& w = report.warnings[0];
  EXPECT_NE(w.find("no faster candidate for 'mm' (MatMul)"), std::string::npos) << w;
  EXPECT_NE(w.find("34.4 s per run"), std::string::npos) << w;
  EXPECT_NE(w.find("measuring it takes about 274.9 s"), std::string::npos) << w;
  EXPECT_NE(w.find("it will time out unless the per-kernel timeout (--timeout) is at least 413 s"),
            std::string::npos)
      << w;
  // mm+relu would take 8 runs of ~34 s, past the 60 s timeout, and mm alone
  // and relu alone cover its nodes: it is not started.
  EXPECT_EQ(f.calls.count("slow MatMul+Relu"), 0u);
  EXPECT_EQ(ms[3].status, MeasurementStatus::Skipped);
  EXPECT_NE(ms[3].message.find("timeout"), std::string::npos) << ms[3].message;
  EXPECT_EQ(report.skipped, 1);

  std::vector<Cost> costs;
  for (const auto& m : ms) costs.push_back(m.cost());
  const OpLevelResult plan = optimizeOpLevel(OpLevelProblem{&f.model.g, &f.set, costs, nullptr, {}});
  std::vector<int32_t> chosen = plan.chosen;
  std::sort(chosen.begin(), chosen.end());
  EXPECT_EQ(chosen, (std::vector<int32_t>{1, 2}));
}

// Where the only other candidates for a node failed, the reference kernel
// is the node's only way to run, and is measured even when a faster
// candidate exists for its other nodes.
TEST(ReferenceSkips, JudgedOnlyAgainstMeasuredAlternatives) {
  Fixture f(1024);
  const KernelEstimate e = estimateReferenceNodes(f.model.g, NodeSet::of(2, {f.mm}));
  std::vector<Measurement> ms(f.set.size());  // nothing measured: Failed "not measured"
  ReferenceScreen s = f.screen();
  EXPECT_FALSE(judgeReferenceCandidate(f.model.g, f.set, 2, e, ms, s).skip);
  ms[0] = ok(1e6);
  EXPECT_TRUE(judgeReferenceCandidate(f.model.g, f.set, 2, e, ms, s).skip);
  // Only 20x slower at most: measured.
  ms[0] = ok(e.ns / 10);
  EXPECT_FALSE(judgeReferenceCandidate(f.model.g, f.set, 2, e, ms, s).skip);
}

}  // namespace
}  // namespace collage
