// measureOnTarget with stand-ins for Slurm's commands that play the tasks'
// part (each writes its task report, as `collage measure-batch` does): the
// target's fingerprint is learned from the reports, a task that never ran is
// named with its job, a later run submits only what the store lacks for the
// remembered target, and a cancel runs scancel. The e2e twins run the real
// tasks: tests/e2e/slurm_target_standin.sh and slurm_target_cluster.sh.
#include "core/measure/target_measurement.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/ir/error.h"
#include "core/measure/measurement_db.h"
#include "core/patterns/candidate_signature.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using test_support::expectError;

// Every task but those in $SKIP (never ran), $FAIL (failed) and $KILLED
// (started, never finished) reports "done" on a target whose CPU
// is "Target CPU" with native version 9, as a node would.
const char* kTasksScript = R"(#!/bin/sh
for a in "$@"; do
  case $a in
    --chdir=*) d=${a#--chdir=} ;;
    --array=0-*) last=${a#--array=0-} ;;
  esac
done
i=0
while [ $i -le $last ]; do
  case " $KILLED " in *" $i "*)
    printf '{"task":%d,"node":"n%d","state":"running","fingerprint":{"cpu_vendor":"V","cpu_model":"Target CPU","isa_flags":"avx512f","cores":64,"threads":64,"library_versions":"native=9"},"versions":[{"name":"native","version":"9"}],"kernels":2}' $i $i >"$d/task-$i.json" ;;
  *) case " $FAIL " in *" $i "*)
    printf '{"task":%d,"node":"n%d","state":"failed","message":"shared store unreachable"}' $i $i >"$d/task-$i.json" ;;
  *) case " $SKIP " in *" $i "*) ;; *)
    printf '{"task":%d,"node":"n%d","state":"done","fingerprint":{"cpu_vendor":"V","cpu_model":"Target CPU","isa_flags":"avx512f","cores":64,"threads":64,"library_versions":"native=9"},"versions":[{"name":"native","version":"9"}],"kernels":2,"measured":2}' $i $i >"$d/task-$i.json" ;;
  esac ;;
  esac ;;
  esac
  i=$((i + 1))
done
echo "$@" >>"$LOG"
echo "$COLLAGE_TARGET_DB" >"$LOG.env"
echo 99
)";

class TargetMeasurementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("collage_target_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write("sbatch", kTasksScript);
    write("squeue",
          "#!/bin/sh\n[ -e " + (dir_ / "running").string() + " ] && echo '0 RUNNING n0'\nexit 0\n");
    write("scancel", "#!/bin/sh\necho \"$@\" >" + (dir_ / "cancelled").string() + "\n");
    setenv("COLLAGE_SBATCH", (dir_ / "sbatch").c_str(), 1);
    setenv("COLLAGE_SQUEUE", (dir_ / "squeue").c_str(), 1);
    setenv("COLLAGE_SCANCEL", (dir_ / "scancel").c_str(), 1);
    setenv("LOG", (dir_ / "submissions").c_str(), 1);
    setenv("SKIP", "", 1);
    setenv("FAIL", "", 1);
    setenv("KILLED", "", 1);
    std::ofstream(dir_ / "model.onnx") << "not read: only hashed";

    GraphBuilder b;
    const ValueId x = b.input({1, 8});
    const ValueId y = b.op("Relu", {x});
    b.finish(b.op("Sigmoid", {y}));
    graph_ = b.graph();
    candidates_ = CandidateSet(graph_.numNodes());
    for (const auto& nodes : std::vector<std::vector<NodeId>>{{0}, {1}, {0, 1}}) {
      Candidate c;
      c.nodes = NodeSet::of(graph_.numNodes(), nodes);
      c.backend = "native";
      c.origin = "rule:op";
      candidates_.add(c);
    }
    options_.constraint = "bignode";
    options_.workDir = (dir_ / "shared").string();
    options_.collageExecutable = "/opt/collage/bin/collage";
    options_.dbUrl = "postgresql://u:secret@db/collage";
    options_.modelPath = (dir_ / "model.onnx").string();
    options_.backends = {"native"};
    options_.batchSize = 2;
    options_.pollSeconds = 0.05;
  }
  void TearDown() override {
    for (const char* v :
         {"COLLAGE_SBATCH", "COLLAGE_SQUEUE", "COLLAGE_SCANCEL", "LOG", "SKIP", "FAIL", "KILLED"})
      unsetenv(v);
    fs::remove_all(dir_);
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    fs::permissions(dir_ / name, fs::perms::owner_all);
  }
  int submissions() {
    std::ifstream in(dir_ / "submissions");
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }

  fs::path dir_;
  Graph graph_;
  CandidateSet candidates_;
  TargetMeasurementOptions options_;
};

