// The Session's device-aware path, on a fake device (no GPU involved): copies
// exactly where a plan edge crosses devices, once per destination device,
// graph outputs brought back to the host, a device memory pool reused like
// the host's, and results equal to the reference executor's. The fake
// device's kernels refuse host memory and the host's kernels refuse device
// memory, so a missing or misplaced copy fails the run instead of passing by
// accident (the fake "device memory" is host RAM).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"
#include "tests/unit/runtime/fake_device.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using test_support::expectError;
using test_support::FakeDeviceBackend;
using test_support::FakeDeviceRuntime;
using test_support::HostCheckingBackend;

const Tolerance kTolerance = kPlanTolerance;
const Device kHost{};
const Device kGpu{DeviceType::CUDA, 0};

// A fake GPU ("gpu") and the host ("cpu"), both running native kernels.
struct Devices {
  FakeDeviceRuntime runtime;
  FakeDeviceBackend gpu{runtime, "gpu"};
  HostCheckingBackend cpu{runtime};
  BackendLookup lookup() {
    return [this](const std::string& n) -> Backend* {
      if (n == "gpu") return &gpu;
      if (n == "cpu") return &cpu;
      return nullptr;
    };
  }
};

// One group per node, placed as `backends` says (one name per node).
Plan placed(const Graph& g, const std::vector<std::string>& backends) {
  Plan p;
  for (NodeId n = 0; n < g.numNodes(); ++n) {
    PlanGroup group;
    group.nodes = {g.node(n).name};
    group.backend = backends.at(static_cast<size_t>(n));
    p.groups.push_back(group);
  }
  return p;
}

void expectMatchesReference(Session& s, const Graph& g, uint64_t seed) {
  SessionVerification v = verifySession(s, randomInputs(g, seed), kTolerance);
  for (const auto& p : v.problems) ADD_FAILURE() << p;
  EXPECT_EQ(v.outputs.size(), g.outputs().size());
}

// x -> Relu -> r -> Sigmoid -> s -> Tanh -> t -> Neg -> y (output); float32[4x8].
struct Chain {
  Graph g;
  static constexpr size_t kBytes = 4 * 8 * 4;
  Chain() {
    const TensorType type{ElementType::Float32, {4, 8}};
    ValueId x = g.addInput("x", type);
    ValueId r = g.addValue("r", type), s = g.addValue("s", type), t = g.addValue("t", type),
            y = g.addValue("y", type);
    g.addNode(Node{"relu", "Relu", {}, {x}, {r}});
    g.addNode(Node{"sig", "Sigmoid", {}, {r}, {s}});
    g.addNode(Node{"tanh", "Tanh", {}, {s}, {t}});
    g.addNode(Node{"neg", "Neg", {}, {t}, {y}});
    g.markOutput(y);
    g.finalize();
  }
  ValueId value(const std::string& name) const { return *g.findValue(name); }
};

// x -> Relu -> r -> {Sigmoid -> s, Tanh -> th} -> Add -> y; r is an output too.
struct Diamond {
  Graph g;
  Diamond() {
    const TensorType type{ElementType::Float32, {2, 3}};
    ValueId x = g.addInput("x", type);
    ValueId r = g.addValue("r", type), s = g.addValue("s", type), th = g.addValue("th", type),
            y = g.addValue("y", type);
    g.addNode(Node{"relu", "Relu", {}, {x}, {r}});
    g.addNode(Node{"sig", "Sigmoid", {}, {r}, {s}});
    g.addNode(Node{"tanh", "Tanh", {}, {r}, {th}});
    g.addNode(Node{"add", "Add", {}, {s, th}, {y}});
    g.markOutput(y);
    g.markOutput(r);
    g.finalize();
  }
};

TEST(SessionDevices, CopiesExactlyWhereAPlanEdgeCrossesDevices) {
  Chain c;
  Devices d;
  Session s(c.g, placed(c.g, {"cpu", "gpu", "gpu", "cpu"}), d.lookup());
  EXPECT_EQ(s.groupDevice(0), kHost);
  EXPECT_EQ(s.groupDevice(1), kGpu);
  // r goes up before Sigmoid, t comes down before Neg; s stays on the device.
  ASSERT_EQ(s.deviceEdges().size(), 2u);
  const DeviceEdge& up = s.deviceEdges()[0];
  const DeviceEdge& down = s.deviceEdges()[1];
  EXPECT_EQ(up.value, c.value("r"));
  EXPECT_EQ(up.from, kHost);
  EXPECT_EQ(up.to, kGpu);
  EXPECT_EQ(up.consumers, std::vector<int>{1});
  EXPECT_EQ(down.value, c.value("t"));
  EXPECT_EQ(down.to, kHost);
  EXPECT_EQ(down.consumers, std::vector<int>{3});

  expectMatchesReference(s, c.g, 1);
  EXPECT_EQ(d.runtime.copiesToDevice, 1);
  EXPECT_EQ(d.runtime.copiesToHost, 1);
  EXPECT_EQ(d.runtime.bytesToDevice, Chain::kBytes);
  EXPECT_EQ(d.runtime.bytesToHost, Chain::kBytes);
  EXPECT_EQ(d.gpu.kernelRuns, 2);
  EXPECT_GE(d.runtime.synchronizations, 1);
  // A second run makes the same copies again, and no more.
  expectMatchesReference(s, c.g, 2);
  EXPECT_EQ(d.runtime.copiesToDevice, 2);
  EXPECT_EQ(d.runtime.copiesToHost, 2);
}

