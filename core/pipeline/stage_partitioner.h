// The stage partitioner (thesis ch. 3, §3.5), for inference: cut a PipeGraph
// into a graph of stages, give each stage devices and the pipeline a
// micro-batch size, so that the bottleneck stage's time per sample is least.
//
//   graph:  x -> {a1 -> a2, b} -> join        devices: cpu0, cpu1, cpu2
//   plan:   [x a1 a2] on cpu0 ─┐
//           [b] on cpu1 ───────┴─> [join] on cpu2      micro-batch 4
//
// How (and why this way):
//  - Binary search on the target time per sample T. For a fixed T the
//    question "can the graph be cut into stages that each take <= T per
//    sample and fit in memory, with the devices at hand?" is a yes/no DP,
//    monotone in T. The optimum is one candidate stage's time, so the search
//    runs over the sorted times of all candidate stages (as Alpa sweeps its
//    cap over measured stage costs) and the answer is exact, not within a
//    tolerance.
//  - The DP walks the series-parallel tree (series_parallel.h). Its state is
//    (sub-graph, devices of each kind still free, micro-batch size):
//      * a sub-graph can be one stage on d devices of one kind (data-parallel
//        inside: each device runs the whole stage on micro-batch/d samples);
//      * a Series can be split into runs of consecutive children, each run one
//        stage, or a single child planned on its own (recursively);
//      * a Parallel can be split into runs of consecutive children (in the
//        tree's order), each run one stage or a single child planned on its
//        own share of the devices, so branches run side by side: the graph
//        pipeline that a chain cannot be.
//  - A stage's time per sample is its compute, a hand-over per queue it may
//    have (the link's latency, as the simulator charges it) and its inputs'
//    bytes over the link (stage_cost.h), over its micro-batch. Its memory per device is its
//    weights plus `inFlight` micro-batches of activations; it must fit the
//    smallest memory limit of its kind. inFlight defaults to 2, what a stage
//    needs to stay busy when its consumers start as it finishes (one
//    micro-batch computing, the previous one leaving); the micro-batch
//    scheduler (microbatch_schedule.h) computes the exact count per stage,
//    which is larger where a branch waits for a longer one at a join.
//  - One micro-batch size for the whole pipeline, chosen among the options.
//  - Pins (node -> stage index) are a constraint of the DP, not a fix-up
//    after it: stages are numbered in the order the DP emits them (the
//    tree's left-to-right order, a topological one), so the DP state also
//    counts the stages emitted before (capped one past the largest pin: all
//    later indices are alike), and a candidate stage holding a node pinned to
//    another index than the one it would get is infeasible. The answer is
//    the least bottleneck among the plans that honour every pin.
//
// The series-parallel space cuts a block of parallel branches only between
// whole branches; a chain cuts anywhere in a topological
// order, which balances finer when there are fewer devices than branches.
// So GPP also runs the same search over runs of the chain, each stage
// receiving its tensors straight from their producers, and keeps the better
// plan: a graph of stages is never slower than the chain it contains, and
// GPP is never slower than SPP under the same costs.
//
// The baseline SPP (sequential pipeline, as PipeDream and Piper) is the
// search on the chain alone, with tensors relayed: a stage receives
// everything live across the cut in front of it.
//
// Pure planning: no I/O; measured costs in (StageCostModel), plan out.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/pipeline/pipe_graph.h"
#include "core/pipeline/series_parallel.h"
#include "core/pipeline/stage_cost.h"
#include "core/pipeline/topology.h"

namespace collage {

struct PartitionOptions {
  int batch = 1;                  // samples per batch
  std::vector<int> microBatches;  // sizes to consider; empty: every divisor of `batch`
  int inFlight = 2;               // micro-batches of activations each stage is sized for
  // node -> the index of the stage it must be in (stages in the plan's
  // order). Error for a node the graph lacks or an index the devices cannot
  // give (each stage takes at least one device); when no plan honours them
  // all, the refusal says so.
  std::map<int, int> pins;
};

struct PipelineStage {
  std::vector<int> nodes;  // sorted graph nodes
  DeviceKind kind = DeviceKind::Cpu;
  std::vector<std::string> devices;  // concrete device ids, data-parallel
  StageEstimate estimate;
};

struct StageGraph {
  std::vector<PipelineStage> stages;       // in a topological order
  std::vector<std::pair<int, int>> edges;  // (producer stage, consumer stage), each once
  int microBatch = 1;
  int inFlight = 2;                    // what the memory check assumed per stage
  double bottleneckTimePerSample = 0;  // the largest stage time per sample
  std::string toString(const PipeGraph& graph) const;
};

// Graph pipeline parallelism (GPP): the better of the searches on the
// series-parallel decomposition and on the chain's runs (ties: the former).
// Throws collage::Error when no partition fits the memory limits, naming
// the node or the need that does not fit.
StageGraph partitionGraphPipeline(const PipeGraph& graph, const Topology& topology,
                                  const StageCostModel& cost, const PartitionOptions& options);

// Sequential pipeline parallelism (SPP): the graph linearised (in
// PipeGraph::topologicalOrder) and cut into a chain of stages.
StageGraph partitionSequentialPipeline(const PipeGraph& graph, const Topology& topology,
                                       const StageCostModel& cost, const PartitionOptions& options);

// Pins by node name (`--pin NODE=STAGE`, a pipeline file's "pins") as
// PartitionOptions::pins: Error naming a node `graph` lacks.
std::map<int, int> pinsByName(const PipeGraph& graph, const std::map<std::string, int>& pins);

}  // namespace collage
