// The optimize flow for another kind of machine (`collage optimize --target
// C --db postgresql://...`): the kernels are measured on the nodes of a
// Slurm constraint (core/measure/target_measurement.h) and the op-level DP
// runs on the shared store's measurements under the target's fingerprint,
// which the job's tasks report. Nothing is timed on this machine, so what
// needs timing here in the local flow is left out: switching costs
// (charged 0), the layout hand-over, the near-tie re-measurement, the
// end-to-end check, and the graph-level search unless targetGraphLevel fans
// it out over the nodes (core/search/slurm_plan_evaluator.h).
//
// A task that died costs only its batch: the DP then plans with what the
// store has, and says which node has no measured candidate when that leaves
// the graph uncovered.
#pragma once

#include "core/search/optimization_job.h"

namespace collage {

// runOptimizationJob's flow when options.target is set (it delegates here).
// Throws Error without a shared store, when no task reported its node, and
// when the measurements the tasks stored cannot cover the graph.
OptimizationResult runTargetOptimizationJob(const Graph& graph,
                                            const OptimizationJobOptions& options,
                                            SearchObserver* observer,
                                            const CancellationToken* cancel);

}  // namespace collage