TEST_F(TargetMeasurementTest, LearnsTheTargetFromTheTasksAndNamesOneThatNeverRan) {
  setenv("SKIP", "1", 1);
  MeasurementDb db(":memory:");
  const TargetMeasurementResult r =
      measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, nullptr);
  EXPECT_EQ(r.jobId, "99");
  EXPECT_EQ(r.kernels, 3);
  EXPECT_EQ(r.tasks, 2);
  ASSERT_TRUE(r.fingerprint);
  EXPECT_EQ(r.fingerprint->cpuModel, "Target CPU");
  ASSERT_EQ(r.versions.size(), 1u);
  EXPECT_EQ(r.versions[0].second, "9");
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("Slurm job 99 task 1 ended without starting its batch of 1 kernels"),
            std::string::npos)
      << r.problems[0];
  // Kept for reading: the job file, the script, the reports.
  ASSERT_FALSE(r.runDir.empty());
  EXPECT_TRUE(fs::exists(fs::path(r.runDir) / "job.json"));
  const TargetJob job = [&] {
    std::ifstream in(fs::path(r.runDir) / "job.json");
    std::stringstream s;
    s << in.rdbuf();
    return TargetJob::fromJson(s.str(), "job.json");
  }();
  EXPECT_EQ(job.batches.size(), 2u);
  // The password stays out of the shared folder, and out of the tasks'
  // environment: they read it by libpq's means.
  EXPECT_EQ(job.store.find("secret"), std::string::npos);
  std::ifstream env(dir_ / "submissions.env");
  std::string url;
  std::getline(env, url);
  EXPECT_EQ(url, "postgresql://u@db/collage");
}

TEST_F(TargetMeasurementTest, ARememberedTargetGetsOnlyWhatTheStoreLacks) {
  MeasurementDb db(":memory:");
  const TargetMeasurementResult first =
      measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, nullptr);
  ASSERT_TRUE(first.fingerprint);
  EXPECT_TRUE(first.problems.empty());
  EXPECT_TRUE(first.runDir.empty());  // nothing to read: removed
  // Two of the three kernels now in the store under the target's key.
  for (int c = 0; c < 2; ++c) {
    MeasurementRecord rec;
    rec.fingerprint = *first.fingerprint;
    rec.key = MeasurementKey{"native", "9", candidateSignature(graph_, candidates_[c].nodes).hash};
    rec.measurement.status = MeasurementStatus::Ok;
    rec.measurement.medianNs = 1000;
    rec.measurement.samples = 7;
    db.store(rec);
  }
  const TargetMeasurementResult second =
      measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, nullptr);
  EXPECT_EQ(second.kernels, 1);
  EXPECT_EQ(submissions(), 2);
  // The third too: no job at all, the remembered fingerprint.
  MeasurementRecord rec;
  rec.fingerprint = *first.fingerprint;
  rec.key = MeasurementKey{"native", "9", candidateSignature(graph_, candidates_[2].nodes).hash};
  rec.measurement.status = MeasurementStatus::Ok;
  rec.measurement.medianNs = 1500;
  rec.measurement.samples = 7;
  db.store(rec);
  const TargetMeasurementResult third =
      measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, nullptr);
  EXPECT_TRUE(third.jobId.empty());
  EXPECT_EQ(submissions(), 2);
  ASSERT_TRUE(third.fingerprint);
  EXPECT_EQ(third.fingerprint->cpuModel, "Target CPU");
}

// After an upgrade (a backend's version changed here, and so on the nodes
// that run the same collage), the target remembered for the old versions is
// not used: its measurements are the old versions', and a job measures the
// kernels again; the tasks report the new versions' fingerprint.
TEST_F(TargetMeasurementTest, AnUpgradedBackendIsMeasuredAgainNotReadFromTheOldVersion) {
  options_.versions = {{"native", "9"}};
  MeasurementDb db(":memory:");
  const TargetMeasurementResult first =
      measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, nullptr);
  ASSERT_TRUE(first.fingerprint);
  for (size_t c = 0; c < candidates_.size(); ++c) {
    MeasurementRecord rec;
    rec.fingerprint = *first.fingerprint;
    rec.key = MeasurementKey{"native", "9", candidateSignature(graph_, candidates_[c].nodes).hash};
    rec.measurement.status = MeasurementStatus::Ok;
    rec.measurement.medianNs = 1000;
    rec.measurement.samples = 7;
    db.store(rec);
  }
  // The same versions: everything is known, no job.
  EXPECT_TRUE(measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, nullptr).jobId.empty());
  EXPECT_EQ(submissions(), 1);
  options_.versions = {{"native", "10"}};  // upgraded
  const TargetMeasurementResult upgraded =
      measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, nullptr);
  EXPECT_EQ(upgraded.jobId, "99");
  EXPECT_EQ(upgraded.kernels, 3);
  EXPECT_EQ(submissions(), 2);
}

