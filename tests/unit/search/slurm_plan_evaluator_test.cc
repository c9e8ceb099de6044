// The fanned-out graph-level search's Slurm side (core/search/slurm_plan_evaluator.h)
// with stand-ins for sbatch, squeue and scancel whose tasks never finish, and
// a scratch PostgreSQL: a generation's folder (the job file, the plans, the
// script) and its submission; a deadline that passes with the plans still out
// (nothing returned: the search keeps their estimates); a row that arrives
// later collected by the next call; the jobs still out cancelled at the end.
// The tasks themselves run in tests/e2e/slurm_graph_level_standin.sh.
#include "core/search/slurm_plan_evaluator.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/ir/error.h"
#include "core/measure/shared_store.h"
#include "tests/unit/scratch_postgres.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

const HardwareFingerprint kTarget{"V", "Target CPU", "avx512f", 64, 64, "native=9"};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PlanPairJob, RoundTripsAndRefusesOtherFiles) {
  PlanPairJob job;
  job.modelPath = "/models/m.onnx";
  job.inputShapes = {"x=1x3x8x8"};
  job.backends = {"native", "onednn"};
  job.modelKey = "sha256:abc;x=1x3x8x8";
  job.timeoutSeconds = 30;
  job.runs.minRounds = 3;
  job.runs.maxRounds = 7;
  job.incumbentKey = "inc";
  job.incumbentFile = "incumbent.json";
  job.plans = {{"p0", "0110", "plan-0.json"}, {"p1", "2200", "plan-1.json"}};
  const PlanPairJob back = PlanPairJob::fromJson(job.toJson(), "job.json");
  EXPECT_EQ(back.modelPath, job.modelPath);
  EXPECT_EQ(back.inputShapes, job.inputShapes);
  EXPECT_EQ(back.backends, job.backends);
  EXPECT_EQ(back.modelKey, job.modelKey);
  EXPECT_EQ(back.runs.minRounds, 3);
  EXPECT_EQ(back.runs.maxRounds, 7);
  EXPECT_EQ(back.incumbentKey, "inc");
  ASSERT_EQ(back.plans.size(), 2u);
  EXPECT_EQ(back.plans[1].key, "p1");
  EXPECT_EQ(back.plans[1].genome, "2200");
  EXPECT_EQ(back.plans[1].file, "plan-1.json");
  EXPECT_THROW(PlanPairJob::fromJson("{\"kind\":\"collage-target-job\"}", "job.json"), Error);
  EXPECT_THROW(PlanPairJob::fromJson("not json", "job.json"), Error);
}

class SlurmPlanEvaluatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pg_ = new test_support::ScratchPostgres(); }
  static void TearDownTestSuite() {
    delete pg_;
    pg_ = nullptr;
  }
  void SetUp() override {
    if (!pg_->ok()) GTEST_SKIP() << "PostgreSQL not available: " << pg_->why();
    dir_ = fs::temp_directory_path() / ("collage_plan_eval_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // sbatch: logs its arguments, its tasks "run" (and never finish) until
    // the file `running` goes.
    write("sbatch", "#!/bin/sh\necho \"$@\" >>" + (dir_ / "submissions").string() + "\ntouch " +
                        (dir_ / "running").string() + "\necho 4242\n");
    write("squeue",
          "#!/bin/sh\n[ -e " + (dir_ / "running").string() + " ] && echo '0 RUNNING n0'\nexit 0\n");
    write("scancel", "#!/bin/sh\necho \"$@\" >>" + (dir_ / "cancelled").string() + "\n");
    setenv("COLLAGE_SBATCH", (dir_ / "sbatch").c_str(), 1);
    setenv("COLLAGE_SQUEUE", (dir_ / "squeue").c_str(), 1);
    setenv("COLLAGE_SCANCEL", (dir_ / "scancel").c_str(), 1);
    options_.constraint = "bignode";
    options_.workDir = (dir_ / "shared").string();
    options_.collageExecutable = "/opt/collage/bin/collage";
    options_.dbUrl = pg_->url();
    options_.modelPath = (dir_ / "model.onnx").string();
    options_.backends = {"native"};
    options_.modelKey = "sha256:abc";
    options_.targetFingerprintId = kTarget.id();
    options_.generationSeconds = 0.3;
    options_.pollSeconds = 0.05;
  }
  void TearDown() override {
    for (const char* v : {"COLLAGE_SBATCH", "COLLAGE_SQUEUE", "COLLAGE_SCANCEL"}) unsetenv(v);
    fs::remove_all(dir_);
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    fs::permissions(dir_ / name, fs::perms::owner_all);
  }

  static test_support::ScratchPostgres* pg_;
  fs::path dir_;
  SlurmPlanEvaluatorOptions options_;
};
test_support::ScratchPostgres* SlurmPlanEvaluatorTest::pg_ = nullptr;

