// A pipeline file: what `collage pipeline` decides and `collage run
// --pipeline` runs (format: docs/pipeline.md). Like a plan, it names nodes by
// NAME and pins what it was made for:
//  - the model, by its file's SHA-256 (as plans record it, core/plan/plan.h)
//    and its input shapes at the micro-batch;
//  - the topology, written out whole with its SHA-256 (of that canonical
//    text): a run on another machine description is refused, not mis-run.
//
//   {"format": "collage-pipeline", "version": 1,
//    "model": {"path": "m.onnx", "sha256": "...", "input_shapes": {"x": [2, 3, 139, 139]}},
//    "topology": {"sha256": "...", "devices": [...], "links": [...]},
//    "batch": 8, "micro_batch": 2,
//    "stages": [{"nodes": ["conv1", ...], "devices": ["cpu0"], "in_flight": 2,
//                "seconds_per_micro_batch": 0.0012}, ...],
//    "edges": [[0, 1]], "bottleneck_seconds_per_sample": 0.0006,
//    "pins": {"conv1": 1}, ...}                          (pins: optional)
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/graph.h"
#include "core/pipeline/microbatch_schedule.h"
#include "core/pipeline/stage_partitioner.h"
#include "core/pipeline/topology.h"

namespace collage {

struct PipelineFileStage {
  std::vector<std::string> nodes;  // node names, in the graph's order
  std::vector<std::string> devices;
  int inFlight = 2;
  double secondsPerMicroBatch = 0;  // the partitioner's estimate (compute + transfer)
};

struct PipelineFile {
  static constexpr int kFormatVersion = 1;
  int version = kFormatVersion;
  std::string modelPath;                     // informative
  std::string modelSha256;                   // checked
  std::map<std::string, Shape> inputShapes;  // at the micro-batch (checked)
  Topology topology;
  std::string topologySha256;
  int batch = 1;
  int microBatch = 1;
  std::vector<PipelineFileStage> stages;
  std::vector<std::pair<int, int>> edges;
  double bottleneckSecondsPerSample = 0;
  // The pins the plan was asked to honour (`collage pipeline --pin`, the
  // app's "Pin to stage"): node name -> stage index. Written only when there
  // are some ("pins": {"conv1": 1}); a re-plan starts from them.
  std::map<std::string, int> pins;
  std::string createdBy, createdAt;
  std::string sourcePath;  // not serialised: where it was read from

  std::string displayName() const { return sourcePath.empty() ? "the pipeline" : sourcePath; }
};

// The topology as JSON in the topology file's format (every pair's link
// written out), and the SHA-256 of that text: equal for equal topologies.
std::string topologyToJson(const Topology& topology);
std::string topologySha256(const Topology& topology);

// The file of a partition of `graph` (its nodes named), with the scheduler's
// in-flight counts when `schedule` is given.
PipelineFile pipelineFileOf(const StageGraph& stages, const MicroBatchSchedule* schedule,
                            const Graph& graph, const Topology& topology,
                            const std::string& modelPath, int batch);

std::string pipelineToJson(const PipelineFile& file);
// Error starting with `displayPath` and naming the field for anything
// malformed (not JSON, not a pipeline file, a newer version, a missing or
// mistyped field, a stage on a device the topology lacks).
PipelineFile pipelineFromJson(const std::string& text, const std::string& displayPath);
void savePipelineFile(const PipelineFile& file, const std::string& path);
PipelineFile loadPipelineFile(const std::string& path);

// Error when the file was made for another model ("pipeline.json was made
// for a model with sha256 X, m.onnx has Y").
void checkPipelineModel(const PipelineFile& file, const std::string& modelPath);
// Error when `topology` (read from `topologyPath`) is not the one the file
// was made for.
void checkPipelineTopology(const PipelineFile& file, const Topology& topology,
                           const std::string& topologyPath);

// The stages as a StageGraph of `graph`'s node ids (as pipeGraphOf numbers
// them). Error naming the stage and node for a name `graph` lacks, a node in
// two stages or in none, and an input shape that differs from the file's.
StageGraph stageGraphOf(const PipelineFile& file, const Graph& graph);

}  // namespace collage
