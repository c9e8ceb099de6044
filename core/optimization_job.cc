#include "core/optimization_job.h"

#include <map>
#include <memory>

#include "core/error.h"
#include "core/hardware_fingerprint.h"
#include "core/measurement_db.h"
#include "core/measurer.h"
#include "core/op_level_optimizer.h"
#include "core/switch_costs.h"
#include "core/threading.h"

namespace collage {

std::vector<std::string> optimizationWorkerCommand(const OptimizationJobOptions& options) {
  if (options.workerExecutable.empty())
    throw Error("no measurement worker: the 'collage' executable was not found");
  std::vector<std::string> cmd = {options.workerExecutable, "--threads",
                                  std::to_string(threadCount()), "measure-worker",
                                  options.modelPath};
  for (const auto& s : options.inputShapes) {
    cmd.push_back("--input-shape");
    cmd.push_back(s);
  }
  return cmd;
}

OptimizationResult runOptimizationJob(const Graph& graph, const OptimizationJobOptions& options,
                                      SearchObserver* observer, const CancellationToken* cancel) {
  OptimizationResult result;
  result.candidates = enumerateCandidates(graph, options.capabilities);

  HardwareFingerprint fingerprint = HardwareFingerprint::current();
  std::map<std::string, std::string> versions;
  for (const auto& [name, version] : options.versions) {
    versions[name] = version;
    fingerprint.libraryVersions +=
        (fingerprint.libraryVersions.empty() ? "" : ";") + name + "=" + version;
  }
  std::unique_ptr<MeasurementDb> db;
  if (!options.noDb)
    db = std::make_unique<MeasurementDb>(options.dbPath.empty() ? MeasurementDb::defaultPath()
                                                                : options.dbPath);

  MeasurerOptions measurerOptions;
  measurerOptions.timeoutSeconds = options.timeoutSeconds;
  IsolatedMeasurer measurer(optimizationWorkerCommand(options), measurerOptions);
  CandidateCoster coster(
      graph, db.get(), fingerprint, [&](const std::string& b) { return versions[b]; },
      [&](const Candidate& c) { return measurer.measure(c.backend, c.nodes); });
  result.measurements = coster.costAll(result.candidates, {}, observer, cancel, &result.report);
  if (result.report.cancelled || (cancel && cancel->cancelled())) {
    result.cancelled = true;
    return result;
  }

  SwitchCostTable switchCosts = measureSwitchCosts(
      result.candidates, result.measurements, versions, db.get(), fingerprint,
      [&](const Candidate& a, const Candidate& b) {
        return measurer.measureSwitch(a.backend, a.nodes, b.backend, b.nodes);
      });
  std::vector<Cost> costs;
  for (const auto& m : result.measurements) costs.push_back(m.cost());
  OpLevelProblem problem{&graph, &result.candidates, costs,
                         [&](const std::string& b) { return switchCosts.epsilonInto(b); }, {}};
  OpLevelResult opLevel = optimizeOpLevel(problem, observer, cancel);
  result.cancelled = opLevel.cancelled;

  std::vector<BackendVersion> backendVersions;
  for (const auto& [name, version] : versions) backendVersions.push_back(BackendVersion{name, version});
  result.plan = makePlan(graph, options.modelPath, result.candidates, opLevel.chosen,
                         result.measurements, PlanOrigin::OpLevel, fingerprint, backendVersions);
  result.plan.predictedNs = opLevel.total;
  result.plan.createdBy = "collage-studio (op-level)";
  result.chosen = opLevel.chosen;
  result.hasPlan = true;
  return result;
}

}  // namespace collage
