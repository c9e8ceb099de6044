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
//    the consumer pops, and a blocked producer resumes a link latency later:
//    its wake-up); it takes its next micro-batch after the pushes;
//  - a pushed micro-batch crosses the link between the two stages' devices
//    (the slowest pair when a stage spans several): each link carries one
//    transfer at a time (bytes / bandwidth), and the data arrives a latency
//    later; stages on the same device pass it for free;
//  - stages that share a device take turns on it;
//  - a stage's own hand-over work per micro-batch (options.handOverSeconds)
//    follows its compute and delays its pushes; a stage starts when it is
//    ready (options.startSeconds), and the makespan runs from the run's
//    start (time 0) to the last stage's last hand-over, as a run's wall
//    time does.
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
#include "core/runtime/polling_wait.h"

namespace collage {

struct SimulationOptions {
  int microBatches = 64;
  // Capacity of the queues into each stage (by stage; missing or < 1: 2, the
  // runtime's default): MicroBatchSchedule's in-flight counts.
  std::vector<int> inFlight;
  // Compute seconds per micro-batch by stage, e.g. measured by a run; empty:
  // each stage's estimate.computeSeconds. Transfers come from the topology.
  std::vector<double> computeSeconds;
  // By stage, by micro-batch: each micro-batch's own compute seconds (a
  // run's trace, StageRunReport::microBatchSeconds), in place of the stage's
  // one figure where given (a stage's time varies, and a short queue turns
  // that into waiting that a mean hides).
  std::vector<std::vector<double>> computeSecondsByMicroBatch;
  // Seconds per micro-batch, by stage, its thread spends outside compute on
  // its own: taking its inputs and handing its outputs on (a queue's lock
  // and wake-up, MPI's send and receive calls), whether or not it waited.
  // The stage is occupied meanwhile and its outputs leave after it; empty
  // or missing: 0. A run measures it (StageRunReport::handOverSeconds);
  // before one, queueHandOverSeconds below is the planner's estimate.
  std::vector<double> handOverSeconds;
  // When each stage is ready to take its first micro-batch (thread started
  // and pinned), from the run's start; missing: 0.
  std::vector<double> startSeconds;
  // A message moves only while its receiver waits for it: MPI without a
  // progress thread, whose library moves a large message (rendezvous) inside
  // the receiver's MPI calls, not while it computes. Off: the transfer starts
  // when the sender pushes (the in-process queue hands over a pointer).
  bool transferWhenReceiverWaits = false;
  // How a stage's waits (for its inputs, for room at a consumer) end:
  // mpiWaitPolling() for the MPI runtime (spin, then nap: polling_wait.h);
  // the default, woken at once.
  PollingWait polling;
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

// Each stage's hand-over per micro-batch as the partitioner prices it
// (stage_cost.h, handOverSeconds), for the queues the simulation wires: the
// latency of each queue's link, for the stage that pushes and the one that
// pops. What a plan fresh from the partitioner is simulated with
// (SimulationOptions::handOverSeconds), so that the two price a plan alike.
// A pipeline file's seconds per micro-batch already hold it. Errors as
// simulatePipeline's.
std::vector<double> queueHandOverSeconds(const StageGraph& stages, const PipeGraph& graph,
                                         const Topology& topology);

// Error naming the stage for a device the topology lacks, a stage edge that
// does not point forward, or a negative compute time.
SimulationReport simulatePipeline(const StageGraph& stages, const PipeGraph& graph,
                                  const Topology& topology, const SimulationOptions& options);

// Data parallel (docs/pipeline.md, "Baselines"): replicas of the whole
// model, each a StageGraph of its own on its own devices (`replicas[r]`),
// the micro-batches dealt round robin (replica r takes r, r + R, ...), all
// replicas at once, as `collage run --baseline data-parallel` runs them.
// Replicas share no device or link, so each is simulated alone
// (`options[r]`, its microBatches set to its share; missing: the defaults)
// and the runs combined: the makespan is the longest replica's and
// samples/s is over it; latency over every micro-batch; steady samples/s
// the replicas' sum; stages: each replica's, in replica order; devices:
// the topology's, each holding what the replicas put there. Error for no
// replica, else as simulatePipeline's.
SimulationReport simulateDataParallel(const std::vector<StageGraph>& replicas,
                                      const PipeGraph& graph, const Topology& topology,
                                      int microBatches,
                                      const std::vector<SimulationOptions>& options);

}  // namespace collage
