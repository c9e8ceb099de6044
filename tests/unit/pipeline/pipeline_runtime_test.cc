// The in-process pipeline runtime: stages as Sessions on their own pinned
// threads, queues between them. Its outputs equal the whole model's Session
// (same kernels, one per node); a stage that fails stops the pipeline with an
// error naming the stage and the node, and nothing hangs.
#include "core/pipeline/pipeline_runtime.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "backends/backend_list.h"
#include "core/ir/error.h"
#include "core/ir/tensor_compare.h"
#include "core/ir/threading.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "core/pipeline/pipe_graph.h"
#include "core/pipeline/stage_partitioner.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/pipeline/fake_stage_cost.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using test_support::expectError;

int allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

Topology twoCores() {
  const LinkCost link{1e10, 1e-6};
  return Topology({{"c0", DeviceKind::Cpu, 1}, {"c1", DeviceKind::Cpu, 1}}, {}, &link, "test");
}

// Each stage gets its own backend objects, as the product's factory gives.
StageBackendsFactory nativeBackends() {
  return [] {
    auto backend = std::shared_ptr<Backend>(createBackend("native"));
    return BackendLookup([backend](const std::string& name) -> Backend* {
      return name == "native" ? backend.get() : nullptr;
    });
  };
}

// in[4x8] -> relu -> {sigmoid, mul(constant) -> tanh} -> add; relu's value is
// a model output too, made in one stage and read by two others.
struct Branches {
  GraphBuilder b;
  Branches() {
    const ValueId r = b.op("Relu", {b.input({4, 8})});
    const ValueId s = b.op("Sigmoid", {r});
    const ValueId t = b.op("Tanh", {b.op("Mul", {r, b.constant({4, 8})})});
    b.graph().markOutput(r);
    b.finish(b.op("Add", {s, t}));
  }
  const Graph& graph() { return b.graph(); }
};

StageGraph stagesOf(const std::vector<std::pair<std::vector<int>, std::string>>& stages) {
  StageGraph g;
  for (const auto& [nodes, device] : stages) {
    PipelineStage s;
    s.nodes = nodes;
    s.devices = {device};
    g.stages.push_back(s);
  }
  return g;
}

// Every micro-batch's outputs equal the whole model's Session on the same
// kernels (within the plan check's float32 bound: the kernels run with one
// thread in a stage, with the process's count whole).
void expectMatchesWholeModel(const Graph& graph, const std::vector<std::vector<Tensor>>& batches,
                             const std::vector<std::vector<Tensor>>& outputs) {
  const BackendLookup lookup = nativeBackends()();
  Session whole(graph, singleNodePlan(graph, "native"), lookup);
  ASSERT_EQ(outputs.size(), batches.size());
  for (size_t m = 0; m < batches.size(); ++m) {
    const std::vector<Tensor> expected = whole.run(batches[m]);
    ASSERT_EQ(outputs[m].size(), expected.size());
    for (size_t o = 0; o < expected.size(); ++o) {
      const CompareResult c = compareScaled(outputs[m][o], expected[o], kFloat32Bound);
      EXPECT_TRUE(c.ok) << "micro-batch " << m << ", output " << o << ": " << c.message;
    }
  }
}

std::vector<std::vector<Tensor>> randomBatches(const Graph& graph, int count) {
  std::vector<std::vector<Tensor>> out;
  for (int m = 0; m < count; ++m)
    out.push_back(randomInputs(graph, 100 + static_cast<uint64_t>(m)));
  return out;
}

