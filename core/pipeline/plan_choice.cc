#include "core/pipeline/plan_choice.h"

#include "core/pipeline/microbatch_schedule.h"

namespace collage {

SimulationReport simulateFreshPlan(const StageGraph& plan, const PipeGraph& graph, const Topology& topology,
                                   int microBatches) {
  const MicroBatchSchedule schedule = scheduleMicroBatches(plan, topology, graph);
  SimulationOptions options;
  if (microBatches > 0) options.microBatches = microBatches;
  for (const auto& s : schedule.stages) options.inFlight.push_back(s.inFlight);
  options.handOverSeconds = queueHandOverSeconds(plan, graph, topology);
  return simulatePipeline(plan, graph, topology, options);
}

StageGraph graphPipelineOrChain(const StageGraph& gpp, const StageGraph& chain, const PipeGraph& graph,
                                const Topology& topology, bool* chosenChain) {
  const double g = simulateFreshPlan(gpp, graph, topology).steadySamplesPerSecond;
  const double c = simulateFreshPlan(chain, graph, topology).steadySamplesPerSecond;
  const bool takeChain = c > g;
  if (chosenChain) *chosenChain = takeChain;
  return takeChain ? chain : gpp;
}

}  // namespace collage
