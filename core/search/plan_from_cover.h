// From a search's result to a Plan. The search picks a cover of the graph by
// candidates (indices into the candidate set); the plan records it by node
// name, with each group's measured cost, so it can be saved, checked and run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/hardware_fingerprint.h"
#include "core/measure/measurement.h"
#include "core/patterns/candidate.h"
#include "core/plan/plan.h"

namespace collage {

// The plan a search writes: one group per chosen candidate (indices into
// `candidates`), its cost from `measurements` (indexed like `candidates`; may
// be empty, then costs are unknown; a status other than Ok gives +inf). The
// model's sha256 is computed from `modelPath` (skipped when empty);
// inputShapes are the graph's input shapes; `backends` is filtered to the ones
// some group uses; predictedNs is the sum of the group costs (the caller may
// overwrite it, e.g. with the optimizer's total including switching costs);
// createdAt is now; each group's `candidate` is the index it was chosen as.
// Throws Error if `chosen` does not cover every node exactly once.
Plan makePlan(const Graph& graph, const std::string& modelPath, const CandidateSet& candidates,
              const std::vector<int32_t>& chosen, const std::vector<Measurement>& measurements,
              PlanOrigin origin, const HardwareFingerprint& fingerprint,
              const std::vector<BackendVersion>& backends);

// makePlan for a cover of what `kept` leaves: `kept` are groups placed
// already (the regions an override leaves alone, core/search/plan_override.h),
// taken as they are, and `chosen` must cover every other node exactly once.
// Groups are in the order of their first node, as makePlan's are.
Plan makePlanAround(const Graph& graph, const std::vector<PlanGroup>& kept,
                    const CandidateSet& candidates, const std::vector<int32_t>& chosen,
                    const std::vector<Measurement>& measurements, PlanOrigin origin,
                    const HardwareFingerprint& fingerprint,
                    const std::vector<BackendVersion>& backends);

}  // namespace collage