TEST(PipelineRuntime, MultiBranchStagesMatchTheWholeModel) {
  if (allowedCpus() < 2) GTEST_SKIP() << "needs 2 cores";
  Branches m;
  const Graph& g = m.graph();
  // Nodes: 0 relu, 1 sigmoid, 2 mul, 3 tanh, 4 add. Three stages on two cores:
  // relu | sigmoid (side by side with) mul+tanh | add.
  const StageGraph stages = stagesOf({{{0}, "c0"}, {{1}, "c1"}, {{2, 3, 4}, "c0"}});
  PipelineRuntimeOptions options;
  options.backend = "native";
  options.inFlight = {2, 3, 1};
  PipelineRuntime runtime(g, stages, twoCores(), nativeBackends(), options);
  ASSERT_EQ(runtime.stageCount(), 3u);
  EXPECT_EQ(runtime.stageGraph(0).outputs().size(),
            1u);  // relu's, read by two stages and the caller
  EXPECT_EQ(runtime.stageGraph(2).inputs().size(), 2u);  // relu's and sigmoid's values
  const auto batches = randomBatches(g, 7);
  PipelineRunReport report;
  const auto outputs = runtime.run(batches, &report);
  expectMatchesWholeModel(g, batches, outputs);
  EXPECT_EQ(report.microBatches, 7);
  ASSERT_EQ(report.stages.size(), 3u);
  for (const auto& s : report.stages) {
    EXPECT_EQ(s.microBatches, 7);
    EXPECT_EQ(s.threads, 1);
    EXPECT_GE(s.busyShare, 0);
    EXPECT_LE(s.busyShare, 1);
  }
  // The run's timeline (the app draws it): a span per micro-batch, one at a
  // time on each stage, and the join's after both of its producers'.
  for (const auto& s : report.stages) {
    ASSERT_EQ(s.starts.size(), 7u);
    ASSERT_EQ(s.finishes.size(), 7u);
    for (size_t k = 0; k < 7; ++k) {
      EXPECT_LE(s.starts[k], s.finishes[k]);
      if (k > 0) EXPECT_GE(s.starts[k], s.finishes[k - 1]);
    }
  }
  for (size_t k = 0; k < 7; ++k)
    for (size_t producer : {0u, 1u})
      EXPECT_GE(report.stages[2].starts[k], report.stages[producer].finishes[k]) << k;
  EXPECT_EQ(report.stages[1].cpus, std::vector<int>{report.stages[1].cpus.at(0)});
  EXPECT_NE(report.stages[0].cpus, report.stages[1].cpus);
  // Memory (a 4x8 float tensor is 128 B): relu holds its output (its
  // Session's peak) and its input for 2 micro-batches in flight; sigmoid
  // the same for 3; the join the Mul's constant as weights, and at least
  // its two inputs for 1 micro-batch and its output.
  EXPECT_EQ(report.stages[0].weightBytes, 0);
  EXPECT_EQ(report.stages[0].activationBytes, 128 + 2 * 128);
  EXPECT_EQ(report.stages[1].activationBytes, 128 + 3 * 128);
  EXPECT_EQ(report.stages[2].weightBytes, 128);
  EXPECT_GE(report.stages[2].activationBytes, 2 * 128 + 128);
  EXPECT_LE(report.stages[2].activationBytes, 2 * 128 + 3 * 128);
  // A second stream through the same runtime.
  const auto again = runtime.run(randomBatches(g, 3));
  EXPECT_EQ(again.size(), 3u);
}

TEST(PipelineRuntime, PartitionedMultiBranchModelMatchesTheWholeModel) {
  if (allowedCpus() < 2) GTEST_SKIP() << "needs 2 cores";
  ImportOptions import;
  import.inputShapes["input"] = {1, 3, 139, 139};
  const Graph g = importOnnx(
      std::string(COLLAGE_SOURCE_DIR) + "/resources/models/inception_v3_small.onnx", import);
  const PipeGraph pipe = pipeGraphOf(g, 1);
  FakeStageCost cost;
  cost.nodes.resize(static_cast<size_t>(pipe.size()));
  PartitionOptions po;
  po.batch = 1;
  const StageGraph stages = partitionGraphPipeline(pipe, twoCores(), cost, po);
  ASSERT_GE(stages.stages.size(), 2u) << stages.toString(pipe);
  PipelineRuntimeOptions options;
  options.backend = "native";
  PipelineRuntime runtime(g, stages, twoCores(), nativeBackends(), options);
  const auto batches = randomBatches(g, 3);
  expectMatchesWholeModel(g, batches, runtime.run(batches));
}

