// The stage partitioner against brute force on small graphs, GPP against
// its SPP baseline, and the memory limits (test-double costs throughout).
#include "core/pipeline/stage_partitioner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "core/ir/error.h"
#include "tests/unit/pipeline/fake_stage_cost.h"

namespace collage {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Shape {
  std::string name;
  std::vector<std::string> nodes;
  std::vector<std::pair<int, int>> edges;
};

// Small graphs, series-parallel and not, with at most 7 nodes.
std::vector<Shape> shapes() {
  return {
      {"chain", {"n0", "n1", "n2", "n3", "n4"}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}},
      {"diamond", {"a", "b", "c", "d"}, {{0, 1}, {0, 2}, {1, 3}, {2, 3}}},
      {"towers", {"x", "a1", "a2", "b", "j"}, {{0, 1}, {1, 2}, {2, 4}, {0, 3}, {3, 4}}},
      {"N", {"a", "b", "c", "d"}, {{0, 2}, {0, 3}, {1, 3}}},
      {"residual+heads",
       {"in", "c1", "c2", "add", "h1", "h2", "cat"},
       {{0, 1}, {1, 2}, {2, 3}, {0, 3}, {3, 4}, {3, 5}, {4, 6}, {5, 6}}},
      {"bridge",
       {"s", "a", "b", "c", "d", "t"},
       {{0, 1}, {0, 2}, {1, 3}, {1, 4}, {2, 4}, {3, 5}, {4, 5}}},
      {"three-branches",
       {"x", "p", "q1", "q2", "r", "y", "z"},
       {{0, 1}, {0, 2}, {2, 3}, {0, 4}, {1, 5}, {3, 5}, {4, 5}, {5, 6}}},
  };
}

PipeGraph build(const Shape& s, std::mt19937& rng) {
  PipeGraph g;
  for (const auto& n : s.nodes) g.addNode(n);
  for (const auto& [a, b] : s.edges) g.addEdge(a, b, 1000.0 * (1 + rng() % 8));
  return g;
}

FakeStageCost randomCost(int n, std::mt19937& rng) {
  FakeStageCost c;
  for (int i = 0; i < n; ++i) {
    FakeNodeCost node;
    node.cpuSecondsPerSample = 1e-3 * (1 + rng() % 9);
    node.gpuSecondsPerSample = rng() % 4 == 0 ? kInf : 1e-4 * (1 + rng() % 9);
    node.weightBytes = 1e5 * (rng() % 10);
    node.activationBytesPerSample = 1e4 * (1 + rng() % 10);
    c.nodes.push_back(node);
  }
  c.overheadSecondsPerMicroBatch = 1e-4 * (rng() % 20);
  c.dataParallelEfficiency = 0.5 + 0.1 * (rng() % 6);
  return c;
}

Topology machine(int cpus, int gpus, double cpuMemory, double gpuMemory) {
  std::vector<PipeDevice> devices;
  for (int i = 0; i < cpus; ++i)
    devices.push_back({"cpu" + std::to_string(i), DeviceKind::Cpu, 1, cpuMemory});
  for (int i = 0; i < gpus; ++i)
    devices.push_back({"gpu" + std::to_string(i), DeviceKind::Gpu, 0, gpuMemory});
  std::vector<PipeLink> links;
  if (cpus >= 2) links.push_back({"cpu0", "cpu1", {2e7, 1e-5}});  // one fast pair...
  const LinkCost slow{5e6, 5e-5};                                 // ...the rest slower
  return Topology(devices, links, &slow, "test");
}

// ---- brute force ----------------------------------------------------------

// Every partition of {0..n-1} into blocks (restricted growth strings).
void forEachPartition(int n, const std::function<void(const std::vector<std::vector<int>>&)>& f) {
  std::vector<int> label(n, 0);
  std::function<void(int, int)> rec = [&](int i, int blocks) {
    if (i == n) {
      std::vector<std::vector<int>> out(blocks);
      for (int v = 0; v < n; ++v) out[label[v]].push_back(v);
      f(out);
      return;
    }
    for (int b = 0; b <= blocks; ++b) {
      label[i] = b;
      rec(i + 1, std::max(blocks, b + 1));
    }
  };
  rec(0, 0);
}

