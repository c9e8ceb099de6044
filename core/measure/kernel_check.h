// Runs a backend's kernel for a group of nodes and checks it against the
// reference executor on random inputs: the one check every backend test,
// the conformance runner's backend mode and `--verify` share.
#pragma once

#include <string>
#include <vector>

#include "core/runtime/backend.h"
#include "core/runtime/session.h"
#include "core/ir/tensor_compare.h"

namespace collage {

struct KernelCheckResult {
  bool compiled = false;
  std::string refusal;  // when not compiled
  bool ok = false;
  std::string message;  // the first mismatch, naming the output tensor
};

// Allocates the request's outputs, runs `kernel` on `inputs` (one per
// request.inputs) and returns the outputs.
std::vector<Tensor> runKernel(Kernel& kernel, const KernelRequest& request,
                              std::vector<Tensor>& inputs);

// Compiles `nodes` on `backend`, runs it on random inputs (seeded) and
// compares every output with the reference executor's value for it.
KernelCheckResult checkKernelAgainstReference(Backend& backend, const Graph& graph,
                                              const NodeSet& nodes, uint64_t seed = 1,
                                              Tolerance tolerance = {1e-3, 1e-4});

// Every value of `graph` (indexed by ValueId) as the reference executor
// computes it on `inputs` (one per graph input).
std::vector<Tensor> referenceValues(const Graph& graph, const std::vector<Tensor>& inputs);

}  // namespace collage
