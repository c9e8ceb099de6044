// The copy model of a device: fitted from timings of small and large copies
// per direction, kept in the measurement database and reused, unmeasured
// (NaN) where a timing fails. Deterministic timers stand in for the clock;
// the fake device (no GPU) checks the product's timer and that the measurer
// times a device kernel on device memory.
#include "core/measure/copy_cost_measurement.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/measure/measurer.h"
#include "tests/unit/runtime/fake_device.h"

namespace collage {
namespace {

const Device kGpu{DeviceType::CUDA, 0};
const HardwareFingerprint kMachine{"Vendor", "Model X", "avx2", 2, 2, "lib=1"};

std::string tempDb(const std::string& name) {
  auto dir =
      std::filesystem::temp_directory_path() / ("collage_copy_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto p = dir / name;
  std::filesystem::remove(p);
  return p.string();
}

// Up: 5 us + 10 B/ns; down: 3 us + 20 B/ns. Counts its calls.
struct LinearTimer {
  int calls = 0;
  CopyTimer timer() {
    return [this](bool toDevice, size_t bytes) {
      ++calls;
      Measurement m;
      m.status = MeasurementStatus::Ok;
      m.medianNs = toDevice ? 5000 + static_cast<double>(bytes) / 10
                            : 3000 + static_cast<double>(bytes) / 20;
      m.samples = 15;
      return m;
    };
  }
};

TEST(CopyCostMeasurement, FitsLatencyAndBandwidthPerDirection) {
  LinearTimer t;
  const CopyTimingOptions options;  // 4 B and 16 MiB
  const CopyCostMeasurement m =
      measureCopyCost(kGpu, "fake gpu", nullptr, kMachine, t.timer(), options);
  EXPECT_EQ(m.measured, 4);
  EXPECT_TRUE(m.problem.empty()) << m.problem;
  EXPECT_DOUBLE_EQ(m.model.toDeviceLatencyNs, 5000 + 4.0 / 10);
  EXPECT_NEAR(m.model.toDeviceBytesPerNs, 10, 1e-9);
  EXPECT_DOUBLE_EQ(m.model.toHostLatencyNs, 3000 + 4.0 / 20);
  EXPECT_NEAR(m.model.toHostBytesPerNs, 20, 1e-9);
  // The model then prices a 1 MB copy up as the timer would have.
  DeviceEdge up;
  up.from = Device{};
  up.to = kGpu;
  up.bytes = 1000000;
  EXPECT_NEAR(copyCostNs({up}, m.model), 5000 + 1000000.0 / 10, 1.0);
}

TEST(CopyCostMeasurement, IsStoredAndReusedByMachineAndDevice) {
  MeasurementDb db(tempDb("reuse.sqlite"));
  LinearTimer first;
  const CopyCostMeasurement a = measureCopyCost(kGpu, "fake gpu", &db, kMachine, first.timer());
  EXPECT_EQ(first.calls, 4);
  LinearTimer second;
  const CopyCostMeasurement b = measureCopyCost(kGpu, "fake gpu", &db, kMachine, second.timer());
  EXPECT_EQ(second.calls, 0) << "measured again although the database had it";
  EXPECT_EQ(b.measured, 0);
  EXPECT_DOUBLE_EQ(b.model.toDeviceLatencyNs, a.model.toDeviceLatencyNs);
  EXPECT_DOUBLE_EQ(b.model.toHostBytesPerNs, a.model.toHostBytesPerNs);
  // Another GPU or driver (the runtime's fingerprint), or another machine: measured anew.
  LinearTimer otherGpu;
  measureCopyCost(kGpu, "another gpu", &db, kMachine, otherGpu.timer());
  EXPECT_EQ(otherGpu.calls, 4);
  HardwareFingerprint otherMachine = kMachine;
  otherMachine.cpuModel = "Model Y";
  LinearTimer elsewhere;
  measureCopyCost(kGpu, "fake gpu", &db, otherMachine, elsewhere.timer());
  EXPECT_EQ(elsewhere.calls, 4);
}

TEST(CopyCostMeasurement, AFailedTimingLeavesItsDirectionUnmeasuredAndUnstored) {
  MeasurementDb db(tempDb("failed.sqlite"));
  LinearTimer good;
  int failures = 0;
  CopyTimer halfBroken = [&](bool toDevice, size_t bytes) {
    if (toDevice) return good.timer()(toDevice, bytes);
    ++failures;
    Measurement m;
    m.status = MeasurementStatus::Failed;
    m.message = "cudaMemcpy: unspecified launch failure";
    return m;
  };
  const CopyCostMeasurement m = measureCopyCost(kGpu, "fake gpu", &db, kMachine, halfBroken);
  EXPECT_TRUE(std::isfinite(m.model.toDeviceLatencyNs));
  EXPECT_TRUE(std::isnan(m.model.toHostLatencyNs));
  EXPECT_TRUE(std::isnan(m.model.toHostBytesPerNs));
  EXPECT_NE(m.problem.find("copies from cuda:0: cudaMemcpy: unspecified launch failure"),
            std::string::npos)
      << m.problem;
  // The next run tries the failed direction again, and only it.
  const int before = failures;
  good.calls = 0;
  measureCopyCost(kGpu, "fake gpu", &db, kMachine, halfBroken);
  EXPECT_EQ(good.calls, 0);
  EXPECT_GT(failures, before);
}

TEST(CopyCostMeasurement, TheRuntimeTimerCopiesThroughTheDeviceRuntime) {
  test_support::FakeDeviceRuntime runtime;
  CopyTimingOptions options;
  options.smallBytes = 4;
  options.largeBytes = 4096;
  options.warmups = 2;
  options.repetitions = 5;
  const CopyTimer timer = runtimeCopyTimer(runtime, options);
  const Measurement up = timer(true, 4096);
  EXPECT_EQ(up.status, MeasurementStatus::Ok) << up.message;
  EXPECT_EQ(up.samples, 5);
  EXPECT_EQ(runtime.copiesToDevice, 7);
  const Measurement down = timer(false, 4);
  EXPECT_EQ(down.status, MeasurementStatus::Ok) << down.message;
  EXPECT_EQ(runtime.copiesToHost, 7);
  EXPECT_GE(runtime.synchronizations, 14);
  EXPECT_EQ(runtime.liveBlocks(), 0u);
}

TEST(CopyCostMeasurement, TheMeasurerTimesADeviceKernelOnDeviceMemory) {
  // The fake device's kernel throws when handed host memory: an Ok
  // measurement means its inputs and outputs were device buffers, so the
  // copies at plan edges are not hidden in the kernel's time.
  Graph g;
  const TensorType type{ElementType::Float32, {8, 8}};
  ValueId x = g.addInput("x", type);
  ValueId y = g.addValue("y", type);
  g.addNode(Node{"relu", "Relu", {}, {x}, {y}});
  g.markOutput(y);
  g.finalize();
  test_support::FakeDeviceRuntime runtime;
  test_support::FakeDeviceBackend gpu(runtime);
  MeasurerOptions options;
  options.warmupSeconds = 0;
  options.minTotalSeconds = 0;
  options.maxSamples = 9;
  const Measurement m = measureKernel(gpu, KernelRequest::of(g, NodeSet::of(1, {0})), options);
  EXPECT_EQ(m.status, MeasurementStatus::Ok) << m.message;
  EXPECT_EQ(runtime.copiesToDevice, 1) << "the input is uploaded once, before timing";
  EXPECT_EQ(runtime.copiesToHost, 0);
  EXPECT_EQ(runtime.liveBlocks(), 0u);
}

}  // namespace
}  // namespace collage