TEST(PipelineRuntime, AStagesPlanIsTheModelsPlanRestrictedToIt) {
  if (allowedCpus() < 2) GTEST_SKIP() << "needs 2 cores";
  Branches m;
  const Graph& g = m.b.graph();
  // Fused groups: {relu, sigmoid} (cut by the stages below) and
  // {mul, tanh, add} (inside one stage).
  auto name = [&](int n) { return g.node(n).name; };
  Plan plan;
  plan.groups = {{{name(0), name(1)}, "native", "test"},
                 {{name(2), name(3), name(4)}, "native", "test"}};
  const StageGraph stages = stagesOf({{{0}, "c0"}, {{1}, "c1"}, {{2, 3, 4}, "c0"}});
  PipelineRuntimeOptions options;
  options.plan = &plan;
  PipelineRuntime runtime(g, stages, twoCores(), nativeBackends(), options);
  EXPECT_EQ(runtime.stagePlan(0).groups.size(), 1u);
  EXPECT_EQ(runtime.stagePlan(1).groups.size(), 1u);
  ASSERT_EQ(runtime.stagePlan(2).groups.size(), 1u);
  EXPECT_EQ(runtime.stagePlan(2).groups[0].nodes.size(), 3u);  // still fused
  const auto batches = randomBatches(g, 4);
  const auto outputs = runtime.run(batches);
  // Against the whole model's Session of the same plan.
  const BackendLookup lookup = nativeBackends()();
  Session whole(g, plan, lookup);
  for (size_t b = 0; b < batches.size(); ++b) {
    const std::vector<Tensor> expected = whole.run(batches[b]);
    for (size_t o = 0; o < expected.size(); ++o)
      EXPECT_TRUE(compareScaled(outputs[b][o], expected[o], kFloat32Bound).ok) << b << ", " << o;
  }
}

// A backend whose kernels throw: a planted failing kernel.
class ThrowingBackend : public Backend {
 public:
  std::string name() const override { return "thrower"; }
  std::string version() const override { return "1"; }
  CompileResult compile(const KernelRequest&) override {
    struct Throwing : Kernel {
      void run(const std::vector<const DLTensor*>&, const std::vector<DLTensor*>&) override {
        throw Error("out of paper");
      }
    };
    return CompileResult::ok(std::make_unique<Throwing>());
  }
};

TEST(PipelineRuntime, AFailingStageStopsThePipelineNamingStageAndNode) {
  Branches m;
  const Graph& g = m.graph();
  Plan plan = singleNodePlan(g, "native");
  for (PlanGroup& group : plan.groups)
    if (group.nodes == std::vector<std::string>{g.node(3).name}) group.backend = "thrower";
  const StageGraph stages = stagesOf({{{0}, "c0"}, {{1}, "c1"}, {{2, 3, 4}, "c0"}});
  PipelineRuntimeOptions options;
  options.plan = &plan;
  options.pin = false;  // the data flow, on any machine
  const StageBackendsFactory backends = [] {
    auto native = std::shared_ptr<Backend>(createBackend("native"));
    auto thrower = std::make_shared<ThrowingBackend>();
    return BackendLookup([native, thrower](const std::string& name) -> Backend* {
      return name == "native" ? native.get() : name == "thrower" ? thrower.get() : nullptr;
    });
  };
  if (allowedCpus() < 2) GTEST_SKIP() << "needs 2 cores";
  PipelineRuntime runtime(g, stages, twoCores(), backends, options);
  // Many micro-batches and small queues: the stages before the failing one
  // block on full queues unless the failure stops them.
  expectError([&] { runtime.run(randomBatches(g, 20)); },
              {"stage 2 [c0]", "micro-batch 0", g.node(3).name, "out of paper"});
}

