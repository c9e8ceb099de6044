// The op-level search on wide graphs: the walk order, the memory budget, and
// a generated 2,000-node graph searched within 2 GB. Costs come from a
// deterministic model (a test double for the measurer, as in
// op_level_optimizer_test.cc); candidates from the shipped backend specs.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

#include "backends/backend_list.h"
#include "core/ir/error.h"
#include "core/runtime/backend.h"
#include "core/patterns/candidate.h"
#include "core/search/dp_order.h"
#include "core/search/op_level_optimizer.h"
#include "tests/unit/search/wide_graphs.h"

namespace collage {
namespace {

// The host's CPU backends, their code rules included (oneDNN's candidates
// come from its rule); those that do not load are left out.
struct Specs {
  BackendSet set;
  Specs() {
    for (const std::string b : {"native", "onednn", "openblas"}) {
      try {
        BackendSet one = loadBackendSet({b});
        set.specs.push_back(std::move(one.specs[0]));
        set.backends.push_back(std::move(one.backends[0]));
      } catch (const Error& e) {
        std::cerr << "[ note ] backend " << b << " not loaded: " << e.what() << "\n";
      }
    }
  }
  std::vector<BackendCapabilities> caps() const { return set.capabilities(); }
};

// Layout offers as oneDNN makes them: each of its candidates offers one of
// two blocked layouts at every boundary and runs 10% faster in it; a
// reorder costs 0.3 us plus 1 ns per KB.
std::vector<LayoutOffers> modelOffers(const Graph& g, const CandidateSet& set, const std::vector<Cost>& costs) {
  std::vector<LayoutOffers> offers(set.size());
  for (size_t c = 0; c < set.size(); ++c) {
    if (set[c].backend != "onednn") continue;
    offers[c].nativeNs = costs[c] * 0.9;
    const KernelRequest request = KernelRequest::of(g, set[c].nodes);
    const char* layout = c % 3 ? "L" : "M";
    for (ValueId v : request.inputs)
      if (!g.value(v).isConstant()) offers[c].offers.push_back({v, false, layout});
    for (ValueId v : request.outputs) offers[c].offers.push_back({v, true, layout});
  }
  return offers;
}
const ReorderModel kReorders{300, 0.001, 1};


// Deterministic costs: a per-node base by op, a fused group cheaper than its
// parts by a backend- and size-dependent share, so that the best cover mixes
// backends and group sizes.
std::vector<Cost> modelCosts(const Graph& g, const CandidateSet& set) {
  std::vector<Cost> costs;
  for (size_t c = 0; c < set.size(); ++c) {
    double parts = 0;
    set[c].nodes.forEach([&](NodeId n) {
      const std::string& op = g.node(n).op;
      parts += op == "ConvInteger" ? 2000 : op == "Concat" ? 400 : 150 + 7 * (n % 5);
    });
    const int k = set[c].nodes.count();
    const double backend = set[c].backend == "native" ? 1.0 : set[c].backend == "onednn" ? 0.93 : 1.1;
    // The share saved by fusing stops at half: a cost is never negative
    // (the DP's lower bound assumes it), however large the group.
    costs.push_back(parts * backend * std::max(0.5, 1.0 - 0.04 * (k - 1)) + 25.0 * ((c * 2654435761u) % 7));
  }
  return costs;
}

// g's op-level problem as these tests pose it: every candidate the specs
// allow, modelled costs, 30 us per backend switch, and modelled layout
// offers priced by kReorders (p.layouts points at them).
struct ModelledProblem {
  CandidateSet set;
  OpLevelProblem p;
  LayoutCharges layouts;
  ModelledProblem(const Graph& g, const Specs& specs)
      : set(enumerateCandidates(g, specs.caps())),
        p{&g, &set, modelCosts(g, set), [](const std::string&) { return 30.0; }, {}},
        layouts(g, set, modelOffers(g, set, p.costs), kReorders) {
    p.layouts = &layouts;
  }
};

// Peak resident memory of this process, MiB: since the last resetPeakRss()
// where the kernel allows resetting it (VmHWM), else since the start.
void resetPeakRss() {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);  // resets the peak resident set size
    std::fclose(f);
  }
}
double peakRssMiB() {
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    long kib = -1;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
    std::fclose(f);
    if (kib >= 0) return static_cast<double>(kib) / 1024.0;
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

TEST(OpLevelScale, DepthFirstOrderFollowsBranches) {
  WideGraphShape shape;
  shape.stages = 1;
  shape.branches = 6;
  shape.depth = 2;
  const Graph interleaved = wideQuantizedGraph(shape);
  shape.interleaved = false;
  const Graph byBranch = wideQuantizedGraph(shape);
  Specs specs;
  const CandidateSet a = enumerateCandidates(interleaved, specs.caps());
  const CandidateSet b = enumerateCandidates(byBranch, specs.caps());
  const std::vector<NodeId> deep = depthFirstTopologicalOrder(interleaved);
  std::vector<NodeId> identity(static_cast<size_t>(byBranch.numNodes()));
  for (NodeId n = 0; n < byBranch.numNodes(); ++n) identity[static_cast<size_t>(n)] = n;
  // Interleaved, the graph's order holds nodes of every branch ahead; the
  // depth-first one is as narrow as the branch-by-branch graph.
  const DpOrderWidth given = dpOrderWidth(interleaved, a, {}, identity, false);
  const DpOrderWidth followed = dpOrderWidth(interleaved, a, {}, deep, false);
  const DpOrderWidth branchwise = dpOrderWidth(byBranch, b, {}, identity, false);
  EXPECT_GE(given.max, 6) << "one node ahead per branch at least";
  EXPECT_LE(followed.max, branchwise.max);
  EXPECT_LT(followed.max * 2, given.max);
  EXPECT_EQ(chooseDpOrder(interleaved, a, {}, false).name, "depth-first");
  EXPECT_EQ(chooseDpOrder(byBranch, b, {}, false).name, "graph");
}

// The same optimum in the chosen order, the graph's, and a random one, on
// wide graphs small enough for every order (a random one is wide).
TEST(OpLevelScale, EveryOrderFindsTheSameOptimum) {
  Specs specs;
  std::mt19937 rng(17);
  for (int trial = 0; trial < 6; ++trial) {
    WideGraphShape shape;
    shape.stages = 1 + trial % 2;
    shape.branches = 2 + trial % 2;
    shape.depth = 1;
    shape.interleaved = trial % 2 == 0;
    const Graph g = wideQuantizedGraph(shape);
    const CandidateSet set = enumerateCandidates(g, specs.caps());
    OpLevelProblem p{&g, &set, modelCosts(g, set), [](const std::string&) { return 30.0; }, {}};
    const OpLevelResult chosen = optimizeOpLevel(p);
    std::vector<NodeId> order(static_cast<size_t>(g.numNodes()));
    for (NodeId n = 0; n < g.numNodes(); ++n) order[static_cast<size_t>(n)] = n;
    p.order = order;
    const OpLevelResult graphOrder = optimizeOpLevel(p);
    EXPECT_DOUBLE_EQ(chosen.total, graphOrder.total) << "trial " << trial;
    // A random order is wide: only where the graph is small.
    if (g.numNodes() <= 20) {
      std::shuffle(order.begin(), order.end(), rng);
      p.order = order;
      EXPECT_DOUBLE_EQ(chosen.total, optimizeOpLevel(p).total) << "trial " << trial;
    }
    EXPECT_FALSE(chosen.bounded);
  }
}

// A budget too small for the states: a plan, said to be bounded, with its
// cost and a lower bound that brackets the optimum; never a throw.
TEST(OpLevelScale, OverTheBudgetGivesAPlanAndSaysSo) {
  WideGraphShape shape;
  shape.stages = 1;
  shape.branches = 4;
  shape.depth = 2;
  const Graph g = wideQuantizedGraph(shape);
  Specs specs;
  const CandidateSet set = enumerateCandidates(g, specs.caps());
  OpLevelProblem p{&g, &set, modelCosts(g, set), nullptr, {}};
  const OpLevelResult exact = optimizeOpLevel(p);
  ASSERT_FALSE(exact.bounded);
  EXPECT_TRUE(exact.note.empty());
  p.memoryBudgetBytes = 4096;
  const OpLevelResult cut = optimizeOpLevel(p);
  EXPECT_TRUE(cut.bounded);
  EXPECT_NE(cut.note.find("memory budget"), std::string::npos) << cut.note;
  EXPECT_NE(cut.note.find("best found"), std::string::npos) << cut.note;
  EXPECT_GE(cut.total, exact.total);
  EXPECT_LE(cut.lowerBound, exact.total + 1e-6);
  NodeSet covered(g.numNodes());
  for (int32_t c : cut.chosen) {
    ASSERT_FALSE(set[c].nodes.intersects(covered));
    covered |= set[c].nodes;
  }
  EXPECT_EQ(covered.count(), g.numNodes());
}

// The scale goal: a generated 2,000-node graph with wide parallel chains,
// written interleaved, searched within 2 GB of peak resident memory. A
// resource check: the time is printed, never compared.
TEST(OpLevelScale, TwoThousandNodeWideGraphWithinTwoGigabytes) {
  const Graph g = wideQuantizedGraph(WideGraphShape{});
  ASSERT_GE(g.numNodes(), 2000);
  Specs specs;
  ModelledProblem problem(g, specs);
  const CandidateSet& set = problem.set;
  OpLevelProblem& p = problem.p;
  const LayoutCharges& layouts = problem.layouts;
  for (const bool withLayouts : {false, true}) {
    SCOPED_TRACE(withLayouts ? "with layout hand-overs" : "kernels only");
    p.layouts = withLayouts ? &layouts : nullptr;
    resetPeakRss();
    const double before = peakRssMiB();
    const OpLevelResult r = optimizeOpLevel(p);
    const double after = peakRssMiB();
    std::cerr << "[ note ] " << g.numNodes() << " nodes, " << set.size() << " candidates"
              << (withLayouts ? ", layouts" : "") << ": " << r.order << " order of width " << r.orderWidth
              << ", " << r.statesExpanded << " states expanded, " << r.statesDominated << " dominated, "
              << r.peakStates << " held at most, " << r.seconds << " s, peak RSS " << before << " -> "
              << after << " MiB\n";
    EXPECT_LT(after, 2048.0);
    EXPECT_FALSE(r.bounded) << r.note;
    NodeSet covered(g.numNodes());
    for (int32_t c : r.chosen) covered |= set[c].nodes;
    EXPECT_EQ(covered.count(), g.numNodes());
  }
}

// The scale goal as `optimize` meets it, in a process of its own: this
// binary runs again on this test alone (COLLAGE_SCALE_CHILD set), builds a
// generated 2,088-node inception-like graph (wide_graphs.h: 16 branches per
// stage, written interleaved, Concat joins, explicit Pads, a many-head
// end), enumerates the shipped backends' candidates, and searches it with
// layout hand-overs under the default state budget, as optimize does. The
// child must find the exact optimum (not bounded), and its whole peak
// resident memory, read by the parent with wait4 (ru_maxrss), must stay
// under the 2 GB: measured in a fresh process so that no other
// test's allocations count. A resource check: the time is printed, never
// compared. Its frontier is held by the walk order more than by the
// dominance rules (without them: a third more states, the same memory); in
// the graph's order, as the former search walked, its states passed 1 GB
// within minutes, even without layouts.
constexpr double kScaleBoundMiB = 2048.0;
const char* const kScaleChild = "COLLAGE_SCALE_CHILD";

TEST(OpLevelScale, TwoThousandNodeInceptionGraphInAFreshProcessWithinTwoGigabytes) {
  if (std::getenv(kScaleChild)) {
    const Graph g = inceptionGraph(InceptionGraphShape{});
    ASSERT_GE(g.numNodes(), 2000);
    Specs specs;
    ModelledProblem problem(g, specs);
    const CandidateSet& set = problem.set;
    OpLevelProblem& p = problem.p;
    const OpLevelResult r = optimizeOpLevel(p);
    std::printf("[ child ] %d nodes, %zu candidates: %s order of width %d, %lld states expanded, %lld dominated "
                "(%lld at joins), %lld held at most (%zu KiB), %.3f s (%.3f s CPU), bounded %d\n",
                g.numNodes(), set.size(), r.order.c_str(), r.orderWidth, static_cast<long long>(r.statesExpanded),
                static_cast<long long>(r.statesDominated), static_cast<long long>(r.statesJoined),
                static_cast<long long>(r.peakStates), r.peakBytes / 1024, r.seconds, r.cpuSeconds,
                r.bounded ? 1 : 0);
    EXPECT_FALSE(r.bounded) << r.note;
    NodeSet covered(g.numNodes());
    for (int32_t c : r.chosen) {
      ASSERT_FALSE(set[c].nodes.intersects(covered));
      covered |= set[c].nodes;
    }
    EXPECT_EQ(covered.count(), g.numNodes());
    return;
  }
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(len, 0) << std::strerror(errno);
  self[len] = 0;
  const std::string filter = std::string("--gtest_filter=") + ::testing::UnitTest::GetInstance()->current_test_suite()->name() +
                             "." + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  // The child's environment: ours, with the flag set and gtest's sharding
  // and report file left out (the child must run this test and write no
  // report over ours).
  std::vector<std::string> env{std::string(kScaleChild) + "=1"};
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "GTEST_", 6) != 0 && std::strncmp(*e, kScaleChild, std::strlen(kScaleChild)) != 0)
      env.push_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string selfPath(self);
  std::vector<char*> argv{selfPath.data(), const_cast<char*>(filter.c_str()), nullptr};
  // Its output through a pipe, so that the parent can check it ran.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t child = 0;
  const int spawned = posix_spawn(&child, self, &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  ASSERT_EQ(spawned, 0) << std::strerror(spawned);
  std::string out;
  char buf[4096];
  for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) != 0;) {
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) break;
    out.append(buf, static_cast<size_t>(got));
  }
  close(fds[0]);
  int status = 0;
  rusage usage{};
  ASSERT_EQ(wait4(child, &status, 0, &usage), child) << std::strerror(errno);
  const double peakMiB = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
  const size_t line = out.find("[ child ]");
  std::cerr << "[ note ] " << (line == std::string::npos ? "no child line" : out.substr(line, out.find('\n', line) - line))
            << "; peak RSS of the process " << peakMiB << " MiB\n";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child failed:\n" << out;
  EXPECT_NE(line, std::string::npos) << "the child did not run the search:\n" << out;
  EXPECT_LT(peakMiB, kScaleBoundMiB);
}

