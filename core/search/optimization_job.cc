#include "core/search/optimization_job.h"

#include <map>
#include <memory>

#include "core/ir/error.h"
#include "core/ir/hardware_fingerprint.h"
#include "core/measure/measurement_db.h"
#include "core/measure/measurer.h"
#include "core/search/near_ties.h"
#include "core/search/op_level_optimizer.h"
#include "core/search/plan_from_cover.h"
#include "core/search/plan_override.h"
#include "core/search/plan_selection.h"
#include "core/measure/switch_costs.h"
#include "core/ir/threading.h"

namespace collage {

std::optional<int32_t> groupCandidate(const OptimizationResult& result, const Graph& graph,
                                      const PlanGroup& group) {
  if (!group.candidate) return std::nullopt;
  const int32_t c = *group.candidate;
  if (c < 0 || static_cast<size_t>(c) >= result.candidates.size()) return std::nullopt;
  // The index alone could name another optimisation's candidate: the
  // group must be exactly this one.
  const Candidate& cand = result.candidates[static_cast<size_t>(c)];
  if (cand.backend != group.backend || nodeNames(graph, cand.nodes) != group.nodes) return std::nullopt;
  return c;
}

std::vector<std::string> optimizationWorkerCommand(const OptimizationJobOptions& options) {
  if (options.workerExecutable.empty())
    throw Error("no measurement worker: the 'collage' executable was not found");
  return measurementWorkerCommand(options.workerExecutable, options.modelPath, options.inputShapes);
}

MeasureFn jobMeasureFn(std::shared_ptr<const Graph> graph, const OptimizationJobOptions& options) {
  struct State {
    std::shared_ptr<const Graph> graph;
    std::map<std::string, std::string> versions;
    std::unique_ptr<MeasurementDb> db;
    std::unique_ptr<IsolatedMeasurer> measurer;
    std::unique_ptr<CandidateCoster> coster;
  };
  auto state = std::make_shared<State>();
  state->graph = std::move(graph);
  for (const auto& [name, version] : options.versions) state->versions[name] = version;
  if (!options.noDb)
    state->db = std::make_unique<MeasurementDb>(options.dbPath.empty() ? MeasurementDb::defaultPath()
                                                                       : options.dbPath);
  MeasurerOptions measurerOptions;
  measurerOptions.timeoutSeconds = options.timeoutSeconds;
  state->measurer =
      std::make_unique<IsolatedMeasurer>(optimizationWorkerCommand(options), measurerOptions);
  state->measurer->setAbortSwitch(options.abort);
  State* raw = state.get();
  state->coster = std::make_unique<CandidateCoster>(
      *state->graph, state->db.get(), measurementFingerprint(options.versions),
      [raw](const std::string& b) { return raw->versions[b]; },
      [raw](const Candidate& c) { return raw->measurer->measure(c.backend, c.nodes); });
  return [state](const Candidate& candidate) {
    CandidateSet one(state->graph->numNodes());
    one.add(candidate);
    return state->coster->costAll(one, {}, nullptr, nullptr).front();
  };
}

OptimizationResult runOptimizationJob(const Graph& graph, const OptimizationJobOptions& options,
                                      SearchObserver* observer, const CancellationToken* cancel) {
  OptimizationResult result;
  result.candidates = enumerateCandidates(graph, options.capabilities);
  result.constraints = options.constraints;
  result.versions = options.versions;
  for (const auto& cap : options.capabilities)
    if (cap.spec) result.limits[cap.spec->name] = cap.spec->limits;
  // Throws Error (naming the selector or node) for a pin that cannot hold.
  result.allowed = allowedCandidates(graph, result.candidates, options.constraints);

  HardwareFingerprint fingerprint = measurementFingerprint(options.versions);
  std::map<std::string, std::string> versions;
  for (const auto& [name, version] : options.versions) versions[name] = version;
  std::unique_ptr<MeasurementDb> db;
  if (!options.noDb)
    db = std::make_unique<MeasurementDb>(options.dbPath.empty() ? MeasurementDb::defaultPath()
                                                                : options.dbPath);

  MeasurerOptions measurerOptions;
  measurerOptions.timeoutSeconds = options.timeoutSeconds;
  IsolatedMeasurer measurer(optimizationWorkerCommand(options), measurerOptions);
  measurer.setAbortSwitch(options.abort);
  measurer.setWaitingReporter([observer](const std::string& holder) {
    if (observer) observer->onLog("waiting for the machine's timing lock, held by " + holder);
  });
  CandidateCoster coster(
      graph, db.get(), fingerprint, [&](const std::string& b) { return versions[b]; },
      [&](const Candidate& c) { return measurer.measure(c.backend, c.nodes); });
  // Read before measuring: our own worker adds to the load once it runs.
  const std::string busy = busyMachineWarning();
  result.measurements =
      coster.costAll(result.candidates, result.allowed, observer, cancel, &result.report);
  if (!busy.empty() && result.report.measured > 0) {
    result.warnings.push_back(busy);
    if (observer) observer->onLog("warning: " + busy);
  }
  result.measured.clear();
  for (const auto& m : result.measurements) result.measured.push_back(!isMissingMeasurement(m));
  if (result.report.cancelled || (cancel && cancel->cancelled())) {
    result.cancelled = true;
    return result;
  }

  result.switchCosts = measureSwitchCosts(
      result.candidates, result.measurements, versions, db.get(), fingerprint,
      [&](const Candidate& a, const Candidate& b) {
        return measurer.measureSwitch(a.backend, a.nodes, b.backend, b.nodes);
      });
  // Copies between the host and a GPU, measured here through the backend's
  // device runtime (plain copies: nothing for the isolated worker to guard).
  std::vector<std::string> backendNames;
  for (const auto& [name, version] : options.versions) backendNames.push_back(name);
  result.deviceCosts = measureDeviceCosts(backendNames, options.backends, db.get(), fingerprint);
  if (observer)
    for (const std::string& note : result.deviceCosts.notes) observer->onLog("copies: " + note);
  std::vector<Cost> costs;
  for (const auto& m : result.measurements) costs.push_back(m.cost());
  OpLevelProblem problem{&graph, &result.candidates, costs,
                         [&](const std::string& b) { return result.switchCosts.epsilonInto(b); },
                         result.allowed};
  result.deviceCosts.applyTo(problem);
  OpLevelResult opLevel = optimizeOpLevel(problem, observer, cancel);
  result.cancelled = opLevel.cancelled;
  // Near ties the noise may have decided (core/search/near_ties.h): measured again, then the DP again.
  if (!result.cancelled) {
    NearTieReport again;
    const OpLevelResult first = opLevel;
    opLevel = refineAtNearTies(graph, result.candidates, result.measurements, problem, first, coster,
                               cancel, &again);
    result.cancelled = opLevel.cancelled;
    if (again.ties > 0) {
      result.report.seconds += again.seconds;
      if (observer) {
        // The chart gets one more step of the same search: where it ended.
        observer->onSearchStep(SearchStepEvent{
            "op-level", first.steps + 1,
            static_cast<int>(first.statesExpanded + opLevel.statesExpanded), opLevel.total,
            opLevel.total, first.seconds + again.seconds + opLevel.seconds});
        observer->onLog("near ties: " + std::to_string(again.ties) +
                        " fused kernel(s) measured again with their parts (" +
                        std::to_string(again.remeasured) + " kernels, " +
                        std::to_string(again.lowered) + " read faster); predicted " +
                        std::to_string(first.total / 1e6) + " -> " +
                        std::to_string(opLevel.total / 1e6) + " ms");
      }
    }
  }

  std::vector<BackendVersion> backendVersions;
  for (const auto& [name, version] : versions) backendVersions.push_back(BackendVersion{name, version});
  auto planOf = [&](const OpLevelResult& r) {
    Plan p = makePlan(graph, options.modelPath, result.candidates, r.chosen, result.measurements,
                      PlanOrigin::OpLevel, fingerprint, backendVersions);
    p.predictedNs = r.total;
    p.createdBy = "collage-studio (op-level)";
    return p;
  };
  if (options.backends && options.constraints.empty() && !result.cancelled) {
    std::vector<std::string> order;
    for (const auto& [name, version] : options.versions) order.push_back(name);
    std::vector<NamedPlacement> baselines = baselinePlacements(problem, order);
    EndToEndSelection selection;
    const PlanPairTimer timePair = [&](const Plan& a, const Plan& b, const PairedRunOptions& o) {
      return measurer.timePlans(a, b, o, options.graphLevelOptions.timeoutSeconds);
    };
    int chosen = choosePlacementByEndToEnd(graph, opLevel, baselines, planOf, timePair, &selection, cancel);
    result.endToEnd = describeSelection(selection);
    if (observer) observer->onLog("end to end:\n" + result.endToEnd);
    if (chosen >= 0) {
      const NamedPlacement& b = baselines[static_cast<size_t>(chosen)];
      opLevel = b.result;
      result.plan = planOf(b.result);
      result.plan.createdBy += " (the " + b.label + " placement ran faster end to end)";
    }
  }
  if (result.plan.groups.empty()) result.plan = planOf(opLevel);
  if (options.graphLevel && options.backends && !result.cancelled) {
    std::vector<Backend*> backends;
    for (const auto& [name, version] : options.versions)
      if (Backend* b = options.backends(name)) backends.push_back(b);
    result.startPlan = result.plan;
    const std::vector<GraphLibrary> libraries =
        honouringConstraints(graph, graphLibrariesOf(graph, backends), options.constraints);
    result.graphLevel = runGraphLevelSearch(graph, result.plan, libraries, measurer, db.get(), fingerprint,
                                            options.graphLevelOptions, observer, cancel);
    result.graphLevelRan = true;
    result.plan = result.graphLevel.plan;
    if (result.graphLevel.improved) result.plan.createdBy += " + graph-level search";
    if (observer) observer->onLog(describeGraphLevel(result.graphLevel));
  }
  markPinnedGroups(result.plan, graph, options.constraints);
  result.hasPlan = true;
  return result;
}

}  // namespace collage
