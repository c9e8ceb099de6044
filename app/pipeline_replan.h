// The app's re-plan of an open pipeline around pins ("Pin to stage N" on a
// node): the same partitioners `collage pipeline` runs (GPP, the chain, the
// better simulated of the two), on node times profiled here in the process,
// at the file's micro-batch and on the file's devices. The file records the
// pins; the model, topology, batch and micro-batch stay the file's.
//
// Profiled in process (core/pipeline/profiled_stage_cost.h, the CLI's
// --measure in-process), not in the measurement worker: a re-plan must come
// back in seconds on a small model. The costs are kept and handed back, so
// a second pin re-plans without profiling again. Runs on BackgroundWork's
// thread (it times kernels), never on the UI thread.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/ir/graph.h"
#include "core/pipeline/pipeline_file.h"
#include "core/pipeline/profiled_stage_cost.h"

namespace collage {

// `graph`: the model at `file.microBatch` (file.inputShapes). `costs`: in,
// the profile of an earlier re-plan of the same file or null; out, the one
// used. Throws collage::Error for a pin naming a node the model lacks, a
// stage the devices cannot give, or pins no plan honours (the partitioner's
// message).
PipelineFile replanPipeline(const PipelineFile& file, const Graph& graph, const std::string& modelPath,
                            const std::map<std::string, int>& pins,
                            std::shared_ptr<const ProfiledStageCost>* costs);

}  // namespace collage
