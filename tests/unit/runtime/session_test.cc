// Session: compiles a plan's groups once, runs them in dependency order with
// intermediate buffers reused, and matches the reference executor on every
// small zoo model — with one native kernel per node, with single nodes placed
// on oneDNN/OpenBLAS where they compile, and with fused groups chosen from the
// backends' candidates. Also: errors for missing backends, refusals, failing
// kernels and wrong inputs; profiling timings.
#include "core/runtime/session.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "backends/backend_list.h"
#include "backends/reduced_precision.h"
#include "core/patterns/candidate.h"
#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/search/op_level_optimizer.h"
#include "core/plan/plan.h"
#include "core/search/plan_from_cover.h"
#include "core/ops/reference_executor.h"

#include "tests/unit/test_support.h"

namespace collage {
namespace {

const std::string kModels = std::string(COLLAGE_SOURCE_DIR) + "/resources/models/";
const Tolerance kTolerance = kPlanTolerance;

// The small zoo models (opset variants included).
std::vector<std::string> zooModels() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kModels))
    if (entry.path().extension() == ".onnx") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Backends created once per test binary, by name.
Backend* backendNamed(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Backend>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, createBackend(name)).first;
  return it->second.get();
}
const BackendLookup kLookup = [](const std::string& n) { return backendNamed(n); };

using test_support::expectError;

// x -> relu -> {sig, tanh} -> add.
struct Diamond {
  Graph g;
  Diamond() {
    const TensorType t{ElementType::Float32, {2, 3}};
    ValueId x = g.addInput("x", t);
    ValueId r = g.addValue("r", t), s = g.addValue("s", t), th = g.addValue("th", t),
            y = g.addValue("y", t);
    g.addNode(Node{"relu", "Relu", {}, {x}, {r}});
    g.addNode(Node{"sig", "Sigmoid", {}, {r}, {s}});
    g.addNode(Node{"tanh", "Tanh", {}, {r}, {th}});
    g.addNode(Node{"add", "Add", {}, {s, th}, {y}});
    g.markOutput(y);
    g.markOutput(r);  // an output that later kernels also read
    g.finalize();
  }
};

PlanGroup group(std::vector<std::string> nodes, std::string backend = "native") {
  PlanGroup g;
  g.nodes = std::move(nodes);
  g.backend = std::move(backend);
  return g;
}

void expectMatchesReference(Session& session, const Graph& graph, uint64_t seed, const std::string& what,
                            Tolerance tolerance = kTolerance) {
  SessionVerification v = verifySession(session, randomInputs(graph, seed), tolerance);
  for (const auto& p : v.problems) ADD_FAILURE() << what << ": " << p;
  EXPECT_EQ(v.outputs.size(), graph.outputs().size());
}

TEST(Session, RunsGroupsInDependencyOrderWhateverTheirIndex) {
  Diamond d;
  Plan p;
  p.groups = {group({"add"}), group({"tanh"}), group({"sig"}), group({"relu"})};
  Session s(d.g, p, kLookup);
  EXPECT_EQ(s.executionOrder().front(), 3u);
  EXPECT_EQ(s.executionOrder().back(), 0u);
  expectMatchesReference(s, d.g, 1, "diamond");
  // Run again on other inputs: buffers are reused between runs.
  expectMatchesReference(s, d.g, 2, "diamond, second run");
  EXPECT_EQ(s.runsDone(), 2);
}

// A large output freshly allocated on every run cost its page faults and
// zeroing each time (a fifth of a 0.4 ms plan): a run hands out again the
// output tensors its caller has dropped, never one the caller still holds.
TEST(Session, HandsOutDroppedOutputTensorsAgainNeverHeldOnes) {
  Diamond d;
  Plan p;
  p.groups = {group({"relu"}), group({"sig", "tanh", "add"})};
  Session s(d.g, p, kLookup);
  const size_t outputs = d.g.outputs().size();
  for (int i = 0; i < 5; ++i) s.run(randomInputs(d.g, 10));  // each result dropped at once
  EXPECT_EQ(s.outputAllocations(), outputs);
  std::vector<Tensor> last;
  for (int i = 0; i < 5; ++i) last = s.run(randomInputs(d.g, 10));  // the last kept while the next runs
  EXPECT_EQ(s.outputAllocations(), 2 * outputs);
  last.clear();

  // Results the caller holds keep their values whatever runs after them.
  ReferenceExecutor reference(d.g);
  std::vector<std::vector<Tensor>> held, expected;
  for (uint64_t seed = 20; seed < 24; ++seed) {
    const std::vector<Tensor> in = randomInputs(d.g, seed);
    held.push_back(s.run(in));
    expected.push_back(reference.run(in));
  }
  for (size_t r = 0; r < held.size(); ++r)
    for (size_t o = 0; o < outputs; ++o)
      EXPECT_TRUE(compareTensors(held[r][o], expected[r][o], kTolerance).ok) << "run " << r << " output " << o;
  // Once dropped, a held result's storage is handed out again.
  const void* first = held[0][0].raw();
  held.erase(held.begin());
  EXPECT_EQ(s.run(randomInputs(d.g, 30))[0].raw(), first);
}

