// A graph pipeline from a program: what `collage pipeline` plans and `collage
// run --pipeline` runs (docs/pipeline.md). The model's nodes are split into
// stages, each on its own devices, and a batch streams through them in
// micro-batches.
//
//   collage::api::PipelineOptions options;  // devices "cpu:2", batch 8
//   auto pipeline = collage::api::planPipeline("model.onnx", options);
//   pipeline.save("pipeline.json");
//   auto run = collage::api::runPipeline("model.onnx", pipeline);
//   // run.samplesPerSecond, run.stages[s].busyShare, run.outputsMatch
//
// Planning profiles each node in this process (`collage pipeline --measure
// in-process`) on the stage backend. Errors (api::Error) carry the command
// line's messages: an unknown device spec, a pin on a node the model lacks,
// a pipeline made for another model (naming the pipeline file).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collage/export.h"

namespace collage::api {

struct PipelineOptions {
  std::string devices = "cpu:2";  // cpu:N: N one-core devices (ignored with a topology)
  std::string topology;           // a topology file (docs/pipeline.md); "" = devices
  int batch = 8;                  // samples per batch
  // Micro-batch sizes to consider; empty = the powers of two dividing batch, up to 8.
  std::vector<int> microBatches;
  std::map<std::string, int> pins;  // node name -> the stage it must be in (0 is the first)
  std::string strategy = "gpp";     // gpp (a graph of stages) or spp (the chain baseline)
  std::string backend = "native";   // the backend the nodes are profiled and run on
  int runs = 3;                     // profiled runs per micro-batch size
};

struct PipelineStage {
  std::vector<std::string> devices;
  std::vector<std::string> nodes;  // node names, in the model's order
  int inFlight = 2;                // micro-batches it may hold at once
  double secondsPerMicroBatch = 0;  // the planner's estimate
};

class COLLAGE_API Pipeline {
 public:
  struct Impl;
  explicit Pipeline(std::shared_ptr<Impl> impl);

  // A pipeline file; Error naming the file and field for a malformed one.
  static Pipeline load(const std::string& path);
  void save(const std::string& path) const;
  std::string toJson() const;

  std::vector<PipelineStage> stages() const;
  std::vector<std::pair<int, int>> edges() const;  // stage -> stage
  int batch() const;
  int microBatch() const;
  std::string modelPath() const;  // the model it was made for (checked by its SHA-256)
  std::map<std::string, int> pins() const;
  // The planner's prediction: 1 / the slowest stage's time per sample.
  double predictedSamplesPerSecond() const;
  std::string summary() const;  // "2 stage(s), micro-batch 2: cpu0 5 node(s), cpu1 4 node(s)"

  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

COLLAGE_API Pipeline planPipeline(const std::string& model, const PipelineOptions& options = {});

struct PipelineRunOptions {
  int batch = 0;                  // 0 = the pipeline's
  std::string backend = "native";
  uint64_t seed = 0;              // of the random inputs
  // Check every output against one Session running the whole model
  // (within float32's bound): PipelineRun::outputsMatch.
  bool verify = true;
};

struct PipelineStageRun {
  std::vector<std::string> devices;
  double busySeconds = 0;  // in its Session
  double busyShare = 0;    // busySeconds over the run's wall time
  int64_t microBatches = 0;
};

struct PipelineDeviceMemory {
  std::string device;
  double weightBytes = 0;
  double activationBytes = 0;  // the Sessions' peak for one micro-batch + inputs in flight
};

struct PipelineRun {
  int microBatches = 0;
  double wallSeconds = 0;
  double samplesPerSecond = 0;
  double medianLatencyMs = 0;  // per sample: its micro-batch through every stage
  double maxLatencyMs = 0;
  std::vector<PipelineStageRun> stages;
  std::vector<PipelineDeviceMemory> memory;
  bool verified = false;     // options.verify
  bool outputsMatch = false;  // with verify: every output matched the whole model's
  double largestError = 0;   // of the output's largest value
  std::vector<std::string> mismatches;  // "micro-batch M, output 'y': ..."
  std::string report;  // the runtime's report, as `collage run --pipeline` prints it
};

// Streams `options.batch` samples of seeded random inputs through the
// stages in this process. Error when the pipeline was made for another
// model, or the batch is not a multiple of its micro-batch.
COLLAGE_API PipelineRun runPipeline(const std::string& model, const Pipeline& pipeline,
                                    const PipelineRunOptions& options = {});

}  // namespace collage::api
