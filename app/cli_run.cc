// `collage run model.onnx`: runs a model with the reference executor or a
// plan's Session, on random or given inputs; reports latency and peak memory,
// checks outputs (--expect files, --verify against the reference), and
// writes the per-kernel trace and node-data exports.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "backends/reduced_precision.h"
#include "core/ir/error.h"
#include "core/ir/hardware_fingerprint.h"
#include "core/ops/model_stats.h"
#include "core/plan/plan.h"
#include "core/plan/plan_export.h"
#include "core/rewrite/equivalence_check.h"
#include "core/ops/reference_executor.h"
#include "core/measure/plan_check.h"
#include "core/measure/machine_timing_lock.h"
#include "core/runtime/session.h"
#include "core/ir/tensor_compare.h"

namespace collage::cli {

Action addRunCommand(CLI::App& app) {
  struct RunOptions : ModelOptions {
    std::string backend = "reference";
    std::string plan;
    bool verify = false;
    std::vector<std::string> inputFiles;
    std::vector<std::string> expectFiles;
    std::string outputDir;
    int repeat = 1;
    uint64_t seed = 0;
    std::string trace, nodeData, annotated;
    std::string nodeDataKind = "backend";
    std::string pipeline, topology;
    int batch = 0;
    std::string pipelineBackend = "native";
    std::string baseline;
    bool mpi = false;
    double mpiTimeout = 120;
  };
  auto* command = app.add_subcommand("run", "run a model (reference or a plan) and report latency");
  auto options = std::make_shared<RunOptions>();
  options->addTo(*command);
  command->add_option("--backend", options->backend, "executor without a plan: reference")
      ->check(CLI::IsMember({"reference"}));
  command->add_option("--plan", options->plan, "run this plan (from collage optimize) in a Session");
  command->add_flag("--verify", options->verify,
                    "compare every output of the plan with the reference executor (float32's tolerance, or the "
                    "loosest one the plan's reduced-precision backends declare)");
  command->add_option("--input", options->inputFiles,
                      "input TensorProto (.pb) files, in input order (default: random); a dynamic "
                      "input is bound to its file's shape unless --input-shape binds it");
  command->add_option("--expect", options->expectFiles,
                      "expected output TensorProto files, in output order (rtol 1e-3, atol 1e-5)");
  command->add_option("--output-dir", options->outputDir,
                      "write each output as DIR/output_N.pb (TensorProto, output order), as ONNX's "
                      "test data names them");
  command->add_option("--repeat", options->repeat, "timed runs")->check(CLI::PositiveNumber);
  command->add_option("--seed", options->seed, "seed of the random inputs");
  command->add_option("--trace", options->trace,
                      "write per-kernel timings as Chrome-trace JSON (with --pipeline: each stage's micro-batches)");
  command->add_option("--node-data", options->nodeData, "write Model Explorer node data JSON");
  command->add_option("--node-data-kind", options->nodeDataKind, "backend | latency | group-latency");
  command->add_option("--annotated-onnx", options->annotated,
                      "write the model with each node's backend and group in its metadata");
  command->add_option("--pipeline", options->pipeline,
                      "stream a batch through this pipeline's stages (from collage pipeline), in this process "
                      "(with --mpi: one MPI rank per stage)");
  command->add_option("--topology", options->topology, "with --pipeline: refuse it unless made for this topology file");
  command->add_option("--batch", options->batch, "with --pipeline: samples (default: the pipeline's batch)")
      ->check(CLI::PositiveNumber);
  command->add_option("--pipeline-backend", options->pipelineBackend, "with --pipeline: the backend of every stage");
  command->add_option("--baseline", options->baseline,
                      "with --pipeline: run a baseline on its devices instead: one-device or data-parallel")
      ->check(CLI::IsMember({"one-device", "data-parallel"}));
  command->add_flag("--mpi", options->mpi,
                    "with --pipeline: run each stage in its own MPI rank (start with mpirun -n STAGES)");
  command->add_option("--mpi-timeout", options->mpiTimeout,
                      "with --mpi: seconds a rank waits for another before the run fails (default 120)")
      ->check(CLI::PositiveNumber);
  return [options]() {
    if (options->mpi && options->pipeline.empty())
      throw Error("--mpi runs a pipeline's stages as MPI ranks: give --pipeline too");
    if (!options->pipeline.empty())
      return runPipeline(*options, {options->pipeline, options->topology, options->batch, options->pipelineBackend,
                                    options->plan, options->seed, options->verify, options->baseline,
                                    options->mpi, options->mpiTimeout, options->trace});
    std::vector<Tensor> inputs;
    for (const auto& f : options->inputFiles) inputs.push_back(readTensorProtoFile(f));
    // A dynamic input given as a file is bound to the file's shape, unless
    // --input-shape binds it.
    if (!inputs.empty()) {
      const std::vector<DeclaredInput> declared = readDeclaredInputs(options->modelPath);
      for (size_t i = 0; i < declared.size() && i < inputs.size(); ++i) {
        const std::string prefix = declared[i].name + "=";
        const bool bound = std::any_of(options->inputShapes.begin(), options->inputShapes.end(),
                                       [&](const std::string& b) { return b.rfind(prefix, 0) == 0; });
        if (!declared[i].isDynamic() || bound || inputs[i].isSequence()) continue;
        std::string dims;
        for (int64_t d : inputs[i].shape()) dims += (dims.empty() ? "" : "x") + std::to_string(d);
        options->inputShapes.push_back(prefix + dims);
      }
    }
    Graph graph = options->load();
    if (inputs.empty()) {
      inputs = randomInputs(graph, options->seed);
    } else if (inputs.size() != graph.inputs().size()) {
      throw Error(options->modelPath + ": the model has " + std::to_string(graph.inputs().size()) +
                  " inputs, " + std::to_string(options->inputFiles.size()) + " --input files given");
    }

    std::unique_ptr<Plan> plan;
    // The model's outputs as given, on the reference executor, when a
    // verified plan rewrites it (by name: the rewritten graph's outputs).
    std::optional<std::vector<Tensor>> modelOutputs;
    std::vector<std::string> modelOutputNames;
    std::unique_ptr<BackendSet> backends;
    std::unique_ptr<Session> session;
    if (!options->plan.empty()) {
      plan = std::make_unique<Plan>(loadPlan(options->plan));
      // The plan's substitutions, replayed (and checked): its groups name
      // the rewritten graph's nodes. --verify compares with the model as
      // given, never with the rewritten graph (a wrong rewrite would be
      // checked against itself): one reference run of the model gives its
      // outputs and the ranges of the values the rewrites read, which the
      // replay's checks draw inputs from too.
      if (!plan->substitutions.empty()) {
        const Graph& model = graph;
        ValueRanges ranges;
        if (options->verify) {
          modelOutputs.emplace();
          ranges = observeValueRanges(model, inputs, siteInputValues(model, planSites(*plan)), &*modelOutputs);
          for (size_t i = 0; i < model.outputs().size(); ++i)
            modelOutputNames.push_back(model.value(model.outputs()[i]).name);
        }
        graph = planGraph(*plan, model, nullptr, options->verify ? &ranges : nullptr);
      }
      std::vector<std::string> warnings;
      backends = std::make_unique<BackendSet>(
          loadBackendsForPlan(*plan, graph, options->modelPath, {}, &warnings));
      for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
      session = std::make_unique<Session>(
          graph, *plan, [&](const std::string& name) { return backends->find(name); });
      session->setProfiling(!options->trace.empty() || !options->nodeData.empty());
    } else if (options->verify) {
      throw Error("--verify compares a plan with the reference executor: give --plan");
    }

    ReferenceExecutor reference(graph);
    std::vector<Tensor> outputs;
    std::vector<double> ms;
    std::vector<Session::KernelTiming> timings;
    // One untimed run first: the first run pays page faults and thread start-up.
    // Repeated runs are a timing: alone on the machine (machine_timing_lock.h).
    std::optional<MachineTimingLock> turn;
    if (options->repeat > 1)
      turn.emplace("collage run --repeat " + options->modelPath, [](const std::string& holder) {
        std::fprintf(stderr, "%s%s\n", kWaitingForTimingLock, holder.c_str());
      });
    if (options->repeat > 1) session ? (void)session->run(inputs) : (void)reference.run(inputs);
    for (int r = 0; r < options->repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      outputs = session ? session->run(inputs) : reference.run(inputs);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (session && session->profiling())
        timings.insert(timings.end(), session->lastTimings().begin(), session->lastTimings().end());
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    const double spread = sorted.size() >= 4
                              ? (sorted[3 * sorted.size() / 4] - sorted[sorted.size() / 4]) / median
                              : 0;
    for (size_t i = 0; i < outputs.size(); ++i)
      std::cout << "output " << graph.value(graph.outputs()[i]).name << ": " << outputs[i].toString()
                << "\n";
    for (size_t i = 0; !options->outputDir.empty() && i < outputs.size(); ++i)
      writeTensorProtoFile(options->outputDir + "/output_" + std::to_string(i) + ".pb", outputs[i],
                           graph.value(graph.outputs()[i]).name);
    std::printf("latency: median %.3f ms, spread %.1f%% over %d run(s) (min %.3f, max %.3f), %s\n",
                median, spread * 100, options->repeat, sorted.front(), sorted.back(),
                session ? ("plan " + options->plan).c_str() : "reference executor");
    if (session) {
      std::printf("peak memory: %s of intermediate tensors (%s if none were reused), %zu kernels\n",
                  formatBytes(static_cast<double>(session->peakBytes())).c_str(),
                  formatBytes(static_cast<double>(session->totalValueBytes())).c_str(),
                  plan->groups.size());
      if (session->nativeLayoutValues() > 0)
        std::printf("%d tensor(s) passed between kernels in a backend's own layout (no reorders)\n",
                    session->nativeLayoutValues());
      // Like with like: a plan the optimizer timed whole is predicted by
      // that time; the sum of its kernels timed alone is shown beside it.
      const bool timedWhole = std::isfinite(plan->kernelsAloneNs) && plan->kernelsAloneNs > 0;
      if (plan->predictedNs > 0)
        std::printf("predicted: %.3f ms, %s (measured/predicted %.2f)\n", plan->predictedNs / 1e6,
                    timedWhole ? "the plan timed whole by the optimizer" : "its kernels timed alone, added",
                    median / (plan->predictedNs / 1e6));
      if (timedWhole)
        std::printf("kernels timed alone add up to %.3f ms (measured/that %.2f: in a run, kernels "
                    "go slower than back to back alone; docs/measurement.md)\n",
                    plan->kernelsAloneNs / 1e6, median / (plan->kernelsAloneNs / 1e6));
    }

    int status = 0;
    if (options->verify) {
      // Float32's bound, unless the plan uses a reduced-precision backend
      // (onednn_bf16, cublas_tf32): then the loosest it declares.
      const PlanTolerance tolerance = planTolerance(*plan);
      std::printf("verify: tolerance %s\n", tolerance.why.c_str());
      // Each group is also rerun alone on the reference's values of its
      // inputs, each within its own backend's bound, so the kernel that
      // drifts is named, not what inherits it.
      PlanCheckOptions checkOptions;
      checkOptions.outputBound = tolerance.bound;
      checkOptions.eachKernel = true;
      std::vector<Tensor> expected;
      if (modelOutputs) {
        for (ValueId v : graph.outputs()) {
          const std::string& name = graph.value(v).name;
          auto at = std::find(modelOutputNames.begin(), modelOutputNames.end(), name);
          if (at == modelOutputNames.end())
            throw Error(plan->displayName() + ": the rewritten model has an output '" + name +
                        "' the model does not");
          expected.push_back((*modelOutputs)[static_cast<size_t>(at - modelOutputNames.begin())]);
        }
        checkOptions.expected = &expected;
        std::printf("verify: against the model as given (the plan's %zu substitution(s) replayed, each checked)\n",
                    plan->substitutions.size());
      }
      const PlanCheck check = checkPlan(*session, inputs, checkOptions);
      for (size_t i = 0; i < check.comparisons.size(); ++i) {
        const CompareResult& c = check.comparisons[i];
        std::printf(
            "verify: output '%s': max abs error %.3g, %.3g of its largest value%s\n",
            graph.value(graph.outputs()[i]).name.c_str(), c.maxAbsError, c.scaledError,
            c.ok ? ""
                 : (" (" + std::to_string(c.mismatches) + " elements beyond the bound)").c_str());
      }
      const std::vector<GroupError>& errors = check.groups;
      auto worst = std::max_element(errors.begin(), errors.end(), [](const auto& a, const auto& b) {
        return a.scaledError < b.scaledError;
      });
      if (worst != errors.end() && !worst->worstOutput.empty())
        std::printf("verify: worst kernel alone: group %zu on %s (%s): max abs error %.3g on '%s', "
                    "%.3g of its largest value\n",
                    worst->group + 1, worst->backend.c_str(), worst->what.c_str(),
                    worst->maxAbsError, worst->worstOutput.c_str(), worst->scaledError);
      int64_t tieSteps = 0;
      for (const GroupError& e : errors) tieSteps += e.tieSteps;
      if (tieSteps > 0)
        std::printf("verify: %lld quantized value(s) one step off inside kernels, each at a rounding tie\n",
                    static_cast<long long>(tieSteps));
      // A kernel beyond its own backend's bound is among the problems.
      std::vector<std::string> beyond = check.problems;
      // Kernels that each match while the outputs do not: say whether the
      // plan's substitutions are what changed the model's numbers.
      if (modelOutputs && !beyond.empty()) {
        const std::vector<Tensor> rewritten = ReferenceExecutor(graph).run(inputs);
        for (size_t i = 0; i < rewritten.size(); ++i) {
          const CompareResult c = compareScaled(rewritten[i], expected[i], tolerance.bound);
          if (!c.ok)
            beyond.push_back("the plan's substitutions change output '" + graph.value(graph.outputs()[i]).name +
                             "': the rewritten graph on the reference executor differs from the model as given: " +
                             c.message);
        }
      }
      for (const std::string& line : beyond) std::printf("verify: MISMATCH: %s\n", line.c_str());
      if (!beyond.empty()) {
        status = 3;
      } else if (!check.tiesNote.empty()) {
        std::printf("verify: the plan computes the model's numbers: %s\n", check.tiesNote.c_str());
      } else {
        double most = 0;
        for (const auto& c : check.comparisons) most = std::max(most, c.maxAbsError);
        std::printf("verify: every output matches the reference executor (max abs error %g)%s\n", most,
                    tolerance.reducedBackends.empty() ? "" : " within the declared reduced-precision tolerance");
      }
    }
    if (!options->expectFiles.empty()) {
      if (options->expectFiles.size() != outputs.size())
        throw Error("the model has " + std::to_string(outputs.size()) + " outputs, " +
                    std::to_string(options->expectFiles.size()) + " --expect files given");
      // PyTorch and Collage sum in different orders: deep nets accumulate
      // float32 rounding, hence an absolute floor above ONNX's 1e-7.
      for (size_t i = 0; i < outputs.size(); ++i) {
        Tensor expected = readTensorProtoFile(options->expectFiles[i]);
        CompareResult c = compareTensors(outputs[i], expected, Tolerance{1e-3, 1e-5});
        std::cout << "check " << graph.value(graph.outputs()[i]).name << ": "
                  << (c.ok ? "matches" : "MISMATCH: " + c.message) << " (max abs error "
                  << c.maxAbsError << ")\n";
        if (!c.ok) status = 3;
      }
    }
    if (plan) {
      if (!options->trace.empty()) {
        exportChromeTrace(*plan, timings, options->trace);
        std::printf("trace written to %s (open in Perfetto or chrome://tracing)\n", options->trace.c_str());
      }
      if (!options->nodeData.empty()) {
        exportModelExplorerNodeData(*plan, options->nodeData, nodeDataKindFromName(options->nodeDataKind),
                                    &timings);
        std::printf("Model Explorer node data written to %s\n", options->nodeData.c_str());
      }
      if (!options->annotated.empty()) {
        exportAnnotatedOnnx(options->modelPath, *plan, options->annotated);
        std::printf("annotated model written to %s\n", options->annotated.c_str());
      }
    } else if (!options->trace.empty() || !options->nodeData.empty() || !options->annotated.empty()) {
      throw Error("--trace, --node-data and --annotated-onnx describe a plan: give --plan");
    }
    return status;
  };
}

}  // namespace collage::cli
