// A kernel's cost estimated before it is measured, from its FLOPs and the
// bytes it reads and writes. Only for the kernels a backend runs on the
// registry's reference kernels (Backend::referenceNodes): their speed is
// the reference's scalar loops', the same on every backend, so a constant
// says it well enough to tell a kernel that needs a minute per run from one
// that needs a millisecond. A library's kernel is measured, never guessed.
#pragma once

#include <string>

#include "core/ir/cost.h"
#include "core/ir/graph.h"
#include "core/ir/node_set.h"

namespace collage {

// The scalar reference kernels' speed, set high on purpose, so that an
// estimate is a lower bound on the time such a kernel takes: a kernel is
// only ever skipped for being slow when it is at least this slow. The
// reference's integer convolution (ConvInteger, 64 channels 3x3 at 56x56)
// ran at 0.98 GFLOP/s on the development machine (an AMD EPYC, shared with
// other builds); 4 GFLOP/s leaves room for an idle, faster machine. Not
// every reference kernel is a scalar loop: the float Conv and MatMul go
// through the reference sgemm (23 and 96 GFLOP/s there), which is why a
// backend names only the nodes it leaves to scalar loops (Backend::referenceNodes).
inline constexpr double kReferenceFlopsPerSecond = 4e9;
// Its memory traffic, likewise high: bytes streamed by one core.
inline constexpr double kReferenceBytesPerSecond = 10e9;

struct KernelEstimate {
  // The nodes that run on the reference kernels (empty: none; the kernel is
  // a library's, and nothing below is estimated).
  NodeSet referenceNodes;
  double flops = 0;  // of the reference nodes
  double bytes = 0;  // their inputs (weights included) and outputs
  Cost ns = kUnknownCost;  // one run, at the reference's speed: the larger of the two bounds

  bool runsReference() const { return referenceNodes.count() > 0; }
  // "4.83 GFLOP in 'conv1' (ConvInteger)": what the estimate is of.
  std::string describe(const Graph& graph) const;
};

// The estimate of `referenceNodes` (of `graph`) run on the reference kernels.
KernelEstimate estimateReferenceNodes(const Graph& graph, const NodeSet& referenceNodes);

// "61.2 s", "2.30 ms": a duration in ns, human-readable.
std::string formatDuration(Cost ns);

}  // namespace collage
