// The table of backend devices and copy models the optimize flows hand to the
// op-level DP: empty when every backend is on the host, measured through a
// device's runtime once and then read from the database, unmeasured (and
// said so) for a device whose backends give no runtime. On a fake device.
#include "core/search/device_costs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "tests/unit/runtime/fake_device.h"

namespace collage {
namespace {

using test_support::FakeDeviceBackend;
using test_support::FakeDeviceRuntime;
using test_support::HostCheckingBackend;

const HardwareFingerprint kMachine{"Vendor", "Model X", "avx2", 2, 2, "lib=1"};

CopyTimingOptions quick() {
  CopyTimingOptions o;
  o.largeBytes = 4096;
  o.warmups = 1;
  o.repetitions = 3;
  return o;
}

TEST(DeviceCosts, BackendsOnTheHostNeedNoCopyModel) {
  FakeDeviceRuntime runtime;
  HostCheckingBackend cpu(runtime);
  const DeviceCosts costs = measureDeviceCosts(
      {"cpu"}, [&](const std::string&) -> Backend* { return &cpu; }, nullptr, kMachine, quick());
  EXPECT_TRUE(costs.empty());
  EXPECT_TRUE(costs.notes.empty());
  OpLevelProblem problem;
  costs.applyTo(problem);
  EXPECT_FALSE(problem.device);
  EXPECT_FALSE(problem.copyCost);
  EXPECT_EQ(runtime.allocations, 0);
}

TEST(DeviceCosts, ADeviceIsMeasuredThroughItsRuntimeOnceThenReadFromTheDatabase) {
  auto dir =
      std::filesystem::temp_directory_path() / ("collage_device_costs_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir / "db.sqlite");
  MeasurementDb db((dir / "db.sqlite").string());
  FakeDeviceRuntime runtime;
  FakeDeviceBackend gpu(runtime, "gpu");
  HostCheckingBackend cpu(runtime);
  const BackendLookup lookup = [&](const std::string& n) -> Backend* {
    return n == "gpu" ? static_cast<Backend*>(&gpu) : &cpu;
  };

  const DeviceCosts first = measureDeviceCosts({"cpu", "gpu"}, lookup, &db, kMachine, quick());
  EXPECT_EQ(first.measured, 4);
  ASSERT_EQ(first.copyModels.size(), 1u);
  const CopyCostModel& model = first.copyModels[0].second;
  EXPECT_TRUE(std::isfinite(model.toDeviceLatencyNs) && std::isfinite(model.toHostLatencyNs));
  EXPECT_GT(model.toDeviceBytesPerNs, 0);
  EXPECT_GT(model.toHostBytesPerNs, 0);
  EXPECT_GT(runtime.copiesToDevice, 0);
  ASSERT_EQ(first.notes.size(), 1u);
  EXPECT_EQ(first.notes[0].rfind("cpu <-> cuda:0: to the device ", 0), 0u) << first.notes[0];

  const int copies = runtime.copiesToDevice + runtime.copiesToHost;
  const DeviceCosts second = measureDeviceCosts({"cpu", "gpu"}, lookup, &db, kMachine, quick());
  EXPECT_EQ(second.measured, 0);
  EXPECT_EQ(runtime.copiesToDevice + runtime.copiesToHost, copies) << "timed again";
  EXPECT_DOUBLE_EQ(second.copyModels[0].second.toDeviceLatencyNs, model.toDeviceLatencyNs);

  OpLevelProblem problem;
  second.applyTo(problem);
  ASSERT_TRUE(problem.device && problem.copyCost);
  EXPECT_EQ(problem.device("gpu"), (Device{DeviceType::CUDA, 0}));
  EXPECT_EQ(problem.device("cpu"), Device{});
  EXPECT_DOUBLE_EQ(problem.copyCost(Device{DeviceType::CUDA, 0}).toHostBytesPerNs,
                   model.toHostBytesPerNs);
  EXPECT_TRUE(std::isnan(problem.copyCost(Device{DeviceType::CUDA, 1}).toDeviceLatencyNs));
}

// A backend on a GPU that gives no runtime.
class NoRuntimeBackend : public Backend {
 public:
  std::string name() const override { return "blind"; }
  std::string version() const override { return "1"; }
  Device device() const override { return Device{DeviceType::CUDA, 0}; }
  CompileResult compile(const KernelRequest&) override { return CompileResult::refuse("never"); }
};

TEST(DeviceCosts, ADeviceWithoutARuntimeStaysUnmeasuredAndSaysWhy) {
  NoRuntimeBackend blind;
  const DeviceCosts costs = measureDeviceCosts(
      {"blind"}, [&](const std::string&) -> Backend* { return &blind; }, nullptr, kMachine,
      quick());
  ASSERT_EQ(costs.copyModels.size(), 1u);
  EXPECT_TRUE(std::isnan(costs.copyModels[0].second.toDeviceLatencyNs));
  ASSERT_EQ(costs.notes.size(), 1u);
  EXPECT_NE(costs.notes[0].find("no backend there gives a device runtime"), std::string::npos)
      << costs.notes[0];
}

}  // namespace
}  // namespace collage