// No cycle between the blocks (each block then is convex, too).
bool stagesAcyclic(const PipeGraph& g, const std::vector<std::vector<int>>& blocks) {
  const int k = static_cast<int>(blocks.size());
  std::vector<int> of(g.size());
  for (int b = 0; b < k; ++b)
    for (int v : blocks[b]) of[v] = b;
  std::vector<std::set<int>> next(k);
  std::vector<int> indegree(k, 0);
  for (const auto& e : g.edges())
    if (of[e.from] != of[e.to] && next[of[e.from]].insert(of[e.to]).second) ++indegree[of[e.to]];
  std::vector<int> ready;
  for (int b = 0; b < k; ++b)
    if (!indegree[b]) ready.push_back(b);
  int done = 0;
  while (!ready.empty()) {
    const int b = ready.back();
    ready.pop_back();
    ++done;
    for (int c : next[b])
      if (--indegree[c] == 0) ready.push_back(c);
  }
  return done == k;
}

// The stages the GPP search may form on the tree: a tree node's nodes, or a
// run of two or more consecutive children of a Series or a Parallel
// (stage_partitioner.h).
std::set<std::vector<int>> seriesParallelIntervals(const SeriesParallelTree& t) {
  std::set<std::vector<int>> out;
  for (const SpNode& n : t.nodes) {
    out.insert(n.nodes);
    if (n.kind == SpNode::Kind::Leaf) continue;
    for (size_t i = 0; i < n.children.size(); ++i) {
      std::vector<int> run;
      for (size_t j = i; j < n.children.size(); ++j) {
        const auto& c = t.nodes[n.children[j]].nodes;
        run.insert(run.end(), c.begin(), c.end());
        std::vector<int> sorted = run;
        std::sort(sorted.begin(), sorted.end());
        out.insert(sorted);
      }
    }
  }
  return out;
}

// Whether a block is a run of the chain (PipeGraph::topologicalOrder).
std::function<bool(const std::vector<int>&)> chainRuns(const PipeGraph& g) {
  const auto order = g.topologicalOrder();
  std::vector<int> position(g.size());
  for (int i = 0; i < g.size(); ++i) position[order[i]] = i;
  return [position](const std::vector<int>& block) {
    int lo = static_cast<int>(position.size()), hi = -1;
    for (int v : block) lo = std::min(lo, position[v]), hi = std::max(hi, position[v]);
    return hi - lo + 1 == static_cast<int>(block.size());
  };
}

struct Problem {
  const PipeGraph& g;
  const Topology& topo;
  const FakeStageCost& cost;
  PartitionOptions opt;
};

// The least bottleneck over every partition `allowed` admits, every
// (kind, device count) per stage within the topology, every micro-batch.
// `received` prices a block's inputs. +inf when nothing fits.
double bruteForce(const Problem& p,
                  const std::function<bool(const std::vector<std::vector<int>>&)>& allowed,
                  const std::function<double(const std::vector<int>&)>& received) {
  const auto kinds = p.topo.kinds();
  double best = kInf;
  forEachPartition(p.g.size(), [&](const std::vector<std::vector<int>>& blocks) {
    if (static_cast<int>(blocks.size()) > static_cast<int>(p.topo.devices().size())) return;
    if (!stagesAcyclic(p.g, blocks) || !allowed(blocks)) return;
    for (int b : p.opt.microBatches) {
      std::vector<int> used(kinds.size(), 0);
      std::function<void(size_t, double)> assign = [&](size_t i, double worst) {
        if (worst >= best) return;
        if (i == blocks.size()) {
          best = worst;
          return;
        }
        for (size_t k = 0; k < kinds.size(); ++k)
          for (int d = 1; used[k] + d <= p.topo.count(kinds[k]); ++d) {
            if (b % d) continue;
            const StageEstimate e =
                estimateStage(p.cost, p.topo, blocks[i], kinds[k], d, b, received(blocks[i]),
                              queuesAtMost(p.g, blocks[i]));
            if (!std::isfinite(e.timePerSample()) ||
                e.memoryBytes(p.opt.inFlight) > p.topo.memoryLimit(kinds[k]))
              continue;
            used[k] += d;
            assign(i + 1, std::max(worst, e.timePerSample()));
            used[k] -= d;
          }
      };
      assign(0, 0);
    }
  });
  return best;
}

