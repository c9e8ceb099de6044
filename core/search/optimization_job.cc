#include "core/search/optimization_job.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>

#include "core/ir/error.h"
#include "core/ir/hardware_fingerprint.h"
#include "core/measure/candidate_costs.h"
#include "core/measure/kernel_estimate.h"
#include "core/measure/reference_skips.h"
#include "core/ir/hashing.h"
#include "core/measure/measurement_db.h"
#include "core/measure/machine_timing_lock.h"
#include "core/measure/measurer.h"
#include "core/rewrite/substitution_spec_file.h"
#include "core/search/canonical_rewrites.h"
#include "core/search/layout_charges.h"
#include "core/search/near_ties.h"
#include "core/search/op_level_optimizer.h"
#include "core/search/plan_from_cover.h"
#include "core/search/plan_override.h"
#include "core/search/plan_selection.h"
#include "core/search/skipped_references.h"
#include "core/search/target_optimization.h"
#include "core/measure/switch_costs.h"
#include "core/ops/reference_executor.h"
#include "core/ir/threading.h"
#include "core/rewrite/equivalence_check.h"

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
  std::vector<std::string> command =
      measurementWorkerCommand(options.workerExecutable, options.modelPath, options.inputShapes);
  for (const std::string& file : options.substitutionRuleFiles) {
    command.push_back("--substitution-rules");
    command.push_back(file);
  }
  return command;
}

std::unique_ptr<MeasurementDb> openMeasurementDb(const OptimizationJobOptions& options) {
  return std::make_unique<MeasurementDb>(
      options.dbPath.empty() ? MeasurementDb::defaultPath() : options.dbPath, options.localDbPath);
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
  if (!options.noDb) state->db = openMeasurementDb(options);
  MeasurerOptions measurerOptions;
  measurerOptions.timeoutSeconds = options.timeoutSeconds;
  state->measurer =
      std::make_unique<IsolatedMeasurer>(optimizationWorkerCommand(options), measurerOptions);
  state->measurer->setAbortSwitch(options.abort);
  State* raw = state.get();
  state->coster = std::make_unique<CandidateCoster>(
      *state->graph, state->db.get(),
      measurementFingerprint(options.versions, measurementProtocol(*state->graph)),
      [raw](const std::string& b) { return raw->versions[b]; },
      [raw](const Candidate& c) { return raw->measurer->measure(c.backend, c.nodes); });
  return [state](const Candidate& candidate) {
    CandidateSet one(state->graph->numNodes());
    one.add(candidate);
    return state->coster->costAll(one, {}, nullptr, nullptr).front();
  };
}