// The detector's shape at 2,000 nodes: cross-stage partial blocks whose
// kept outputs wait at each block's Concat, with layout hand-overs. Before
// the join rule (op_level_optimizer.h) their states multiplied: 4.2 million
// expanded and 96 MiB of states at once, so a 16 MiB budget bounded the
// search; now it stays exact within it, and within 2 GB of peak resident
// memory. A resource check: the time is printed, never compared.
TEST(OpLevelScale, TwoThousandNodeCspGraphWithLayoutsWithinTwoGigabytes) {
  const Graph g = cspQuantizedGraph(CspGraphShape{});
  ASSERT_GE(g.numNodes(), 2000);
  Specs specs;
  ModelledProblem problem(g, specs);
  const CandidateSet& set = problem.set;
  OpLevelProblem& p = problem.p;
  p.memoryBudgetBytes = size_t{16} << 20;
  resetPeakRss();
  const double before = peakRssMiB();
  const OpLevelResult r = optimizeOpLevel(p);
  const double after = peakRssMiB();
  std::cerr << "[ note ] " << g.numNodes() << " nodes, " << set.size() << " candidates, layouts: " << r.order
            << " order of width " << r.orderWidth << ", " << r.statesExpanded << " states expanded, "
            << r.statesDominated << " dominated (" << r.statesJoined << " at joins), " << r.peakStates
            << " held at most (" << r.peakBytes / 1024 << " KiB), " << r.seconds << " s (" << r.cpuSeconds
            << " s CPU), peak RSS " << before << " -> " << after << " MiB\n";
  EXPECT_LT(after, 2048.0);
  EXPECT_FALSE(r.bounded) << r.note;
  EXPECT_GT(r.statesJoined, 0);
  EXPECT_LE(r.peakBytes, p.memoryBudgetBytes);
  NodeSet covered(g.numNodes());
  for (int32_t c : r.chosen) {
    ASSERT_FALSE(set[c].nodes.intersects(covered));
    covered |= set[c].nodes;
  }
  EXPECT_EQ(covered.count(), g.numNodes());
}

