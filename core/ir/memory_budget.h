// The memory this machine can still give a computation, and the check that
// refuses one whose tensors cannot fit before any of them is allocated.
//
// Why: a model bound to a long sequence declares tensors no machine holds (a
// prompt of 32k tokens makes each attention's [1,16,32768,32768] score
// tensor 64 GiB). Allocating one either throws std::bad_alloc (the kernel's
// overcommit heuristic refuses one request larger than memory and swap) or,
// for a tensor under that but over what is free, succeeds, and touching its
// pages wakes the out-of-memory killer, which kills the largest process: the
// measurement worker mid-request, or another user's. So whatever is about to
// allocate a computation's tensors (the measurer's kernel, a Session's
// buffers, the reference executor's node) first sets their bytes against
// availableMemory() and refuses, naming the largest tensor. A refusal is a
// fact about this machine now, not about the kernel or the plan.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "core/ir/error.h"
#include "core/ir/graph.h"

namespace collage {

struct AvailableMemory {
  size_t bytes = 0;
  std::string source;  // where the figure comes from, for messages
};

// Thrown by whatever refuses a computation for memory (a kernel's compile
// about to allocate its intermediates, a Session planning its buffers, the
// reference executor before a node): an Error, so every caller that reports
// Errors names it, and one the measurer records as the machine's memory
// (FailureCause::OutOfMemory), never as the kernel's verdict.
class DoesNotFitInMemory : public Error {
 public:
  using Error::Error;
};

// The least of:
//  - MemAvailable in /proc/meminfo (free memory plus the caches the kernel can
//    drop; what a new allocation can take without swapping or a kill);
//  - the cgroup's limit less its usage (cgroup v2 memory.max - memory.current),
//    where a container is limited below the machine;
//  - $COLLAGE_MEMORY_LIMIT: bytes, or a number with KiB, MiB or GiB (a budget
//    lower than the machine's: tests plant a machine too small, and a user can
//    leave memory to others). Error naming the variable when it does not parse.
// SIZE_MAX ("unknown") when none can be read.
AvailableMemory availableMemory();

// "64.0 GiB", "3.5 MiB", "512 bytes".
std::string describeBytes(size_t bytes);

// Parses "1048576", "64MiB", "2 GiB", "512KiB" (binary units); throws Error
// naming `what` on anything else.
size_t parseByteCount(const std::string& text, const std::string& what);

// One tensor a computation would allocate: `what` names it ("output
// '/MatMul_output_0' float32[1x16x32768x32768]").
struct TensorBytes {
  std::string what;
  size_t bytes = 0;
};

// Empty when `tensors`, allocated together, fit in `available`; else why not,
// naming the largest: "output 'x' float32[1x16x32768x32768] is 64.0 GiB, 64.2
// GiB in all, and 21.3 GiB is available (MemAvailable in /proc/meminfo)".
std::string memoryRefusal(const std::vector<TensorBytes>& tensors, const AvailableMemory& available);
// The same against availableMemory(). Tensors under kMemInfoBytes in all
// are set against $COLLAGE_MEMORY_LIMIT alone: no machine that runs anything
// lacks a mebibyte, and the reference executor checks every node of every
// decode step (reading /proc/meminfo costs tens of microseconds).
std::string memoryRefusal(const std::vector<TensorBytes>& tensors);
inline constexpr size_t kMemInfoBytes = size_t{1} << 20;

// Empty when `node`'s outputs, as the graph declares them, fit (memoryRefusal);
// else "node 'x' (MatMul): output 'y' float32[1x16x32768x32768] is 64.0 GiB,
// and ...": what the reference executor checks before each node runs.
std::string nodeMemoryRefusal(const Graph& graph, const Node& node);

}  // namespace collage
