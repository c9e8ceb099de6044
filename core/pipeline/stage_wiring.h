// How a StageGraph's stages connect, worked out once for both runtimes: the
// in-process one (a queue per stage edge, core/pipeline/pipeline_runtime.h)
// and the MPI one (a message per tensor, core/pipeline/mpi_pipeline_runtime.h).
//
// Each stage gets:
//  - its sub-graph, cut out of the model (extractRegion): the values it reads
//    from other stages or the model's inputs become its inputs, the values
//    other stages or the caller read its outputs (in node order);
//  - its plan: the model's plan restricted to its nodes (restrictPlan), or
//    one kernel per node on one backend;
//  - where each of its inputs comes from (a model input, or the slot-th
//    tensor of what one producer stage sends it), and what it sends to each
//    consumer stage (its output positions, in the consumer's slot order).
// The numbering is a pure function of the graph and the stages, so separate
// processes that wire the same pipeline agree on every edge and slot (the
// MPI runtime's message tags rely on that).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/graph.h"
#include "core/pipeline/stage_partitioner.h"
#include "core/plan/plan.h"

namespace collage {

// Where a stage's input comes from: the model's input `graphInput`, or the
// `slot`-th tensor of what the producer of in-edge `edge` sends.
struct StageInputSource {
  int graphInput = -1;
  size_t edge = 0;  // index into WiredStage::inEdges
  size_t slot = 0;
};

// What a stage sends one consumer: its sub-graph's output positions, in the
// order of the consumer's slots on that edge.
struct StageSend {
  size_t consumer = 0;
  std::vector<size_t> outputs;
};

struct WiredStage {
  size_t index = 0;
  std::vector<std::string> devices;
  std::unique_ptr<Graph> graph;  // the stage's sub-graph
  Plan plan;
  std::vector<StageInputSource> inputs;  // per sub-graph input
  std::vector<size_t> inEdges;           // the producer stage of each in-edge
  std::vector<StageSend> outEdges;
  // Model outputs made here: (sub-graph output position, model output index).
  std::vector<std::pair<size_t, size_t>> modelOutputs;
};

// What a stage holds on each of its devices, as a run reports it
// (docs/pipeline.md, "The runtime"): the constants its sub-graph reads
// (weights: every device of a stage holds all of them), and its activations
// at their peak: its Session's intermediate values and outputs of one
// micro-batch (`sessionPeakBytes`, Session::peakBytes) plus its inputs for
// the `inFlight` micro-batches its queues may hold.
struct StageMemory {
  double weightBytes = 0;
  double activationBytes = 0;
};
StageMemory stageMemoryOf(const WiredStage& stage, size_t sessionPeakBytes, int inFlight);

// "stage 1 [cpu1]": how messages name a stage.
std::string stageDisplayName(size_t stage, const std::vector<std::string>& devices);

// The wiring of `stages` over `graph` (node ids as pipeGraphOf numbers them;
// every node in exactly one stage). With `plan` each stage runs the plan
// restricted to it, else one kernel per node on `backend`. Error naming the
// stage or node for a node in no stage or two, a stage with no device, an
// output no stage makes.
std::vector<WiredStage> wireStages(const Graph& graph, const StageGraph& stages, const Plan* plan,
                                   const std::string& backend);

// The StageGraph's stages as a plan restricted to each: the groups of `plan`
// whose nodes all lie in `nodes` as they are, a group the set cuts as one
// group per node inside it (same backend, origin User). `nodes` by name.
Plan restrictPlan(const Plan& plan, const std::vector<std::string>& nodes);

}  // namespace collage
