// `collage optimize model.onnx -o plan.json`: the tool's main job. Enumerates
// candidates, costs them (database first, then isolated measurement), runs
// the op-level optimizer, prints where the time goes, and writes the plan.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <algorithm>
#include <map>

#include "app/cli_common.h"
#include "app/cli_progress.h"
#include "backends/backend_list.h"
#include "core/measure/candidate_costs.h"
#include "core/ir/error.h"
#include "core/measure/measurement_db.h"
#include "core/measure/measurer.h"
#include "core/search/device_costs.h"
#include "core/search/graph_level_search.h"
#include "core/search/near_ties.h"
#include "core/search/op_level_optimizer.h"
#include "core/search/placement_constraints.h"
#include "core/search/plan_override.h"
#include "core/plan/plan.h"
#include "core/search/plan_from_cover.h"
#include "core/search/plan_selection.h"
#include "core/measure/switch_costs.h"
#include "core/ir/threading.h"

namespace collage::cli {

std::string selfExecutable() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot locate this executable to start measurement workers");
  return p.string();
}

std::vector<std::string> workerCommand(const ModelOptions& model) {
  return measurementWorkerCommand(selfExecutable(), model.modelPath, model.inputShapes);
}

// "90s", "5m", "1h" or plain seconds; Error naming the option otherwise.
double parseDurationSeconds(const std::string& text, const std::string& option) {
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  const std::string unit = text.substr(std::min(used, text.size()));
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : -1;
  if (value <= 0 || scale < 0)
    throw Error(option + " '" + text + "': expected a positive duration such as 90s, 5m or 1h");
  return value * scale;
}

