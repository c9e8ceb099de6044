// Node costs for the stage partitioner from the measurer and its database:
// each node as one kernel on a backend, at one micro-batch share, timed in
// the isolated measurement worker at a device's thread count, and stored
// under the same key as every other kernel measurement (this machine, the
// backend's version, the measurement protocol, the thread count), so a second
// `collage pipeline` on this machine measures nothing. The result feeds
// ProfiledStageCost (profiled_stage_cost.h) like an in-process profile does.

#pragma once

#include <functional>
#include <string>

#include "core/ir/graph.h"
#include "core/ir/hardware_fingerprint.h"
#include "core/measure/candidate_costs.h"
#include "core/measure/measurement_db.h"
#include "core/pipeline/profiled_stage_cost.h"
#include "core/pipeline/topology.h"

namespace collage {

// One Measurement per node of `graph` (on `backend`), from `db` (may be null)
// or from `measure` (the product: IsolatedMeasurer::measure in a worker
// started for `graph`'s shapes and the device's threads), stored in `db`.
// `fingerprint` must carry the device's thread count. Error naming the node,
// the backend and the reason when one cannot be measured (a stage holding it
// would have no cost). `report` (optional): what was cached and measured.
NodeProfile measureNodes(const Graph& graph, const std::string& backend,
                         const std::string& backendVersion, MeasurementDb* db,
                         const HardwareFingerprint& fingerprint, const MeasureFn& measure,
                         CostingReport* report = nullptr);

}  // namespace collage
