// The machine's timing lock: one holder at a time across processes (flock on
// one file; two descriptors in one process stand in for two processes here),
// a waiter told who holds it, a waiter that can give up, and a measurement
// worker's wait that does not count against its deadline.
#include "core/measure/machine_timing_lock.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <optional>
#include <thread>

#include "core/measure/measurer.h"

namespace collage {
namespace {

class TimingLock : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() /
            ("collage_timing_lock_test_" + std::to_string(getpid()) + ".lock");
    setenv("COLLAGE_TIMING_LOCK", path_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("COLLAGE_TIMING_LOCK");
    std::filesystem::remove(path_);
  }
  std::filesystem::path path_;
};

TEST_F(TimingLock, AWaiterIsToldWhoHoldsItAndGetsItWhenReleased) {
  EXPECT_EQ(MachineTimingLock::path(), path_.string());
  std::optional<MachineTimingLock> first(std::in_place, "measuring a.onnx");
  EXPECT_FALSE(first->waited());
  std::promise<std::string> told;
  std::atomic<bool> holding{false};
  std::thread second([&] {
    MachineTimingLock lock("measuring b.onnx",
                           [&](const std::string& holder) { told.set_value(holder); });
    holding = true;
    EXPECT_TRUE(lock.waited());
    EXPECT_TRUE(lock.held());
  });
  const std::string holder = told.get_future().get();  // the second waits for the first
  EXPECT_NE(holder.find("pid " + std::to_string(getpid())), std::string::npos) << holder;
  EXPECT_NE(holder.find("measuring a.onnx"), std::string::npos) << holder;
  EXPECT_FALSE(holding);
  first.reset();  // released: the second takes it
  second.join();
  EXPECT_TRUE(holding);
}

TEST_F(TimingLock, AWaiterMayGiveUp) {
  MachineTimingLock first("measuring a.onnx");
  int asked = 0;
  MachineTimingLock second("a plan run", {}, [&] { return ++asked == 3; });
  EXPECT_FALSE(second.held());
  EXPECT_TRUE(second.waited());
  EXPECT_EQ(asked, 3);
}

TEST_F(TimingLock, TheLockIsFreeAgainAfterItsHolderEnds) {
  { MachineTimingLock first("measuring a.onnx"); }
  MachineTimingLock second("measuring b.onnx");
  EXPECT_FALSE(second.waited());
}

// A worker that waits for the lock says so, and its request's deadline
// starts once it has the lock: this one waits 1.5 s, longer than its 0.5 s
// deadline, and still answers in time.
TEST(IsolatedMeasurer, AWorkerWaitingForTheTimingLockIsNotTimedOut) {
  MeasurerOptions options;
  options.timeoutSeconds = 0.5;
  IsolatedMeasurer m({"/bin/sh", "-c",
                      "read line; echo '{\"waiting\": \"pid 1, measuring other.onnx\"}'; sleep 1.5; "
                      "echo '{\"acquired\": true}'; "
                      "echo '{\"status\":\"ok\",\"median_ns\":1500,\"spread\":0.01,\"samples\":11}'"},
                     options);
  std::string reported;
  m.setWaitingReporter([&](const std::string& holder) { reported = holder; });
  const Measurement r = m.measure("any", NodeSet::of(1, {0}));
  EXPECT_EQ(r.status, MeasurementStatus::Ok) << r.message;
  EXPECT_EQ(reported, "pid 1, measuring other.onnx");
}

}  // namespace
}  // namespace collage