// The plan is what it says: a partition of the nodes into stages on distinct
// devices of their kind, each stage's estimate recomputed, memory within the
// limits, the bottleneck the largest stage time.
void expectConsistent(const Problem& p, const StageGraph& plan, bool chain) {
  std::vector<int> count(p.g.size(), 0);
  std::set<std::string> devices;
  double worst = 0;
  const auto order = p.g.topologicalOrder();
  std::vector<int> position(p.g.size());
  for (int i = 0; i < p.g.size(); ++i) position[order[i]] = i;
  for (const auto& st : plan.stages) {
    for (int v : st.nodes) ++count[v];
    for (const auto& id : st.devices) {
      EXPECT_TRUE(devices.insert(id).second) << id << " in two stages";
      EXPECT_EQ(p.topo.find(id)->kind, st.kind);
    }
    int first = p.g.size();
    for (int v : st.nodes) first = std::min(first, position[v]);
    const double received = chain ? chainReceivedBytesPerSample(p.g, position, first)
                                  : receivedBytesPerSample(p.g, st.nodes);
    const StageEstimate e =
        estimateStage(p.cost, p.topo, st.nodes, st.kind, static_cast<int>(st.devices.size()),
                      plan.microBatch, received, queuesAtMost(p.g, st.nodes));
    EXPECT_EQ(e.timePerSample(), st.estimate.timePerSample());
    EXPECT_LE(e.memoryBytes(plan.inFlight), p.topo.memoryLimit(st.kind));
    worst = std::max(worst, e.timePerSample());
  }
  for (int v = 0; v < p.g.size(); ++v) EXPECT_EQ(count[v], 1) << p.g.name(v);
  EXPECT_EQ(worst, plan.bottleneckTimePerSample);
}

// ---- tests ------------------------------------------------------------------

struct Setting {
  int cpus, gpus;
  bool tightMemory;
};

TEST(StagePartitioner, GraphPipelineEqualsBruteForceOnSmallGraphs) {
  const std::vector<Setting> settings = {
      {2, 0, false}, {3, 0, false}, {2, 1, false}, {3, 0, true}, {2, 1, true}};
  int compared = 0, infeasible = 0, multiStage = 0;
  for (const Shape& shape : shapes())
    for (const Setting& s : settings)
      for (unsigned seed = 0; seed < 8; ++seed) {
        std::mt19937 rng(seed * 7919 + shape.nodes.size());
        const PipeGraph g = build(shape, rng);
        const FakeStageCost cost = randomCost(g.size(), rng);
        // Tight: about a third of the graph's weights and activations per device.
        double total = 0;
        for (const auto& n : cost.nodes)
          total += n.weightBytes + 2 * 4 * n.activationBytesPerSample;
        const double memory = s.tightMemory ? total / 3 : kInf;
        const Topology topo = machine(s.cpus, s.gpus, memory, memory);
        Problem p{g, topo, cost, {}};
        p.opt.batch = 4;
        p.opt.microBatches = {1, 2, 4};
        const SeriesParallelTree tree = decomposeSeriesParallel(g);
        const auto intervals = seriesParallelIntervals(tree);
        const auto runs = chainRuns(g);
        // GPP's space: all stages series-parallel intervals, or all runs of
        // the chain (tensors sent directly either way).
        const double expected = bruteForce(
            p,
            [&](const std::vector<std::vector<int>>& blocks) {
              bool allIntervals = true, allRuns = true;
              for (const auto& b : blocks) {
                allIntervals = allIntervals && intervals.count(b);
                allRuns = allRuns && runs(b);
              }
              return allIntervals || allRuns;
            },
            [&](const std::vector<int>& nodes) { return receivedBytesPerSample(g, nodes); });
        SCOPED_TRACE(shape.name + " cpus " + std::to_string(s.cpus) + " gpus " +
                     std::to_string(s.gpus) + (s.tightMemory ? " tight" : "") + " seed " +
                     std::to_string(seed) + " " + tree.toString(g));
        if (!std::isfinite(expected)) {
          EXPECT_THROW(partitionGraphPipeline(g, topo, cost, p.opt), Error);
          ++infeasible;
          continue;
        }
        const StageGraph plan = partitionGraphPipeline(g, topo, cost, p.opt);
        EXPECT_EQ(plan.bottleneckTimePerSample, expected) << plan.toString(g);
        expectConsistent(p, plan, false);
        multiStage += plan.stages.size() > 1;
        ++compared;
      }
  // The cases do exercise splitting and the memory limits.
  EXPECT_GT(compared, 150);
  EXPECT_GT(multiStage, 60);
  EXPECT_GT(infeasible, 0);
}

