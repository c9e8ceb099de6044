#include "app/pipeline_replan.h"

#include <optional>

#include "backends/backend_list.h"
#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/pipeline/microbatch_schedule.h"
#include "core/pipeline/pipe_graph.h"
#include "core/pipeline/plan_choice.h"
#include "core/pipeline/stage_partitioner.h"

namespace collage {

namespace {

constexpr const char* kBackend = "native";  // as `collage pipeline` and the app's runs
constexpr int kRuns = 3;                    // the CLI's --runs default

// Every share micro-batch / d a stage on d devices of a kind runs, profiled
// (the model imported with its inputs' first dimension at the share).
std::shared_ptr<const ProfiledStageCost> profile(const PipelineFile& file, const Graph& graph,
                                                 const std::string& modelPath) {
  auto cost = std::make_shared<ProfiledStageCost>(graph);
  auto set = std::make_shared<BackendSet>(loadBackendSet({kBackend}));
  const BackendLookup backends([set](const std::string& name) { return set->find(name); });
  int threads = 1;
  for (const PipeDevice& d : file.topology.devices())
    if (d.kind == DeviceKind::Cpu) threads = d.cores;
  int most = 1;
  for (DeviceKind k : file.topology.kinds()) most = std::max(most, file.topology.count(k));
  for (int d = 1; d <= most; ++d) {
    if (file.microBatch % d != 0) continue;
    const int share = file.microBatch / d;
    if (share == file.microBatch) {
      cost->add(share, profileNodes(graph, kBackend, backends, threads, kRuns));
      continue;
    }
    ImportOptions options;
    for (const auto& [name, shape] : file.inputShapes) {
      Shape s = shape;
      if (!s.empty()) s[0] = share;  // the batch dimension, as the file was made
      options.inputShapes[name] = s;
    }
    try {
      cost->add(share, profileNodes(importOnnx(modelPath, options), kBackend, backends, threads, kRuns));
    } catch (const Error&) {
      // A model whose inputs do not take this share (a static batch): data
      // parallel stages over d devices are then priced +inf, as the CLI's.
    }
  }
  return cost;
}

}  // namespace

PipelineFile replanPipeline(const PipelineFile& file, const Graph& graph, const std::string& modelPath,
                            const std::map<std::string, int>& pins,
                            std::shared_ptr<const ProfiledStageCost>* costs) {
  const PipeGraph pipe = pipeGraphOf(graph, file.microBatch);
  PartitionOptions po;
  po.batch = file.batch;
  po.microBatches = {file.microBatch};
  po.pins = pinsByName(pipe, pins);  // before profiling: a bad pin is refused at once
  const int devices = static_cast<int>(file.topology.devices().size());
  for (const auto& [name, stage] : pins)
    if (stage >= devices)
      throw Error("pin " + name + " to stage " + std::to_string(stage) + ": " + std::to_string(devices) +
                  " device(s) give at most " + std::to_string(devices) + " stage(s)");
  if (!*costs) *costs = profile(file, graph, modelPath);
  const StageGraph gpp = partitionGraphPipeline(pipe, file.topology, **costs, po);
  std::optional<StageGraph> chain;
  try {
    chain = partitionSequentialPipeline(pipe, file.topology, **costs, po);
  } catch (const Error&) {
    // No chain honours the pins: the graph's plan stands alone.
  }
  const StageGraph chosen = chain ? graphPipelineOrChain(gpp, *chain, pipe, file.topology) : gpp;
  const MicroBatchSchedule schedule = scheduleMicroBatches(chosen, file.topology, pipe);
  PipelineFile out = pipelineFileOf(chosen, &schedule, graph, file.topology, modelPath, file.batch);
  out.pins = pins;
  out.createdBy = "collage-studio (pinned re-plan)";
  return out;
}

}  // namespace collage