namespace {

// The layout hand-over the DP charges (core/search/layout_charges.h): each
// measured candidate's kernel is compiled here to ask which boundaries it
// offers in its own layout; those kernels are measured again (in the worker,
// stored under "<backend>@native-layouts") with those boundaries native, and
// the difference fits the reorder model. Off with COLLAGE_NO_LAYOUT_HANDOVER,
// as the Session's hand-over is.
LayoutCharges measureLayoutCharges(const Graph& graph, const CandidateSet& candidates,
                                   const std::vector<Measurement>& measurements,
                                   const BackendLookup& backends, MeasurementDb* db,
                                   const HardwareFingerprint& fingerprint,
                                   std::map<std::string, std::string>& versions,
                                   IsolatedMeasurer& measurer, const CancellationToken* cancel,
                                   const std::function<void(std::string)>& say) {
  std::vector<LayoutOffers> offers(candidates.size());
  std::vector<Cost> costs;
  for (const auto& m : measurements) costs.push_back(m.cost());
  if (!backends || !layoutHandoverEnabled()) return LayoutCharges(graph, candidates, offers, {});
  CandidateSet native(graph.numNodes());
  std::vector<size_t> of;  // candidate index of each entry of `native`
  for (size_t c = 0; c < candidates.size(); ++c) {
    if (!isKnown(costs[c]) || (cancel && cancel->cancelled())) continue;
    const Candidate& cand = candidates[c];
    Backend* backend = backends(cand.backend);
    if (!backend || !(backend->device() == Device{})) continue;
    const KernelRequest request = KernelRequest::of(graph, cand.nodes, cand.origin);
    CompileResult k;
    try {
      k = backend->compile(request);
    } catch (const std::exception&) {
      continue;  // the measurement said it compiles; this is only a question
    }
    if (!k) continue;
    for (size_t o = 0; o < request.outputs.size(); ++o)
      if (auto l = k.kernel->nativeOutputLayout(o)) offers[c].offers.push_back({request.outputs[o], true, l->name});
    for (size_t i = 0; i < request.inputs.size(); ++i)
      if (auto l = k.kernel->nativeInputLayout(i)) offers[c].offers.push_back({request.inputs[i], false, l->name});
    if (offers[c].offers.empty()) continue;
    if (k.kernel->layoutAgnostic()) {  // costs what it cost in plain memory
      offers[c].agnostic = true;
      offers[c].nativeNs = costs[c];
      continue;
    }
    Candidate copy = cand;
    copy.backend += kNativeLayoutsSuffix;
    if (native.add(copy)) of.push_back(c);
  }
  if (of.empty()) return LayoutCharges(graph, candidates, offers, {});
  CandidateCoster coster(
      graph, db, fingerprint,
      [&](const std::string& b) {
        return versions[b.substr(0, b.size() - kNativeLayoutsSuffix.size())];
      },
      [&](const Candidate& c) { return measurer.measure(c.backend, c.nodes); });
  CostingReport report;
  const std::vector<Measurement> measured = coster.costAll(native, {}, nullptr, cancel, &report);
  for (size_t i = 0; i < of.size() && i < measured.size(); ++i) offers[of[i]].nativeNs = measured[i].cost();
  const ReorderModel model = fitReorderModel(graph, costs, offers);
  char line[256];
  std::snprintf(line, sizeof line,
                "layout hand-over: %zu kernels offer their own layout at a boundary, measured so in %.1f s "
                "(%d from the database); a reorder costs %s",
                of.size(), report.seconds, report.cached, model.toString().c_str());
  say(line);
  return LayoutCharges(graph, candidates, std::move(offers), model);
}

}  // namespace

std::vector<SubstitutionRuleText> planSubstitutionRules(const std::vector<PlanSubstitution>& substitutions) {
  std::vector<SubstitutionRuleText> rules;
  for (const PlanSubstitution& s : substitutions)
    if (const SpecSubstitution* rule = findSpecSubstitution(s.site.rule))
      if (std::none_of(rules.begin(), rules.end(), [&](const SubstitutionRuleText& t) { return t.name == rule->name(); }))
        rules.push_back(rule->text());
  return rules;
}

std::vector<PlanSubstitution> planSubstitutions(const SubstitutionSearchResult& search) {
  std::vector<PlanSubstitution> out;
  for (const SubstitutionStep& step : search.steps)
    for (const SubstitutionSite& site : step.sites)
      out.push_back(PlanSubstitution{site, (step.before - step.after) / static_cast<double>(step.sites.size())});
  return out;
}

