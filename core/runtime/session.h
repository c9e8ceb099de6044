// A Session runs a model as a Plan places it: the deployable product of the
// tool. Construction does every one-time thing; run() only computes.
//
// Construction:
//  - resolves the plan's groups against the graph (the node errors of
//    resolvePlanGroups) and orders them (planExecutionOrder: a group runs once
//    the groups producing its inputs have run; the plan's group order does
//    not matter);
//  - compiles every group once on its backend (KernelRequest::of(graph,
//    nodes, pattern)); a missing backend or a refusal is an Error naming the
//    group, its backend and the reason;
//  - hands values over in a backend's own layout where a producer and all of
//    its consumers offer the same one (Kernel::nativeOutputLayout: two
//    oneDNN kernels pass a blocked tensor without reordering it to NCHW and
//    back);
//  - plans memory: every intermediate value (produced by one kernel, read by
//    later ones, not a graph output) gets a buffer from a pool when its
//    producer runs and gives it back after its last reader has run; a request
//    takes the smallest free buffer that fits (best fit), else grows the
//    largest free one, else adds a buffer. A kernel's outputs never share a
//    buffer with its inputs. The buffers are allocated once, here.
//
// run(): checks the inputs against the graph's input types, allocates the
// graph outputs (they are returned, so each run gets fresh ones) and runs the
// kernels in order. Intermediates live in the preallocated buffers, so run()
// allocates nothing else. Not reentrant: one run at a time per Session.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/backend.h"
#include "core/runtime/kernel_cache.h"
#include "core/ir/graph.h"
#include "core/plan/plan.h"
#include "core/ir/tensor.h"
#include "core/ir/tensor_compare.h"

namespace collage {

// Returns the backend of a name, or nullptr if there is none
// (e.g. [&](const std::string& n) { return backendSet.find(n); }).
using BackendLookup = std::function<Backend*(const std::string&)>;

class Session {
 public:
  // The graph must outlive the Session (kernels refer to it); the plan is
  // copied. With a `cache` (which must outlive the Session), kernels are
  // taken from it and compiled only when missing: the graph-level search
  // builds many Sessions that share most of their kernels.
  Session(const Graph& graph, const Plan& plan, BackendLookup backends, KernelCache* cache = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Inputs in the order of graph.inputs(); outputs in the order of
  // graph.outputs(). Error naming the input whose type differs from the graph's.
  // A kernel that throws is reported as an Error naming its group.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);

  // The most bytes of intermediate values and graph outputs alive at once
  // over a run (graph inputs and constants not counted): what an ideal
  // allocator needs.
  size_t peakBytes() const { return peakBytes_; }
  // What the buffer pool actually holds (>= peakBytes() minus the outputs'
  // bytes, because reuse is by whole buffers).
  size_t arenaBytes() const { return arenaBytes_; }
  // The sum of the sizes of every value passed between kernels or returned
  // (what running without reuse would need).
  size_t totalValueBytes() const { return totalValueBytes_; }
  // How many intermediate values pass between kernels in a backend's own layout.
  int nativeLayoutValues() const { return nativeLayoutValues_; }

  using KernelTiming = collage::KernelTiming;  // core/plan/plan.h
  // When profiling is on, every kernel of the last run, in execution order;
  // empty otherwise.
  const std::vector<KernelTiming>& lastTimings() const { return timings_; }
  void setProfiling(bool on) { profiling_ = on; }
  bool profiling() const { return profiling_; }

  const Plan& plan() const { return plan_; }
  const Graph& graph() const { return graph_; }
  // Group indices in the order they run.
  const std::vector<size_t>& executionOrder() const { return order_; }
  // The request a group was compiled from (its inputs/outputs order).
  const KernelRequest& request(size_t group) const;
  int64_t runsDone() const { return runs_; }

 private:
  struct Kernel_;
  void handOverNativeLayouts();
  void planMemory();
  size_t bytesOf(ValueId v) const;

  const Graph& graph_;
  Plan plan_;
  KernelCache* cache_ = nullptr;
  std::vector<size_t> order_;
  std::vector<std::unique_ptr<Kernel_>> kernels_;  // indexed by group

  // Per value: its DLTensor (shape points into graph_), and for intermediates
  // the buffer it lives in.
  std::vector<DLTensor> dl_;
  std::vector<int32_t> bufferOf_;  // -1: not in the pool
  std::vector<Tensor> buffers_;
  size_t peakBytes_ = 0;
  size_t arenaBytes_ = 0;
  size_t totalValueBytes_ = 0;
  std::vector<size_t> nativeBytes_;  // per value: its native layout's size, 0 if plain
  int nativeLayoutValues_ = 0;

  bool profiling_ = false;
  std::vector<KernelTiming> timings_;
  std::chrono::steady_clock::time_point epoch_;
  int64_t runs_ = 0;
};

// The result of checking a session's outputs against the reference executor.
struct SessionVerification {
  std::vector<Tensor> outputs;             // the session's
  std::vector<Tensor> expected;            // the reference executor's
  std::vector<CompareResult> comparisons;  // per output
  std::vector<std::string> problems;       // "output 'y': <mismatch>", one per bad output
  bool ok() const { return problems.empty(); }
};

// Runs the session and the reference executor on `inputs` and compares every
// graph output (compareTensors with `tolerance`).
SessionVerification verifySession(Session& session, const std::vector<Tensor>& inputs,
                                  Tolerance tolerance = {1e-3, 1e-4});

}  // namespace collage
