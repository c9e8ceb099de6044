// Pieces shared by the `collage` subcommands: model loading with the
// --input-shape bindings, and the registration function of each subcommand.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/onnx/onnx_import.h"

namespace collage::cli {

// Options every command that opens a model shares.
struct ModelOptions {
  std::string modelPath;
  // "name=1x3x224x224" (--input-shape), and "name:=true": an input bound to
  // a constant (--input-value name=true), the form a value binding takes in
  // this list, so that the words the optimizer hands its workers
  // (measurementWorkerCommand's --input-shape) carry it too.
  std::vector<std::string> inputShapes;
  std::vector<std::string> inputValues;  // --input-value "name=true"
  std::vector<std::string> lastRows;     // --last-row logits: "logits@last"

  void addTo(CLI::App& command);
  // inputShapes, then inputValues as "name:=value", then lastRows as
  // "name@last": every binding, as one list of words
  // (OptimizationJobOptions::inputShapes).
  std::vector<std::string> bindings() const;
  ImportOptions importOptions() const;
  // Imports the model; prints the import's notes (dynamic inputs and their
  // binding) to stderr unless `quiet` (a worker: its parent printed them).
  Graph load(bool quiet = false) const;
};

// Each subcommand registers itself and returns the action to run when chosen;
// the action returns the process exit code.
using Action = std::function<int()>;
Action addInspectCommand(CLI::App& app);
Action addRunCommand(CLI::App& app);
Action addGenerateCommand(CLI::App& app);
Action addDecodeParallelCommand(CLI::App& app);
Action addCandidatesCommand(CLI::App& app);
Action addSpecCommand(CLI::App& app);
Action addOptimizeCommand(CLI::App& app);
Action addMeasureWorkerCommand(CLI::App& app);
Action addMeasureBatchCommand(CLI::App& app);
Action addMeasurePlanPairCommand(CLI::App& app);
Action addDbCommand(CLI::App& app);
Action addExplainCommand(CLI::App& app);
Action addLayoutWorkerCommand(CLI::App& app);
Action addPipelineCommand(CLI::App& app);
Action addLinkCommand(CLI::App& app);  // cli_link.cc

// `collage run --pipeline` (cli_pipeline.cc): the run options it reads.
struct PipelineRunRequest {
  std::string pipelinePath;
  std::string topologyPath;  // optional: refused when not the file's
  int batch = 0;             // 0: the file's
  std::string backend = "native";
  std::string planPath;  // optional: each stage runs this plan's groups (restricted to it)
  uint64_t seed = 0;
  bool verify = false;
  std::string baseline;  // "", "one-device" or "data-parallel" (cli_pipeline.cc's runBaseline)
  bool mpi = false;      // one MPI rank per stage (core/pipeline/mpi_pipeline_runtime.h)
  double mpiTimeoutSeconds = 120;  // with mpi: the longest wait for another rank
  // Optional: each stage's micro-batches as a Chrome trace (docs/pipeline.md,
  // "The run's trace"), which the app draws beside the simulated timeline.
  std::string tracePath;
};
int runPipeline(const ModelOptions& model, const PipelineRunRequest& request);

}  // namespace collage::cli
