// The safety net under the reference screen (core/measure/reference_skips.h).
// A reference kernel is skipped when other measured candidates hold each of
// its nodes; but those may hold them only in overlapping groups that no
// cover can combine, and then the skipped kernel was the only way to run
// them. So, before the op-level search, the job checks that the candidates
// left still cover the graph, and if not, measures the skipped ones after
// all: never worse than measuring everything, which is what it did before.
#pragma once

#include <vector>

#include "core/ir/graph.h"
#include "core/ir/search_events.h"
#include "core/measure/candidate_costs.h"
#include "core/measure/measurement.h"
#include "core/patterns/candidate.h"

namespace collage {

// When `measurements` has Skipped candidates and no cover of `graph` exists
// without them (the op-level DP finds none among the `allowed` ones with a
// finite cost), measures the skipped ones with `coster` (its screen turned
// off), puts the results in `measurements` and `report` (skipped back to 0),
// and says so to `observer`. Returns whether it measured them.
bool measureSkippedIfNoCover(const Graph& graph, const CandidateSet& candidates, const std::vector<bool>& allowed,
                             CandidateCoster& coster, std::vector<Measurement>& measurements,
                             CostingReport& report, SearchObserver* observer, const CancellationToken* cancel);

}  // namespace collage
