// `collage measure-plan-pair job.json --task N`: one task of the Slurm job
// array a fanned-out graph-level search submits for a generation
// (core/search/slurm_plan_evaluator.h). Not for people: Slurm runs it on a
// node of the target. It times plan N paired with the incumbent, round by
// round in the isolated worker (so the ratio cancels the node's speed, and a
// plan that crashes costs this task only), and appends the result to the
// shared store's collage_plan_runs under the node's fingerprint.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "core/ir/error.h"
#include "core/measure/slurm_jobs.h"
#include "core/measure/measurer.h"
#include "core/measure/shared_store.h"
#include "core/measure/target_measurement.h"
#include "core/search/slurm_plan_evaluator.h"

namespace collage::cli {

std::string selfExecutable();  // cli_optimize.cc

Action addMeasurePlanPairCommand(CLI::App& app) {
  auto* command = app.add_subcommand("measure-plan-pair", "");  // hidden: empty description
  command->group("");
  auto jobFile = std::make_shared<std::string>();
  auto task = std::make_shared<std::string>();
  command->add_option("job", *jobFile, "")->required();
  command->add_option("--task", *task, "");
  return [jobFile, task]() {
    const ArrayTaskStart start = startArrayTask("measure-plan-pair", *task, *jobFile);
    const int n = start.index;
    const PlanPairJob job = PlanPairJob::fromJson(start.jobText, *jobFile);
    if (static_cast<size_t>(n) >= job.plans.size())
      throw Error(*jobFile + ": task " + std::to_string(n) + " out of range (the job has " +
                  std::to_string(job.plans.size()) + " plans)");
    const std::filesystem::path runDir = std::filesystem::path(*jobFile).parent_path();
    const PlanPairJob::Entry& entry = job.plans[static_cast<size_t>(n)];

    ModelOptions model;
    model.modelPath = job.modelPath;
    model.inputShapes = job.inputShapes;
    const Graph graph = model.load(/*quiet=*/true);
    BackendSet set = loadBackendSet(job.backends);
    for (const auto& w : set.warnings) std::cout << "warning: " << w << "\n";
    const HardwareFingerprint fingerprint =
        measurementFingerprint(set.versions(), measurementProtocol(graph));
    const Plan plan = loadPlan((runDir / entry.file).string());
    const Plan incumbent = loadPlan((runDir / job.incumbentFile).string());
    std::cout << "task " << n << " on " << SharedMeasurementStore::thisMachine() << ": plan "
              << entry.file << " against the incumbent, " << fingerprint.toString() << std::endl;
    const char* url = std::getenv(kTargetDbVariable);
    if (!url || !*url)
      throw Error(
          std::string("no shared store: ") + kTargetDbVariable +
          " is not set in the task's environment (sbatch passes the submitting environment on "
          "unless --export limits it)");
    SharedMeasurementStore store(url);

    MeasurerOptions measurerOptions;
    measurerOptions.timeoutSeconds = job.timeoutSeconds;
    IsolatedMeasurer measurer(
        measurementWorkerCommand(selfExecutable(), job.modelPath, job.inputShapes),
        measurerOptions);
    const PairedPlanRuns runs = measurer.timePlans(plan, incumbent, job.runs, job.timeoutSeconds);
    SharedMeasurementStore::PlanRunRow row;
    row.modelKey = job.modelKey;
    row.planKey = entry.key;
    row.incumbentKey = job.incumbentKey;
    row.runId = job.runId;  // this submission's row, even for a pair timed before
    row.genome = entry.genome;
    row.status = std::string(measurementStatusName(runs.status));
    row.medianRatio = runs.ok() ? runs.medianRatio() : 0;
    row.runsJson = toJson(runs).dump();
    store.appendPlanRun(fingerprint, row);
    if (runs.ok())
      std::cout << "task " << n << " done: " << runs.aMs.size() << " rounds, ratio "
                << runs.medianRatio() << " (" << runs.aMedianMs() << " vs " << runs.bMedianMs()
                << " ms), stored in " << store.url() << std::endl;
    else
      std::cout << "task " << n << ": the plan could not run (" << runs.message << "), stored in "
                << store.url() << std::endl;
    return 0;
  };
}

}  // namespace collage::cli
