// The steps of planning a graph pipeline and running one that every front
// end takes the same way: `collage pipeline` and `collage run --pipeline`
// (app/cli_pipeline.cc) and the public API (api/pipeline.cc). Kept here so
// that the command line and a program refuse the same input with the same
// message and run the same stages.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/tensor.h"
#include "core/measure/measurement_db.h"
#include "core/onnx/onnx_import.h"
#include "core/pipeline/pipe_graph.h"
#include "core/pipeline/pipeline_file.h"
#include "core/pipeline/pipeline_runtime.h"
#include "core/pipeline/stage_cost.h"
#include "core/pipeline/stage_partitioner.h"
#include "core/pipeline/topology.h"
#include "core/plan/plan.h"

namespace collage {

// The model with every input's first dimension bound to `microBatch` (a
// dynamic one; a static one must equal it), other dynamic dimensions as
// `options.inputShapes` binds them (else 1). `quiet`: no import notes.
Graph loadAtMicroBatch(const std::string& modelPath, ImportOptions options, int microBatch,
                       bool quiet);

// "cpu:N": N devices of one core each, linked in this process: the link
// between the first two devices' CPUs from the measurement database when it
// holds one (`db` may be null), else measured now and stored there
// (link_measurement.h). Error for any other spec.
Topology topologyFromDevices(const std::string& spec, MeasurementDb* db);

// The micro-batch sizes to consider: `given`, else the powers of two that
// divide `batch` up to 8; sorted. Error for one that does not divide it.
std::vector<int> microBatchSizes(std::vector<int> given, int batch);

// The per-device micro-batch shares to profile: a stage on d devices runs
// micro-batch / d on each (`simulated`: more CPU devices to price).
std::vector<int> profiledShares(const std::vector<int>& sizes, const Topology& topology,
                                int simulated);

// `--pin NODE=STAGE` (repeatable) by node name, checked against the model
// and the devices: the node must exist, the stage be one `devices` can give.
std::map<std::string, int> parsePins(const std::vector<std::string>& pins, const Graph& graph,
                                     int devices);

// The bytes of the constants (weights) `nodes` read, each once.
double weightBytesOf(const Graph& graph, const std::vector<int>& nodes);

// GPP and SPP planned from the same costs; `gpp` is the graph partitioner's
// plan, or the chain's where that simulates faster (tookChain).
struct PipelineCandidates {
  StageGraph gpp, spp;
  bool tookChain = false;
  double gppSearchSeconds = 0, sppSearchSeconds = 0;
};
PipelineCandidates partitionBoth(const PipeGraph& pipe, const Topology& topology,
                                 const StageCostModel& cost, const PartitionOptions& options);

// What a run's stages hold on each device (each stage's on every device of
// it), in the order the stages name the devices.
struct DeviceMemory {
  std::string device;
  double weightBytes = 0;
  double activationBytes = 0;
};
std::vector<DeviceMemory> memoryPerDevice(const std::vector<StageRunReport>& stages);

// What a run starts from: the pipeline file checked against the model, the
// model at the micro-batch, the stages, their in-flight counts, and the
// batch's micro-batches of seeded random inputs (`batch` 0: the file's).
// Error naming the file for another model or a batch that is not a
// multiple of its micro-batch.
struct PipelineRunInputs {
  Graph graph;
  StageGraph stages;
  std::vector<int> inFlight;
  std::vector<std::vector<Tensor>> batches;
};
PipelineRunInputs preparePipelineRun(const PipelineFile& file, const std::string& modelPath,
                                     const ImportOptions& import, int batch, uint64_t seed,
                                     bool quiet);

// Every output of a pipeline run against one Session running `plan` on the
// whole model, within `bound`.
struct WholeModelComparison {
  std::vector<std::string> mismatches;  // "micro-batch M, output 'y': ..."
  double largestError = 0;              // of the output's largest value
  bool ok() const { return mismatches.empty(); }
};
WholeModelComparison compareWithWholeModel(const PipelineRunInputs& run, const Plan& plan,
                                           const BackendLookup& backends, double bound,
                                           const std::vector<std::vector<Tensor>>& outputs);

}  // namespace collage