Action addOptimizeCommand(CLI::App& app) {
  struct Options : ModelOptions {
    std::vector<std::string> backends;
    std::vector<std::string> pins, forbids;
    std::string db = MeasurementDb::defaultPath();
    std::string output = "plan.json";
    bool noDb = false;
    bool baselines = false;
    std::string baselinePlans;
    double timeout = 60;
    bool noEndToEnd = false;
    bool graphLevel = false;
    std::string budget = "5m";
    int saturation = 6;
  };
  auto* command = app.add_subcommand("optimize", "measure candidates and find the fastest placement");
  auto options = std::make_shared<Options>();
  options->addTo(*command);
  command->add_option("--backends", options->backends, "backends to use (default: all)")
      ->delimiter(',');
  command->add_option("--pin", options->pins,
                      "pin nodes to a backend: NODES=BACKEND, NODES a name, re:REGEX, op:TYPE, "
                      "or a+b+c for one group (repeatable)");
  command->add_option("--forbid", options->forbids, "forbid a backend for nodes: NODES=BACKEND");
  command->add_option("--db", options->db, "measurement database (SQLite)");
  command->add_flag("--no-db", options->noDb, "measure everything, store nothing");
  command->add_option("-o,--output", options->output, "where to write the plan");
  command->add_flag("--baselines", options->baselines,
                    "also report each single-backend placement and the priority placement");
  command->add_option("--baseline-plans", options->baselinePlans,
                      "also write each baseline as a plan into this folder (only_<backend>.json, "
                      "priority.json), for like-for-like benchmarks; implies --baselines");
  command->add_option("--timeout", options->timeout, "seconds before a kernel measurement is killed");
  command->add_flag("--no-end-to-end", options->noEndToEnd,
                    "write the op-level plan without running it against the baselines end to end");
  command->add_flag("--graph-level", options->graphLevel,
                    "then search whole plans: hand runs of groups to graph libraries as regions, "
                    "measured end to end (an evolutionary search)");
  command->add_option("--budget", options->budget,
                      "time budget of the graph-level search: 90s, 5m, 1h or seconds (default 5m)");
  command->add_option("--saturation", options->saturation,
                      "stop the graph-level search after this many generations without a better plan")
      ->check(CLI::PositiveNumber);
  return [options]() {
    using Clock = std::chrono::steady_clock;
    const double budgetSeconds = parseDurationSeconds(options->budget, "--budget");
    auto t0 = Clock::now();
    Graph graph = options->load();
    BackendSet set = loadBackendSet(options->backends);
    for (const auto& w : set.warnings) std::cerr << "warning: " << w << "\n";
    CandidateSet candidates = enumerateCandidates(graph, set.capabilities());

    PlacementConstraints constraints;
    for (const auto& p : options->pins) constraints.pins.push_back(PlacementConstraints::parsePin(p));
    for (const auto& f : options->forbids)
      constraints.forbids.push_back(PlacementConstraints::parseForbid(f));
    std::vector<bool> allowed = allowedCandidates(graph, candidates, constraints);

    HardwareFingerprint fingerprint = set.fingerprint();
    std::map<std::string, std::string> versions;
    for (size_t i = 0; i < set.specs.size(); ++i) versions[set.specs[i].name] = set.backends[i]->version();
    std::unique_ptr<MeasurementDb> db;
    if (!options->noDb) db = std::make_unique<MeasurementDb>(options->db);

    MeasurerOptions measurerOptions;
    measurerOptions.timeoutSeconds = options->timeout;
    IsolatedMeasurer measurer(workerCommand(*options), measurerOptions);
    measurer.setWaitingReporter([](const std::string& holder) {
      std::fprintf(stderr, "\nwaiting for the machine's timing lock, held by %s\n", holder.c_str());
    });
    CandidateCoster coster(
        graph, db.get(), fingerprint, [&](const std::string& b) { return versions[b]; },
        [&](const Candidate& c) { return measurer.measure(c.backend, c.nodes); });
    TerminalProgress progress;
    CostingReport report;
    const std::string busy = busyMachineWarning();  // before our own worker adds to the load
    std::printf("%s: %d nodes, %zu candidates on %zu backends\n", options->modelPath.c_str(),
                graph.numNodes(), candidates.size(), set.specs.size());
    std::vector<Measurement> measurements =
        coster.costAll(candidates, allowed, &progress, nullptr, &report);
    progress.finish();
    if (!busy.empty() && report.measured > 0) std::cerr << "warning: " << busy << "\n";
    if (report.measured == 0 && !options->noDb)
      std::printf("warm database: nothing measured, %d distinct kernels from %s\n", report.cached,
                  options->db.c_str());
    else
      std::printf("measured %d kernels in %.1f s (%d from the database, %d failed or invalid)\n",
                  report.measured, report.seconds, report.cached, report.failed);

    SwitchCostTable switchCosts = measureSwitchCosts(
        candidates, measurements, versions, db.get(), fingerprint,
        [&](const Candidate& a, const Candidate& b) {
          return measurer.measureSwitch(a.backend, a.nodes, b.backend, b.nodes);
        });
    std::printf("%s", switchCosts.toString().c_str());
    if (switchCosts.measured == 0 && report.measured == 0)
      std::printf("(switching costs from the database too)\n");

    // Copies between the host and a GPU (none when every backend is on the host).
    std::vector<std::string> backendNames;
    for (const auto& spec : set.specs) backendNames.push_back(spec.name);
    const DeviceCosts deviceCosts = measureDeviceCosts(
        backendNames, [&](const std::string& n) { return set.find(n); }, db.get(), fingerprint);
    for (const std::string& note : deviceCosts.notes) std::printf("copies: %s\n", note.c_str());

    std::vector<Cost> costs;
    for (const auto& m : measurements) costs.push_back(m.cost());
    OpLevelProblem problem{&graph, &candidates, costs,
                           [&](const std::string& b) { return switchCosts.epsilonInto(b); },
                           allowed};
    deviceCosts.applyTo(problem);
    auto searchStart = Clock::now();
    OpLevelResult result = optimizeOpLevel(problem, &progress);
    double searchSeconds = std::chrono::duration<double>(Clock::now() - searchStart).count();
    // Near ties the noise may have decided (core/search/near_ties.h): measured again, then the DP again.
    NearTieReport again;
    const Cost before = result.total;
    searchStart = Clock::now();
    result = refineAtNearTies(graph, candidates, measurements, problem, result, coster, nullptr, &again);
    costs = problem.costs;
    if (again.ties > 0) {
      report.seconds += again.seconds;
      searchSeconds += std::chrono::duration<double>(Clock::now() - searchStart).count() - again.seconds;
      std::printf("near ties: %d fused kernel(s) within 25%% of their parts measured again with them "
                  "(%d kernels, %.1f s, %d read faster); predicted %.3f -> %.3f ms\n",
                  again.ties, again.remeasured, again.seconds, again.lowered, before / 1e6,
                  result.total / 1e6);
    }

    // Where the time goes.
    std::map<std::string, std::pair<int, double>> perBackend;
    for (int32_t c : result.chosen) {
      auto& [groups, ns] = perBackend[candidates[c].backend];
      ++groups;
      ns += costs[c] + switchCosts.epsilonInto(candidates[c].backend);
    }
    std::printf("\n%-10s %7s %12s %7s\n", "backend", "groups", "time", "share");
    for (const auto& [backend, v] : perBackend)
      std::printf("%-10s %7d %9.3f ms %6.1f%%\n", backend.c_str(), v.first, v.second / 1e6,
                  100 * v.second / result.total);
    std::printf("predicted total %.3f ms; measuring %.1f s, search %.3f s (%lld states), total %.1f s\n",
                result.total / 1e6, report.seconds, searchSeconds,
                static_cast<long long>(result.statesExpanded),
                std::chrono::duration<double>(Clock::now() - t0).count());

    std::vector<BackendVersion> backendVersions;
    for (const auto& [name, version] : versions) backendVersions.push_back(BackendVersion{name, version});
    auto writeBaseline = [&](const OpLevelResult& r, const std::string& file, const std::string& label) {
      if (options->baselinePlans.empty()) return;
      std::filesystem::create_directories(options->baselinePlans);
      Plan p = makePlan(graph, options->modelPath, candidates, r.chosen, measurements,
                        PlanOrigin::OpLevel, fingerprint, backendVersions);
      p.predictedNs = r.total;
      p.createdBy = "collage optimize (baseline: " + label + ")";
      savePlan(p, options->baselinePlans + "/" + file);
    };
    // The baselines, from the same measurements: reported, written for the
    // bench, and run end to end against the op-level plan below.
    std::vector<std::string> order, uncovered;
    for (const auto& spec : set.specs) order.push_back(spec.name);
    std::vector<NamedPlacement> baselines = baselinePlacements(problem, order, &uncovered);
    if (options->baselines || !options->baselinePlans.empty()) {
      std::printf("\nbaselines (predicted from the same measurements):\n");
      for (const auto& b : baselines)
        std::printf("  %-24s %9.3f ms  (%.2fx the op-level plan)\n", b.label.c_str(), b.result.total / 1e6,
                    b.result.total / result.total);
      for (const auto& u : uncovered) {  // "backend: reason"
        const size_t colon = u.find(": ");
        std::printf("  only %-19s cannot cover the model: %s\n", u.substr(0, colon).c_str(),
                    u.substr(colon + 2).c_str());
      }
    }
    for (const auto& b : baselines) writeBaseline(b.result, b.file + ".json", b.label);

    auto planOf = [&](const OpLevelResult& r) {
      Plan p = makePlan(graph, options->modelPath, candidates, r.chosen, measurements, PlanOrigin::OpLevel,
                        fingerprint, backendVersions);
      p.predictedNs = r.total;
      return p;
    };
    Plan plan = planOf(result);
    // Pins and forbids constrain the op-level plan only (the baselines ignore
    // them), so with constraints the op-level plan is written as it is.
    if (!options->noEndToEnd && constraints.empty()) {
      auto e2eStart = Clock::now();
      EndToEndSelection selection;
      const PlanPairTimer timePair = [&](const Plan& a, const Plan& b, const PairedRunOptions& o) {
        return measurer.timePlans(a, b, o, std::max(60.0, options->timeout));
      };
      int chosen = choosePlacementByEndToEnd(graph, result, baselines, planOf, timePair, &selection);
      std::printf("\nend to end (the sum of isolated kernel costs misses cache and layout effects between "
                  "kernels), %.1f s:\n%s",
                  std::chrono::duration<double>(Clock::now() - e2eStart).count(),
                  describeSelection(selection).c_str());
      if (chosen >= 0) {
        plan = planOf(baselines[static_cast<size_t>(chosen)].result);
        plan.createdBy += " (the " + baselines[static_cast<size_t>(chosen)].label +
                          " placement ran faster end to end)";
        std::printf("writing the %s placement: it ran faster than the op-level plan\n",
                    baselines[static_cast<size_t>(chosen)].label.c_str());
      }
    }
    if (options->graphLevel) {
      std::vector<Backend*> backends;
      for (auto& b : set.backends) backends.push_back(b.get());
      GraphLevelOptions glOptions;
      glOptions.evolution.budgetSeconds = budgetSeconds;
      glOptions.evolution.saturationGenerations = options->saturation;
      glOptions.timeoutSeconds = std::max(60.0, options->timeout);
      const std::vector<GraphLibrary> libraries =
          honouringConstraints(graph, graphLibrariesOf(graph, backends), constraints);
      std::string names;
      for (const auto& l : libraries) names += (names.empty() ? "" : ", ") + l.backend;
      std::printf("\ngraph-level search (graph libraries: %s; budget %.0f s, stops after %d generations "
                  "without a better plan):\n",
                  names.empty() ? "none" : names.c_str(), budgetSeconds, options->saturation);
      GraphLevelResult gl = runGraphLevelSearch(graph, plan, libraries, measurer, db.get(), fingerprint,
                                                glOptions, &progress, nullptr);
      if (gl.storedRuns > 0)
        std::printf("(%d plans run by an earlier search were read from the database)\n", gl.storedRuns);
      std::printf("%s\n", describeGraphLevel(gl).c_str());
      for (const auto& c : gl.changes) std::printf("  %s\n", c.c_str());
      plan = gl.plan;
      if (gl.improved) plan.createdBy += " + graph-level search";
    }
    markPinnedGroups(plan, graph, constraints);  // pinned groups say so: origin "user"
    savePlan(plan, options->output);
    std::printf("plan written to %s (%zu groups)\n", options->output.c_str(), plan.groups.size());
    return 0;
  };
}

}  // namespace collage::cli