TEST_F(SlurmPlanEvaluatorTest, PlansStillOutAtTheDeadlineAreCollectedByALaterCall) {
  Plan incumbent, a, b;
  incumbent.modelPath = a.modelPath = b.modelPath = options_.modelPath;
  {
    SlurmPlanEvaluator evaluator(options_, nullptr);
    const std::vector<PlanToTime> plans{{"plan-a", &a, "01"}, {"plan-b", &b, "10"}};
    const std::vector<TimedPlan> first = evaluator.timeGeneration(plans, "inc", incumbent, nullptr);
    EXPECT_TRUE(
        first.empty());  // the deadline passed with both still out: they keep their estimate

    // The submission: one array, a task per plan, on the constraint's nodes, exclusive.
    const std::string submitted = slurp(dir_ / "submissions");
    EXPECT_NE(submitted.find("--array=0-1"), std::string::npos) << submitted;
    EXPECT_NE(submitted.find("--constraint=bignode"), std::string::npos) << submitted;
    EXPECT_NE(submitted.find("--exclusive"), std::string::npos) << submitted;
    // The generation's folder: the job file, each plan, the incumbent, the script.
    std::vector<fs::path> folders;
    for (const auto& e : fs::directory_iterator(options_.workDir)) folders.push_back(e.path());
    ASSERT_EQ(folders.size(), 1u);
    const fs::path run = folders.front();
    const PlanPairJob job = PlanPairJob::fromJson(slurp(run / "job.json"), "job.json");
    EXPECT_EQ(job.incumbentKey, "inc");
    EXPECT_EQ(job.modelKey, "sha256:abc");
    ASSERT_EQ(job.plans.size(), 2u);
    EXPECT_EQ(job.plans[0].key, "plan-a");
    EXPECT_EQ(job.plans[1].genome, "10");
    EXPECT_TRUE(fs::exists(run / job.plans[0].file));
    EXPECT_TRUE(fs::exists(run / job.plans[1].file));
    EXPECT_TRUE(fs::exists(run / job.incumbentFile));
    const std::string script = slurp(run / "job.sh");
    EXPECT_NE(script.find("'/opt/collage/bin/collage' measure-plan-pair"), std::string::npos)
        << script;
    EXPECT_NE(script.find("--task \"$SLURM_ARRAY_TASK_ID\""), std::string::npos) << script;

    // Plan a's task finishes late: its row is collected by the next call.
    PairedPlanRuns runs;
    runs.status = MeasurementStatus::Ok;
    runs.aMs = {1, 1, 1};
    runs.bMs = {2, 2, 2};
    SharedMeasurementStore node(pg_->url(), "n0");
    SharedMeasurementStore::PlanRunRow row;
    row.modelKey = "sha256:abc";
    row.planKey = "plan-a";
    row.incumbentKey = "inc";
    row.status = "ok";
    row.medianRatio = 0.5;
    row.runsJson = toJson(runs).dump();
    ASSERT_TRUE(node.appendPlanRun(kTarget, row));
    const std::vector<TimedPlan> later = evaluator.timeGeneration({}, "inc", incumbent, nullptr);
    ASSERT_EQ(later.size(), 1u);
    EXPECT_EQ(later[0].planKey, "plan-a");
    EXPECT_EQ(later[0].incumbentKey, "inc");
    EXPECT_TRUE(later[0].runs.ok());
    EXPECT_DOUBLE_EQ(later[0].runs.medianRatio(), 0.5);
    // Collected once: not returned again.
    EXPECT_TRUE(evaluator.timeGeneration({}, "inc", incumbent, nullptr).empty());
    EXPECT_EQ(evaluator.jobsSubmitted(), 1);
  }
  // Plan b was still out when the search ended: its job is cancelled.
  EXPECT_NE(slurp(dir_ / "cancelled").find("4242"), std::string::npos);
}

