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

// One group of a plan run alone on the reference executor's values of its
// inputs and compared with the reference's values of its outputs: the error
// the kernel itself makes, not what it inherits from the kernels before it.
// `--verify` names the worst one when the outputs drift.
struct GroupError {
  size_t group = 0;
  std::string backend;
  std::string what;         // the group's nodes (KernelRequest::toString)
  std::string worstOutput;  // of its float outputs, the one with the largest scaled error
  double maxAbsError = 0;   // on that output
  double scaledError = 0;   // maxAbsError over the largest |reference value| of that output
  std::string notRun;       // why it was not rerun alone (on a device, refused), else empty
};

// For each group of `session`'s plan, in plan order.
std::vector<GroupError> groupErrors(const Session& session, const std::vector<Tensor>& inputs);

}  // namespace collage
