// `collage optimize model.onnx -o plan.json`: the tool's main job, as the app
// and the API run it (runOptimizationJob): enumerates candidates, costs them
// (database first, then isolated measurement), runs the op-level optimizer,
// the end-to-end check and the graph-level search (unless --op-level); this command
// prints the job's report and writes the plan.
#include <unistd.h>

#include <csignal>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <algorithm>
#include <map>

#include "app/cli_common.h"
#include "app/cli_progress.h"
#include "backends/backend_list.h"
#include "backends/reduced_precision.h"
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
#include "core/rewrite/substitution.h"
#include "core/rewrite/substitution_spec_file.h"
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

namespace {

// Ctrl-C while a Slurm job measures for --target: the wait loop sees the
// token within 50 ms and cancels the job (scancel) before the command ends.
CancellationToken interrupted;
extern "C" void onInterrupt(int) { interrupted.cancel(); }

}  // namespace

Action addOptimizeCommand(CLI::App& app) {
  struct Options : ModelOptions {
    std::vector<std::string> backends;
    std::vector<std::string> allowPrecisions;
    std::vector<std::string> pins, forbids;
    std::string db = MeasurementDb::defaultPath();
    std::string localDb;
    std::string output = "plan.json";
    bool noDb = false;
    bool baselines = false;
    std::string baselinePlans;
    double timeout = 60;
    bool noEndToEnd = false;
    bool opLevel = false;
    bool graphLevel = false;  // --graph-level: what happens anyway
    bool substitutions = false;
    bool noCanonicalRewrites = false;
    double alpha = 1.05;
    std::vector<std::string> substitute;
    std::vector<std::string> substitutionRules;
    std::string substitutionBudget = "30s";
    std::string budget = "5m";
    int saturation = 6;
    std::string target;
    std::string slurmWorkDir;
    int batchSize = 16;
    bool targetGraphLevel = false;
    std::string generationDeadline = "5m";
    std::string targetTimeout = "1h";
  };
  auto* command = app.add_subcommand("optimize", "measure candidates and find the fastest placement");
  auto options = std::make_shared<Options>();
  options->addTo(*command);
  command->add_option("--backends", options->backends, "backends to use (default: every available backend that computes in float32; a reduced-precision one "
                      "such as onednn_bf16 or cublas_tf32 only when named or allowed by --allow-precision)")
      ->delimiter(',');
  command->add_option("--allow-precision", options->allowPrecisions,
                      "let the plan trade precision for speed where measured faster: add the backends that compute "
                      "in this precision (bf16: onednn_bf16; tf32: cublas_tf32) to the set; their groups are "
                      "verified within the tolerance they declare (docs/precision.md)")
      ->delimiter(',');
  command->add_option("--pin", options->pins,
                      "pin nodes to a backend: NODES=BACKEND, NODES a name, re:REGEX, op:TYPE, "
                      "or a+b+c for one group (repeatable)");
  command->add_option("--forbid", options->forbids, "forbid a backend for nodes: NODES=BACKEND");
  command->add_option("--db", options->db,
                      "measurement database: a SQLite file, or a team's shared store "
                      "(postgresql://user@host/db, docs/shared-measurements.md)");
  command->add_option("--local-db", options->localDb,
                      "with a postgresql:// --db, the SQLite file that caches it (default: the "
                      "default database file)");
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
  auto* opLevel = command->add_flag(
      "--op-level", options->opLevel,
      "stop after the op-level plan: skip the graph-level search, which by default then searches "
      "whole plans (hands runs of groups to graph libraries as regions, measured end to end)");
  // What optimize does by default now; accepted so that scripts written when
  // the search was opt-in still run.
  command->add_flag("--graph-level", options->graphLevel, "run the graph-level search (the default)")
      ->excludes(opLevel);
  command->add_flag("--no-canonical-rewrites", options->noCanonicalRewrites,
                    "place the model as exported: do not first apply the exact rewrites that only remove "
                    "work (cancel-transposes: an exporter's NHWC<->NCHW Transposes; docs/substitutions.md)");
  command->add_flag("--substitutions,!--no-substitutions", options->substitutions,
                    "first search graph substitutions (merge sibling MatMul/Gemm/Conv, collapse Transpose "
                    "and reshape chains), each checked equivalent, costed by the placement they allow "
                    "(default: off)");
  command->add_option("--alpha", options->alpha,
                      "the substitution search explores graphs up to this factor of the best cost (default 1.05)")
      ->check(CLI::Range(1.0, 10.0));
  command->add_option("--substitute", options->substitute,
                      "apply this substitution rule wherever it holds, whatever it costs (each site still "
                      "checked equivalent); implies --substitutions (repeatable; \"all\": every rule, spec files' too)")
      ->delimiter(',');
  command->add_option("--substitution-rules", options->substitutionRules,
                      "also search the substitution rules of this file (TOML, [rules.NAME] tables with source, "
                      "target, condition: docs/substitutions.md); the plan carries the rules it used (repeatable)");
  command->add_option("--substitution-budget", options->substitutionBudget,
                      "time budget of the substitution search (default 30s)");
  command->add_option("--budget", options->budget,
                      "time budget of the graph-level search: 90s, 5m, 1h or seconds (default 5m)");
  command->add_option("--saturation", options->saturation,
                      "stop the graph-level search after this many generations without a better plan")
      ->check(CLI::PositiveNumber);
  command->add_option("--target", options->target,
                      "measure on the Slurm nodes with this feature (--constraint) instead of this machine, "
                      "and plan for them; needs a postgresql:// --db (docs/team-setup.md)");
  command->add_option("--slurm-work-dir", options->slurmWorkDir,
                      "with --target, a folder the nodes share with this machine for the job's files (default: "
                      "$COLLAGE_SLURM_WORK_DIR, else ~/.cache/collage-studio/slurm)");
  command->add_option("--batch-size", options->batchSize, "with --target, kernels per Slurm array task (default 16)")
      ->check(CLI::PositiveNumber);
  command->add_flag("--target-graph-level", options->targetGraphLevel,
                    "with --target, run the graph-level search too, each generation's plans as one Slurm job "
                    "array (each plan timed paired with the incumbent on a node); off by default");
  command->add_option("--target-timeout", options->targetTimeout,
                      "with --target, how long the Slurm job may take, queueing included, before it is "
                      "cancelled and optimize stops with an error (a drained constraint never runs a "
                      "task); 90s, 30m, 2h or seconds, 0 for no limit (default 1h)");
  command->add_option("--generation-deadline", options->generationDeadline,
                      "with --target-graph-level, how long a generation waits for its plans; those still out "
                      "keep their estimate and are collected later (default 5m)");
  return [options]() {
    const double budgetSeconds = parseDurationSeconds(options->budget, "--budget");
    Graph graph = options->load();
    // An If on a graph input stays in the plan, both branches; a merged
    // decoder's `generate` runs each branch inlined, its flag bound.
    for (const Node& node : graph.nodes())
      if (node.op == "If" && graph.value(node.inputs.at(0)).isGraphInput) {
        const std::string& flag = graph.value(node.inputs.at(0)).name;
        std::cerr << "note: node '" << node.name << "' (If) chooses its branch by input '" << flag
                  << "': the plan keeps the If; to plan one branch, bind it with --input-value "
                  << flag << "=true or =false (a merged decoder: the bindings `collage generate "
                  << "--print-bindings` or --print-prefill-bindings prints)\n";
        break;
      }
    BackendSet set = loadBackendSet(withAllowedPrecisions(options->backends, options->allowPrecisions));
    for (const auto& w : set.warnings) std::cerr << "warning: " << w << "\n";

    // The same job the app and the API run (core/search/optimization_job.h):
    // this command only sets it up, shows its progress and writes the plan.
    OptimizationJobOptions job;
    job.modelPath = options->modelPath;
    job.inputShapes = options->bindings();
    job.capabilities = set.capabilities();
    job.versions = set.versions();
    job.dbPath = options->db;
    job.localDbPath = options->localDb;
    job.noDb = options->noDb;
    job.timeoutSeconds = options->timeout;
    job.workerExecutable = selfExecutable();
    job.backends = [&set](const std::string& n) { return set.find(n); };
    job.endToEnd = !options->noEndToEnd;
    for (const auto& p : options->pins) job.constraints.pins.push_back(PlacementConstraints::parsePin(p));
    for (const auto& f : options->forbids)
      job.constraints.forbids.push_back(PlacementConstraints::parseForbid(f));
    job.graphLevel = !options->opLevel;
    // A user's rules join the search (and the workers load them too); a rule
    // that does not load is reported and the file's other rules still load.
    for (const std::string& file : options->substitutionRules) {
      const std::vector<std::string> errors = registerSubstitutionRules(file);
      for (const std::string& e : errors) std::cerr << "warning: " << e << "\n";
      job.substitutionRuleFiles.push_back(std::filesystem::absolute(file).string());
    }
    // "all": every rule this run knows, the C++ ones in their fixed order,
    // then those of the spec files (built in, then --substitution-rules).
    std::vector<std::string> forced;
    for (const std::string& rule : options->substitute) {
      if (rule != "all") {
        forced.push_back(rule);
        continue;
      }
      for (const auto& r : standardSubstitutions()) forced.push_back(r->name());
      for (const Substitution* r : specSubstitutions()) forced.push_back(r->name());
    }
    options->substitute = forced;
    for (const std::string& rule : options->substitute)
      if (!findSubstitution(rule)) {
        std::string known;
        for (const auto& r : standardSubstitutions()) known += (known.empty() ? "" : ", ") + r->name();
        for (const Substitution* r : specSubstitutions()) known += ", " + r->name();
        throw Error("--substitute '" + rule + "': no such substitution rule (the rules: " + known + ")");
      }
    job.substitutions = options->substitutions || !options->substitute.empty();
    job.canonicalRewrites = !options->noCanonicalRewrites;
    job.substitutionOptions.forcedRules = options->substitute;
    job.substitutionOptions.alpha = options->alpha;
    job.substitutionOptions.budgetSeconds =
        parseDurationSeconds(options->substitutionBudget, "--substitution-budget");
    job.graphLevelOptions.evolution.budgetSeconds = budgetSeconds;
    job.graphLevelOptions.evolution.saturationGenerations = options->saturation;
    job.graphLevelOptions.timeoutSeconds = std::max(60.0, options->timeout);

    job.target = options->target;
    job.targetWorkDir = options->slurmWorkDir;
    job.targetBatchSize = options->batchSize;
    job.targetGraphLevel = options->targetGraphLevel;
    job.targetGenerationSeconds = parseDurationSeconds(options->generationDeadline, "--generation-deadline");
    job.targetTimeoutSeconds = options->targetTimeout == "0"
                                   ? 0
                                   : parseDurationSeconds(options->targetTimeout, "--target-timeout");

    // The job's report on stdout, its progress bar on stderr.
    TerminalProgress progress(/*logToStdout=*/true);
    if (!job.target.empty()) std::signal(SIGINT, onInterrupt);
    OptimizationResult result =
        runOptimizationJob(graph, job, &progress, job.target.empty() ? nullptr : &interrupted);
    progress.finish();
    if (result.cancelled && !job.target.empty()) {
      std::fprintf(stderr, "interrupted: no plan written\n");
      return 130;
    }
    // The graph the plan places: the model, or the model rewritten.
    const Graph& placed = placedGraph(result, graph);

    // The baselines, from the same measurements: reported, and written for the bench.
    if (options->baselines || !options->baselinePlans.empty()) {
      std::printf("\nbaselines (predicted from the same measurements):\n");
      for (const auto& b : result.baselines)
        std::printf("  %-24s %9.3f ms  (%.2fx the op-level plan)\n", b.label.c_str(), b.result.total / 1e6,
                    b.result.total / result.opLevel.total);
      for (const auto& u : result.uncoveredBaselines) {  // "backend: reason"
        const size_t colon = u.find(": ");
        std::printf("  only %-19s cannot cover the model: %s\n", u.substr(0, colon).c_str(),
                    u.substr(colon + 2).c_str());
      }
    }
    if (!options->baselinePlans.empty()) {
      std::filesystem::create_directories(options->baselinePlans);
      for (const auto& b : result.baselines) {
        Plan p = makePlan(placed, options->modelPath, result.candidates, b.result.chosen, result.measurements,
                          PlanOrigin::OpLevel, set.fingerprint(graph), set.versions());
        p.substitutions = result.plan.substitutions;
        p.substitutionRules = result.plan.substitutionRules;
        p.predictedNs = b.result.total;
        p.createdBy = "collage optimize (baseline: " + b.label + ")";
        savePlan(p, options->baselinePlans + "/" + b.file + ".json");
      }
    }
    savePlan(result.plan, options->output);
    std::printf("plan written to %s (%zu groups)\n", options->output.c_str(), result.plan.groups.size());
    return 0;
  };
}

}  // namespace collage::cli
