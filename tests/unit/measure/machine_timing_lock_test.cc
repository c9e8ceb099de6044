// The machine's timing lock: one holder at a time across processes (flock on
// one file; two descriptors in one process stand in for two processes here),
// a waiter told who holds it, a waiter that can give up, and a measurement
// worker's wait that does not count against its deadline. Where the lock
// lives (a folder of this user's, never a symlink followed) and a lock that
// cannot be opened: the machine's failure, which is not kept as the kernel's.
#include "core/measure/machine_timing_lock.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/ir/error.h"
#include "core/measure/candidate_costs.h"
#include "core/measure/measurement_db.h"
#include "core/measure/measurer.h"
#include "tests/unit/graph_builder.h"

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

// A symlink at the lock's place is refused (O_NOFOLLOW), not followed to
// whatever file it names.
TEST_F(TimingLock, ASymbolicLinkIsNotFollowed) {
  const std::filesystem::path target = path_.string() + ".target";
  std::ofstream(target) << "someone else's file";
  std::filesystem::create_symlink(target, path_);
  try {
    MachineTimingLock lock("measuring a.onnx");
    ADD_FAILURE() << "a symlinked lock was opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
  std::ifstream in(target);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "someone else's file");
  std::filesystem::remove(target);
}

// Nor is a FIFO planted there opened and waited on: refused at once.
TEST_F(TimingLock, AFifoIsRefusedNotWaitedOn) {
  ASSERT_EQ(mkfifo(path_.c_str(), 0666), 0);
  try {
    MachineTimingLock lock("measuring a.onnx");
    ADD_FAILURE() << "a FIFO was taken for the lock";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

// Without COLLAGE_TIMING_LOCK: where the lock lives.
class TimingLockPlace : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"COLLAGE_TIMING_LOCK", "XDG_RUNTIME_DIR", "TMPDIR"})
      if (const char* value = std::getenv(v)) saved_.emplace_back(v, value);
    unsetenv("COLLAGE_TIMING_LOCK");
    unsetenv("XDG_RUNTIME_DIR");
    dir_ = std::filesystem::temp_directory_path() /
           ("collage_timing_place_test_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    setenv("TMPDIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    for (const char* v : {"COLLAGE_TIMING_LOCK", "XDG_RUNTIME_DIR", "TMPDIR"}) unsetenv(v);
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
    std::filesystem::remove_all(dir_);
  }
  std::filesystem::path mine() const { return dir_ / ("collage-" + std::to_string(geteuid())); }
  std::vector<std::pair<std::string, std::string>> saved_;
  std::filesystem::path dir_;
};