namespace {

// A file that holds the sites a measurement worker replays; removed with it.
struct SitesFile {
  std::string path;
  explicit SitesFile(const std::vector<SubstitutionSite>& sites) {
    char name[] = "/tmp/collage-substitutions-XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) throw Error("cannot create a temporary file for the substitutions");
    const std::string text = sitesToJson(sites);
    const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    close(fd);
    path = name;
    if (!ok) throw Error("cannot write " + path);
  }
  ~SitesFile() { std::remove(path.c_str()); }
  SitesFile(const SitesFile&) = delete;
  SitesFile& operator=(const SitesFile&) = delete;
};

std::vector<std::string> withSites(std::vector<std::string> command, const SitesFile* file) {
  if (file) {
    command.push_back("--substitutions");
    command.push_back(file->path);
  }
  return command;
}

// What the job's backends run on the reference kernels, estimated before it
// is measured (core/measure/reference_skips.h), with the measurer's limits.
ReferenceScreen referenceScreenOf(const Graph& graph, const BackendLookup& backends,
                                  const MeasurerOptions& measurer) {
  ReferenceScreen screen;
  if (!backends) return screen;
  screen.timeoutSeconds = measurer.timeoutSeconds;
  screen.runsPerMeasurement = 1 + measurer.minSamples;
  screen.estimate = [&graph, backends](const Candidate& c) {
    const Backend* b = backends(c.backend);
    if (!b) return KernelEstimate{};
    return estimateReferenceNodes(graph, b->referenceNodes(KernelRequest::of(graph, c.nodes, c.origin)));
  };
  return screen;
}

// The summary's line on what the screen left out (reference_skips.h).
std::string describeSkipped(const CostingReport& report) {
  return skippedReferencesSummary(report.skipped, report.skippedEstimateSeconds);
}

// The ranges the values that `rules` read at their sites really take, so
// that every check also draws inputs from them: one reference run of the
// model on seeded inputs, where it fits the worker's limit (as the
// end-to-end check does). Empty when it does not fit or the model does not
// run on seeded inputs (the checks' own trials only).
ValueRanges modelValueRanges(const Graph& model, const std::vector<const Substitution*>& rules,
                             const OptimizationJobOptions& options) {
  if (!referenceCheckSkipped(estimateReferenceRun(model).ns / 1e9, options.graphLevelOptions.timeoutSeconds).empty())
    return {};
  std::vector<SubstitutionSite> sites;
  for (const Substitution* rule : rules) {
    const std::vector<SubstitutionSite> found = rule->find(model);
    sites.insert(sites.end(), found.begin(), found.end());
  }
  if (sites.empty()) return {};
  try {
    return observeValueRanges(model, randomInputs(model, 0), siteInputValues(model, sites));
  } catch (const Error&) {
    return {};
  }
}

// The substitution search with the job's costs: each graph's candidates
// from the database, the missing ones measured in a worker that replays the
// graph's substitutions, then the op-level DP with the switching costs and
// copy charges of the model as given (one table for every graph, so their
// costs compare).
SubstitutionSearchResult searchSubstitutionsMeasured(const Graph& model, const OptimizationJobOptions& options,
                                                     MeasurementDb* db, const HardwareFingerprint& fingerprint,
                                                     SearchObserver* observer, const CancellationToken* cancel) {
  std::map<std::string, std::string> versions;
  for (const auto& [name, version] : options.versions) versions[name] = version;
  MeasurerOptions measurerOptions;
  measurerOptions.timeoutSeconds = options.timeoutSeconds;
  std::vector<std::string> backendNames;
  for (const auto& [name, version] : options.versions) backendNames.push_back(name);
  const DeviceCosts deviceCosts = measureDeviceCosts(backendNames, options.backends, db, fingerprint);
  std::optional<SwitchCostTable> switchCosts;
  int measured = 0;
  const GraphCostFn cost = [&](const Graph& g, const std::vector<SubstitutionSite>& sites) -> Cost {
    const CandidateSet candidates = enumerateCandidates(g, options.capabilities);
    std::unique_ptr<SitesFile> file;
    std::unique_ptr<IsolatedMeasurer> measurer;  // started only if something is missing
    auto worker = [&]() -> IsolatedMeasurer& {
      if (!measurer) {
        if (!sites.empty()) file = std::make_unique<SitesFile>(sites);
        measurer = std::make_unique<IsolatedMeasurer>(withSites(optimizationWorkerCommand(options), file.get()),
                                                      measurerOptions);
        measurer->setAbortSwitch(options.abort);
      }
      return *measurer;
    };
    CandidateCoster coster(
        g, db, fingerprint, [&](const std::string& b) { return versions[b]; },
        [&](const Candidate& c) { return worker().measure(c.backend, c.nodes); });
    coster.setReferenceScreen(referenceScreenOf(g, options.backends, measurerOptions));
    CostingReport report;
    std::vector<Measurement> measurements = coster.costAll(candidates, {}, observer, cancel, &report);
    measureSkippedIfNoCover(g, candidates, {}, coster, measurements, report, observer, cancel);
    if (!sites.empty()) measured += report.measured;  // the model's own count as the job's
    if (!switchCosts)
      switchCosts = measureSwitchCosts(candidates, measurements, versions, db, fingerprint,
                                       [&](const Candidate& a, const Candidate& b) {
                                         return worker().measureSwitch(a.backend, a.nodes, b.backend, b.nodes);
                                       });
    std::vector<Cost> costs;
    for (const auto& m : measurements) costs.push_back(m.cost());
    OpLevelProblem problem{&g, &candidates, costs,
                           [&](const std::string& b) { return switchCosts->epsilonInto(b); }, {}};
    deviceCosts.applyTo(problem);
    return optimizeOpLevel(problem, nullptr, cancel).total;
  };
  SubstitutionSearchOptions searchOptions = options.substitutionOptions;
  // The canonical rules first, then the user's forced ones.
  if (options.canonicalRewrites) {
    std::vector<std::string> forced;
    for (const std::string& name : canonicalRuleNames())
      if (findSubstitution(name) &&
          std::find(searchOptions.forcedRules.begin(), searchOptions.forcedRules.end(), name) ==
              searchOptions.forcedRules.end())
        forced.push_back(name);
    searchOptions.forcedRules.insert(searchOptions.forcedRules.begin(), forced.begin(), forced.end());
  }
  std::vector<const Substitution*> rules = searchOptions.rules;
  if (rules.empty()) {
    for (const auto& r : standardSubstitutions()) rules.push_back(r.get());
    for (const Substitution* r : specSubstitutions()) rules.push_back(r);
  }
  const ValueRanges ranges = modelValueRanges(model, rules, options);
  if (!ranges.empty()) searchOptions.valueRanges = &ranges;
  SubstitutionSearchResult result = searchSubstitutions(model, cost, searchOptions, observer, cancel);
  if (measured > 0)
    result.notes.push_back(std::to_string(measured) + " kernel(s) of rewritten graphs measured (now in the database)");
  return result;
}

}  // namespace

