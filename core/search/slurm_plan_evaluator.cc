#include "core/search/slurm_plan_evaluator.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/ir/error.h"
#include "core/measure/connection_string.h"
#include "core/measure/shared_store.h"
#include "core/measure/slurm_jobs.h"
#include "core/measure/target_measurement.h"

namespace collage {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

}  // namespace

std::string PlanPairJob::toJson() const {
  json plansJ = json::array();
  for (const Entry& e : plans)
    plansJ.push_back({{"key", e.key}, {"genome", e.genome}, {"file", e.file}});
  json j = {{"kind", "collage-plan-pairs"},
            {"model", modelPath},
            {"input_shapes", inputShapes},
            {"backends", backends},
            {"model_key", modelKey},
            {"timeout_seconds", timeoutSeconds},
            {"runs",
             {{"min_rounds", runs.minRounds},
              {"max_rounds", runs.maxRounds},
              {"seconds", runs.seconds},
              {"verify", runs.verify}}},
            {"incumbent_key", incumbentKey},
            {"run_id", runId},
            {"incumbent_file", incumbentFile},
            {"plans", plansJ}};
  return j.dump(1);
}

PlanPairJob PlanPairJob::fromJson(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw Error(path + ": not a collage plan-pair job file (" + e.what() + ")");
  }
  if (j.value("kind", "") != "collage-plan-pairs")
    throw Error(path + ": not a collage plan-pair job file");
  PlanPairJob job;
  try {
    job.modelPath = j.at("model");
    job.inputShapes = j.value("input_shapes", std::vector<std::string>{});
    job.backends = j.value("backends", std::vector<std::string>{});
    job.modelKey = j.at("model_key");
    job.timeoutSeconds = j.value("timeout_seconds", 120.0);
    const json& r = j.at("runs");
    job.runs.minRounds = r.value("min_rounds", 5);
    job.runs.maxRounds = r.value("max_rounds", 15);
    job.runs.seconds = r.value("seconds", 1.0);
    job.runs.verify = r.value("verify", true);
    job.incumbentKey = j.at("incumbent_key");
    job.runId = j.value("run_id", "");
    job.incumbentFile = j.at("incumbent_file");
    for (const json& e : j.at("plans"))
      job.plans.push_back({e.at("key"), e.value("genome", ""), e.at("file")});
  } catch (const json::exception& e) {
    throw Error(path + ": a plan-pair job file with a missing or wrong field (" + e.what() + ")");
  }
  return job;
}

SlurmPlanEvaluator::SlurmPlanEvaluator(SlurmPlanEvaluatorOptions options, SearchObserver* observer)
    : options_(std::move(options)),
      observer_(observer),
      store_(std::make_unique<SharedMeasurementStore>(options_.dbUrl)) {}

SlurmPlanEvaluator::~SlurmPlanEvaluator() {
  // Jobs still out when the search is over (its plans not back by their
  // generation's deadline) are nobody's business any more: cancelled, even
  // when squeue cannot say whether they are still in the queue.
  const SlurmJobs slurm;
  for (const std::string& id : jobs_) {
    if (finished_.count(id)) continue;
    try {
      if (!slurm.poll(id).inQueue) continue;
    } catch (const std::exception&) {
    }
    try {
      slurm.cancel(id);
    } catch (const std::exception&) {
    }
  }
}

std::optional<TimedPlan> SlurmPlanEvaluator::lookup(const std::string& planKey,
                                                    const std::string& incumbentKey,
                                                    const std::string& runId) const {
  const auto row = store_->findPlanRun(options_.targetFingerprintId, options_.modelKey, planKey,
                                       incumbentKey, runId);
  if (!row) return std::nullopt;
  TimedPlan t;
  t.planKey = planKey;
  t.incumbentKey = incumbentKey;
  try {
    t.runs = pairedPlanRunsFromJson(json::parse(row->runsJson));
  } catch (const std::exception& e) {
    t.runs.status = MeasurementStatus::Failed;
    t.runs.message = "unreadable plan run from " + row->machine + ": " + e.what();
  }
  return t;
}