TEST(StagePartitioner, OnAChainBothEqualUnrestrictedBruteForce) {
  // On a chain every valid partition is a run of the chain: GPP's search
  // space is then complete, and SPP's is the same.
  for (unsigned seed = 0; seed < 10; ++seed) {
    std::mt19937 rng(seed);
    Shape chain{"chain", {"a", "b", "c", "d", "e", "f", "g"}, {}};
    for (int i = 0; i + 1 < 7; ++i) chain.edges.push_back({i, i + 1});
    const PipeGraph g = build(chain, rng);
    const FakeStageCost cost = randomCost(g.size(), rng);
    const Topology topo = machine(3, 0, kInf, kInf);
    Problem p{g, topo, cost, {}};
    p.opt.batch = 2;
    p.opt.microBatches = {1, 2};
    const double expected = bruteForce(
        p, [](const std::vector<std::vector<int>>&) { return true; },
        [&](const std::vector<int>& nodes) { return receivedBytesPerSample(g, nodes); });
    const StageGraph gpp = partitionGraphPipeline(g, topo, cost, p.opt);
    const StageGraph spp = partitionSequentialPipeline(g, topo, cost, p.opt);
    EXPECT_EQ(gpp.bottleneckTimePerSample, expected) << "seed " << seed;
    EXPECT_EQ(spp.bottleneckTimePerSample, expected) << "seed " << seed;
    expectConsistent(p, spp, true);
  }
}

// Whether every pinned node's block is the pin's index when the blocks are
// numbered by their first node in `position`.
bool pinsHold(const std::vector<std::vector<int>>& blocks, const std::vector<int>& position,
              const std::map<int, int>& pins) {
  std::vector<std::pair<int, int>> first;  // (first position, block)
  for (size_t b = 0; b < blocks.size(); ++b) {
    int lo = static_cast<int>(position.size());
    for (int v : blocks[b]) lo = std::min(lo, position[v]);
    first.push_back({lo, static_cast<int>(b)});
  }
  std::sort(first.begin(), first.end());
  std::vector<int> index(blocks.size());
  for (size_t i = 0; i < first.size(); ++i) index[first[i].second] = static_cast<int>(i);
  for (const auto& [v, stage] : pins)
    for (size_t b = 0; b < blocks.size(); ++b)
      if (std::count(blocks[b].begin(), blocks[b].end(), v) && index[b] != stage) return false;
  return true;
}

// The brute force over SPP's space: blocks that are runs of the
// topological order (and honour p's pins), each receiving the bytes live
// across the cut before its first node.
double chainBruteForce(const Problem& p) {
  const PipeGraph& g = p.g;
  const auto order = g.topologicalOrder();
  std::vector<int> position(g.size());
  for (int i = 0; i < g.size(); ++i) position[order[i]] = i;
  auto firstOf = [&](const std::vector<int>& nodes) {
    int first = g.size();
    for (int v : nodes) first = std::min(first, position[v]);
    return first;
  };
  const auto run = chainRuns(g);
  return bruteForce(
      p,
      [&](const std::vector<std::vector<int>>& blocks) {
        for (const auto& b : blocks)
          if (!run(b)) return false;
        return pinsHold(blocks, position, p.opt.pins);
      },
      [&](const std::vector<int>& nodes) { return chainReceivedBytesPerSample(g, position, firstOf(nodes)); });
}

TEST(StagePartitioner, SequentialPipelineEqualsBruteForceOverChainRuns) {
  for (const Shape& shape : shapes())
    for (unsigned seed = 0; seed < 6; ++seed) {
      std::mt19937 rng(seed + 100);
      const PipeGraph g = build(shape, rng);
      const FakeStageCost cost = randomCost(g.size(), rng);
      const Topology topo = machine(3, 0, kInf, kInf);
      Problem p{g, topo, cost, {}};
      p.opt.batch = 2;
      p.opt.microBatches = {1, 2};
      const double expected = chainBruteForce(p);
      const StageGraph spp = partitionSequentialPipeline(g, topo, cost, p.opt);
      EXPECT_EQ(spp.bottleneckTimePerSample, expected) << shape.name << " seed " << seed;
      expectConsistent(p, spp, true);
    }
}

