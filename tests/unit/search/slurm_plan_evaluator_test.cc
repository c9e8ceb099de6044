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

#include <chrono>
#include <filesystem>
#include <future>
#include <set>
#include <thread>
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
  job.runId = "plans-abc-17";
  job.plans = {{"p0", "0110", "plan-0.json"}, {"p1", "2200", "plan-1.json"}};
  const PlanPairJob back = PlanPairJob::fromJson(job.toJson(), "job.json");
  EXPECT_EQ(back.modelPath, job.modelPath);
  EXPECT_EQ(back.inputShapes, job.inputShapes);
  EXPECT_EQ(back.backends, job.backends);
  EXPECT_EQ(back.modelKey, job.modelKey);
  EXPECT_EQ(back.runs.minRounds, 3);
  EXPECT_EQ(back.runs.maxRounds, 7);
  EXPECT_EQ(back.incumbentKey, "inc");
  EXPECT_EQ(back.runId, "plans-abc-17");
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

  // Runs evaluator.recheck on a thread and plays its task: once the job's
  // folder appears, appends `runs` under the job's run id, and the job
  // leaves the queue.
  PairedPlanRuns recheckWithTheTask(SlurmPlanEvaluator& evaluator, const Plan& best, const Plan& start,
                                    const PairedRunOptions& finalRuns, const PairedPlanRuns& runs) {
    write("squeue", "#!/bin/sh\n[ -e " + (dir_ / "done").string() + " ] && exit 0\n[ -e " +
                        (dir_ / "running").string() + " ] && echo '0 RUNNING n0'\nexit 0\n");
    std::set<fs::path> before;
    for (const auto& e : fs::directory_iterator(options_.workDir)) before.insert(e.path());
    auto waiting =
        std::async(std::launch::async, [&] { return evaluator.recheck(best, start, finalRuns, nullptr); });
    fs::path folder;
    for (int i = 0; i < 2000 && folder.empty(); ++i) {
      for (const auto& e : fs::directory_iterator(options_.workDir))
        if (!before.count(e.path()) && fs::exists(e.path() / "job.json")) folder = e.path();
      if (folder.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_FALSE(folder.empty());
    if (!folder.empty()) {
      const PlanPairJob job = PlanPairJob::fromJson(slurp(folder / "job.json"), "job.json");
      SharedMeasurementStore node(pg_->url(), "n0");
      SharedMeasurementStore::PlanRunRow row;
      row.modelKey = options_.modelKey;
      row.planKey = job.plans.at(0).key;
      row.incumbentKey = job.incumbentKey;
      row.status = "ok";
      row.runsJson = toJson(runs).dump();
      row.runId = job.runId;
      EXPECT_TRUE(node.appendPlanRun(kTarget, row));
    }
    std::ofstream(dir_ / "done") << "";  // the task is done: the job leaves the queue
    const PairedPlanRuns back = waiting.get();
    fs::remove(dir_ / "done");
    return back;
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
    row.runId = job.runId;  // the task's row carries its submission's run id
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

  // Rows of the pair under the ordinary key, or of an earlier re-check, are
  // not this re-check's; its own row (its run id) is, once its task appends it.
  PairedPlanRuns earlier, runs;
  earlier.status = runs.status = MeasurementStatus::Ok;
  earlier.aMs = {3, 3, 3, 3};
  earlier.bMs = {2, 2, 2, 2};
  runs.aMs = {1, 1, 1, 1};
  runs.bMs = {2, 2, 2, 2};
  SharedMeasurementStore node(pg_->url(), "n0");
  SharedMeasurementStore::PlanRunRow row;
  row.modelKey = options_.modelKey;
  row.planKey = placementKey(best);
  row.incumbentKey = placementKey(start);
  row.status = "ok";
  row.runsJson = toJson(earlier).dump();
  ASSERT_TRUE(node.appendPlanRun(kTarget, row));
  row.incumbentKey = job.incumbentKey;
  row.runId = job.runId;  // the first re-check's, arrived too late
  ASSERT_TRUE(node.appendPlanRun(kTarget, row));
  options_.recheckSeconds = 30;
  SlurmPlanEvaluator patient(options_, nullptr);
  const PairedPlanRuns back = recheckWithTheTask(patient, best, start, finalRuns, runs);
  ASSERT_TRUE(back.ok()) << back.message;
  EXPECT_EQ(back.aMs.size(), 4u);
  EXPECT_DOUBLE_EQ(back.medianRatio(), 0.5);
}

// A pair timed again (the same plan against the same incumbent, on the same
// node) is a run of its own: the re-timing reads its own fresh row, not the
// earlier run's (which the store's unique key kept as the only one).
TEST_F(SlurmPlanEvaluatorTest, ARetimingReadsItsOwnFreshRow) {
  Plan incumbent, a;
  incumbent.modelPath = a.modelPath = options_.modelPath;
  PairedPlanRuns earlier;
  earlier.status = MeasurementStatus::Ok;
  earlier.aMs = {1, 1, 1};
  earlier.bMs = {2, 2, 2};
  SharedMeasurementStore node(pg_->url(), "n0");
  SharedMeasurementStore::PlanRunRow row;
  row.modelKey = options_.modelKey;
  row.planKey = "plan-a";
  row.incumbentKey = "inc";
  row.status = "ok";
  row.runsJson = toJson(earlier).dump();
  row.runId = "an-earlier-run";
  ASSERT_TRUE(node.appendPlanRun(kTarget, row));

  SlurmPlanEvaluator evaluator(options_, nullptr);
  EXPECT_TRUE(evaluator.timeGeneration({{"plan-a", &a, "01"}}, "inc", incumbent, nullptr).empty());
  std::vector<fs::path> folders;
  for (const auto& e : fs::directory_iterator(options_.workDir)) folders.push_back(e.path());
  ASSERT_EQ(folders.size(), 1u);
  const PlanPairJob job = PlanPairJob::fromJson(slurp(folders.front() / "job.json"), "job.json");
  EXPECT_FALSE(job.runId.empty());
  EXPECT_NE(job.runId, row.runId);
  PairedPlanRuns fresh;
  fresh.status = MeasurementStatus::Ok;
  fresh.aMs = {4, 4, 4};
  fresh.bMs = {5, 5, 5};
  row.runsJson = toJson(fresh).dump();
  row.runId = job.runId;
  ASSERT_TRUE(node.appendPlanRun(kTarget, row));  // the same node and pair: appended all the same
  const std::vector<TimedPlan> later = evaluator.timeGeneration({}, "inc", incumbent, nullptr);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_DOUBLE_EQ(later[0].runs.medianRatio(), 0.8);
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
