// Which reference-only kernels are not worth measuring. A backend runs some
// ops on the registry's reference kernels (Backend::referenceNodes): scalar
// loops that, at a large model's sizes, take minutes per run, so that
// measuring them never finishes. Before such a kernel is measured, its cost
// is estimated from its FLOPs at the reference's speed (kernel_estimate.h)
// and set against what the faster candidates for the same nodes were
// measured at (the other kernels are measured first for this). It is not
// measured:
//  - when the estimate is more than kReferenceSkipFactor times what other
//    candidates take for its nodes: no cover would choose it;
//  - when measuring it would pass the measurement timeout and other
//    candidates cover its nodes: it would time out, and is not needed.
// A node whose only candidates are reference kernels still has them
// measured (the model must run), with a warning of how long that will take.
// A skipped candidate is recorded as MeasurementStatus::Skipped: the DP
// cannot choose it (cost +inf), exactly as if it had failed.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/measure/kernel_estimate.h"
#include "core/measure/measurement.h"
#include "core/patterns/candidate.h"

namespace collage {

// How many times slower than the alternative a reference kernel's estimate
// must be to be skipped. The estimate is a lower bound (kernel_estimate.h:
// the reference's speed is set high), and the alternative's cost counts a
// multi-node candidate once per node it shares: both err towards measuring.
// 20x leaves room for what the estimate cannot see (a cache-resident
// reference kernel, an alternative that pays a layout change) and still
// skips the kernels that matter, which are 100x to 10000x slower.
inline constexpr double kReferenceSkipFactor = 20;
// A measured reference kernel expected to take longer than this to measure
// gets a warning saying how long.
inline constexpr double kSlowMeasurementWarningSeconds = 10;

struct ReferenceScreen {
  // What of a candidate's kernel runs on the reference kernels, estimated
  // (estimateReferenceNodes). Null: nothing is screened.
  std::function<KernelEstimate(const Candidate&)> estimate;
  double timeoutSeconds = 60;  // the measurer's limit for one kernel (MeasurerOptions::timeoutSeconds)
  // Runs one measurement takes at least: a warm-up and the minimum samples
  // (MeasurerOptions::minSamples), so a 10 s kernel needs 80 s.
  int runsPerMeasurement = 8;
  double factor = kReferenceSkipFactor;
};

struct ReferenceVerdict {
  bool skip = false;
  // Skipped: why, with the estimate and the alternative. Measured: a warning
  // naming the nodes with no faster candidate and how long the measurement
  // is expected to take, when that is long; else empty.
  std::string message;
  double alternativeNs = 0;  // what the other candidates take for its nodes (skipped for being slower)
};

// The verdict on candidate `i` of `candidates`, a reference kernel estimated
// at `estimate`, given what is measured so far (`measured`, per candidate;
// only Ok measurements count, and never candidate i's own).
ReferenceVerdict judgeReferenceCandidate(const Graph& graph, const CandidateSet& candidates, size_t i,
                                         const KernelEstimate& estimate,
                                         const std::vector<Measurement>& measured,
                                         const ReferenceScreen& screen);

// "skipped 3 reference kernels estimated at 183.2 s per run in all (faster
// candidates exist)": the optimize summary's line; empty when none was.
std::string skippedReferencesSummary(int skipped, double estimateSeconds);

}  // namespace collage