TEST(Session, OneGroupForTheWholeGraph) {
  Diamond d;
  Plan p;
  p.groups = {group({"relu", "sig", "tanh", "add"})};
  Session s(d.g, p, kLookup);
  expectMatchesReference(s, d.g, 3, "one group");
}

TEST(Session, WrongInputsAreErrorsNamingTheInput) {
  Diamond d;
  Session s(d.g, singleNodePlan(d.g, "native"), kLookup);
  expectError([&] { s.run({}); }, {"1 input", "(x)", "got 0"});
  expectError([&] { s.run({Tensor(ElementType::Float32, {3, 2})}); }, {"input 'x'", "float32[2x3]", "float32[3x2]"});
  expectError([&] { s.run({Tensor(ElementType::Int64, {2, 3})}); }, {"input 'x'", "int64"});
}

TEST(Session, MissingBackendNamesTheGroup) {
  Diamond d;
  Plan p = singleNodePlan(d.g, "native");
  p.groups[2].backend = "tpu";
  expectError([&] { Session(d.g, p, kLookup); }, {"group 2", "'tpu'", "not available"});
  expectError([&] { Session(d.g, p, nullptr); }, {"not available"});
}

// A plan whose buffers cannot fit in this machine's memory is refused when
// the Session plans them, naming the largest value and its group, before
// anything is allocated ($COLLAGE_MEMORY_LIMIT plants a machine of 3 MiB;
// core/ir/memory_budget.h). Without the limit it runs.
TEST(Session, APlanWhoseBuffersDoNotFitIsRefusedNamingTheValue) {
  Graph g;
  const ValueId q = g.addInput("q", {ElementType::Float32, {1024, 64}});
  const ValueId k = g.addInput("k", {ElementType::Float32, {64, 1024}});
  const ValueId v = g.addInput("v", {ElementType::Float32, {1024, 16}});
  const ValueId s = g.addValue("scores", {ElementType::Float32, {1024, 1024}});
  const ValueId y = g.addValue("y", {ElementType::Float32, {1024, 16}});
  g.addNode(Node{"qk", "MatMul", {}, {q, k}, {s}});
  g.addNode(Node{"sv", "MatMul", {}, {s, v}, {y}});
  g.markOutput(y);
  g.finalize();
  Plan apart;
  apart.groups = {group({"qk"}), group({"sv"})};
  setenv("COLLAGE_MEMORY_LIMIT", "3MiB", 1);
  expectError([&] { Session(g, apart, kLookup); },
              {"its tensors do not fit in memory", "the buffer of 'scores' float32[1024x1024] (made by group 0 on native)",
               "is 4.0 MiB", "3.0 MiB is available"});
  unsetenv("COLLAGE_MEMORY_LIMIT");
  Session fits(g, apart, kLookup);
  expectMatchesReference(fits, g, 1, "two groups");
}

// A backend that refuses everything, or compiles kernels that throw.
class FakeBackend : public Backend {
 public:
  explicit FakeBackend(bool refuse) : refuse_(refuse) {}
  std::string name() const override { return refuse_ ? "refuser" : "thrower"; }
  std::string version() const override { return "1"; }
  CompileResult compile(const KernelRequest&) override {
    if (refuse_) return CompileResult::refuse("it does not like Tanh");
    struct Throwing : Kernel {
      void run(const std::vector<const DLTensor*>&, const std::vector<DLTensor*>&) override {
        throw Error("out of paper");
      }
    };
    return CompileResult::ok(std::make_unique<Throwing>());
  }

