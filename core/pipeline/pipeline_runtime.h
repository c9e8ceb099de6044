// The in-process pipeline runtime: a stream of micro-batches through a
// StageGraph's stages, each stage a Session on its own thread, pinned to its
// devices' cores, with queues between the stages.
//
//   caller's micro-batches ─▶ [stage 0: cpu 0] ─queue─▶ [stage 2: cpu 1] ─▶ outputs
//                         └─▶ [stage 1: cpu 1] ─queue─┘
//
// How (and why this way):
//  - A stage's nodes are cut out of the model as a graph of their own, with
//    the model's plan restricted to them (wireStages, stage_wiring.h: the
//    MPI runtime, mpi_pipeline_runtime.h, wires the same way).
//  - Each stage runs on its own std::thread, pinned (pthread_setaffinity_np)
//    to its devices' cores before any kernel runs, so the OpenMP pool libgomp
//    gives that thread inherits the pinning; its thread count is its cores
//    (setThisThreadCount: the process's count is global, a stage's is its
//    thread's). Kernels are compiled with that count too.
//  - Between stages, one bounded FIFO per stage edge; every stage takes the
//    micro-batches in order, so the queues need no tags, and the pipeline
//    cannot deadlock (the earliest unfinished micro-batch can always move).
//    A queue holds at most its consumer's in-flight count
//    (MicroBatchSchedule), so activations in flight stay within what the
//    scheduler sized.
//  - A stage that throws stops the pipeline: every queue is closed, every
//    thread returns, and run() throws an Error naming the stage, its devices,
//    the micro-batch and the Session's message (which names the group and its
//    nodes). Never a hang.
//
// Core groups: the topology's CPU devices take this process's allowed CPUs
// (sched_getaffinity) in file order, `cores` each. A stage on several
// devices runs as one Session whose pool spans all their cores (not yet
// data-parallel replicas). GPU devices are refused for now.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/tensor.h"
#include "core/pipeline/stage_partitioner.h"
#include "core/pipeline/stage_wiring.h"
#include "core/pipeline/topology.h"
#include "core/plan/plan.h"
#include "core/runtime/session.h"

namespace collage {

// The CPUs each CPU device of `topology` runs on: this process's allowed CPUs
// in ascending order, handed out in the file's device order. Error naming the
// device when the machine (or the process's affinity) has too few, or when a
// device is a GPU (the runtime runs CPU devices only, so far).
std::map<std::string, std::vector<int>> assignCores(const Topology& topology);

// Makes the backends one stage compiles and runs on. Called once per stage,
// so stages share no backend object (oneDNN's stream, a backend's caches);
// the returned lookup must keep what it returns alive (capture it).
using StageBackendsFactory = std::function<BackendLookup()>;

struct PipelineRuntimeOptions {
  // The model's plan (its groups name `graph`'s nodes), or nullptr: each stage
  // then runs one kernel per node on `backend`.
  const Plan* plan = nullptr;
  std::string backend;
  // Micro-batches each stage may hold in flight (by stage; missing or < 1:
  // 2): the capacity of the queues into it (MicroBatchSchedule::stages).
  std::vector<int> inFlight;
  // Pin stage threads to their cores (off: a test on a machine that refuses
  // affinity still checks the data flow).
  bool pin = true;
};

struct StageRunReport {
  std::vector<std::string> devices;
  std::vector<int> cpus;  // pinned to
  int threads = 1;
  int groups = 0;          // kernels of its Session
  double busySeconds = 0;  // in Session::run
  double busyShare = 0;    // busySeconds over the run's wall time
  int64_t microBatches = 0;
  // The rest of the stage thread's life: blocked in its queues (waiting for
  // a producer or for room at a consumer), and its own hand-over work
  // outside Session::run (taking inputs, handing outputs on, freeing the
  // last micro-batch's tensors). startSeconds: from run() starting to the
  // thread being ready (created and pinned).
  double waitSeconds = 0;
  // Each micro-batch's seconds in Session::run, in order: the trace the
  // simulator replays (how long a stage takes varies from one to the next).
  std::vector<double> microBatchSeconds;
  double handOverSeconds = 0;
  double startSeconds = 0;
  // By micro-batch: when its Session::run began and ended, in seconds from
  // the run's start (the timeline the app draws beside the simulator's).
  std::vector<double> starts, finishes;
  // What it holds on each of its devices: weights, and activations at
  // their peak (stageMemoryOf, stage_wiring.h).
  double weightBytes = 0;
  double activationBytes = 0;
};

struct PipelineRunReport {
  int microBatches = 0;
  int microBatch = 1;  // samples per micro-batch
  double wallSeconds = 0;
  double samplesPerSecond = 0;
  // A sample waits for its micro-batch: from the first stage starting it to
  // the last stage finishing it.
  double medianLatencySeconds = 0;
  double maxLatencySeconds = 0;
  // The queues' wake-up as this run saw it: from a producer's push to the
  // return of its consumer's pop, over the pops that were waiting for it
  // (median; 0 when none waited). The in-process link's latency under this
  // run's conditions: on a loaded machine a woken thread waits for a core.
  double wakeUpSeconds = 0;
  int wakeUps = 0;  // the pops it is the median of
  std::vector<StageRunReport> stages;
  std::string toString() const;
};

class PipelineRuntime {
 public:
  // `graph` at the micro-batch's shapes (its inputs' batch is `microBatch`
  // samples), outliving the runtime; `stages`' node ids are `graph`'s
  // (pipeGraphOf numbers them so); every node in exactly one stage. Builds
  // every stage's sub-graph and Session (compiled with its thread count).
  // Error naming the stage for a node in no stage or two, a stage the
  // topology lacks a device of, a plan group the Session refuses.
  PipelineRuntime(const Graph& graph, const StageGraph& stages, const Topology& topology,
                  const StageBackendsFactory& backends, PipelineRuntimeOptions options);
  ~PipelineRuntime();
  PipelineRuntime(const PipelineRuntime&) = delete;
  PipelineRuntime& operator=(const PipelineRuntime&) = delete;

  // Streams `microBatches` (each: the graph's inputs, in graph.inputs()
  // order) through the stages; returns each micro-batch's outputs (in
  // graph.outputs() order). `report` (optional): throughput, latency and each
  // stage's busy share. Error when a stage fails (above).
  std::vector<std::vector<Tensor>> run(const std::vector<std::vector<Tensor>>& microBatches,
                                       PipelineRunReport* report = nullptr);

  size_t stageCount() const { return stages_.size(); }
  // A stage's sub-graph and the plan its Session runs.
  const Graph& stageGraph(size_t stage) const;
  const Plan& stagePlan(size_t stage) const;
  // "stage 1 [cpu1]": how messages name a stage.
  std::string stageName(size_t stage) const;

 private:
  struct Stage;
  const Graph& graph_;
  int microBatch_ = 1;
  std::vector<std::unique_ptr<Stage>> stages_;
  PipelineRuntimeOptions options_;
};

}  // namespace collage