std::string SlurmPlanEvaluator::submitAndWait(const std::vector<PlanToTime>& plans,
                                              const std::string& incumbentKey,
                                              const Plan& incumbent, const PairedRunOptions& runs,
                                              double deadline, bool keepAtDeadline,
                                              const CancellationToken* cancel) {
  std::error_code ec;
  fs::create_directories(options_.workDir, ec);
  const std::string pattern = (fs::path(options_.workDir) / "plans-XXXXXX").string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back(0);
  if (!mkdtemp(name.data()))
    throw Error("cannot create a run folder in the Slurm work dir " + options_.workDir);
  const std::string dir = fs::absolute(name.data()).string();

  PlanPairJob job;
  // This submission's own rows: the folder's unique name and the time, so
  // that a pair timed again (a re-timing, a re-check) is read from this
  // run's rows, not from an earlier run's.
  job.runId = fs::path(dir).filename().string() + "-" +
              std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count());
  job.modelPath = fs::absolute(options_.modelPath).string();
  job.inputShapes = options_.inputShapes;
  job.backends = options_.backends;
  job.modelKey = options_.modelKey;
  job.timeoutSeconds = options_.timeoutSeconds;
  job.runs = runs;
  job.incumbentKey = incumbentKey;
  job.incumbentFile = "incumbent.json";
  savePlan(incumbent, dir + "/incumbent.json");
  for (size_t i = 0; i < plans.size(); ++i) {
    const std::string file = "plan-" + std::to_string(i) + ".json";
    savePlan(*plans[i].plan, dir + "/" + file);
    job.plans.push_back({plans[i].key, plans[i].genome, file});
  }
  const std::string jobFile = dir + "/job.json";
  writeFileAtomically(jobFile, job.toJson());
  const std::string script = dir + "/job.sh";
  writeFileAtomically(script, "#!/bin/sh\n# collage optimize --target " + options_.constraint +
                        ": one plan per array task, timed paired with the incumbent on its node.\n"
                        "exec " +
                        shellQuoted(options_.collageExecutable) + " measure-plan-pair " +
                        shellQuoted(jobFile) + " --task \"$SLURM_ARRAY_TASK_ID\"\n");
  fs::permissions(script, fs::perms::owner_all, fs::perm_options::add, ec);

  const SlurmJobs slurm;
  SlurmArrayRequest request;
  request.script = script;
  request.tasks = static_cast<int>(plans.size());
  request.constraint = options_.constraint;
  request.jobName = "collage-plans";
  request.output = dir + "/task-%a.log";
  request.workDir = dir;
  // Without the password: the tasks read it by libpq's means.
  request.environment = {{kTargetDbVariable, ConnectionString(options_.dbUrl).withoutPassword()}};
  const std::string id = slurm.submitArray(request);
  jobs_.push_back(id);
  if (observer_)
    observer_->onLog("graph-level: " + std::to_string(plans.size()) + " plans to Slurm job " + id +
                     " (--constraint=" + options_.constraint + "; files in " + dir + ")");

  // Squeue failing, an exception or Ctrl-C cancel the job (SlurmJobs::wait);
  // the generation's deadline leaves it running when `keepAtDeadline` (a
  // later generation reads its rows; the destructor cancels it at the end).
  SlurmWaitOptions wait;
  wait.pollSeconds = options_.pollSeconds;
  wait.deadlineSeconds = deadline;
  wait.cancelAtDeadline = !keepAtDeadline;
  const SlurmWaitResult waited = slurm.wait(id, wait, cancel);
  if (waited.end != SlurmWaitEnd::Deadline || !keepAtDeadline) finished_.insert(id);
  if (!waited.cancelProblem.empty() && observer_) observer_->onLog("warning: " + waited.cancelProblem);
  return job.runId;
}

std::vector<TimedPlan> SlurmPlanEvaluator::timeGeneration(const std::vector<PlanToTime>& plans,
                                                          const std::string& incumbentKey,
                                                          const Plan& incumbent,
                                                          const CancellationToken* cancel) {
  std::vector<TimedPlan> back;
  if (!plans.empty()) {
    const std::string runId = submitAndWait(plans, incumbentKey, incumbent, options_.runs,
                                            options_.generationSeconds, /*keepAtDeadline=*/true, cancel);
    for (const PlanToTime& p : plans) outstanding_.push_back({p.key, incumbentKey, runId});
  }
  // This generation's answers, and earlier ones that arrived since.
  std::vector<Outstanding> still;
  for (const Outstanding& o : outstanding_)
    if (auto t = lookup(o.plan, o.incumbent, o.runId))
      back.push_back(std::move(*t));
    else
      still.push_back(o);
  outstanding_ = std::move(still);
  if (observer_ && !outstanding_.empty())
    observer_->onLog("graph-level: " + std::to_string(outstanding_.size()) +
                     " plans still out at the generation's deadline (they keep their estimate)");
  return back;
}

PairedPlanRuns SlurmPlanEvaluator::recheck(const Plan& best, const Plan& start,
                                           const PairedRunOptions& runs,
                                           const CancellationToken* cancel) {
  // Its own incumbent key: the pair may have been timed already, with fewer rounds.
  const std::string startKey = "recheck:" + placementKey(start);
  const std::string bestKey = placementKey(best);
  PlanToTime p{bestKey, &best, ""};
  // Nothing reads the re-check after its deadline: its job is cancelled then.
  const std::string runId =
      submitAndWait({p}, startKey, start, runs, options_.recheckSeconds, /*keepAtDeadline=*/false, cancel);
  if (auto t = lookup(bestKey, startKey, runId)) return t->runs;
  PairedPlanRuns none;
  none.status = MeasurementStatus::TimedOut;
  none.message =
      "the re-check on one node of --constraint=" + options_.constraint + " did not come back";
  return none;
}

}  // namespace collage
