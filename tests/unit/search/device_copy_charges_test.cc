// The op-level DP with backends on two devices: it charges the measured cost
// of the copies a cover makes (once per value and destination device, graph
// outputs back to the host), exactly as the Session would make them, and
// never takes a copy whose cost is unmeasured. A deterministic cost model and
// copy model stand in for the measurer (test doubles, never in the product).
#include "core/search/device_copy_charges.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "core/ir/error.h"
#include "core/ir/sub_graph.h"
#include "core/search/op_level_optimizer.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

const Device kHost{};
const Device kGpu{DeviceType::CUDA, 0};

// "gpu" runs on the GPU, every other backend on the host.
Device deviceOf(const std::string& backend) { return backend == "gpu" ? kGpu : kHost; }

CopyCostModel copyModel(double latencyNs, double bytesPerNs) {
  return CopyCostModel{latencyNs, bytesPerNs, latencyNs, bytesPerNs};
}

// x -> n0 -> n1 -> n2 -> y, float32[4] (16 bytes a value), every node a
// single-node candidate on "cpu" and on "gpu".
struct Chain {
  Graph g;
  CandidateSet candidates;
  Chain() {
    ValueId v = g.addInput("x", {ElementType::Float32, {4}});
    for (int i = 0; i < 3; ++i) {
      ValueId out = g.addValue("v" + std::to_string(i), {ElementType::Float32, {4}});
      g.addNode(Node{"n" + std::to_string(i), "Relu", {}, {v}, {out}});
      v = out;
    }
    g.markOutput(v);
    g.finalize();
    candidates = CandidateSet(g.numNodes());
    for (NodeId n = 0; n < g.numNodes(); ++n)
      for (const char* b : {"cpu", "gpu"})
        candidates.add(Candidate{NodeSet::of(g.numNodes(), {n}), b, "op", {}});
  }
  // Kernels cost `cpuNs` on the host and `gpuNs` on the GPU.
  OpLevelProblem problem(double cpuNs, double gpuNs, CopyCostFn copies) const {
    OpLevelProblem p;
    p.graph = &g;
    p.candidates = &candidates;
    for (size_t c = 0; c < candidates.size(); ++c)
      p.costs.push_back(candidates[c].backend == "gpu" ? gpuNs : cpuNs);
    p.device = deviceOf;
    p.copyCost = std::move(copies);
    return p;
  }
  std::vector<std::string> backendsOf(const OpLevelResult& r) const {
    std::vector<std::string> names;
    for (int32_t c : r.chosen) names.push_back(candidates[static_cast<size_t>(c)].backend);
    return names;
  }
};

TEST(DeviceCopyCharges, DpKeepsTheHostWhenCopiesCostMoreThanTheDeviceGains) {
  // The GPU saves 3 x 40 ns; going there and back costs 2 x (100 + 16/16) ns.
  Chain c;
  const OpLevelResult r =
      optimizeOpLevel(c.problem(100, 60, [](const Device&) { return copyModel(100, 16); }));
  EXPECT_EQ(c.backendsOf(r), (std::vector<std::string>{"cpu", "cpu", "cpu"}));
  EXPECT_DOUBLE_EQ(r.total, 300);
}

TEST(DeviceCopyCharges, DpMovesToTheDeviceWhenItGainsMoreThanTheCopiesCost) {
  // Copies of 10 + 1 ns each way: 3 x 60 + 2 x 11 = 202 < 300.
  Chain c;
  const OpLevelResult r =
      optimizeOpLevel(c.problem(100, 60, [](const Device&) { return copyModel(10, 16); }));
  EXPECT_EQ(c.backendsOf(r), (std::vector<std::string>{"gpu", "gpu", "gpu"}));
  EXPECT_DOUBLE_EQ(r.total, 3 * 60 + 2 * 11);
  // Without the copies the GPU would win by more; with copies dearer than
  // its gain of 120 it loses: 180 + 2 x 61 = 302 > 300.
  const OpLevelResult dear =
      optimizeOpLevel(c.problem(100, 60, [](const Device&) { return copyModel(60, 16); }));
  EXPECT_EQ(c.backendsOf(dear), (std::vector<std::string>{"cpu", "cpu", "cpu"}));
}

