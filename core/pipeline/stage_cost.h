// What the stage partitioner asks about a candidate stage, and how it turns
// the answers into a time per sample and a memory need.
//
//   candidate stage: nodes {b, c} on 2 cpu devices, micro-batch 4
//     StageCostModel::stage  -> 3.1 ms per micro-batch, weights 40 MB and
//                               activations 6 MB per micro-batch, per device
//     inputs from other stages: 64 KiB/sample over the slowest link into cpu
//     queues: 2 in, 1 out, each a hand-over of the link's latency
//     => time per sample = (3.1 ms + 3 hand-overs + link time for 4 samples) / 4
//
// The product feeds StageCostModel from measurements: Collage's plan for the
// sub-graph on that device kind at that micro-batch size, timed by the
// measurer (a later piece of the pipeline work). The deterministic models in
// tests/unit/pipeline/ are test doubles only; nothing here guesses a cost.
#pragma once

#include <limits>
#include <vector>

#include "core/pipeline/pipe_graph.h"
#include "core/pipeline/topology.h"

namespace collage {

struct StageRunCost {
  // One micro-batch through the stage, split data-parallel over its devices.
  // +inf: the stage cannot run there (a kind without a kernel for a node).
  double seconds = std::numeric_limits<double>::infinity();
  double weightBytes = 0;      // per device: each data-parallel replica holds all weights
  double activationBytes = 0;  // per device, per micro-batch in flight (inputs, outputs, scratch)
};

class StageCostModel {
 public:
  virtual ~StageCostModel() = default;
  // `nodes` sorted, non-empty; `devices` >= 1 devices of `kind`;
  // `microBatch` samples, a multiple of `devices` (each device takes an equal share).
  virtual StageRunCost stage(const std::vector<int>& nodes, DeviceKind kind, int devices,
                             int microBatch) const = 0;
};

// How a stage's received bytes are counted.
//  - Graph pipelines (GPP) send each tensor straight from the stage that
//    makes it to the stages that read it: a stage receives the edges that
//    enter it.
//  - A chain (SPP, as PipeDream and Piper run it) passes everything down the
//    line: a stage receives every tensor live across the cut in front of it,
//    including those it only forwards to a later stage.
double receivedBytesPerSample(const PipeGraph& graph, const std::vector<int>& nodes);
double chainReceivedBytesPerSample(const PipeGraph& graph, const std::vector<int>& chainPosition,
                                   int firstPosition);

// The time a stage's thread spends per micro-batch on its queues, besides
// its compute: for each queue it pops or pushes, the link's latency (in
// process the wake-up of the thread waiting on the queue, ~20 us measured;
// over MPI a message's latency). The one rule both sides use: the
// partitioner adds it to a candidate stage's time, and the simulation of a
// plan charges it to each stage per queue the plan wires
// (queueHandOverSeconds, pipeline_simulator.h). Left out of the planner, a
// cut that adds queues looked free, and the plans it picked ran slower in
// simulation than the chain's (docs/pipeline.md, "Stage cost").
double handOverSeconds(const LinkCost& link, int queues);

// The queues a candidate stage can have, at most: one per node outside it
// that feeds it, one per node outside it that it feeds (each could be a
// stage of its own; estimateStage also caps them at the other devices).
// The partitioner does not know its neighbours' stages yet, so it prices
// the most, as it prices the slowest link.
int queuesAtMost(const PipeGraph& graph, const std::vector<int>& nodes);

struct StageEstimate {
  double computeSeconds = 0;   // per micro-batch (the cost model's)
  double handOverSeconds = 0;  // per micro-batch: its queues (handOverSeconds above)
  double transferSeconds = 0;  // per micro-batch: its inputs' bytes at the link's bandwidth
  double weightBytes = 0;      // per device
  double activationBytes = 0;  // per device, per micro-batch in flight
  int microBatch = 1;

  // The stage receives, then computes; no overlap is assumed, so this is an
  // upper bound the runtime can beat by overlapping the next receive.
  double secondsPerMicroBatch() const {
    return computeSeconds + handOverSeconds + transferSeconds;
  }
  double timePerSample() const { return secondsPerMicroBatch() / microBatch; }
  double memoryBytes(int inFlight) const { return weightBytes + inFlight * activationBytes; }
};

// The estimate of one candidate stage with at most `queues` queues
// (queuesAtMost); the one pricing rule that the partitioner, the baselines
// and the tests share.
StageEstimate estimateStage(const StageCostModel& cost, const Topology& topology,
                            const std::vector<int>& nodes, DeviceKind kind, int devices,
                            int microBatch, double receivedBytesPerSample, int queues = 0);

}  // namespace collage
