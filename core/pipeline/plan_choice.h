// Which pipeline `collage pipeline` writes: GPP's search space holds the
// chain's (SPP's) plans, so GPP must never run slower than SPP. The two
// partitioners are exact on the planner's cost (each stage's time with its
// transfers added), but the simulator, which models what runs (transfers
// overlapped with compute, a hand-over per queue actually wired, tensors
// sent directly), can rank two plans the other way: 28 of 1,000 random small
// graphs simulated GPP's plan slower than SPP's. So GPP's answer is whichever
// of the two simulates faster, the way the run will go.
#pragma once

#include "core/pipeline/pipe_graph.h"
#include "core/pipeline/pipeline_simulator.h"
#include "core/pipeline/stage_cost.h"
#include "core/pipeline/stage_partitioner.h"
#include "core/pipeline/topology.h"

namespace collage {

// A plan fresh from a partitioner, simulated as it will run: the
// scheduler's in-flight counts (scheduleMicroBatches) and the hand-over of
// each queue it wires (queueHandOverSeconds); `microBatches` <= 0: the
// simulator's default. Errors as simulatePipeline's and the scheduler's.
SimulationReport simulateFreshPlan(const StageGraph& plan, const PipeGraph& graph, const Topology& topology,
                                   int microBatches = 0);

// GPP's plan, or `chain` (partitionSequentialPipeline's, on the same
// topology and costs) where that one simulates faster in steady state
// (ties: GPP's). `chosenChain`, if given, says which was taken.
StageGraph graphPipelineOrChain(const StageGraph& gpp, const StageGraph& chain, const PipeGraph& graph,
                                const Topology& topology, bool* chosenChain = nullptr);

}  // namespace collage