TEST(DeviceCopyCharges, OnlyTheNodesThatGainEnoughMoveToTheDevice) {
  // The GPU is much faster on n1 only: one copy up and one down pay for it.
  Chain c;
  OpLevelProblem p = c.problem(100, 100, [](const Device&) { return copyModel(10, 16); });
  for (size_t i = 0; i < c.candidates.size(); ++i)
    if (c.candidates[i].backend == "gpu" && c.candidates[i].firstNode() == 1) p.costs[i] = 20;
  const OpLevelResult r = optimizeOpLevel(p);
  EXPECT_EQ(c.backendsOf(r), (std::vector<std::string>{"cpu", "gpu", "cpu"}));
  EXPECT_DOUBLE_EQ(r.total, 100 + 20 + 100 + 2 * 11);
}

TEST(DeviceCopyCharges, UnmeasuredCopiesAreNeverTakenAsFree) {
  Chain c;
  // GPU kernels far cheaper, but the copy model unknown (no model, or NaN):
  // the DP keeps the host rather than assume copies cost nothing.
  for (CopyCostFn copies :
       {CopyCostFn{}, CopyCostFn([](const Device&) { return CopyCostModel{}; })}) {
    const OpLevelResult r = optimizeOpLevel(c.problem(100, 1, copies));
    EXPECT_EQ(c.backendsOf(r), (std::vector<std::string>{"cpu", "cpu", "cpu"}));
    EXPECT_DOUBLE_EQ(r.total, 300);
  }
  // With only GPU kernels there is no plan, and the error says why.
  OpLevelProblem gpuOnly = c.problem(kInvalidCost, 1, nullptr);
  test_support::expectError(
      [&] { optimizeOpLevel(gpuOnly); },
      {"no placement covers node 'n0'", "copies between cpu and cuda:0 are not measured"});
}

TEST(DeviceCopyCharges, AllOnTheHostSearchesTheSameStatesAsWithoutDevices) {
  Chain c;
  OpLevelProblem p = c.problem(100, 60, nullptr);
  p.device = [](const std::string&) { return kHost; };
  const OpLevelResult withDevices = optimizeOpLevel(p);
  p.device = nullptr;
  const OpLevelResult without = optimizeOpLevel(p);
  EXPECT_EQ(withDevices.chosen, without.chosen);
  EXPECT_EQ(withDevices.statesPushed, without.statesPushed);
  EXPECT_DOUBLE_EQ(withDevices.total, 3 * 60);
}

