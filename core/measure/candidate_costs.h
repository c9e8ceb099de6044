// Gets a cost for every candidate: from the measurement database when it has
// one for this machine, else by measuring (through an isolated worker in the
// product; a deterministic function in tests) and storing the result.
// Kernels that would run on the reference kernels can be screened first
// (reference_skips.h): those far slower than a faster candidate for the same
// nodes are not measured, and recorded as Skipped.
// Candidates with the same canonical signature on the same backend (the 12
// identical layers of BERT) are measured once.
// With a shared store, so are kernels that another process (another engineer's
// optimize) is measuring at the same time: each is claimed while measured,
// and one claimed elsewhere is read from the store once that process is done.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/patterns/candidate.h"
#include "core/ir/hardware_fingerprint.h"
#include "core/measure/measurement.h"
#include "core/measure/measurement_db.h"
#include "core/measure/reference_skips.h"
#include "core/ir/search_events.h"

namespace collage {

using MeasureFn = std::function<Measurement(const Candidate&)>;

struct CostingReport {
  int candidates = 0;
  int distinct = 0;  // distinct (backend, signature) pairs
  int cached = 0;
  int measured = 0;
  int failed = 0;  // invalid, failed or timed out (cached or fresh)
  int preempted = 0;  // measured now with runs left out: another process preempted them
  // Failed now through the machine's fault (its timing lock, its memory, a
  // busy machine, a kill from outside: Measurement::environmental). Not kept
  // as the kernel's verdict nor shared: measured again on the next run.
  int environmental = 0;
  // Reference kernels not measured, faster candidates covering their nodes
  // (reference_skips.h), and what one run of each was estimated at in all.
  int skipped = 0;
  double skippedEstimateSeconds = 0;
  // Reference kernels measured although slow (no faster candidate for some
  // node): one line each, naming the nodes and the expected time.
  std::vector<std::string> warnings;
  double seconds = 0;
  bool cancelled = false;
};

class CandidateCoster {
 public:
  // `db` may be null (nothing cached or stored). `backendVersion` gives the
  // version string stored with each measurement. An empty `measure` only
  // looks up: what the database lacks is left "not measured".
  CandidateCoster(const Graph& graph, MeasurementDb* db, HardwareFingerprint fingerprint,
                  std::function<std::string(const std::string&)> backendVersion, MeasureFn measure);

  // One Measurement per candidate (Failed with "cancelled" for those not
  // reached when cancelled). `needed` (optional) skips candidates a pin or
  // forbid already excludes.
  std::vector<Measurement> costAll(const CandidateSet& candidates, const std::vector<bool>& needed,
                                   SearchObserver* observer, const CancellationToken* cancel,
                                   CostingReport* report = nullptr);

  // With a screen, candidates whose kernel runs on the reference kernels are
  // measured last, each after judging it against what the others were
  // measured at (judgeReferenceCandidate), and skipped where faster
  // candidates cover its nodes. Without one (the default), every candidate is measured.
  void setReferenceScreen(ReferenceScreen screen) { screen_ = std::move(screen); }

  // Measures `candidate` again and keeps whichever of `current` and the new
  // measurement has the lower median (noise only adds time), storing the
  // kept one in the database. A failed new measurement keeps `current`.
  Measurement remeasure(const Candidate& candidate, const Measurement& current);

 private:
  const Graph& graph_;
  MeasurementDb* db_;
  HardwareFingerprint fingerprint_;
  std::function<std::string(const std::string&)> backendVersion_;
  MeasureFn measure_;
  ReferenceScreen screen_;
};

// "Conv+Add+Relu": the ops of a group, for tables and exports.
std::string opsLabel(const Graph& graph, const NodeSet& nodes);

}  // namespace collage
