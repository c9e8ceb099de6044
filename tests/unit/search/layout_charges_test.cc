// The op-level DP with layout charges (core/search/layout_charges.h): a
// chain where a library wins only when its kernels hand tensors over, the
// refusal of a hand-over when a consumer needs plain memory, and the DP
// against brute force (every cover priced as the Session would run it) on
// random graphs.
#include "core/search/layout_charges.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "core/ir/sub_graph.h"
#include "core/runtime/backend.h"
#include "core/search/op_level_optimizer.h"

namespace collage {
namespace {

// x -> n0 -> n1 -> n2 -> (n3 reads n1's result too when `fork`) -> outputs.
Graph chain(bool fork) {
  Graph g;
  ValueId v = g.addInput("x", {ElementType::Float32, {1, 16, 8, 8}});
  std::vector<ValueId> values{v};
  for (int i = 0; i < 3; ++i) {
    ValueId out = g.addValue("v" + std::to_string(i), {ElementType::Float32, {1, 16, 8, 8}});
    g.addNode(Node{"n" + std::to_string(i), "Relu", {}, {values.back()}, {out}});
    values.push_back(out);
  }
  if (fork) {
    ValueId out = g.addValue("v3", {ElementType::Float32, {1, 16, 8, 8}});
    g.addNode(Node{"n3", "Relu", {}, {values[2]}, {out}});
    g.finalize();
    g.markOutput(out);
  }
  g.finalize();
  g.markOutput(values.back());
  g.finalize();
  return g;
}

// Singles on "plain" (10 ns) and on "lib" (12 ns measured, 6 ns with every
// boundary in its layout "L"; a reorder costs 3 ns).
struct Placements {
  Graph g;
  CandidateSet set;
  std::vector<Cost> costs;
  std::vector<LayoutOffers> offers;
  ReorderModel model{3.0, 0.0, 1};
};

Placements singles(bool fork, const std::vector<std::string>& plainOnly = {}) {
  Placements s{chain(fork), {}, {}, {}};
  s.set = CandidateSet(s.g.numNodes());
  for (NodeId n = 0; n < s.g.numNodes(); ++n) {
    s.set.add(Candidate{NodeSet::of(s.g.numNodes(), {n}), "plain", "op", {}});
    s.costs.push_back(10);
    s.offers.emplace_back();
    const bool lib = std::find(plainOnly.begin(), plainOnly.end(), s.g.node(n).name) == plainOnly.end();
    if (!lib) continue;
    s.set.add(Candidate{NodeSet::of(s.g.numNodes(), {n}), "lib", "op", {}});
    s.costs.push_back(12);
    LayoutOffers o;
    o.nativeNs = 6;
    for (ValueId v : s.g.node(n).inputs) o.offers.push_back({v, false, "L"});
    for (ValueId v : s.g.node(n).outputs) o.offers.push_back({v, true, "L"});
    s.offers.push_back(o);
  }
  return s;
}

OpLevelResult solve(const Placements& s, const LayoutCharges* charges) {
  OpLevelProblem p{&s.g, &s.set, s.costs, nullptr, {}};
  p.layouts = charges;
  return optimizeOpLevel(p);
}

std::string backendsOf(const Placements& s, const OpLevelResult& r) {
  std::string out;
  for (int32_t c : r.chosen) out += (out.empty() ? "" : " ") + s.set[c].backend;
  return out;
}

// Alone, each "lib" kernel (12) loses to "plain" (10); in a run of three the
// two values between them are handed over and only the graph's input and
// output are reordered: 3 * 6 + 2 * 3 = 24 < 30.
TEST(LayoutCharges, ARunOfKernelsThatHandOverBeatsCheaperKernelsAlone) {
  const Placements s = singles(false);
  EXPECT_EQ(backendsOf(s, solve(s, nullptr)), "plain plain plain");
  EXPECT_DOUBLE_EQ(solve(s, nullptr).total, 30);
  const LayoutCharges charges(s.g, s.set, s.offers, s.model);
  ASSERT_TRUE(charges.active());
  const OpLevelResult r = solve(s, &charges);
  EXPECT_EQ(backendsOf(s, r), "lib lib lib");
  EXPECT_DOUBLE_EQ(r.total, 24);
  EXPECT_DOUBLE_EQ(charges.coverCost(r.chosen), 6);
}

// A value read by a kernel that needs plain memory is not handed over: the
// producer reorders it, and so does every other consumer in the layout. With
// n3 (a reader of v1, besides n2) plain-only, lib everywhere else costs
// 6 * 3 + 10 + 3 (x) + 3 (v2, a graph output) + 2 * 3 (v1: n1 and n2) = 40,
// as much as all plain; lib n0 and n1 with plain n2 and n3 cost
// 6 + 6 + 10 + 10 + 3 (x) + 3 (v1, reordered once by n1) = 38.
TEST(LayoutCharges, AConsumerThatNeedsPlainMemoryStopsTheHandOver) {
  const Placements s = singles(true, {"n3"});
  const LayoutCharges charges(s.g, s.set, s.offers, s.model);
  const OpLevelResult r = solve(s, &charges);
  EXPECT_DOUBLE_EQ(r.total, 38);
  EXPECT_EQ(backendsOf(s, r), "lib lib plain plain");
  // The same cover priced as the Session runs it.
  Cost sum = 0;
  for (int32_t c : r.chosen) sum += charges.kernelNs(c, s.costs[static_cast<size_t>(c)]);
  EXPECT_DOUBLE_EQ(sum + charges.coverCost(r.chosen), r.total);
}

// A kernel that runs in any layout at one cost (an elementwise pass) joins
// a hand-over and is charged no reorder of its own. With n1 plain-only on
// "lib", a 9 ns agnostic "pass" kernel there lets v0 and v1 stay in L:
// 6 + 9 + 6 + 3 (x) + 3 (v2, a graph output) = 27, less than all plain (30)
// or lib around a plain n1 (6 + 10 + 6 + 5 reorders * 3 = 37). With n2 plain
// too, the pass's failed hand-over of v1 costs nothing.
TEST(LayoutCharges, ALayoutAgnosticKernelJoinsTheHandOverAndNeverReorders) {
  for (bool lastPlain : {false, true}) {
    SCOPED_TRACE(lastPlain ? "n2 plain only" : "n2 on lib too");
    Placements s = singles(false, lastPlain ? std::vector<std::string>{"n1", "n2"} : std::vector<std::string>{"n1"});
    const NodeId n1 = 1;
    s.set.add(Candidate{NodeSet::of(s.g.numNodes(), {n1}), "pass", "op", {}});
    s.costs.push_back(9);
    LayoutOffers o;
    o.nativeNs = 9;
    o.agnostic = true;
    o.offers = {{s.g.node(n1).inputs[0], false, "L"}, {s.g.node(n1).outputs[0], true, "L"}};
    s.offers.push_back(o);
    const LayoutCharges charges(s.g, s.set, s.offers, s.model);
    const OpLevelResult r = solve(s, &charges);
    EXPECT_EQ(backendsOf(s, r), lastPlain ? "lib pass plain" : "lib pass lib");
    EXPECT_DOUBLE_EQ(r.total, lastPlain ? 6 + 9 + 10 + 3 : 27);
    Cost sum = 0;
    for (int32_t c : r.chosen) sum += charges.kernelNs(c, s.costs[static_cast<size_t>(c)]);
    EXPECT_DOUBLE_EQ(sum + charges.coverCost(r.chosen), r.total);
  }
}

// The plan records each group at the cost the DP charged it (its kernel in
// its own layout), not at its measurement with plain boundaries: with the
// cover's reorders the groups add up to the prediction. Measured plainly the
// three "lib" kernels would say 36 of a 24 ns plan.
TEST(LayoutCharges, APlansGroupsCostWhatTheDpChargedThem) {
  const Placements s = singles(false);
  const LayoutCharges charges(s.g, s.set, s.offers, s.model);
  const OpLevelResult r = solve(s, &charges);
  std::vector<PlanGroup> groups;
  for (int32_t c : r.chosen) {
    PlanGroup g;
    g.candidate = c;
    g.costNs = s.costs[static_cast<size_t>(c)];
    groups.push_back(g);
  }
  PlanGroup region;  // a graph-level region: no candidate, its own time
  region.origin = PlanOrigin::GraphLevel;
  region.costNs = 99;
  groups.push_back(region);
  chargeKernelsAsTheDp(charges, groups);
  Cost sum = 0;
  for (size_t i = 0; i + 1 < groups.size(); ++i) sum += groups[i].costNs;
  EXPECT_DOUBLE_EQ(sum + charges.coverCost(r.chosen), r.total);
  EXPECT_DOUBLE_EQ(groups.back().costNs, 99);
  // Rebuilt from what the job keeps (offers and model), the charges plan the same.
  const LayoutCharges again(s.g, s.set, charges.offers(), charges.model());
  EXPECT_EQ(solve(s, &again).chosen, r.chosen);
}

// Random DAGs and candidates on three backends, "lib" offering one of two
// layouts at each boundary: the DP's total is the cheapest cover's kernels
// plus the reorders coverCost counts for it.
TEST(LayoutCharges, EqualsBruteForceOnRandomGraphs) {
  std::mt19937 rng(5);
  int checked = 0;
  for (int trial = 0; trial < 40; ++trial) {
    Graph g;
    std::vector<ValueId> values = {g.addInput("x", {ElementType::Float32, {1, 4, 2, 2}})};
    const int nodes = 3 + trial % 8;
    for (int i = 0; i < nodes; ++i) {
      ValueId out = g.addValue("v" + std::to_string(i), {ElementType::Float32, {1, 4, 2, 2}});
      const size_t lo = values.size() > 3 ? values.size() - 3 : 0;
      auto recent = [&] { return values[std::uniform_int_distribution<size_t>(lo, values.size() - 1)(rng)]; };
      if (rng() % 3 == 0 && values.size() > 1)
        g.addNode(Node{"n" + std::to_string(i), "Add", {}, {recent(), recent()}, {out}});
      else
        g.addNode(Node{"n" + std::to_string(i), "Relu", {}, {recent()}, {out}});
      values.push_back(out);
    }
    g.finalize();
    for (ValueId v = 0; v < g.numValues(); ++v)
      if (g.value(v).consumers.empty() && !g.value(v).isGraphInput) g.markOutput(v);
    g.finalize();

    CandidateSet set(g.numNodes());
    GraphReachability reach(g);
    for (NodeId n = 0; n < g.numNodes(); ++n)
      for (const char* b : {"plain", "lib"}) set.add(Candidate{NodeSet::of(g.numNodes(), {n}), b, "op", {}});
    for (int tries = 0; tries < 60; ++tries) {
      const NodeId start = static_cast<NodeId>(rng() % g.numNodes());
      NodeSet s = NodeSet::of(g.numNodes(), {start});
      for (NodeId n = start + 1; n < g.numNodes() && s.count() < 3; ++n)
        if (rng() % 2) s.insert(n);
      if (!checkSubGraph(g, reach, s, SubGraphLimits{0, 2, 4, true})) continue;
      set.add(Candidate{s, rng() % 2 ? "lib" : "plain", "test", {}});
    }
    std::vector<Cost> costs;
    std::vector<LayoutOffers> offers(set.size());
    for (size_t c = 0; c < set.size(); ++c) {
      costs.push_back(10.0 + static_cast<double>(rng() % 20));
      if (set[c].backend != "lib") continue;
      offers[c].nativeNs = costs[c] - static_cast<double>(rng() % 8);
      const KernelRequest request = KernelRequest::of(g, set[c].nodes);
      for (ValueId v : request.inputs)
        if (rng() % 4) offers[c].offers.push_back({v, false, rng() % 5 ? "L" : "M"});
      for (ValueId v : request.outputs)
        if (rng() % 4) offers[c].offers.push_back({v, true, rng() % 5 ? "L" : "M"});
      if (rng() % 4 == 0) {  // an elementwise kernel: any layout at its cost
        offers[c].agnostic = true;
        offers[c].nativeNs = costs[c];
      }
    }
    const LayoutCharges charges(g, set, offers, ReorderModel{1.5, 0.01, 1});
    OpLevelProblem p{&g, &set, costs, nullptr, {}};
    p.layouts = &charges;
    const OpLevelResult r = optimizeOpLevel(p);

    Cost best = kInvalidCost;
    std::vector<int32_t> cover;
    // Kernels alone are a lower bound (reorders only add): prune on them.
    std::function<void(size_t, NodeSet, Cost)> go = [&](size_t i, NodeSet covered, Cost kernels) {
      if (kernels >= best) return;
      if (covered.count() == g.numNodes()) {
        best = std::min(best, kernels + charges.coverCost(cover));
        return;
      }
      if (i == set.size()) return;
      go(i + 1, covered, kernels);
      if (set[i].nodes.intersects(covered)) return;
      cover.push_back(static_cast<int32_t>(i));
      go(i + 1, covered | set[i].nodes,
         kernels + charges.kernelNs(static_cast<int32_t>(i), costs[i]));
      cover.pop_back();
    };
    go(0, NodeSet(g.numNodes()), 0);
    ASSERT_NEAR(r.total, best, 1e-9) << "trial " << trial << "\n" << g.toString();
    Cost sum = charges.coverCost(r.chosen);
    for (int32_t c : r.chosen) sum += charges.kernelNs(c, costs[static_cast<size_t>(c)]);
    EXPECT_NEAR(sum, r.total, 1e-9) << "trial " << trial;
    // The DP walks the nodes in any order to the same optimum (dp_order.h).
    p.order.resize(static_cast<size_t>(g.numNodes()));
    for (NodeId n = 0; n < g.numNodes(); ++n) p.order[static_cast<size_t>(n)] = n;
    std::shuffle(p.order.begin(), p.order.end(), rng);
    EXPECT_NEAR(optimizeOpLevel(p).total, best, 1e-9) << "trial " << trial << " in a shuffled order";
    ++checked;
  }
  EXPECT_EQ(checked, 40);
}

// Every cover, priced as the Session would run it: the least cost.
Cost bruteForceWithLayouts(const Graph& g, const CandidateSet& set, const std::vector<Cost>& costs,
                           const LayoutCharges& charges) {
  Cost best = kInvalidCost;
  std::vector<int32_t> cover;
  // Kernels alone are a lower bound (reorders only add): prune on them.
  std::function<void(size_t, NodeSet, Cost)> go = [&](size_t i, NodeSet covered, Cost kernels) {
    if (kernels >= best) return;
    if (covered.count() == g.numNodes()) {
      best = std::min(best, kernels + charges.coverCost(cover));
      return;
    }
    if (i == set.size()) return;
    go(i + 1, covered, kernels);
    if (set[i].nodes.intersects(covered)) return;
    cover.push_back(static_cast<int32_t>(i));
    go(i + 1, covered | set[i].nodes, kernels + charges.kernelNs(static_cast<int32_t>(i), costs[i]));
    cover.pop_back();
  };
  go(0, NodeSet(g.numNodes()), 0);
  return best;
}

// A chain whose outputs are kept for a join at its end (a cross-stage
// partial block: each kept value waits at the join while the chain goes
// on), with kernels in two layouts: the states that differ only in the
// values waiting there are pruned by the join rule (op_level_optimizer.h),
// and the result is still the brute-force optimum.
TEST(LayoutCharges, ValuesWaitingAtAJoinEqualBruteForce) {
  std::mt19937 rng(41);
  int64_t joined = 0;
  for (int trial = 0; trial < 30; ++trial) {
    Graph g;
    const TensorType t{ElementType::Float32, {1, 4, 2, 2}};
    std::vector<ValueId> chainValues{g.addInput("x", t)}, kept;
    const int links = 4 + trial % 4;
    for (int i = 0; i < links; ++i) {
      const ValueId out = g.addValue("v" + std::to_string(i), t);
      // Some links add the value before the last (a residual), as a bottleneck does.
      if (i >= 2 && rng() % 3 == 0)
        g.addNode(Node{"n" + std::to_string(i), "Add", {}, {chainValues.back(), chainValues[chainValues.size() - 2]}, {out}});
      else
        g.addNode(Node{"n" + std::to_string(i), "Relu", {}, {chainValues.back()}, {out}});
      chainValues.push_back(out);
      if (i + 1 < links && rng() % 3 != 0) kept.push_back(out);
    }
    kept.push_back(chainValues.back());
    const ValueId joinOut = g.addValue("joined", t);
    g.addNode(Node{"join", "Sum", {}, kept, {joinOut}});
    g.finalize();
    g.markOutput(joinOut);
    g.finalize();

    CandidateSet set(g.numNodes());
    for (NodeId n = 0; n < g.numNodes(); ++n)
      for (const char* b : {"plain", "lib"}) set.add(Candidate{NodeSet::of(g.numNodes(), {n}), b, "op", {}});
    // Pairs along the chain, and the last link with the join.
    for (NodeId n = 0; n + 1 < g.numNodes(); ++n)
      if (rng() % 2) set.add(Candidate{NodeSet::of(g.numNodes(), {n, n + 1}), rng() % 2 ? "lib" : "plain", "pair", {}});
    std::vector<Cost> costs;
    std::vector<LayoutOffers> offers(set.size());
    for (size_t c = 0; c < set.size(); ++c) {
      costs.push_back(10.0 + static_cast<double>(rng() % 20));
      if (set[c].backend != "lib") continue;
      offers[c].nativeNs = costs[c] - static_cast<double>(rng() % 8);
      const KernelRequest request = KernelRequest::of(g, set[c].nodes);
      const char* layout = rng() % 2 ? "L" : "M";
      for (ValueId v : request.inputs) offers[c].offers.push_back({v, false, layout});
      for (ValueId v : request.outputs) offers[c].offers.push_back({v, true, layout});
    }
    const LayoutCharges charges(g, set, offers, ReorderModel{1.5, 0.01, 1});
    OpLevelProblem p{&g, &set, costs, nullptr, {}};
    p.layouts = &charges;
    const OpLevelResult r = optimizeOpLevel(p);
    joined += r.statesJoined;
    const Cost best = bruteForceWithLayouts(g, set, costs, charges);
    ASSERT_NEAR(r.total, best, 1e-9) << "trial " << trial << "\n" << g.toString();
    Cost sum = charges.coverCost(r.chosen);
    for (int32_t c : r.chosen) sum += charges.kernelNs(c, costs[static_cast<size_t>(c)]);
    EXPECT_NEAR(sum, r.total, 1e-9) << "trial " << trial;
  }
  EXPECT_GT(joined, 0) << "the join rule never applied: the test does not exercise it";
}

// The reorder model: plain - native = 2 us per reorder + 1 ns per byte,
// over values of four sizes, and one kernel measured on a busy machine
// (10 ms more) that does not move the fit.
TEST(LayoutCharges, ReorderModelFitsFixedAndPerByteTimesDespiteAnOutlier) {
  Graph g;
  std::vector<ValueId> v;
  for (int64_t c : {4, 16, 64, 256}) v.push_back(g.addInput("x" + std::to_string(c), {ElementType::Float32, {1, c, 8, 8}}));
  g.finalize();
  std::vector<Cost> plain;
  std::vector<LayoutOffers> offers;
  for (int k = 0; k < 9; ++k) {
    LayoutOffers o;
    const ValueId value = v[static_cast<size_t>(k) % v.size()];
    const int boundaries = 1 + k % 2;
    for (int i = 0; i < boundaries; ++i) o.offers.push_back({value, i == 1, "L"});
    o.nativeNs = 5000;
    const double bytes = static_cast<double>(g.value(value).type.byteSize());
    plain.push_back(5000 + boundaries * (2000 + bytes) + (k == 4 ? 1e7 : 0));
    offers.push_back(o);
  }
  // Layout-agnostic kernels (plain and native cost the same: nothing of
  // their own to reorder) outnumbering the rest do not pull the fit to zero.
  for (int k = 0; k < 12; ++k) {
    LayoutOffers o;
    o.offers.push_back({v[static_cast<size_t>(k) % v.size()], false, "L"});
    o.nativeNs = 3000;
    o.agnostic = true;
    plain.push_back(3000);
    offers.push_back(o);
  }
  const ReorderModel m = fitReorderModel(g, plain, offers);
  EXPECT_EQ(m.samples, 9);
  EXPECT_NEAR(m.fixedNs, 2000, 1e-6);
  EXPECT_NEAR(m.perByteNs, 1.0, 1e-9);
  // Nothing offered: no model, no charges.
  EXPECT_EQ(fitReorderModel(g, {5.0}, {LayoutOffers{}}).samples, 0);
}

}  // namespace
}  // namespace collage