// A random DAG of unary/binary elementwise nodes over two inputs, with
// random valid candidates on "cpu", "cpu2" and "gpu".
struct RandomProblem {
  Graph g;
  CandidateSet candidates;
  std::vector<Cost> costs;
  RandomProblem(std::mt19937& rng, int numNodes) {
    std::vector<ValueId> values = {g.addInput("x", {ElementType::Float32, {4}}),
                                   g.addInput("w", {ElementType::Float32, {4}})};
    for (int i = 0; i < numNodes; ++i) {
      ValueId out = g.addValue("v" + std::to_string(i), {ElementType::Float32, {4}});
      const size_t lo = values.size() > 3 ? values.size() - 3 : 0;
      auto recent = [&] {
        return values[std::uniform_int_distribution<size_t>(lo, values.size() - 1)(rng)];
      };
      auto any = [&] {
        return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)];
      };
      if (rng() % 3 == 0)
        g.addNode(Node{"n" + std::to_string(i), "Add", {}, {recent(), any()}, {out}});
      else
        g.addNode(Node{"n" + std::to_string(i), "Relu", {}, {recent()}, {out}});
      values.push_back(out);
    }
    g.finalize();
    for (ValueId v = 0; v < g.numValues(); ++v)
      if (g.value(v).consumers.empty() && !g.value(v).isGraphInput) g.markOutput(v);
    g.markOutput(values[values.size() / 2]);  // an output read inside too
    g.finalize();
    candidates = CandidateSet(g.numNodes());
    const char* backends[] = {"cpu", "cpu2", "gpu"};
    for (NodeId n = 0; n < g.numNodes(); ++n) {
      candidates.add(Candidate{NodeSet::of(g.numNodes(), {n}), "cpu", "op", {}});
      candidates.add(Candidate{NodeSet::of(g.numNodes(), {n}), "gpu", "op", {}});
    }
    GraphReachability reach(g);
    const SubGraphLimits limits{0, 2, 4, true};
    for (int tries = 0; tries < 200; ++tries) {
      const NodeId start = static_cast<NodeId>(rng() % static_cast<uint32_t>(g.numNodes()));
      NodeSet s = NodeSet::of(g.numNodes(), {start});
      const int size = 1 + static_cast<int>(rng() % 4);
      for (NodeId n = start + 1; n < g.numNodes() && s.count() < size; ++n)
        if (rng() % 2) s.insert(n);
      if (!checkSubGraph(g, reach, s, limits)) continue;
      candidates.add(Candidate{s, backends[rng() % 3], "test", {}});
    }
    for (size_t i = 0; i < candidates.size(); ++i)
      costs.push_back(10.0 + static_cast<double>(candidates[i].nodes.count()) *
                                 static_cast<double>(5 + rng() % 37));
  }
};

// Copies of a cover computed directly from crossDeviceEdges: what the Session makes.
Cost sessionCopyCost(const Graph& g, const CandidateSet& cs, const std::vector<int32_t>& chosen,
                     const CopyCostModel& model) {
  std::vector<NodeSet> groups;
  std::vector<Device> devices;
  for (int32_t c : chosen) {
    groups.push_back(cs[static_cast<size_t>(c)].nodes);
    devices.push_back(deviceOf(cs[static_cast<size_t>(c)].backend));
  }
  return copyCostNs(crossDeviceEdges(g, groups, devices), model);
}

TEST(DeviceCopyCharges, DpEqualsBruteForceOverCoversWithTheirCopies) {
  std::mt19937 rng(20261125);
  const CopyCostModel model{7, 2, 5, 4};  // 16 B: 15 ns up, 9 ns down
  for (int trial = 0; trial < 40; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    RandomProblem rp(rng, 5 + trial % 6);
    // Every cover (each enumerated once: at the lowest uncovered node, every
    // disjoint candidate holding it), cheapest total with its copies.
    Cost best = kInvalidCost;
    std::vector<int32_t> chosen;
    std::function<void(NodeSet, Cost)> go = [&](NodeSet covered, Cost total) {
      if (total >= best) return;  // copies only add
      const NodeId low = covered.firstMissing();
      if (low >= rp.g.numNodes()) {
        best = std::min(best, total + sessionCopyCost(rp.g, rp.candidates, chosen, model));
        return;
      }
      for (int32_t c : rp.candidates.covering(low)) {
        if (rp.candidates[static_cast<size_t>(c)].nodes.intersects(covered)) continue;
        chosen.push_back(c);
        go(covered | rp.candidates[static_cast<size_t>(c)].nodes,
           total + rp.costs[static_cast<size_t>(c)]);
        chosen.pop_back();
      }
    };
    go(NodeSet(rp.g.numNodes()), 0);

    OpLevelProblem p{&rp.g, &rp.candidates, rp.costs, nullptr, {}};
    p.device = deviceOf;
    p.copyCost = [&](const Device&) { return model; };
    const OpLevelResult r = optimizeOpLevel(p);
    EXPECT_DOUBLE_EQ(r.total, best);
    // The total is the chosen cover's kernels plus the copies the Session would make.
    Cost kernels = 0;
    for (int32_t c : r.chosen) kernels += rp.costs[static_cast<size_t>(c)];
    EXPECT_DOUBLE_EQ(r.total, kernels + sessionCopyCost(rp.g, rp.candidates, r.chosen, model));
  }
}