// A backend whose kernels copy their input and record, as they run, the
// thread count the backends see and the CPUs their thread may run on.
class RecordingBackend : public Backend {
 public:
  struct Seen {
    int threads = 0;
    std::vector<int> cpus;
  };
  std::shared_ptr<std::vector<Seen>> seen = std::make_shared<std::vector<Seen>>();
  std::string name() const override { return "recorder"; }
  std::string version() const override { return "1"; }
  CompileResult compile(const KernelRequest&) override {
    struct Recording : Kernel {
      std::shared_ptr<std::vector<Seen>> seen;
      void run(const std::vector<const DLTensor*>& in, const std::vector<DLTensor*>& out) override {
        std::memcpy(out[0]->data, in[0]->data, 4 * 8 * sizeof(float));
        Seen s;
        s.threads = threadCount();
        cpu_set_t set;
        CPU_ZERO(&set);
        sched_getaffinity(0, sizeof set, &set);
        for (int c = 0; c < CPU_SETSIZE; ++c)
          if (CPU_ISSET(c, &set)) s.cpus.push_back(c);
        seen->push_back(s);
      }
    };
    auto k = std::make_unique<Recording>();
    k->seen = seen;
    return CompileResult::ok(std::move(k));
  }
};

TEST(PipelineRuntime, EachStageRunsPinnedToItsCoresWithItsOwnThreadCount) {
  if (allowedCpus() < 2) GTEST_SKIP() << "needs 2 cores";
  test_support::ThreadCountGuard guard;
  setThreadCount(7);  // the process's count; each stage's is its cores
  // in -> Identity -> Identity: two stages, one per core.
  GraphBuilder b;
  b.finish(b.op("Identity", {b.op("Identity", {b.input({4, 8})})}));
  const Graph& g = b.graph();
  Plan plan = singleNodePlan(g, "recorder");
  std::vector<std::shared_ptr<std::vector<RecordingBackend::Seen>>> seen;
  std::mutex mutex;
  const StageBackendsFactory backends = [&] {
    auto backend = std::make_shared<RecordingBackend>();
    std::lock_guard<std::mutex> lock(mutex);
    seen.push_back(backend->seen);
    return BackendLookup([backend](const std::string& name) -> Backend* {
      return name == "recorder" ? backend.get() : nullptr;
    });
  };
  PipelineRuntimeOptions options;
  options.plan = &plan;
  PipelineRuntime runtime(g, stagesOf({{{0}, "c0"}, {{1}, "c1"}}), twoCores(), backends, options);
  PipelineRunReport report;
  const auto batches = randomBatches(g, 4);
  const auto outputs = runtime.run(batches, &report);
  ASSERT_EQ(seen.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    ASSERT_EQ(seen[s]->size(), 4u) << "stage " << s;
    for (const auto& one : *seen[s]) {
      EXPECT_EQ(one.threads, 1) << "stage " << s;
      EXPECT_EQ(one.cpus, report.stages[s].cpus) << "stage " << s;
    }
  }
  EXPECT_NE(report.stages[0].cpus, report.stages[1].cpus);
  EXPECT_EQ(threadCount(), 7);
  for (size_t m = 0; m < batches.size(); ++m)
    EXPECT_TRUE(compareTensors(outputs[m][0], batches[m][0], Tolerance{0, 0}).ok);
}

TEST(PipelineRuntime, ABadInputStopsThePipelineNamingTheStageAndInput) {
  if (allowedCpus() < 2) GTEST_SKIP() << "needs 2 cores";
  Branches m;
  const Graph& g = m.graph();
  const StageGraph stages = stagesOf({{{0}, "c0"}, {{1}, "c1"}, {{2, 3, 4}, "c0"}});
  PipelineRuntimeOptions options;
  options.backend = "native";
  PipelineRuntime runtime(g, stages, twoCores(), nativeBackends(), options);
  auto batches = randomBatches(g, 6);
  batches[4][0] = Tensor(ElementType::Float32, {8, 4});
  expectError([&] { runtime.run(batches); }, {"stage 0 [c0]", "micro-batch 4", "float32[8x4]"});
  expectError([&] { runtime.run({{}}); }, {"micro-batch 0 has 0 inputs"});
}

