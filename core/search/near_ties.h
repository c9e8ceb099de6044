// A second look at the op-level DP's near ties. Kernels are measured one at
// a time, and on a shared machine a burst of noise can make a fused kernel
// (Conv+Relu, a whole block) read a few percent slower than its parts
// together, so the DP splits it; in a whole run the split costs more than the
// isolated figures say (an extra kernel boundary, its tensor written and read
// again). So after the DP, every candidate that covers exactly two or more of
// the plan's groups and costs at most (1 + margin) times those groups
// together is measured again, interleaved with its parts, and each keeps the
// lower of its medians (noise only ever adds time); the caller then runs the
// DP again. Only ties involving a measurement made in this run are looked at,
// so a warm database measures nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "core/patterns/candidate.h"
#include "core/measure/candidate_costs.h"
#include "core/measure/measurement.h"
#include "core/search/op_level_optimizer.h"

namespace collage {

struct NearTie {
  int32_t fused = -1;          // the candidate the plan did not take
  std::vector<int32_t> parts;  // the plan's groups it covers exactly
  double ratio = 0;            // fused cost / parts' cost, > 1
};

struct NearTieOptions {
  // Ties: fused cost <= (1 + margin) x parts' cost. Under load this VM's
  // kernels read up to 2x slower for seconds at a time; 25% catches most
  // flips and re-measures a few dozen kernels at most.
  double margin = 0.25;
  double minPartsNs = 50e3;  // ignore ties smaller than this (not worth a measurement)
  int maxTies = 24;          // the largest ones first
};

// The near ties of a plan (`chosen`: candidate indices); `allowed` may be empty.
std::vector<NearTie> findNearTies(const CandidateSet& candidates,
                                  const std::vector<Measurement>& measurements,
                                  const std::vector<int32_t>& chosen,
                                  const std::vector<bool>& allowed, const NearTieOptions& options = {});

struct NearTieReport {
  int ties = 0;
  int remeasured = 0;  // candidates measured again
  int lowered = 0;     // of which the new median was lower
  double seconds = 0;
};

// Measures the ties' candidates again (each distinct kernel once, fused then
// parts, tie by tie) through `coster`, which stores the kept measurement;
// updates `measurements` for every candidate with the same kernel.
NearTieReport remeasureNearTies(const Graph& graph, const CandidateSet& candidates,
                                std::vector<Measurement>& measurements,
                                const std::vector<NearTie>& ties, CandidateCoster& coster);

// The whole second look: finds the near ties of `first` (the DP's result on
// `problem`), measures them again, updates `measurements` and
// `problem.costs`, and returns the DP's result on the new costs, run without
// an observer (`first` itself when there is no tie; `report->ties` is 0 then).
OpLevelResult refineAtNearTies(const Graph& graph, const CandidateSet& candidates,
                               std::vector<Measurement>& measurements, OpLevelProblem& problem,
                               const OpLevelResult& first, CandidateCoster& coster,
                               const CancellationToken* cancel, NearTieReport* report);

}  // namespace collage
