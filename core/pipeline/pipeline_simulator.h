// A simulation of a StageGraph streaming micro-batches on a Topology: what a
// run would report (throughput, latency per sample, busy share per stage)
// plus memory per device, without running it. It checks a plan against a
// real run here and projects it to machines we do not have (8, 16, 32
// devices).
//
//   stage 0 ─link─▶ stage 1 ─┐
//        └──link─▶ stage 2 ──┴─▶ stage 3 (join: waits for both)
//
// What it models, as the in-process runtime (pipeline_runtime.h) behaves:
//  - a stage takes micro-batches in order, one at a time, for its compute
//    time per micro-batch (the estimate's, or a measured one);
//  - it pops its input queues in edge order, then computes: a join waits for
//    all of its producers;
//  - it then pushes to each consumer's queue in edge order, blocking while
//    that queue holds the consumer's in-flight count (a slot comes free when
//    the consumer pops); it takes its next micro-batch after the pushes;
//  - a pushed micro-batch crosses the link between the two stages' devices
//    (the slowest pair when a stage spans several): each link carries one
//    transfer at a time (bytes / bandwidth), and the data arrives a latency
//    later; stages on the same device pass it for free;
//  - stages that share a device take turns on it.
// Every event time is a max-plus function of earlier events, so the times are
// computed in dependency order (micro-batch, then stage order) rather than by
// popping a priority queue; a link or a shared device serves its users in
// that order (FIFO by micro-batch). The result is the event schedule a
// priority-queue simulation of the same rules would produce.
//
// The queues are the runtime's: one per pair of stages that a value of the
// PipeGraph crosses, carrying the bytes of those edges per sample × the
// micro-batch. The runtime sends each tensor straight to the stages that read
// it, for a chain (SPP) too, so the stage graph's own edges (which add order
// only, or a chain's relay) are not read.
#pragma once

#include <string>
#include <vector>

#include "core/pipeline/pipe_graph.h"
#include "core/pipeline/stage_partitioner.h"
#include "core/pipeline/topology.h"

namespace collage {

struct SimulationOptions {
  int microBatches = 64;
  // Capacity of the queues into each stage (by stage; missing or < 1: 2, the
  // runtime's default): MicroBatchSchedule's in-flight counts.
  std::vector<int> inFlight;
  // Compute seconds per micro-batch by stage, e.g. measured by a run; empty:
  // each stage's estimate.computeSeconds. Transfers come from the topology.
  std::vector<double> computeSeconds;
};

struct SimulatedStage {
  double busySeconds = 0;  // computing
  double busyShare = 0;    // busySeconds over the makespan
  std::vector<double> starts, finishes;  // by micro-batch: the timeline
};

struct SimulatedDevice {
  std::string id;
  double memoryBytes = 0;  // weights + in-flight activations of its stages
  double memoryLimitBytes = 0;
};

struct SimulationReport {
  int microBatches = 0;
  int microBatch = 1;
  double makespanSeconds = 0;  // first start to last finish
  double samplesPerSecond = 0; // over the makespan, fill and drain included (as a run reports)
  // Over the second half of the micro-batches: the pipeline's steady rate.
  double steadySamplesPerSecond = 0;
  double medianLatencySeconds = 0;
  double maxLatencySeconds = 0;
  std::vector<SimulatedStage> stages;
  std::vector<SimulatedDevice> devices;  // every device of the topology, in file order
  std::string toString() const;
};

// Error naming the stage for a device the topology lacks, a stage edge that
// does not point forward, or a negative compute time.
SimulationReport simulatePipeline(const StageGraph& stages, const PipeGraph& graph,
                                  const Topology& topology, const SimulationOptions& options);

}  // namespace collage