TEST(SessionDevices, OneDeviceNeedsNoCopyAndNoDeviceMemory) {
  Chain c;
  Devices d;
  Session s(c.g, placed(c.g, {"cpu", "cpu", "cpu", "cpu"}), d.lookup());
  EXPECT_TRUE(s.deviceEdges().empty());
  expectMatchesReference(s, c.g, 3);
  EXPECT_EQ(d.runtime.allocations, 0);
  EXPECT_EQ(d.runtime.copiesToDevice + d.runtime.copiesToHost, 0);
  EXPECT_EQ(s.deviceArenaBytes(), 0u);
}

TEST(SessionDevices, EverythingOnTheDeviceCopiesTheInputUpAndTheOutputBack) {
  Chain c;
  Devices d;
  Session s(c.g, placed(c.g, {"gpu", "gpu", "gpu", "gpu"}), d.lookup());
  ASSERT_EQ(s.deviceEdges().size(), 2u);
  EXPECT_EQ(s.deviceEdges()[0].value, c.value("x"));
  EXPECT_EQ(s.deviceEdges()[1].value, c.value("y"));
  EXPECT_TRUE(s.deviceEdges()[1].consumers.empty()) << "y goes back only because it is an output";
  expectMatchesReference(s, c.g, 4);
  EXPECT_EQ(d.runtime.copiesToDevice, 1);
  EXPECT_EQ(d.runtime.copiesToHost, 1);
  EXPECT_EQ(d.gpu.kernelRuns, 4);
}

TEST(SessionDevices, AValueIsCopiedOncePerDestinationDevice) {
  // r is made on the device, read by two host kernels and returned: one copy
  // down serves all three.
  Diamond dia;
  Devices d;
  Session s(dia.g, placed(dia.g, {"gpu", "cpu", "cpu", "cpu"}), d.lookup());
  ASSERT_EQ(s.deviceEdges().size(), 2u);  // x up, r down
  const DeviceEdge& down = s.deviceEdges()[1];
  EXPECT_EQ(dia.g.value(down.value).name, "r");
  EXPECT_EQ(down.consumers, (std::vector<int>{1, 2}));
  expectMatchesReference(s, dia.g, 5);
  EXPECT_EQ(d.runtime.copiesToDevice, 1);
  EXPECT_EQ(d.runtime.copiesToHost, 1);

  // x is read by two kernels on the device: one copy up.
  Devices d2;
  Session s2(dia.g, placed(dia.g, {"cpu", "gpu", "gpu", "cpu"}), d2.lookup());
  // r up once (read by both), s and th down (each its own value).
  ASSERT_EQ(s2.deviceEdges().size(), 3u);
  EXPECT_EQ(dia.g.value(s2.deviceEdges()[0].value).name, "r");
  EXPECT_EQ(s2.deviceEdges()[0].consumers, (std::vector<int>{1, 2}));
  expectMatchesReference(s2, dia.g, 6);
  EXPECT_EQ(d2.runtime.copiesToDevice, 1);
  EXPECT_EQ(d2.runtime.copiesToHost, 2);
}

TEST(SessionDevices, GraphOutputsMadeOnTheDeviceAreCopiedBack) {
  // y and r are both made on the device; r is also read there.
  Diamond dia;
  Devices d;
  Session s(dia.g, placed(dia.g, {"gpu", "gpu", "gpu", "gpu"}), d.lookup());
  std::vector<Tensor> inputs = randomInputs(dia.g, 7);
  std::vector<Tensor> outputs = s.run(inputs);
  std::vector<Tensor> expected = ReferenceExecutor(dia.g).run(inputs);
  ASSERT_EQ(outputs.size(), 2u);
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_FALSE(d.runtime.touches(outputs[i].raw(), outputs[i].byteSize()))
        << "output " << i << " is device memory";
    EXPECT_TRUE(compareTensors(outputs[i], expected[i], kTolerance).ok) << "output " << i;
  }
  EXPECT_EQ(d.runtime.copiesToDevice, 1);
  EXPECT_EQ(d.runtime.copiesToHost, 2);
}