// x -> {a, b} -> j on four devices where data parallel gains nothing
// (efficiency 1/2): x and j 0.5 ms a sample, a and b 3 ms, 1 MB an edge on
// a 1 GB/s link.
struct BranchesOnFourDevices {
  PipeGraph g;
  int x = g.addNode("x"), a = g.addNode("a"), b = g.addNode("b"), j = g.addNode("j");
  FakeStageCost cost;
  LinkCost link{1e9, 0};
  Topology topo = topology();
  BranchesOnFourDevices() {
    for (auto [from, to] : std::vector<std::pair<int, int>>{{x, a}, {x, b}, {a, j}, {b, j}})
      g.addEdge(from, to, 1e6);
    cost.nodes = {{0.5e-3}, {3e-3}, {3e-3}, {0.5e-3}};
    cost.dataParallelEfficiency = 0.5;
  }
  Topology topology() const {
    std::vector<PipeDevice> devices;
    for (int i = 0; i < 4; ++i) devices.push_back({"cpu" + std::to_string(i), DeviceKind::Cpu, 1});
    return Topology(devices, {}, &link, "test");
  }
};

// x -> {a, b} -> j, every tensor 1 MB per sample over 1 GB/s links (1 ms a
// sample), x and j 0.5 ms, a and b 3 ms; four devices; data parallel gains
// nothing (efficiency 1/2). By hand:
//   GPP  [x] [a] [b] [j]: a and b each receive x's tensor: 3 + 1 = 4 ms;
//        j receives two: 0.5 + 2 = 2.5 ms. Bottleneck 4 ms.
//   SPP  chain x, a, b, j: every cut has two tensors live across it (x's to
//        b rides along a's stage), so a stage after a cut pays 2 ms:
//        [x] [a] [b] [j] = 0.5, 5, 5, 2.5; [x a] [b] [j] = 3.5, 5, 2.5; ...
//        Bottleneck 5 ms.
TEST(StagePartitioner, GraphPipelineBeatsTheChainOnBranches) {
  BranchesOnFourDevices f;
  const PipeGraph& g = f.g;
  const FakeStageCost& cost = f.cost;
  const Topology& topo = f.topo;
  PartitionOptions opt;
  opt.batch = 1;
  const StageGraph gpp = partitionGraphPipeline(g, topo, cost, opt);
  const StageGraph spp = partitionSequentialPipeline(g, topo, cost, opt);
  EXPECT_DOUBLE_EQ(gpp.bottleneckTimePerSample, 4e-3) << gpp.toString(g);
  EXPECT_DOUBLE_EQ(spp.bottleneckTimePerSample, 5e-3) << spp.toString(g);
  EXPECT_LT(gpp.bottleneckTimePerSample, spp.bottleneckTimePerSample);
  // The graph of stages: a and b side by side between x and j.
  ASSERT_EQ(gpp.stages.size(), 4u);
  EXPECT_EQ(gpp.edges, (std::vector<std::pair<int, int>>{{0, 1}, {0, 2}, {1, 3}, {2, 3}}));
}

// Four independent towers u_i -> v_i (every node 1 ms a sample, every edge
// 1 ms on the link), numbered u0..u3 then v0..v3, on two devices where data
// parallel gains nothing. Two towers per device, side by side: 4 ms, no
// transfer. A chain (u0 u1 u2 u3 v0 v1 v2 v3) must cut between some u_i and
// v_i: at best 6 ms. One stage: 8 ms.
TEST(StagePartitioner, BranchesShareDevicesWhenThereAreFewer) {
  PipeGraph g;
  for (int i = 0; i < 4; ++i) g.addNode("u" + std::to_string(i));
  for (int i = 0; i < 4; ++i) g.addNode("v" + std::to_string(i));
  for (int i = 0; i < 4; ++i) g.addEdge(i, 4 + i, 1e6);
  FakeStageCost cost;
  cost.nodes.assign(8, FakeNodeCost{1e-3});
  cost.dataParallelEfficiency = 0.5;
  const LinkCost link{1e9, 0};
  const Topology topo({{"c0", DeviceKind::Cpu, 1}, {"c1", DeviceKind::Cpu, 1}}, {}, &link, "t");
  PartitionOptions opt;
  const StageGraph gpp = partitionGraphPipeline(g, topo, cost, opt);
  const StageGraph spp = partitionSequentialPipeline(g, topo, cost, opt);
  EXPECT_DOUBLE_EQ(gpp.bottleneckTimePerSample, 4e-3) << gpp.toString(g);
  EXPECT_DOUBLE_EQ(spp.bottleneckTimePerSample, 6e-3) << spp.toString(g);
  ASSERT_EQ(gpp.stages.size(), 2u);
  EXPECT_EQ(g.names(gpp.stages[0].nodes), "u0, u1, v0, v1");
  EXPECT_TRUE(gpp.edges.empty());
}

