// `collage measure-batch job.json --task N`: one task of the Slurm job array
// that `collage optimize --target` submits (core/measure/target_measurement.h).
// Not for people: Slurm runs it on a node of the target. It reports its node,
// fingerprint and backend versions first (task-N.json beside the job file),
// then measures its batch as a local run would (the store first, each missing
// kernel in the isolated worker, each stored at once in the shared store),
// and reports "done", or "failed" with the reason.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "core/ir/error.h"
#include "core/measure/slurm_jobs.h"
#include "core/measure/candidate_costs.h"
#include "core/measure/measurement_db.h"
#include "core/measure/measurer.h"
#include "core/measure/shared_store.h"
#include "core/measure/target_measurement.h"

namespace collage::cli {

std::string selfExecutable();  // cli_optimize.cc

namespace {

// The task's log (its Slurm output file): what it measured, line by line.
class TaskLog : public SearchObserver {
 public:
  void onLog(const std::string& line) override { std::cout << line << std::endl; }
};

}  // namespace

Action addMeasureBatchCommand(CLI::App& app) {
  auto* command = app.add_subcommand("measure-batch", "");  // hidden: empty description
  command->group("");
  auto jobFile = std::make_shared<std::string>();
  auto task = std::make_shared<std::string>();
  command->add_option("job", *jobFile, "")->required();
  command->add_option("--task", *task, "");
  return [jobFile, task]() {
    const ArrayTaskStart start = startArrayTask("measure-batch", *task, *jobFile);
    const int n = start.index;
    const TargetJob job = TargetJob::fromJson(start.jobText, *jobFile);
    if (static_cast<size_t>(n) >= job.batches.size())
      throw Error(*jobFile + ": task " + std::to_string(n) + " out of range (the job has " +
                  std::to_string(job.batches.size()) + " batches)");
    const std::string runDir = std::filesystem::path(*jobFile).parent_path().string();
    const std::vector<TargetKernel>& batch = job.batches[static_cast<size_t>(n)];

    TargetTaskReport report;
    report.task = n;
    report.node = SharedMeasurementStore::thisMachine();
    report.state = "running";
    report.kernels = static_cast<int>(batch.size());
    try {
      ModelOptions model;
      model.modelPath = job.modelPath;
      model.inputShapes = job.inputShapes;
      const Graph graph = model.load(/*quiet=*/true);
      BackendSet set = loadBackendSet(job.backends);
      for (const auto& w : set.warnings) std::cout << "warning: " << w << "\n";
      std::map<std::string, std::string> versions;
      for (const auto& [name, version] : set.versions()) {
        versions[name] = version;
        report.versions.emplace_back(name, version);
      }
      // The node's own key: its hardware, its backends' versions, and how
      // this model is measured on it (its cache size decides).
      const HardwareFingerprint fingerprint =
          measurementFingerprint(set.versions(), measurementProtocol(graph));
      report.fingerprint = fingerprint;
      report.write(runDir);  // the target's fingerprint, before any measuring
      std::cout << "task " << n << " on " << report.node << ": " << batch.size() << " kernels of "
                << job.modelPath << ", " << fingerprint.toString() << std::endl;

      const char* url = std::getenv(kTargetDbVariable);
      if (!url || !*url)
        throw Error(
            std::string("no shared store: ") + kTargetDbVariable +
            " is not set in the task's environment (sbatch passes the submitting environment on "
            "unless --export limits it)");
      // The shared store alone: a cache file per task would only be thrown away.
      MeasurementDb db(url, ":memory:");
      CandidateSet candidates(graph.numNodes());
      for (const TargetKernel& k : batch) {
        for (NodeId id : k.nodes)
          if (id < 0 || id >= graph.numNodes())
            throw Error(*jobFile + ": node " + std::to_string(id) + " is not a node of " +
                        job.modelPath + " (was the model changed since the job was submitted?)");
        Candidate c;
        c.nodes = NodeSet::of(graph.numNodes(), k.nodes);
        c.backend = k.backend;
        c.origin = "target";
        candidates.add(c);
      }
      MeasurerOptions measurerOptions;
      measurerOptions.timeoutSeconds = job.timeoutSeconds;
      IsolatedMeasurer measurer(
          measurementWorkerCommand(selfExecutable(), job.modelPath, job.inputShapes),
          measurerOptions);
      CandidateCoster coster(
          graph, &db, fingerprint, [&](const std::string& b) { return versions[b]; },
          [&](const Candidate& c) { return measurer.measure(c.backend, c.nodes); });
      TaskLog log;
      CostingReport costs;
      coster.costAll(candidates, {}, &log, nullptr, &costs);
      report.measured = costs.measured;
      report.cached = costs.cached;
      report.failed = costs.failed;
      report.state = "done";
      report.write(runDir);
      std::cout << "task " << n << " done: " << costs.measured << " measured, " << costs.cached
                << " already in the store, " << costs.failed << " failed or invalid (" << job.store
                << ")" << std::endl;
      return 0;
    } catch (const std::exception& e) {
      report.state = "failed";
      report.message = e.what();
      try {
        report.write(runDir);
      } catch (const std::exception&) {
      }
      throw;
    }
  };
}

}  // namespace collage::cli