// The final check: one task, the best against the starting plan with the
// final check's rounds, read under its own incumbent key ("recheck:" and the
// start's placement), so an earlier, shorter pairing of the same two plans is
// not taken for it; nothing back by its deadline keeps the starting plan.
TEST_F(SlurmPlanEvaluatorTest, TheBestIsRecheckedAsAOneTaskJob) {
  options_.recheckSeconds = 0.3;
  Plan start, best;
  start.modelPath = best.modelPath = options_.modelPath;
  start.groups.resize(1);
  start.groups[0].backend = "native";
  SlurmPlanEvaluator evaluator(options_, nullptr);
  PairedRunOptions finalRuns{9, 31, 4.0, false};
  const PairedPlanRuns none = evaluator.recheck(best, start, finalRuns, nullptr);
  EXPECT_FALSE(none.ok());
  EXPECT_NE(none.message.find("did not come back"), std::string::npos) << none.message;
  // Nothing reads the re-check after its deadline: its job is cancelled
  // there and then, not left to run.
  EXPECT_NE(slurp(dir_ / "cancelled").find("4242"), std::string::npos);
  const std::string submitted = slurp(dir_ / "submissions");
  EXPECT_NE(submitted.find("--array=0-0"), std::string::npos) << submitted;
  std::vector<fs::path> folders;
  for (const auto& e : fs::directory_iterator(options_.workDir)) folders.push_back(e.path());
  ASSERT_EQ(folders.size(), 1u);
  const PlanPairJob job = PlanPairJob::fromJson(slurp(folders.front() / "job.json"), "job.json");
  EXPECT_EQ(job.incumbentKey, "recheck:" + placementKey(start));
  EXPECT_EQ(job.runs.minRounds, 9);
  EXPECT_EQ(job.runs.maxRounds, 31);
  ASSERT_EQ(job.plans.size(), 1u);
  EXPECT_EQ(job.plans[0].key, placementKey(best));

  // A row under the pair's ordinary key is not the re-check; one under the
  // re-check's key is.
  PairedPlanRuns runs;
  runs.status = MeasurementStatus::Ok;
  runs.aMs = {1, 1, 1, 1};
  runs.bMs = {2, 2, 2, 2};
  SharedMeasurementStore node(pg_->url(), "n0");
  SharedMeasurementStore::PlanRunRow row;
  row.modelKey = options_.modelKey;
  row.planKey = placementKey(best);
  row.incumbentKey = placementKey(start);
  row.status = "ok";
  row.runsJson = toJson(runs).dump();
  ASSERT_TRUE(node.appendPlanRun(kTarget, row));
  EXPECT_FALSE(evaluator.recheck(best, start, finalRuns, nullptr).ok());
  row.incumbentKey = job.incumbentKey;
  ASSERT_TRUE(node.appendPlanRun(kTarget, row));
  const PairedPlanRuns back = evaluator.recheck(best, start, finalRuns, nullptr);
  ASSERT_TRUE(back.ok()) << back.message;
  EXPECT_EQ(back.aMs.size(), 4u);
  EXPECT_DOUBLE_EQ(back.medianRatio(), 0.5);
}

// squeue failing while a generation waits ends the search with its error,
// and the generation's job is cancelled, not left to run on unobserved.
TEST_F(SlurmPlanEvaluatorTest, ASqueueThatFailsCancelsTheGenerationsJob) {
  write("squeue", "#!/bin/sh\necho 'slurm_load_jobs error: Socket timed out'\nexit 1\n");
  Plan incumbent, a;
  incumbent.modelPath = a.modelPath = options_.modelPath;
  SlurmPlanEvaluator evaluator(options_, nullptr);
  try {
    evaluator.timeGeneration({{"plan-a", &a, "01"}}, "inc", incumbent, nullptr);
    ADD_FAILURE() << "the generation ended without an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Socket timed out"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cancelled (scancel)"), std::string::npos) << e.what();
  }
  EXPECT_NE(slurp(dir_ / "cancelled").find("4242"), std::string::npos);
}

}  // namespace
}  // namespace collage