TEST(StagePartitioner, GraphPipelineNeverSlowerThanTheChain) {
  // Random multi-branch graphs of up to 24 nodes, more branches than
  // devices at times: GPP's plan is never slower than SPP's, and strictly
  // faster on some (the relayed tensors SPP pays for).
  std::mt19937 rng(11);
  int faster = 0;
  for (int trial = 0; trial < 60; ++trial) {
    PipeGraph g;
    const int n = 6 + static_cast<int>(rng() % 19);
    for (int i = 0; i < n; ++i) g.addNode("n" + std::to_string(i));
    for (int a = 0; a < n; ++a)
      for (int c = a + 1; c < std::min(n, a + 5); ++c)
        if (rng() % 100 < 40) g.addEdge(a, c, 1000.0 * (1 + rng() % 8));
    const FakeStageCost cost = randomCost(n, rng);
    const Topology topo =
        machine(2 + static_cast<int>(rng() % 3), static_cast<int>(rng() % 2), kInf, kInf);
    PartitionOptions opt;
    opt.batch = 4;
    const StageGraph gpp = partitionGraphPipeline(g, topo, cost, opt);
    const StageGraph spp = partitionSequentialPipeline(g, topo, cost, opt);
    EXPECT_LE(gpp.bottleneckTimePerSample, spp.bottleneckTimePerSample) << "trial " << trial;
    faster += gpp.bottleneckTimePerSample < spp.bottleneckTimePerSample;
  }
  EXPECT_GT(faster, 3);  // 6 of the 60 here
}

TEST(StagePartitioner, MemoryLimitForcesASplit) {
  // Two nodes of 3 MB weights each on devices of 4 MB: they cannot share a
  // device, whatever that costs in time.
  PipeGraph g;
  g.addNode("p");
  g.addNode("q");
  g.addEdge(0, 1, 1);
  FakeStageCost cost;
  cost.nodes = {{1e-3, kInf, 3e6, 0}, {1e-3, kInf, 3e6, 0}};
  const LinkCost link{1e3, 1e-3};  // a slow link: one stage would be faster
  const Topology roomy({{"c0", DeviceKind::Cpu, 1, 1e9}, {"c1", DeviceKind::Cpu, 1, 1e9}}, {},
                       &link, "t");
  const Topology tight({{"c0", DeviceKind::Cpu, 1, 4e6}, {"c1", DeviceKind::Cpu, 1, 4e6}}, {},
                       &link, "t");
  PartitionOptions opt;
  EXPECT_EQ(partitionGraphPipeline(g, roomy, cost, opt).stages.size(), 1u);
  EXPECT_EQ(partitionGraphPipeline(g, tight, cost, opt).stages.size(), 2u);
}

// ---- pins -----------------------------------------------------------------

// Each node's place in the order the DP numbers stages on `tree`: its
// leaves left to right (a stage is a contiguous run of them).
std::vector<int> leafPositions(const SeriesParallelTree& tree, int nodes) {
  std::vector<int> position(nodes, -1);
  int next = 0;
  std::function<void(int)> visit = [&](int t) {
    const SpNode& s = tree.nodes[t];
    if (s.kind == SpNode::Kind::Leaf) position[s.graphNode] = next++;
    for (int c : s.children) visit(c);
  };
  visit(tree.root);
  return position;
}

void expectPinsHonoured(const PipeGraph& g, const StageGraph& plan, const std::map<int, int>& pins) {
  for (const auto& [v, stage] : pins) {
    ASSERT_LT(stage, static_cast<int>(plan.stages.size())) << g.name(v) << "\n" << plan.toString(g);
    const auto& nodes = plan.stages[stage].nodes;
    EXPECT_TRUE(std::count(nodes.begin(), nodes.end(), v))
        << g.name(v) << " pinned to stage " << stage << "\n" << plan.toString(g);
  }
}

