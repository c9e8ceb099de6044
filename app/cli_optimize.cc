// `collage optimize model.onnx -o plan.json`: the tool's main job. Enumerates
// candidates, costs them (database first, then isolated measurement), runs
// the op-level optimizer, prints where the time goes, and writes the plan.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include "app/cli_common.h"
#include "app/cli_progress.h"
#include "backends/backend_list.h"
#include "core/candidate_costs.h"
#include "core/error.h"
#include "core/measurement_db.h"
#include "core/measurer.h"
#include "core/op_level_optimizer.h"
#include "core/placement_constraints.h"
#include "core/plan_override.h"
#include "core/plan.h"
#include "core/switch_costs.h"
#include "core/threading.h"

namespace collage::cli {

std::string selfExecutable() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot locate this executable to start measurement workers");
  return p.string();
}

std::vector<std::string> workerCommand(const ModelOptions& model) {
  std::vector<std::string> cmd = {selfExecutable(), "--threads", std::to_string(threadCount()),
                                  "measure-worker", model.modelPath};
  for (const auto& s : model.inputShapes) {
    cmd.push_back("--input-shape");
    cmd.push_back(s);
  }
  return cmd;
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
  return [options]() {
    using Clock = std::chrono::steady_clock;
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
    CandidateCoster coster(
        graph, db.get(), fingerprint, [&](const std::string& b) { return versions[b]; },
        [&](const Candidate& c) { return measurer.measure(c.backend, c.nodes); });
    TerminalProgress progress;
    CostingReport report;
    std::printf("%s: %d nodes, %zu candidates on %zu backends\n", options->modelPath.c_str(),
                graph.numNodes(), candidates.size(), set.specs.size());
    std::vector<Measurement> measurements =
        coster.costAll(candidates, allowed, &progress, nullptr, &report);
    progress.finish();
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

    std::vector<Cost> costs;
    for (const auto& m : measurements) costs.push_back(m.cost());
    OpLevelProblem problem{&graph, &candidates, costs,
                           [&](const std::string& b) { return switchCosts.epsilonInto(b); },
                           allowed};
    auto searchStart = Clock::now();
    OpLevelResult result = optimizeOpLevel(problem, &progress);
    double searchSeconds = std::chrono::duration<double>(Clock::now() - searchStart).count();

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
    if (options->baselines || !options->baselinePlans.empty()) {
      std::printf("\nbaselines (predicted from the same measurements):\n");
      for (const auto& spec : set.specs) {
        try {
          OpLevelResult single = singleBackendPlacement(problem, spec.name);
          std::printf("  %-24s %9.3f ms  (%.2fx the op-level plan)\n", ("only " + spec.name).c_str(),
                      single.total / 1e6, single.total / result.total);
          writeBaseline(single, "only_" + spec.name + ".json", "only " + spec.name);
        } catch (const Error& e) {
          std::printf("  only %-19s cannot cover the model: %s\n", spec.name.c_str(), e.what());
        }
      }
      std::vector<std::string> order;
      for (const auto& spec : set.specs) order.push_back(spec.name);
      OpLevelResult priority = priorityPlacement(problem, order);
      std::printf("  %-24s %9.3f ms  (%.2fx)\n", "priority", priority.total / 1e6,
                  priority.total / result.total);
      writeBaseline(priority, "priority.json", "priority order");
    }

    Plan plan = makePlan(graph, options->modelPath, candidates, result.chosen, measurements,
                         PlanOrigin::OpLevel, fingerprint, backendVersions);
    plan.predictedNs = result.total;
    markPinnedGroups(plan, graph, constraints);  // pinned groups say so: origin "user"
    savePlan(plan, options->output);
    std::printf("plan written to %s (%zu groups)\n", options->output.c_str(), plan.groups.size());
    return 0;
  };
}

}  // namespace collage::cli