TEST(SessionDevices, DeviceBuffersAreReusedWhenLifetimesDoNotOverlap) {
  // Eight kernels in a line on the device, float32[64x64] each: at most two
  // values are alive at once (a kernel's input and its output).
  Graph g;
  const TensorType type{ElementType::Float32, {64, 64}};
  const size_t bytes = 64 * 64 * 4;
  ValueId v = g.addInput("x", type);
  const std::vector<std::string> ops = {"Relu", "Sigmoid", "Tanh", "Neg",
                                        "Abs",  "Relu",    "Neg",  "Tanh"};
  for (size_t i = 0; i < ops.size(); ++i) {
    ValueId next = g.addValue("v" + std::to_string(i), type);
    g.addNode(Node{"n" + std::to_string(i), ops[i], {}, {v}, {next}});
    v = next;
  }
  g.markOutput(v);
  g.finalize();
  Devices d;
  {
    Session s(g, placed(g, std::vector<std::string>(ops.size(), "gpu")), d.lookup());
    // x's copy and the eight results live on the device.
    EXPECT_EQ(s.deviceTotalValueBytes(), 9 * bytes);
    EXPECT_EQ(s.devicePeakBytes(), 2 * bytes);
    EXPECT_EQ(s.deviceArenaBytes(), 2 * bytes);
    EXPECT_LT(s.devicePeakBytes(), s.deviceTotalValueBytes());
    // Allocated once, at construction, through the runtime.
    EXPECT_EQ(d.runtime.liveBytes(), s.deviceArenaBytes());
    const int allocations = d.runtime.allocations;
    expectMatchesReference(s, g, 8);
    expectMatchesReference(s, g, 9);
    EXPECT_EQ(d.runtime.allocations, allocations) << "run() allocated device memory";
    // Nothing intermediate stays on the host.
    EXPECT_EQ(s.arenaBytes(), 0u);
  }
  EXPECT_EQ(d.runtime.liveBlocks(), 0u) << "the Session did not give its device memory back";
}

// Every zoo model with its nodes alternating between the fake device and the
// host: values cross devices at almost every edge.
TEST(SessionDevices, ZooModelsAlternatingDevicesMatchTheReference) {
  const std::string models = std::string(COLLAGE_SOURCE_DIR) + "/resources/models/";
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(models))
    if (entry.path().extension() == ".onnx") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  ASSERT_FALSE(names.empty());
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    Graph g = importOnnx(models + name + ".onnx");
    std::vector<std::string> backends;
    for (NodeId n = 0; n < g.numNodes(); ++n) backends.push_back(n % 2 ? "cpu" : "gpu");
    Devices d;
    Session s(g, placed(g, backends), d.lookup());
    EXPECT_FALSE(s.deviceEdges().empty());
    expectMatchesReference(s, g, 10);
    // One copy per edge per run, no more.
    EXPECT_EQ(static_cast<size_t>(d.runtime.copiesToDevice + d.runtime.copiesToHost),
              s.deviceEdges().size());
  }
}

TEST(SessionDevices, TheFakeDeviceCatchesMemoryOnTheWrongSide) {
  // The checks the tests above rely on: a device kernel handed host memory,
  // or a host kernel handed device memory, fails.
  Chain c;
  Devices d;
  NodeSet relu(c.g.numNodes());
  relu.insert(0);
  CompileResult onDevice = d.gpu.compile(KernelRequest::of(c.g, relu));
  CompileResult onHost = d.cpu.compile(KernelRequest::of(c.g, relu));
  ASSERT_TRUE(onDevice && onHost);
  Tensor in(ElementType::Float32, {4, 8}), out(ElementType::Float32, {4, 8});
  DLTensor hostIn = in.toDLTensor(), hostOut = out.toDLTensor();
  expectError([&] { onDevice.kernel->run({&hostIn}, {&hostOut}); },
              {"gpu", "input 0", "not in cuda:0 memory"});
  void* deviceMemory = d.runtime.allocate(Chain::kBytes);
  DLTensor deviceIn = hostIn;
  deviceIn.data = deviceMemory;
  expectError([&] { onHost.kernel->run({&deviceIn}, {&hostOut}); },
              {"hostcheck", "input 0", "in cuda:0 memory"});
  d.runtime.release(deviceMemory);
}

// A backend on a device that gives the Session no runtime for it.
class NoRuntimeBackend : public Backend {
 public:
  std::string name() const override { return "blind"; }
  std::string version() const override { return "1"; }
  Device device() const override { return kGpu; }
  CompileResult compile(const KernelRequest& r) override { return native_.compile(r); }
  explicit NoRuntimeBackend(Backend& native) : native_(native) {}

 private:
  Backend& native_;
};

TEST(SessionDevices, ABackendOnADeviceWithoutARuntimeIsAnErrorNamingTheGroup) {
  Chain c;
  Devices d;
  NoRuntimeBackend blind(d.cpu);
  auto lookup = [&](const std::string& n) -> Backend* {
    return n == "blind" ? &blind : d.lookup()(n);
  };
  expectError(
      [&] {
        Session(c.g, placed(c.g, {"cpu", "blind", "cpu", "cpu"}), lookup);
      },
      {"group 1", "sig", "blind runs on cuda:0", "no device runtime"});
}

}  // namespace
}  // namespace collage