// Not /tmp/collage-timing.lock (another user's file there cannot be opened
// with O_CREAT under fs.protected_regular): a folder of this user's, closed
// to others, and the file in it closed to others too, whatever the umask.
TEST_F(TimingLockPlace, ByDefaultItIsInAFolderOfThisUsersOwn) {
  EXPECT_EQ(MachineTimingLock::path(), (mine() / "collage-timing.lock").string());
  struct stat st {};
  ASSERT_EQ(lstat(mine().c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, geteuid());
  const mode_t previous = umask(0);  // a permissive umask changes nothing
  {
    MachineTimingLock lock("measuring a.onnx");
    EXPECT_TRUE(lock.held());
  }
  EXPECT_EQ(umask(previous), 0u);  // and nothing changed the process's umask
  ASSERT_EQ(stat((mine() / "collage-timing.lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(TimingLockPlace, AUsableRuntimeDirectoryIsPreferred) {
  const std::filesystem::path runtime = dir_ / "run-user";
  std::filesystem::create_directories(runtime);
  std::filesystem::permissions(runtime, std::filesystem::perms::owner_all);
  setenv("XDG_RUNTIME_DIR", runtime.c_str(), 1);
  EXPECT_EQ(MachineTimingLock::path(), (runtime / "collage-timing.lock").string());
  // One others may write in is not used.
  std::filesystem::permissions(runtime, std::filesystem::perms::all);
  EXPECT_EQ(MachineTimingLock::path(), (mine() / "collage-timing.lock").string());
}

TEST_F(TimingLockPlace, AFolderPlantedByAnotherIsRefused) {
  // A symlink where the folder should be.
  std::filesystem::create_directories(dir_ / "elsewhere");
  std::filesystem::create_directory_symlink(dir_ / "elsewhere", mine());
  try {
    MachineTimingLock::path();
    ADD_FAILURE() << "a symlinked folder was used";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
  std::filesystem::remove(mine());
  // A folder of another user's (root can make one; others cannot).
  std::filesystem::create_directory(mine());
  std::filesystem::permissions(mine(), std::filesystem::perms::owner_all);
  if (geteuid() != 0) GTEST_SKIP() << "only root can give a folder to another user";
  ASSERT_EQ(chown(mine().c_str(), 12345, 12345), 0);
  try {
    MachineTimingLock::path();
    ADD_FAILURE() << "another user's folder was used";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("uid 12345"), std::string::npos) << e.what();
  }
}

// A worker whose timing lock cannot be opened (another user's, unwritable,
// or, as here, in a folder that is a file: it fails for root too) answers a
// failure whose cause is the lock, not the kernel.
TEST_F(TimingLock, AWorkerThatCannotOpenTheLockSaysSo) {
  const std::filesystem::path file = path_.string() + ".file";
  std::ofstream(file) << "";
  setenv("COLLAGE_TIMING_LOCK", (file / "lock").c_str(), 1);
  GraphBuilder b;
  b.finish(b.op("Relu", {b.input({1, 4})}));
  const Graph& g = b.graph();
  std::istringstream in("{\"backend\": \"native\", \"nodes\": [0]}\n");
  std::ostringstream out;
  runMeasurementWorker(g, [](const std::string&) -> Backend* { return nullptr; }, MeasurerOptions{},
                       in, out);
  const nlohmann::json reply = nlohmann::json::parse(out.str());
  EXPECT_EQ(reply.value("status", ""), "failed");
  EXPECT_EQ(reply.value("cause", ""), "timing_lock") << reply.dump();
  EXPECT_NE(reply.value("message", "").find("timing lock"), std::string::npos) << reply.dump();
  std::filesystem::remove(file);
}

// The measurement that failed so is not kept as the kernel's verdict nor
// found again: the next run measures the kernel again (and keeps what it
// gets then). A failure of the kernel's own is kept, as before.
TEST(FailureCauses, AFailureOfTheMachineIsNotKeptAndIsMeasuredAgainNextRun) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("collage_causes_test_" + std::to_string(getpid()) + ".sqlite"))
                               .string();
  std::filesystem::remove(path);
  GraphBuilder b;
  b.finish(b.op("Sigmoid", {b.op("Relu", {b.input({1, 4})})}));
  const Graph& g = b.graph();
  CandidateSet candidates(g.numNodes());
  candidates.add(Candidate{NodeSet::of(g.numNodes(), {0}), "native", "", {}});
  candidates.add(Candidate{NodeSet::of(g.numNodes(), {1}), "onednn", "", {}});
  const HardwareFingerprint here{"V", "M", "avx2", 2, 2, "native=1"};
  int reluAsked = 0, sigmoidAsked = 0;
  const MeasureFn measure = [&](const Candidate& c) {
    Measurement m;
    if (c.backend == "native") {
      // First the timing lock fails; the next run, the kernel is timed.
      if (++reluAsked == 1) {
        m.status = MeasurementStatus::Failed;
        m.cause = FailureCause::TimingLock;
        m.message = "cannot open the machine's timing lock /tmp/x: Permission denied";
      } else {
        m.status = MeasurementStatus::Ok;
        m.medianNs = 1000;
        m.samples = 7;
      }
    } else {
      ++sigmoidAsked;  // the kernel's own failure
      m.status = MeasurementStatus::Failed;
      m.message = "run threw: bad shape";
    }
    return m;
  };
  {
    MeasurementDb db(path);
    CandidateCoster coster(g, &db, here, [](const std::string&) { return "1"; }, measure);
    CostingReport report;
    const auto first = coster.costAll(candidates, {}, nullptr, nullptr, &report);
    EXPECT_EQ(first[0].status, MeasurementStatus::Failed);
    EXPECT_TRUE(first[0].environmental());
    EXPECT_EQ(report.environmental, 1);
  }
  {
    MeasurementDb db(path);  // the next run
    CandidateCoster coster(g, &db, here, [](const std::string&) { return "1"; }, measure);
    CostingReport report;
    const auto second = coster.costAll(candidates, {}, nullptr, nullptr, &report);
    EXPECT_EQ(reluAsked, 2);     // measured again
    EXPECT_EQ(sigmoidAsked, 1);  // the kernel's failure was kept
    EXPECT_EQ(second[0].status, MeasurementStatus::Ok);
    EXPECT_EQ(second[1].status, MeasurementStatus::Failed);
    EXPECT_TRUE(second[1].fromCache);
    EXPECT_EQ(report.environmental, 0);
  }
  std::filesystem::remove(path);
}

// How a worker ended decides whose failure it is: a kill from outside (the
// out-of-memory killer's SIGKILL, a SIGTERM) is the machine's; a crash is the
// kernel's.
TEST(FailureCauses, AWorkerKilledFromOutsideIsTheMachinesAWorkerCrashTheKernels) {
  IsolatedMeasurer killed({"/bin/sh", "-c", "read line; kill -KILL $$"}, MeasurerOptions{});
  const Measurement k = killed.measure("any", NodeSet::of(1, {0}));
  EXPECT_EQ(k.status, MeasurementStatus::Failed);
  EXPECT_EQ(k.cause, FailureCause::Killed) << k.message;
  IsolatedMeasurer terminated({"/bin/sh", "-c", "read line; kill -TERM $$"}, MeasurerOptions{});
  EXPECT_EQ(terminated.measure("any", NodeSet::of(1, {0})).cause, FailureCause::Killed);
  IsolatedMeasurer crashed({"/bin/sh", "-c", "read line; kill -SEGV $$"}, MeasurerOptions{});
  const Measurement c = crashed.measure("any", NodeSet::of(1, {0}));
  EXPECT_EQ(c.status, MeasurementStatus::Failed);
  EXPECT_EQ(c.cause, FailureCause::None) << c.message;
  // The worker's own word on a cause is kept (its lock, its memory).
  IsolatedMeasurer oom({"/bin/sh", "-c",
                        "read line; echo '{\"status\":\"failed\",\"cause\":\"out_of_memory\","
                        "\"message\":\"run ran out of memory: std::bad_alloc\"}'; read line"},
                       MeasurerOptions{});
  EXPECT_EQ(oom.measure("any", NodeSet::of(1, {0})).cause, FailureCause::OutOfMemory);
}

// A timeout while other processes held the cores is the machine's; one on a
// quiet machine is the kernel's (kept: the kernel hangs).
TEST(FailureCauses, ATimeoutOnABusyMachineIsTheMachinesOnAQuietOneTheKernels) {
  MeasurerOptions options;
  options.timeoutSeconds = 0.3;
  IsolatedMeasurer busy({"/bin/sh", "-c", "read line; exec sleep 60"}, options);
  double others = 0;
  busy.setLoadProbe([&](int) { return others += 1.0; });  // a core's second every look
  const Measurement b = busy.measure("any", NodeSet::of(1, {0}));
  EXPECT_EQ(b.status, MeasurementStatus::TimedOut);
  EXPECT_EQ(b.cause, FailureCause::Busy) << b.message;
  EXPECT_NE(b.message.find("busy"), std::string::npos) << b.message;
  IsolatedMeasurer quiet({"/bin/sh", "-c", "read line; exec sleep 60"}, options);
  quiet.setLoadProbe([](int) { return 5.0; });  // nobody else used a thing
  const Measurement q = quiet.measure("any", NodeSet::of(1, {0}));
  EXPECT_EQ(q.status, MeasurementStatus::TimedOut);
  EXPECT_EQ(q.cause, FailureCause::None) << q.message;
}

// A plan pairing that failed through the machine (here its timing lock) is
// no verdict on the plans: not stored by the graph-level search, and so
// marked where a Slurm task's row carries it back.
TEST(FailureCauses, APairedRunThatFailedThroughTheMachineIsNoVerdict) {
  IsolatedMeasurer m({"/bin/sh", "-c",
                      "read line; echo '{\"status\":\"failed\",\"cause\":\"timing_lock\","
                      "\"message\":\"cannot open the machine timing lock\"}'; read line"},
                     MeasurerOptions{});
  Plan a, b;
  const PairedPlanRuns runs = m.timePlans(a, b, PairedRunOptions{}, 10);
  EXPECT_EQ(runs.status, MeasurementStatus::Failed);
  EXPECT_FALSE(runs.isVerdict()) << runs.message;
  EXPECT_FALSE(pairedPlanRunsFromJson(toJson(runs)).isVerdict());
}

}  // namespace
}  // namespace collage