 private:
  bool refuse_;
};

TEST(Session, RefusalAndKernelFailureNameTheGroupAndBackend) {
  Diamond d;
  FakeBackend refuser(true), thrower(false);
  auto lookup = [&](const std::string& n) -> Backend* {
    if (n == "refuser") return &refuser;
    if (n == "thrower") return &thrower;
    return backendNamed(n);
  };
  Plan p = singleNodePlan(d.g, "native");
  p.groups[2].backend = "refuser";
  expectError([&] { Session(d.g, p, lookup); }, {"group 2", "tanh", "refuser refused it", "does not like Tanh"});
  p.groups[2].backend = "thrower";
  Session s(d.g, p, lookup);
  expectError([&] { s.run(randomInputs(d.g)); }, {"group 2", "thrower kernel failed", "out of paper"});
}

TEST(Session, ProfilingRecordsEveryKernelOfTheLastRun) {
  Diamond d;
  Session s(d.g, singleNodePlan(d.g, "native"), kLookup);
  s.run(randomInputs(d.g));
  EXPECT_TRUE(s.lastTimings().empty());
  s.setProfiling(true);
  s.run(randomInputs(d.g));
  s.run(randomInputs(d.g));
  const auto& t = s.lastTimings();
  ASSERT_EQ(t.size(), 4u);
  std::set<size_t> groups;
  for (size_t i = 0; i < t.size(); ++i) {
    groups.insert(t[i].group);
    EXPECT_EQ(t[i].run, 2);
    EXPECT_GE(t[i].durUs, 0);
    if (i) {
      EXPECT_GE(t[i].startUs, t[i - 1].startUs + t[i - 1].durUs);
    }
  }
  EXPECT_EQ(groups.size(), 4u);
}

// Every zoo model, one native kernel per node.
TEST(Session, ZooModelsOneNativeKernelPerNodeMatchTheReference) {
  for (const std::string& name : zooModels()) {
    SCOPED_TRACE(name);
    Graph g = importOnnx(kModels + name + ".onnx");
    Session s(g, singleNodePlan(g, "native"), kLookup);
    expectMatchesReference(s, g, 7, name);
    EXPECT_LE(s.arenaBytes(), s.totalValueBytes());
  }
}

TEST(Session, BuffersAreReusedOnResNet) {
  Graph g = importOnnx(kModels + "resnet50_small.onnx");
  Session s(g, singleNodePlan(g, "native"), kLookup);
  // Every node's output is passed between kernels here.
  size_t total = 0;
  for (NodeId n = 0; n < g.numNodes(); ++n)
    for (ValueId v : g.node(n).outputs)
      if (v != kNoValue) total += g.value(v).type.byteSize();
  EXPECT_EQ(s.totalValueBytes(), total);
  EXPECT_LT(s.peakBytes(), total / 2) << "peak " << s.peakBytes() << " of " << total;
  EXPECT_LT(s.arenaBytes(), total / 2) << "arena " << s.arenaBytes() << " of " << total;
  // The arena holds at least what is alive at the peak, less the outputs.
  size_t outputs = 0;
  for (ValueId v : g.outputs()) outputs += g.value(v).type.byteSize();
  EXPECT_GE(s.arenaBytes() + outputs, s.peakBytes());
  expectMatchesReference(s, g, 11, "resnet50_small");
}

// Single nodes on oneDNN, OpenBLAS or native, rotating which is tried first,
// so that tensors cross between all three.
TEST(Session, ZooModelsMixedSingleNodePlacementsMatchTheReference) {
  for (const std::string& name : zooModels()) {
    SCOPED_TRACE(name);
    Graph g = importOnnx(kModels + name + ".onnx");
    Plan p = singleNodePlan(g, "native");
    std::map<std::string, int> placed;
    for (size_t i = 0; i < p.groups.size(); ++i) {
      const NodeSet nodes = groupNodes(p, i, g);
      // Rotate the preference so every backend gets some nodes.
      const std::vector<std::string> all = {"onednn", "openblas", "native"};
      for (size_t k = 0; k < all.size(); ++k) {
        const std::string& b = all[(i + k) % all.size()];
        Backend* backend = backendNamed(b);
        if (!backend) continue;
        CompileResult r;
        try {
          r = backend->compile(KernelRequest::of(g, nodes));
        } catch (const std::exception&) {
          continue;
        }
        if (r) {
          p.groups[i].backend = b;
          break;
        }
      }
      ++placed[p.groups[i].backend];
    }
    Session s(g, p, kLookup);
    std::string summary;
    for (const auto& [b, n] : placed) summary += b + "=" + std::to_string(n) + " ";
    std::cerr << "[ note ] " << name << ": " << summary << "\n";
    expectMatchesReference(s, g, 5, name + " (" + summary + ")");
  }
}

