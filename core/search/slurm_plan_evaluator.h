// The graph-level search fanned out over the nodes of a Slurm constraint
// (`collage optimize --target C --target-graph-level`): a PlanEvaluator
// (core/search/graph_level_search.h) that sends each generation's new plans
// out as one job array.
//
//   generation ── gen-XXXXXX/ in the shared work dir: incumbent.json,
//      │            plan-<i>.json, job.json, job.sh
//      │  sbatch --array=0-(N-1) --constraint=C --exclusive job.sh
//      ▼
//   task i:  collage measure-plan-pair job.json --task i
//      └─ plan i paired with the incumbent, round by round in one worker
//         (the ratio cancels the node's speed), appended to the shared
//         store's collage_plan_runs under the node's fingerprint and the
//         submission's run id (job.json), by which the search reads it back
//   search ── polls squeue until the job has left the queue or the
//             generation's deadline; reads the rows that came back. A plan
//             not back keeps its estimate; its row is read by a later
//             generation if it arrives (its job is left to run).
//
// The final best is checked once more against the starting plan as a
// one-task job (with the final check's rounds) before it is accepted.
// Slurm places and retries; PostgreSQL stores; nothing here schedules.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/measure/paired_plan_runs.h"
#include "core/search/graph_level_search.h"

namespace collage {

class SharedMeasurementStore;

// job.json of a generation: what each task needs to time its plan.
struct PlanPairJob {
  std::string modelPath;  // absolute
  std::vector<std::string> inputShapes;
  std::vector<std::string> backends;
  std::string modelKey;  // graphLevelModelKey: the rows' model
  double timeoutSeconds = 120;
  PairedRunOptions runs;
  std::string incumbentKey;   // the rows' incumbent
  std::string incumbentFile;  // beside job.json
  // This submission's id, written into each row its tasks append
  // (SharedMeasurementStore::PlanRunRow::runId) and the rows read back by.
  std::string runId;
  struct Entry {
    std::string key, genome, file;
  };
  std::vector<Entry> plans;  // one per task

  std::string toJson() const;
  static PlanPairJob fromJson(const std::string& text, const std::string& path);
};

struct SlurmPlanEvaluatorOptions {
  std::string constraint;
  std::string workDir;  // shared with the nodes
  std::string collageExecutable;
  std::string dbUrl;
  std::string modelPath;
  std::vector<std::string> inputShapes;
  std::vector<std::string> backends;
  std::string modelKey;
  std::string targetFingerprintId;  // the rows' fingerprint (the kernel job's tasks reported it)
  PairedRunOptions runs;
  double timeoutSeconds = 120;     // per task's paired request
  double generationSeconds = 300;  // a generation's deadline, from its submission
  double recheckSeconds = 600;     // the final check's
  double pollSeconds = 2;
};

class SlurmPlanEvaluator final : public PlanEvaluator {
 public:
  SlurmPlanEvaluator(SlurmPlanEvaluatorOptions options, SearchObserver* observer);
  ~SlurmPlanEvaluator() override;  // cancels the jobs still in the queue

  std::vector<TimedPlan> timeGeneration(const std::vector<PlanToTime>& plans,
                                        const std::string& incumbentKey, const Plan& incumbent,
                                        const CancellationToken* cancel) override;
  PairedPlanRuns recheck(const Plan& best, const Plan& start, const PairedRunOptions& runs,
                         const CancellationToken* cancel) override;

  int jobsSubmitted() const { return static_cast<int>(jobs_.size()); }
  const std::vector<std::string>& jobIds() const { return jobs_; }

 private:
  // Writes the folder and submits; returns the run id its rows carry. `deadline` seconds
  // of waiting (or until the job leaves the queue, or cancel); at the
  // deadline the job keeps running if `keepAtDeadline`, else is cancelled.
  // Cancel, squeue failing or an exception cancel it (SlurmJobs::wait).
  std::string submitAndWait(const std::vector<PlanToTime>& plans, const std::string& incumbentKey,
                            const Plan& incumbent, const PairedRunOptions& runs, double deadline,
                            bool keepAtDeadline, const CancellationToken* cancel);
  // The row of run `runId` for the pair, if it has arrived.
  std::optional<TimedPlan> lookup(const std::string& planKey, const std::string& incumbentKey,
                                  const std::string& runId) const;

  SlurmPlanEvaluatorOptions options_;
  SearchObserver* observer_;
  std::unique_ptr<SharedMeasurementStore> store_;
  std::vector<std::string> jobs_;
  std::set<std::string> finished_;  // jobs that left the queue or were cancelled
  struct Outstanding {
    std::string plan, incumbent, runId;
  };
  std::vector<Outstanding> outstanding_;  // not back yet
};

}  // namespace collage