TEST(PipelineRuntime, RefusesStagesThatDoNotCoverTheModel) {
  if (allowedCpus() < 2) GTEST_SKIP() << "needs 2 cores";
  Branches m;
  const Graph& g = m.graph();
  PipelineRuntimeOptions options;
  options.backend = "native";
  expectError(
      [&] {
        PipelineRuntime(g, stagesOf({{{0, 1}, "c0"}, {{2, 3}, "c1"}}), twoCores(), nativeBackends(),
                        options);
      },
      {"node " + g.node(4).name, "in no stage"});
  expectError(
      [&] {
        PipelineRuntime(g, stagesOf({{{0, 1, 2}, "c0"}, {{2, 3, 4}, "c1"}}), twoCores(),
                        nativeBackends(), options);
      },
      {"node " + g.node(2).name, "stage 0 and in stage 1"});
  expectError(
      [&] {
        PipelineRuntime(g, stagesOf({{{0, 1, 2, 3, 4}, "gpu9"}}), twoCores(), nativeBackends(),
                        options);
      },
      {"stage 0", "\"gpu9\"", "does not list"});
}

TEST(PipelineRuntime, AStageThatCannotCompileNamesTheStage) {
  if (allowedCpus() < 2) GTEST_SKIP() << "needs 2 cores";
  Branches m;
  const Graph& g = m.b.graph();
  Plan plan = singleNodePlan(g, "native");
  plan.groups[1].backend = "nosuch";  // sigmoid's group, in stage 1
  PipelineRuntimeOptions options;
  options.plan = &plan;
  expectError(
      [&] {
        PipelineRuntime(g, stagesOf({{{0}, "c0"}, {{1}, "c1"}, {{2, 3, 4}, "c0"}}), twoCores(),
                        nativeBackends(), options);
      },
      {"pipeline: stage 1 [c1]", "'nosuch'", "not available"});
}

TEST(PipelineRuntime, ADeviceThisMachineLacksIsRefused) {
  const LinkCost link{1e10, 1e-6};
  const Topology big({{"c0", DeviceKind::Cpu, 1}, {"c1", DeviceKind::Cpu, 4096}}, {}, &link,
                     "big.json");
  expectError([&] { assignCores(big); },
              {"device \"c1\"", "needs 4096 core(s)", "1 of them taken"});
  const Topology gpu({{"g0", DeviceKind::Gpu, 0, 1e9}}, {}, &link, "gpu.json");
  expectError([&] { assignCores(gpu); }, {"\"g0\"", "CPU devices only"});
}

TEST(PipelineRuntime, RestrictedPlanKeepsWholeGroupsAndSplitsCutOnes) {
  Plan plan;
  plan.groups = {{{"a", "b"}, "onednn", "pattern:x"},
                 {{"c", "d"}, "native", "pattern:y"},
                 {{"e"}, "native", "rule:op"}};
  const Plan r = restrictPlan(plan, {"a", "b", "c"});
  ASSERT_EQ(r.groups.size(), 2u);
  EXPECT_EQ(r.groups[0].nodes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.groups[0].pattern, "pattern:x");
  EXPECT_EQ(r.groups[1].nodes, std::vector<std::string>{"c"});
  EXPECT_EQ(r.groups[1].backend, "native");
}

TEST(Threading, ThisThreadsCountIsItsOwn) {
  test_support::ThreadCountGuard guard;
  setThreadCount(2);
  int inside = 0, insideAfterReset = 0;
  std::thread t([&] {
    setThisThreadCount(1);
    inside = threadCount();
    setThisThreadCount(0);
    insideAfterReset = threadCount();
  });
  t.join();
  EXPECT_EQ(inside, 1);
  EXPECT_EQ(insideAfterReset, 2);
  EXPECT_EQ(threadCount(), 2);  // the process's, untouched
}

}  // namespace
}  // namespace collage