// Fused groups: the fewest kernels the backends' candidates allow (every
// candidate that compiles costs 1), built into a plan with makePlan.
TEST(Session, ZooModelsWithFusedGroupsMatchTheReference) {
  BackendSet set;
  for (const std::string& b : builtinBackendNames()) {
    try {
      BackendSet one = loadBackendSet({b});
      set.specs.push_back(std::move(one.specs[0]));
      set.backends.push_back(std::move(one.backends[0]));
    } catch (const Error& e) {
      std::cerr << "[ note ] backend " << b << " not loaded: " << e.what() << "\n";
    }
  }
  if (!set.find("native")) GTEST_SKIP() << "the native backend's spec did not load";
  for (const std::string name : {"resnet50_small", "mobilenet_v2_small", "bert_small", "inception_v3_small"}) {
    SCOPED_TRACE(name);
    Graph g = importOnnx(kModels + name + ".onnx");
    EnumerationOptions options;
    options.requireFullCover = false;
    CandidateSet cands = enumerateCandidates(g, set.capabilities(), options);
    OpLevelProblem problem;
    problem.graph = &g;
    problem.candidates = &cands;
    int refused = 0;
    for (size_t c = 0; c < cands.size(); ++c) {
      CompileResult r;
      try {
        r = set.find(cands[c].backend)->compile(KernelRequest::of(g, cands[c].nodes, cands[c].origin));
      } catch (const std::exception&) {
      }
      problem.costs.push_back(r ? 1.0 : kInvalidCost);
      refused += r ? 0 : 1;
    }
    // All backends together, then each backend alone where it can cover the
    // model with native filling in, so every backend's fused kernels run.
    std::vector<std::vector<std::string>> choices = {{}};
    for (const auto& spec : set.specs)
      if (spec.name != "native") choices.push_back({spec.name, "native"});
    choices.push_back({"native"});
    for (const auto& allowedBackends : choices) {
      problem.allowed.clear();
      std::string label = "all";
      if (!allowedBackends.empty()) {
        label.clear();
        for (const auto& b : allowedBackends) label += (label.empty() ? "" : "+") + b;
        for (size_t c = 0; c < cands.size(); ++c)
          problem.allowed.push_back(std::find(allowedBackends.begin(), allowedBackends.end(),
                                              cands[c].backend) != allowedBackends.end());
      }
      OpLevelResult best = optimizeOpLevel(problem);
      Plan p = makePlan(g, kModels + name + ".onnx", cands, best.chosen, {}, PlanOrigin::OpLevel,
                        HardwareFingerprint::current(), {});
      size_t multi = 0;
      std::map<std::string, int> perBackend;
      for (const auto& grp : p.groups) {
        multi += grp.nodes.size() > 1;
        ++perBackend[grp.backend];
      }
      std::string summary;
      for (const auto& [b, n] : perBackend) summary += " " + b + "=" + std::to_string(n);
      std::cerr << "[ note ] " << name << " [" << label << "]: " << g.numNodes() << " nodes in "
                << p.groups.size() << " kernels (" << multi << " fused;" << summary << "), "
                << cands.size() << " candidates, " << refused << " refused at compile\n";
      if (label == "all") {
        EXPECT_LT(p.groups.size(), static_cast<size_t>(g.numNodes())) << "nothing was fused";
      }
      Session s(g, p, [&](const std::string& n) { return set.find(n); });
      // Float32's tolerance, or a reduced-precision backend's (onednn_bf16)
      // where the plan uses one, as `collage run --verify` checks it.
      expectMatchesReference(s, g, 13, name + " [" + label + "]", planTolerance(p).tolerance);
    }
  }
}

}  // namespace
}  // namespace collage
