// The switching cost epsilon between consecutive kernels, measured on this
// machine for every ordered pair of backends (not hard-coded): running kernel
// A then kernel B costs more than A and B alone (thread-pool hand-over, cache
// state, a library's per-call set-up), and that excess is the price of a
// kernel boundary. Each backend is represented by its cheapest measured
// candidate in the model, so the excess is not drowned by long kernels.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/patterns/candidate.h"
#include "core/measure/measurement.h"
#include "core/measure/measurement_db.h"

namespace collage {

struct SwitchCostTable {
  std::map<std::pair<std::string, std::string>, double> pairNs;  // (from, to) -> epsilon
  int measured = 0;  // pairs measured now (the rest came from the database)

  // The cost the op-level optimizer charges for a kernel of `to`: the mean
  // over the backends a kernel could follow (the DP does not know which
  // kernel runs before it). 0 when nothing is known.
  double epsilonInto(const std::string& to) const;
  // A small matrix, "from \ to", in microseconds.
  std::string toString() const;
};

using MeasurePairFn = std::function<Measurement(const Candidate& first, const Candidate& second)>;

// `versions` maps backend name -> version (part of the database key).
SwitchCostTable measureSwitchCosts(const CandidateSet& candidates,
                                   const std::vector<Measurement>& measurements,
                                   const std::map<std::string, std::string>& versions,
                                   MeasurementDb* db, const HardwareFingerprint& fingerprint,
                                   const MeasurePairFn& measurePair);

}  // namespace collage