TEST(DeviceCopyCharges, StepChargesOfAnyCoverAddUpToTheSessionsCopies) {
  // Not only the optimum: every cover, built the way the DP builds it (at the
  // lowest uncovered node, a random disjoint candidate), is charged exactly
  // the copies the Session would make, whatever the order of its steps.
  std::mt19937 rng(7);
  const CopyCostModel model{7, 2, 5, 4};
  int crossing = 0;
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    RandomProblem rp(rng, 6 + trial % 8);
    const DeviceCopyCharges charges(rp.g, rp.candidates, deviceOf,
                                    [&](const Device&) { return model; });
    ASSERT_TRUE(charges.active());
    for (int walk = 0; walk < 10; ++walk) {
      NodeSet covered(rp.g.numNodes());
      std::vector<DeviceCopyCharges::OpenValue> open, next;
      std::vector<int32_t> chosen;
      Cost charged = 0;
      for (NodeId low = 0; low < rp.g.numNodes(); low = covered.firstMissing()) {
        std::vector<int32_t> options;
        for (int32_t c : rp.candidates.startingAt(low))
          if (!rp.candidates[static_cast<size_t>(c)].nodes.intersects(covered))
            options.push_back(c);
        ASSERT_FALSE(options.empty());
        const int32_t c = options[rng() % options.size()];
        charged += charges.add(covered, open, c, &next);
        open.swap(next);
        covered |= rp.candidates[static_cast<size_t>(c)].nodes;
        chosen.push_back(c);
      }
      EXPECT_TRUE(open.empty()) << "values left open after a complete cover";
      const Cost expected = sessionCopyCost(rp.g, rp.candidates, chosen, model);
      EXPECT_DOUBLE_EQ(charged, expected);
      EXPECT_DOUBLE_EQ(charges.coverCost(chosen), expected);
      if (expected > 0) ++crossing;
    }
  }
  EXPECT_GT(crossing, 100) << "too few covers crossed devices to test anything";
}

TEST(DeviceCopyCharges, AValueReadByTwoDeviceKernelsIsChargedOneCopy) {
  // x -> {Relu, Sigmoid} -> Add -> y, every node on the GPU: x goes up once.
  Graph g;
  const TensorType type{ElementType::Float32, {4}};
  ValueId x = g.addInput("x", type);
  ValueId a = g.addValue("a", type), b = g.addValue("b", type), y = g.addValue("y", type);
  g.addNode(Node{"relu", "Relu", {}, {x}, {a}});
  g.addNode(Node{"sig", "Sigmoid", {}, {x}, {b}});
  g.addNode(Node{"add", "Add", {}, {a, b}, {y}});
  g.markOutput(y);
  g.finalize();
  CandidateSet cs(g.numNodes());
  for (NodeId n = 0; n < g.numNodes(); ++n)
    cs.add(Candidate{NodeSet::of(g.numNodes(), {n}), "gpu", "op", {}});
  OpLevelProblem p{&g, &cs, {10, 10, 10}, nullptr, {}};
  p.device = deviceOf;
  p.copyCost = [](const Device&) { return copyModel(100, 16); };
  EXPECT_DOUBLE_EQ(optimizeOpLevel(p).total, 3 * 10 + 2 * 101);
}

TEST(DeviceCopyCharges, BaselinesChargeTheirCopiesToo) {
  Chain c;
  const OpLevelProblem p = c.problem(100, 60, [](const Device&) { return copyModel(10, 16); });
  const OpLevelResult gpu = priorityPlacement(p, {"gpu", "cpu"});
  EXPECT_EQ(c.backendsOf(gpu), (std::vector<std::string>{"gpu", "gpu", "gpu"}));
  EXPECT_DOUBLE_EQ(gpu.total, 3 * 60 + 2 * 11);
}

}  // namespace
}  // namespace collage