TEST_F(TargetMeasurementTest, ATaskThatFailedIsNamedWithItsNodeAndReason) {
  setenv("FAIL", "0", 1);
  MeasurementDb db(":memory:");
  const TargetMeasurementResult r =
      measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, nullptr);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].find("Slurm job 99 task 0 on node n0 failed: shared store unreachable"),
            std::string::npos)
      << r.problems[0];
  // Task 1 still told what the target is.
  ASSERT_TRUE(r.fingerprint);
  EXPECT_EQ(r.fingerprint->cpuModel, "Target CPU");
}

TEST_F(TargetMeasurementTest, ATaskKilledMidBatchIsNamedAndItsFingerprintStillCounts) {
  setenv("KILLED", "0 1", 1);
  MeasurementDb db(":memory:");
  const TargetMeasurementResult r = measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, nullptr);
  ASSERT_EQ(r.problems.size(), 2u);
  EXPECT_NE(r.problems[0].find("Slurm job 99 task 0 on node n0 stopped mid-batch"), std::string::npos)
      << r.problems[0];
  EXPECT_NE(r.problems[0].find("what it stored is kept"), std::string::npos) << r.problems[0];
  // What they stored is under this fingerprint: the plan can use it.
  ASSERT_TRUE(r.fingerprint);
  EXPECT_EQ(r.fingerprint->cpuModel, "Target CPU");
}

TEST_F(TargetMeasurementTest, CancelRunsScancel) {
  std::ofstream(dir_ / "running") << "";
  MeasurementDb db(":memory:");
  CancellationToken cancel;
  cancel.cancel();
  const TargetMeasurementResult r =
      measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, &cancel);
  EXPECT_TRUE(r.cancelled);
  std::ifstream in(dir_ / "cancelled");
  std::string id;
  in >> id;
  EXPECT_EQ(id, "99");
}

// A job that never ends (a task hung on its node) or never starts (the
// constraint's nodes drained: its tasks pending for ever) used to keep
// `optimize` waiting until Ctrl-C. At the deadline it is cancelled and the
// error says why, and what squeue last said.
TEST_F(TargetMeasurementTest, AHungJobIsCancelledAtTheDeadline) {
  std::ofstream(dir_ / "running") << "";
  options_.deadlineSeconds = 0.3;
  MeasurementDb db(":memory:");
  expectError([&] { measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, nullptr); },
              {"Slurm job 99", "--target-timeout", "cancelled (scancel)", "1 running"});
  std::ifstream in(dir_ / "cancelled");
  std::string id;
  in >> id;
  EXPECT_EQ(id, "99");
}

TEST_F(TargetMeasurementTest, ADrainedConstraintIsCancelledAtTheDeadline) {
  write("squeue", "#!/bin/sh\necho '[0-1] PENDING'\n");
  options_.deadlineSeconds = 0.3;
  MeasurementDb db(":memory:");
  expectError([&] { measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, nullptr); },
              {"no task had started", "drained", "2 pending"});
  EXPECT_TRUE(fs::exists(dir_ / "cancelled"));
}

// squeue failing (the controller gone) ends the wait with its error, and the
// job is cancelled rather than left to run on unobserved.
TEST_F(TargetMeasurementTest, ASqueueThatFailsCancelsTheJob) {
  write("squeue", "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller'\nexit 1\n");
  MeasurementDb db(":memory:");
  expectError([&] { measureOnTarget(graph_, candidates_, {}, db, options_, nullptr, nullptr); },
              {"Unable to contact slurm controller", "was cancelled (scancel)"});
  EXPECT_TRUE(fs::exists(dir_ / "cancelled"));
}

TEST(TargetTaskReport, RoundTripsThroughItsFile) {
  const std::string dir =
      (fs::temp_directory_path() / ("collage_report_" + std::to_string(getpid()))).string();
  fs::create_directories(dir);
  TargetTaskReport r;
  r.task = 3;
  r.node = "gpu17";
  r.state = "failed";
  r.message = "no such backend";
  r.fingerprint = HardwareFingerprint{"V", "M", "avx2", 8, 8, "native=1"};
  r.versions = {{"native", "1"}};
  r.kernels = 16;
  r.write(dir);
  const std::optional<TargetTaskReport> back = TargetTaskReport::read(dir, 3);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->node, "gpu17");
  EXPECT_EQ(back->state, "failed");
  EXPECT_EQ(back->message, "no such backend");
  EXPECT_EQ(back->fingerprint, r.fingerprint);
  EXPECT_EQ(back->versions, r.versions);
  EXPECT_FALSE(TargetTaskReport::read(dir, 4));
  EXPECT_THROW(TargetJob::fromJson("{\"batches\": 3}", "job.json"), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace collage