TEST(StagePartitioner, PinnedGraphPipelineEqualsBruteForceOnSmallGraphs) {
  // The unpinned brute force's space, less the partitions that put a pinned
  // node in another stage than its pin (stages numbered as the search
  // numbers them: the tree's leaf order, or the chain's).
  const std::vector<Setting> settings = {{2, 0, false}, {3, 0, false}, {2, 1, false}, {3, 0, true}};
  int compared = 0, infeasible = 0, costlier = 0;
  for (const Shape& shape : shapes())
    for (const Setting& s : settings)
      for (unsigned seed = 0; seed < 6; ++seed) {
        std::mt19937 rng(seed * 104729 + shape.nodes.size() * 31 + s.cpus * 7 + s.gpus);
        const PipeGraph g = build(shape, rng);
        const FakeStageCost cost = randomCost(g.size(), rng);
        double total = 0;
        for (const auto& n : cost.nodes) total += n.weightBytes + 2 * 4 * n.activationBytesPerSample;
        const double memory = s.tightMemory ? total / 3 : kInf;
        const Topology topo = machine(s.cpus, s.gpus, memory, memory);
        Problem p{g, topo, cost, {}};
        p.opt.batch = 4;
        p.opt.microBatches = {1, 2, 4};
        const int devices = s.cpus + s.gpus;
        const int pinCount = 1 + static_cast<int>(rng() % 2);
        for (int i = 0; i < pinCount; ++i)
          p.opt.pins[static_cast<int>(rng() % g.size())] = static_cast<int>(rng() % devices);
        const SeriesParallelTree tree = decomposeSeriesParallel(g);
        const auto intervals = seriesParallelIntervals(tree);
        const auto runs = chainRuns(g);
        const std::vector<int> treeOrder = leafPositions(tree, g.size());
        std::vector<int> chainOrder(g.size());
        const auto order = g.topologicalOrder();
        for (int i = 0; i < g.size(); ++i) chainOrder[order[i]] = i;
        auto received = [&](const std::vector<int>& nodes) { return receivedBytesPerSample(g, nodes); };
        const double expected = bruteForce(
            p,
            [&](const std::vector<std::vector<int>>& blocks) {
              bool allIntervals = true, allRuns = true;
              for (const auto& b : blocks) {
                allIntervals = allIntervals && intervals.count(b);
                allRuns = allRuns && runs(b);
              }
              return (allIntervals && pinsHold(blocks, treeOrder, p.opt.pins)) ||
                     (allRuns && pinsHold(blocks, chainOrder, p.opt.pins));
            },
            received);
        std::string pins;
        for (const auto& [v, stage] : p.opt.pins) pins += " " + g.name(v) + "=" + std::to_string(stage);
        SCOPED_TRACE(shape.name + " cpus " + std::to_string(s.cpus) + " gpus " +
                     std::to_string(s.gpus) + (s.tightMemory ? " tight" : "") + " seed " +
                     std::to_string(seed) + " pins" + pins + " " + tree.toString(g));
        if (!std::isfinite(expected)) {
          EXPECT_THROW(partitionGraphPipeline(g, topo, cost, p.opt), Error);
          ++infeasible;
          continue;
        }
        const StageGraph plan = partitionGraphPipeline(g, topo, cost, p.opt);
        EXPECT_EQ(plan.bottleneckTimePerSample, expected) << plan.toString(g);
        expectConsistent(p, plan, false);
        expectPinsHonoured(g, plan, p.opt.pins);
        PartitionOptions free = p.opt;
        free.pins.clear();
        costlier += expected > partitionGraphPipeline(g, topo, cost, free).bottleneckTimePerSample;
        ++compared;
      }
  // The pins do constrain: some plans are slower for them, some impossible.
  EXPECT_GT(compared, 80);
  EXPECT_GT(costlier, 20);
  EXPECT_GT(infeasible, 5);
}