OptimizationResult runOptimizationJob(const Graph& model, const OptimizationJobOptions& options,
                                      SearchObserver* observer, const CancellationToken* cancel) {
  if (!options.target.empty()) return runTargetOptimizationJob(model, options, observer, cancel);
  const auto jobStart = std::chrono::steady_clock::now();
  // A line (or a table) of the job's report, without its final newline.
  const auto say = [observer](std::string text) {
    while (!text.empty() && text.back() == '\n') text.pop_back();
    if (observer) observer->onLog(text);
  };
  OptimizationResult result;
  HardwareFingerprint fingerprint = measurementFingerprint(options.versions, measurementProtocol(model));
  std::map<std::string, std::string> versions;
  for (const auto& [name, version] : options.versions) versions[name] = version;
  std::unique_ptr<MeasurementDb> db;
  if (!options.noDb)
    db = openMeasurementDb(options);
  else if (options.substitutions && options.constraints.empty())
    db = std::make_unique<MeasurementDb>(":memory:");  // shared by the graphs the search costs; not kept

  std::unique_ptr<SitesFile> sitesFile;
  if (options.substitutions && !options.constraints.empty())
    say("substitutions: skipped (pins and forbids name the model's nodes)");
  if (options.substitutions && options.constraints.empty()) {
    result.substitutions = searchSubstitutionsMeasured(model, options, db.get(), fingerprint, observer, cancel);
    result.substitutionsRan = true;
    say(describeSubstitutions(result.substitutions));
    if (!result.substitutions.applied.empty()) {
      result.graph = std::make_shared<const Graph>(result.substitutions.graph);
      sitesFile = std::make_unique<SitesFile>(result.substitutions.applied);
    }
    if (result.substitutions.cancelled || (cancel && cancel->cancelled())) {
      result.cancelled = true;
      return result;
    }
  } else if (options.canonicalRewrites && options.constraints.empty()) {
    // No search: the canonical rewrites alone, uncosted (canonical_rewrites.h).
    std::vector<const Substitution*> rules;
    for (const std::string& name : canonicalRuleNames())
      if (const Substitution* rule = findSubstitution(name)) rules.push_back(rule);
    const ValueRanges ranges = modelValueRanges(model, rules, options);
    result.substitutions = applyCanonicalRewrites(model, ranges.empty() ? nullptr : &ranges);
    if (!result.substitutions.applied.empty() || !result.substitutions.notes.empty())
      say(describeCanonicalRewrites(model, result.substitutions));
    if (!result.substitutions.applied.empty()) {
      result.graph = std::make_shared<const Graph>(result.substitutions.graph);
      sitesFile = std::make_unique<SitesFile>(result.substitutions.applied);
    }
  }
  // From here on, the graph placed: the model, or the model rewritten.
  const Graph& graph = result.graph ? *result.graph : model;
  result.candidates = enumerateCandidates(graph, options.capabilities);
  result.constraints = options.constraints;
  result.versions = options.versions;
  for (const auto& cap : options.capabilities)
    if (cap.spec) result.limits[cap.spec->name] = cap.spec->limits;
  // Throws Error (naming the selector or node) for a pin that cannot hold.
  result.allowed = allowedCandidates(graph, result.candidates, options.constraints);

  MeasurerOptions measurerOptions;
  measurerOptions.timeoutSeconds = options.timeoutSeconds;
  IsolatedMeasurer measurer(withSites(optimizationWorkerCommand(options), sitesFile.get()), measurerOptions);
  measurer.setAbortSwitch(options.abort);
  measurer.setWaitingReporter([say](const std::string& holder) { say(kWaitingForTimingLock + holder); });
  CandidateCoster coster(
      graph, db.get(), fingerprint, [&](const std::string& b) { return versions[b]; },
      [&](const Candidate& c) { return measurer.measure(c.backend, c.nodes); });
  coster.setReferenceScreen(referenceScreenOf(graph, options.backends, measurerOptions));
  // Read before measuring: our own worker adds to the load once it runs.
  const std::string busy = busyMachineWarning();
  say(options.modelPath + ": " + std::to_string(graph.numNodes()) + " nodes, " +
      std::to_string(result.candidates.size()) + " candidates on " +
      std::to_string(options.versions.size()) + " backends");
  result.measurements =
      coster.costAll(result.candidates, result.allowed, observer, cancel, &result.report);
  if (!result.report.cancelled)
    measureSkippedIfNoCover(graph, result.candidates, result.allowed, coster, result.measurements,
                            result.report, observer, cancel);
  for (const std::string& w : result.report.warnings) result.warnings.push_back(w);
  if (!busy.empty() && result.report.measured > 0) {
    result.warnings.push_back(busy);
    say("warning: " + busy);
  }
  if (db && !db->sharedProblem().empty()) {
    result.warnings.push_back(db->sharedProblem());
    say("warning: " + db->sharedProblem());
  }
  const std::string from =
      db ? db->path() + (db->sharedUrl().empty() ? "" : " and " + db->sharedUrl()) : "";
  char line[512];
  if (result.report.measured == 0 && db)
    std::snprintf(line, sizeof line, "warm database: nothing measured, %d distinct kernels from %s",
                  result.report.cached, from.c_str());
  else
    std::snprintf(line, sizeof line, "measured %d kernels in %.1f s (%d from the database, %d failed or invalid)",
                  result.report.measured, result.report.seconds, result.report.cached, result.report.failed);
  say(line);
  if (result.report.skipped > 0) say(describeSkipped(result.report));
  if (result.report.preempted > 0)
    say(std::to_string(result.report.preempted) +
        " of them had timed runs preempted by other processes; those runs were left out");
  if (result.report.environmental > 0)
    say(std::to_string(result.report.environmental) +
        " of the failures were the machine's (its timing lock, its memory, a busy machine or a "
        "kill from outside), not the kernels': not kept, they are measured again on the next run");
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
  say(result.switchCosts.toString() +
      (result.switchCosts.measured == 0 && result.report.measured == 0 ? "(switching costs from the database too)"
                                                                        : ""));
  std::vector<std::string> backendNames;
  for (const auto& [name, version] : options.versions) backendNames.push_back(name);
  result.deviceCosts = measureDeviceCosts(backendNames, options.backends, db.get(), fingerprint);
  for (const std::string& note : result.deviceCosts.notes) say("copies: " + note);
  std::vector<Cost> costs;
  for (const auto& m : result.measurements) costs.push_back(m.cost());
  const LayoutCharges layoutCharges =
      measureLayoutCharges(graph, result.candidates, result.measurements, options.backends, db.get(),
                           fingerprint, versions, measurer, cancel, say);
  OpLevelProblem problem{&graph, &result.candidates, costs,
                         [&](const std::string& b) { return result.switchCosts.epsilonInto(b); },
                         result.allowed};
  result.deviceCosts.applyTo(problem);
  problem.layouts = &layoutCharges;
  result.layoutOffers = layoutCharges.offers();
  result.reorderModel = layoutCharges.model();
  OpLevelResult opLevel = optimizeOpLevel(problem, observer, cancel);
  result.cancelled = opLevel.cancelled;
  // The search's own figures over both of its runs (near ties run it again).
  double searchSeconds = opLevel.seconds, searchCpu = opLevel.cpuSeconds;
  size_t searchPeakBytes = opLevel.peakBytes;
  int64_t searchStates = opLevel.statesExpanded;
  // Near ties the noise may have decided (core/search/near_ties.h): measured again, then the DP again.
  if (!result.cancelled) {
    NearTieReport again;
    const OpLevelResult first = opLevel;
    opLevel = refineAtNearTies(graph, result.candidates, result.measurements, problem, first, coster,
                               cancel, &again);
    result.cancelled = opLevel.cancelled;
    if (again.ties > 0) {
      result.report.seconds += again.seconds;
      searchSeconds += opLevel.seconds;
      searchCpu += opLevel.cpuSeconds;
      searchPeakBytes = std::max(searchPeakBytes, opLevel.peakBytes);
      searchStates += opLevel.statesExpanded;
      if (observer) {
        // The chart gets one more step of the same search: where it ended.
        observer->onSearchStep(SearchStepEvent{
            "op-level", first.steps + 1,
            static_cast<int>(first.statesExpanded + opLevel.statesExpanded), opLevel.total,
            opLevel.total, first.seconds + again.seconds + opLevel.seconds});
        std::snprintf(line, sizeof line,
                      "near ties: %d fused kernel(s) within 25%% of their parts measured again with them "
                      "(%d kernels, %.1f s, %d read faster); predicted %.3f -> %.3f ms",
                      again.ties, again.remeasured, again.seconds, again.lowered, first.total / 1e6,
                      opLevel.total / 1e6);
        say(line);
      }
    }
  }

  std::vector<BackendVersion> backendVersions;
  for (const auto& [name, version] : versions) backendVersions.push_back(BackendVersion{name, version});
  auto planOf = [&](const OpLevelResult& r) {
    Plan p = makePlan(graph, options.modelPath, result.candidates, r.chosen, result.measurements,
                      PlanOrigin::OpLevel, fingerprint, backendVersions);
    chargeKernelsAsTheDp(layoutCharges, p.groups);
    p.predictedNs = r.total;
    p.createdBy = "collage-studio (op-level)";
    if (r.bounded) p.createdBy += "; " + r.note;  // so the plan and `collage explain` say so
    return p;
  };
  result.opLevel = opLevel;
  if (opLevel.bounded) say(opLevel.note);
  if (!result.cancelled) {
    // Where the time goes, by backend.
    std::map<std::string, std::pair<int, double>> perBackend;
    for (int32_t c : opLevel.chosen) {
      const std::string& backend = result.candidates[static_cast<size_t>(c)].backend;
      auto& [groups, ns] = perBackend[backend];
      ++groups;
      // As the DP charged it: in its own layout where it hands tensors over.
      ns += layoutCharges.kernelNs(c, problem.costs[static_cast<size_t>(c)]) +
            result.switchCosts.epsilonInto(backend);
    }
    std::snprintf(line, sizeof line, "\n%-10s %7s %12s %7s", "backend", "groups", "time", "share");
    std::string table = line;
    for (const auto& [backend, v] : perBackend) {
      std::snprintf(line, sizeof line, "\n%-10s %7d %9.3f ms %6.1f%%", backend.c_str(), v.first,
                    v.second / 1e6, 100 * v.second / opLevel.total);
      table += line;
    }
    if (const Cost reorders = layoutCharges.coverCost(opLevel.chosen); reorders > 0) {
      std::snprintf(line, sizeof line, "\n%-10s %7s %9.3f ms %6.1f%%  (layout changes at kernel boundaries)",
                    "reorders", "", reorders / 1e6, 100 * reorders / opLevel.total);
      table += line;
    }
    std::snprintf(line, sizeof line,
                  "\npredicted total %.3f ms; measuring %.1f s, search %.3f s (%lld states, %.3f s CPU, "
                  "peak %.2f MiB), total %.1f s",
                  opLevel.total / 1e6, result.report.seconds, searchSeconds, static_cast<long long>(searchStates),
                  searchCpu, static_cast<double>(searchPeakBytes) / (1 << 20),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - jobStart).count());
    std::string summary = table + line;
    if (result.report.skipped > 0) summary += "\n" + describeSkipped(result.report);
    say(summary);
  }
  // The baselines, from the same measurements: run end to end against the
  // op-level plan below, and reported (collage optimize --baselines).
  std::vector<std::string> order;
  for (const auto& [name, version] : options.versions) order.push_back(name);
  if (!result.cancelled) result.baselines = baselinePlacements(problem, order, &result.uncoveredBaselines);
  // One run of the model on the reference executor, estimated: the plans
  // below are checked against it only where it fits the worker's limit for
  // one paired request (plan_selection.h, referenceCheckSkipped).
  EndToEndOptions endToEndOptions;
  endToEndOptions.referenceSeconds = estimateReferenceRun(graph).ns / 1e9;
  endToEndOptions.timeLimitSeconds = options.graphLevelOptions.timeoutSeconds;
  const std::string unverified =
      referenceCheckSkipped(endToEndOptions.referenceSeconds, endToEndOptions.timeLimitSeconds);
  // Pins and forbids constrain the op-level plan only (the baselines ignore
  // them), so with constraints the op-level plan is kept as it is.
  double wholeRunMs = 0;  // the written plan's end-to-end median, when it was timed
  if (options.endToEnd && options.constraints.empty() && !result.cancelled) {
    EndToEndSelection selection;
    const PlanPairTimer timePair = [&](const Plan& a, const Plan& b, const PairedRunOptions& o) {
      return measurer.timePlans(a, b, o, options.graphLevelOptions.timeoutSeconds);
    };
    const auto start = std::chrono::steady_clock::now();
    int chosen = choosePlacementByEndToEnd(opLevel, result.baselines, planOf, timePair, &selection, cancel,
                                           endToEndOptions);
    result.endToEnd = describeSelection(selection);
    wholeRunMs = chosenPlanMs(selection);
    std::snprintf(line, sizeof line,
                  "\nend to end (the sum of isolated kernel costs misses cache and layout effects "
                  "between kernels), %.1f s:",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    say(line + ("\n" + result.endToEnd));
    if (chosen >= 0) {
      const NamedPlacement& b = result.baselines[static_cast<size_t>(chosen)];
      result.endToEndChoice = b.label;
      opLevel = b.result;
      result.plan = planOf(b.result);
      result.plan.createdBy += " (the " + b.label + " placement ran faster end to end)";
      say("writing the " + b.label + " placement: it ran faster than the op-level plan");
    }
  }
  if (result.plan.groups.empty()) result.plan = planOf(opLevel);
  result.plan.predictByWholeRun(wholeRunMs);
  if (options.graphLevel && options.backends && !result.cancelled) {
    std::vector<Backend*> backends;
    for (const auto& [name, version] : options.versions)
      if (Backend* b = options.backends(name)) backends.push_back(b);
    result.startPlan = result.plan;
    const std::vector<GraphLibrary> libraries =
        honouringConstraints(graph, graphLibrariesOf(graph, backends), options.constraints);
    std::string names;
    for (const auto& l : libraries) names += (names.empty() ? "" : ", ") + l.backend;
    const EvolutionOptions& e = options.graphLevelOptions.evolution;
    std::snprintf(line, sizeof line,
                  "\ngraph-level search (graph libraries: %s; budget %.0f s, stops after %d generations "
                  "without a better plan):",
                  names.empty() ? "none" : names.c_str(), e.budgetSeconds, e.saturationGenerations);
    say(line);
    GraphLevelOptions graphLevelOptions = options.graphLevelOptions;
    if (!unverified.empty()) {
      graphLevelOptions.runs.verify = false;
      say("  plans " + unverified);
    }
    // Plan runs are stored per model: a rewritten model is another one.
    if (sitesFile && graphLevelOptions.modelKey.empty())
      graphLevelOptions.modelKey = graphLevelModelKey(result.plan) + ";substitutions=" +
                                   stableHashHex(sitesToJson(result.substitutions.applied));
    result.graphLevel = runGraphLevelSearch(graph, result.plan, libraries, measurer, db.get(), fingerprint,
                                            graphLevelOptions, observer, cancel);
    result.graphLevelRan = true;
    result.plan = result.graphLevel.plan;
    if (result.graphLevel.improved) result.plan.createdBy += " + graph-level search";
    if (result.graphLevel.storedRuns > 0)
      say("(" + std::to_string(result.graphLevel.storedRuns) +
          " plans run by an earlier search were read from the database)");
    std::string report = describeGraphLevel(result.graphLevel);
    for (const auto& c : result.graphLevel.changes) report += "\n  " + c;
    say(report);
  }
  markPinnedGroups(result.plan, graph, options.constraints);
  result.plan.substitutions = planSubstitutions(result.substitutions);
  result.plan.substitutionRules = planSubstitutionRules(result.plan.substitutions);
  result.hasPlan = true;
  return result;
}

}  // namespace collage