// On small blocks, the join rule leaves the optimum where it was: the same
// total in every walk order (the rule applies differently in each).
TEST(OpLevelScale, CspGraphsSameOptimumInEveryOrder) {
  Specs specs;
  for (int depth = 1; depth <= 3; ++depth) {
    CspGraphShape shape;
    shape.blocks = 1;
    shape.depth = depth;
    const Graph g = cspQuantizedGraph(shape);
    ModelledProblem problem(g, specs);
    OpLevelProblem& p = problem.p;
    const LayoutCharges& layouts = problem.layouts;
    const OpLevelResult chosen = optimizeOpLevel(p);
    ASSERT_FALSE(chosen.bounded);
    for (const bool fromOutputs : {false, true}) {
      p.order = depthFirstTopologicalOrder(g, fromOutputs);
      EXPECT_NEAR(optimizeOpLevel(p).total, chosen.total, 1e-6) << "depth " << depth;
    }
    p.order.resize(static_cast<size_t>(g.numNodes()));
    for (NodeId n = 0; n < g.numNodes(); ++n) p.order[static_cast<size_t>(n)] = n;
    EXPECT_NEAR(optimizeOpLevel(p).total, chosen.total, 1e-6) << "depth " << depth;
    EXPECT_NEAR(layouts.coverCost(chosen.chosen) + [&] {
      Cost k = 0;
      for (int32_t c : chosen.chosen) k += layouts.kernelNs(c, p.costs[static_cast<size_t>(c)]) + 30.0;
      return k;
    }(), chosen.total, 1e-6 * chosen.total) << "the plan costs what the DP says";
  }
}

}  // namespace
}  // namespace collage