TEST(StagePartitioner, PinnedSequentialPipelineEqualsBruteForceOverChainRuns) {
  int compared = 0;
  for (const Shape& shape : shapes())
    for (unsigned seed = 0; seed < 6; ++seed) {
      std::mt19937 rng(seed + 200);
      const PipeGraph g = build(shape, rng);
      const FakeStageCost cost = randomCost(g.size(), rng);
      const Topology topo = machine(3, 0, kInf, kInf);
      Problem p{g, topo, cost, {}};
      p.opt.batch = 2;
      p.opt.microBatches = {1, 2};
      p.opt.pins[static_cast<int>(rng() % g.size())] = static_cast<int>(rng() % 3);
      const double expected = chainBruteForce(p);
      SCOPED_TRACE(shape.name + " seed " + std::to_string(seed));
      if (!std::isfinite(expected)) {
        EXPECT_THROW(partitionSequentialPipeline(g, topo, cost, p.opt), Error);
        continue;
      }
      const StageGraph spp = partitionSequentialPipeline(g, topo, cost, p.opt);
      EXPECT_EQ(spp.bottleneckTimePerSample, expected);
      expectConsistent(p, spp, true);
      expectPinsHonoured(g, spp, p.opt.pins);
      ++compared;
    }
  EXPECT_GT(compared, 25);
}

// x -> {a, b} -> j as in GraphPipelineBeatsTheChainOnBranches: pinning b to
// stage 1 moves it ahead of a (the free plan has a first), and pinning a
// stage the devices cannot give, a node the graph lacks, or a consumer
// before its producer is refused, naming it.
TEST(StagePartitioner, PinsMoveANodeAndBadPinsAreRefused) {
  BranchesOnFourDevices f;
  const PipeGraph& g = f.g;
  const int x = f.x, b = f.b, j = f.j;
  const FakeStageCost& cost = f.cost;
  const Topology& topo = f.topo;
  PartitionOptions opt;
  const StageGraph free = partitionGraphPipeline(g, topo, cost, opt);
  ASSERT_EQ(free.stages.size(), 4u);
  EXPECT_EQ(g.names(free.stages[1].nodes), "a");

  opt.pins = pinsByName(g, {{"b", 1}});
  const StageGraph pinned = partitionGraphPipeline(g, topo, cost, opt);
  EXPECT_EQ(g.names(pinned.stages[1].nodes), "b") << pinned.toString(g);
  EXPECT_DOUBLE_EQ(pinned.bottleneckTimePerSample, 4e-3);  // no slower: a and b are alike

  // Everything in stage 0 is one stage: the bottleneck is the whole model.
  opt.pins = pinsByName(g, {{"j", 0}});
  const StageGraph one = partitionGraphPipeline(g, topo, cost, opt);
  EXPECT_EQ(one.stages.size(), 1u) << one.toString(g);

  auto refusal = [&](const std::map<int, int>& pins) {
    PartitionOptions o;
    o.pins = pins;
    try {
      partitionGraphPipeline(g, topo, cost, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string why = refusal({{b, 4}});
  EXPECT_NE(why.find("node b is pinned to stage 4"), std::string::npos) << why;
  EXPECT_NE(why.find("4 device(s) give at most 4 stage(s)"), std::string::npos) << why;
  why = refusal({{7, 0}});
  EXPECT_NE(why.find("node id 7"), std::string::npos) << why;
  why = refusal({{j, 0}, {x, 1}});  // j reads x's tensors: j cannot come first
  EXPECT_NE(why.find("honours the pins (x -> stage 1, j -> stage 0)"), std::string::npos) << why;
  try {
    pinsByName(g, {{"nope", 0}});
    FAIL() << "a pin on a node the graph lacks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
  }
}

TEST(StagePartitioner, NothingFitsNamesTheNodeAndTheBytes) {
  PipeGraph g;
  g.addNode("small");
  g.addNode("huge");
  g.addEdge(0, 1, 1);
  FakeStageCost cost;
  cost.nodes = {{1e-3, kInf, 1e3, 10}, {1e-3, kInf, 5e6, 100}};
  const LinkCost link{1e9, 0};
  const Topology topo({{"c0", DeviceKind::Cpu, 1, 1e6}, {"c1", DeviceKind::Cpu, 1, 1e6}}, {}, &link,
                      "t");
  try {
    partitionGraphPipeline(g, topo, cost, PartitionOptions{});
    FAIL() << "a plan over the memory limit";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("node huge"), std::string::npos) << what;
    EXPECT_NE(what.find("5000200 B"), std::string::npos) << what;  // 5e6 + 2 x 100
    EXPECT_NE(what.find("limit 1000000 B"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace collage
