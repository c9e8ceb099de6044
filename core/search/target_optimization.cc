#include "core/search/target_optimization.h"

#include <cstdio>
#include <map>

#include "core/ir/error.h"
#include "core/measure/candidate_costs.h"
#include "core/measure/measurement_db.h"
#include "core/measure/shared_store.h"
#include "core/measure/target_measurement.h"
#include "core/search/op_level_optimizer.h"
#include "core/search/plan_from_cover.h"
#include "core/search/plan_override.h"
#include "core/search/plan_selection.h"
#include "core/search/slurm_plan_evaluator.h"

namespace collage {

OptimizationResult runTargetOptimizationJob(const Graph& graph,
                                            const OptimizationJobOptions& options,
                                            SearchObserver* observer,
                                            const CancellationToken* cancel) {
  const auto say = [observer](const std::string& text) {
    if (observer) observer->onLog(text);
  };
  if (options.noDb || !SharedMeasurementStore::isUrl(options.dbPath))
    throw Error("--target " + options.target +
                " needs a team's shared store (--db postgresql://...): the Slurm tasks write their "
                "measurements there, and the plan is made from them");
  if (options.substitutions)
    say("substitutions: skipped with --target (they are costed by measuring here)");
  std::unique_ptr<MeasurementDb> db = openMeasurementDb(options);

  OptimizationResult result;
  result.candidates = enumerateCandidates(graph, options.capabilities);
  result.constraints = options.constraints;
  for (const auto& cap : options.capabilities)
    if (cap.spec) result.limits[cap.spec->name] = cap.spec->limits;
  result.allowed = allowedCandidates(graph, result.candidates, options.constraints);
  say(options.modelPath + ": " + std::to_string(graph.numNodes()) + " nodes, " +
      std::to_string(result.candidates.size()) + " candidates on " +
      std::to_string(options.versions.size()) +
      " backends, to be measured on the Slurm nodes with feature " + options.target);

  TargetMeasurementOptions t;
  t.constraint = options.target;
  t.workDir = options.targetWorkDir.empty() ? defaultTargetWorkDir() : options.targetWorkDir;
  if (options.workerExecutable.empty())
    throw Error("no measurement worker: the 'collage' executable was not found");
  t.collageExecutable = options.workerExecutable;
  t.dbUrl = options.dbPath;
  t.modelPath = options.modelPath;
  t.inputShapes = options.inputShapes;
  for (const auto& [name, version] : options.versions) t.backends.push_back(name);
  t.versions = options.versions;
  t.timeoutSeconds = options.timeoutSeconds;
  t.batchSize = options.targetBatchSize;
  t.pollSeconds = options.targetPollSeconds;
  t.deadlineSeconds = options.targetTimeoutSeconds;
  const TargetMeasurementResult measured =
      measureOnTarget(graph, result.candidates, result.allowed, *db, t, observer, cancel);
  for (const std::string& p : measured.problems) {
    result.warnings.push_back(p);
    say("warning: " + p);
  }
  if (!measured.runDir.empty()) say("the job's files and the tasks' logs: " + measured.runDir);
  if (measured.cancelled) {
    result.cancelled = true;
    return result;
  }
  const std::string job = measured.jobId.empty() ? "" : "Slurm job " + measured.jobId;
  if (!measured.fingerprint)
    throw Error(
        job + " (--constraint=" + options.target +
        "): no task reported its node, so there are no measurements of the target to plan with" +
        (measured.problems.empty() ? "" : " (" + measured.problems.front() + ")"));
  const HardwareFingerprint fingerprint = *measured.fingerprint;

  // The keys as the nodes wrote them: their backend versions.
  std::map<std::string, std::string> versions;
  for (const auto& [name, version] : options.versions) versions[name] = version;
  for (const auto& [name, version] : measured.versions) versions[name] = version;
  std::vector<BackendVersion> backendVersions;
  for (const auto& [name, version] : options.versions)
    backendVersions.push_back(BackendVersion{name, versions[name]});
  result.versions = backendVersions;
  CandidateCoster lookups(
      graph, db.get(), fingerprint, [&](const std::string& b) { return versions[b]; }, MeasureFn{});
  result.measurements =
      lookups.costAll(result.candidates, result.allowed, nullptr, cancel, &result.report);
  result.measured.clear();
  for (const auto& m : result.measurements) result.measured.push_back(!isMissingMeasurement(m));
  const int missing = result.report.distinct - result.report.cached;
  char line[512];
  const std::string machine = fingerprint.cpuModel + ", " + std::to_string(fingerprint.threads) +
                              " threads; fingerprint " + fingerprint.id();
  const std::string fresh = job.empty()
                                ? "none measured now"
                                : std::to_string(measured.measured) + " measured now by " + job;
  std::snprintf(
      line, sizeof line,
      "target %s (%s): %d distinct kernels from the shared store (%s, %d failed or invalid)%s",
      options.target.c_str(), machine.c_str(), result.report.cached, fresh.c_str(),
      result.report.failed,
      missing > 0 ? (", " + std::to_string(missing) + " with no measurement").c_str() : "");
  say(line);
  say("switching costs: charged 0 (they are measured only on this machine)");
  if (cancel && cancel->cancelled()) {
    result.cancelled = true;
    return result;
  }

  std::vector<Cost> costs;
  for (const auto& m : result.measurements) costs.push_back(m.cost());
  OpLevelProblem problem{&graph, &result.candidates, costs, nullptr, result.allowed};
  OpLevelResult opLevel;
  try {
    opLevel = optimizeOpLevel(problem, observer, cancel);
  } catch (const Error& e) {
    throw Error("no plan for --target " + options.target + ": " + e.what() +
                (missing > 0
                     ? "; " + std::to_string(missing) +
                           " kernel(s) have no measurement on the target" +
                           (measured.problems.empty() ? "" : " (" + measured.problems.front() + ")")
                     : ""));
  }
  result.opLevel = opLevel;
  result.cancelled = opLevel.cancelled;
  if (result.cancelled) return result;
  std::vector<std::string> order;
  for (const auto& [name, version] : options.versions) order.push_back(name);
  result.baselines = baselinePlacements(problem, order, &result.uncoveredBaselines);
  result.plan = makePlan(graph, options.modelPath, result.candidates, opLevel.chosen,
                         result.measurements, PlanOrigin::OpLevel, fingerprint, backendVersions);
  result.plan.predictedNs = opLevel.total;
  result.plan.createdBy = "collage-studio (op-level, measured on --target " + options.target + ")";
  std::snprintf(line, sizeof line, "predicted total on %s: %.3f ms (%zu groups)",
                options.target.c_str(), opLevel.total / 1e6, result.plan.groups.size());
  say(line);
  if (options.graphLevel && options.targetGraphLevel && options.backends) {
    // The graph-level search, fanned out: each generation's plans as one job
    // array on the target's nodes, the final best re-checked on one node.
    std::vector<Backend*> backends;
    for (const auto& [name, version] : options.versions)
      if (Backend* b = options.backends(name)) backends.push_back(b);
    const std::vector<GraphLibrary> libraries =
        honouringConstraints(graph, graphLibrariesOf(graph, backends), options.constraints);
    result.startPlan = result.plan;
    GraphLevelOptions g = options.graphLevelOptions;
    if (g.modelKey.empty()) g.modelKey = graphLevelModelKey(result.plan);
    SlurmPlanEvaluatorOptions e;
    e.constraint = options.target;
    e.workDir = t.workDir;
    e.collageExecutable = t.collageExecutable;
    e.dbUrl = options.dbPath;
    e.modelPath = options.modelPath;
    e.inputShapes = options.inputShapes;
    e.backends = t.backends;
    e.modelKey = g.modelKey;
    e.targetFingerprintId = fingerprint.id();
    e.runs = g.runs;
    e.timeoutSeconds = g.timeoutSeconds;
    e.generationSeconds = options.targetGenerationSeconds;
    e.pollSeconds = options.targetPollSeconds;
    SlurmPlanEvaluator evaluator(e, observer);
    g.evaluator = &evaluator;
    say("\ngraph-level search on --target " + options.target + " (each generation one Slurm job array, " +
        std::to_string(libraries.size()) + " graph libraries):");
    // This machine's worker is never started: every plan runs on the nodes.
    IsolatedMeasurer unused({}, MeasurerOptions{});
    result.graphLevel = runGraphLevelSearch(graph, result.plan, libraries, unused, db.get(), fingerprint, g,
                                            observer, cancel);
    result.graphLevelRan = true;
    result.plan = result.graphLevel.plan;
    if (result.graphLevel.improved) result.plan.createdBy += " + graph-level search (Slurm job arrays)";
    std::string report = describeGraphLevel(result.graphLevel) + "; " +
                         std::to_string(evaluator.jobsSubmitted()) + " Slurm jobs";
    for (const auto& c : result.graphLevel.changes) report += "\n  " + c;
    say(report);
  }
  markPinnedGroups(result.plan, graph, options.constraints);
  result.hasPlan = true;
  return result;
}

}  // namespace collage
