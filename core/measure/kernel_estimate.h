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
// only ever skipped for being slow when it is at least this slow. Not
// every reference kernel is a scalar loop: the float Conv and MatMul go
// through the reference sgemm (23 and 96 GFLOP/s on the development
// machine), which is why a backend names only the nodes it leaves to
// scalar loops (Backend::referenceNodes), and the integer products have
// their own speed (below).
inline constexpr double kReferenceFlopsPerSecond = 4e9;
// The reference's integer products (ConvInteger, MatMulInteger, QLinearConv,
// QLinearMatMul: core/ops/integer_products.h), likewise set high: measured
// at 23 to 27 GOP/s on a 64-channel 3x3 ConvInteger at 256x256 on the
// development machine (an AMD EPYC with AVX-512, shared with other builds;
// bench/kernels/bench_reference_integer.cc), where the int64 loop they
// replaced ran at 0.2 to 1 GOP/s.
inline constexpr double kReferenceIntegerProductFlopsPerSecond = 50e9;
// The float products through the reference sgemm (Conv, ConvTranspose,
// Gemm, MatMul), for the estimate of a whole run (estimateReferenceRun):
// above the convolutions' 23 GFLOP/s, below the large MatMuls' 96.
inline constexpr double kReferenceGemmFlopsPerSecond = 40e9;
// Its memory traffic, likewise high: bytes streamed by one core.
inline constexpr double kReferenceBytesPerSecond = 10e9;

// The speed at which a backend's reference kernel for `op` runs (one of the
// two constants above the sgemm's).
double referenceFlopsPerSecond(const std::string& op);

struct KernelEstimate {
  // The nodes that run on the reference kernels (empty: none; the kernel is
  // a library's, and nothing below is estimated).
  NodeSet referenceNodes;
  double flops = 0;  // of the reference nodes
  double bytes = 0;  // their inputs (weights included) and outputs
  Cost ns = kUnknownCost;  // one run, at the reference's speed: per node the larger of the two bounds, summed

  bool runsReference() const { return referenceNodes.count() > 0; }
  // "4.83 GFLOP in 'conv1' (ConvInteger)": what the estimate is of.
  std::string describe(const Graph& graph) const;
};

// The estimate of `referenceNodes` (of `graph`) run on the reference kernels.
KernelEstimate estimateReferenceNodes(const Graph& graph, const NodeSet& referenceNodes);

// One run of the whole graph on the reference executor (ReferenceExecutor),
// at the speeds above, the float products at the sgemm's: a lower bound
// again. The end-to-end check and the graph-level search check plans
// against that run only when it fits a share of the worker's time limit
// (plan_selection.h, kReferenceShareOfLimit).
KernelEstimate estimateReferenceRun(const Graph& graph);

// "61.2 s", "2.30 ms": a duration in ns, human-readable.
std::string formatDuration(Cost ns);

}  // namespace collage
