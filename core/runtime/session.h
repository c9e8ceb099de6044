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
//    buffer with its inputs. The buffers are allocated once, here;
//  - places values on devices: a value lives where its producer's backend
//    runs (Backend::device; graph inputs on the host). Where a plan edge
//    crosses devices (crossDeviceEdges: once per value and destination
//    device; graph outputs made on a device go back to the host) the Session
//    copies the value through the device's DeviceRuntime, and nowhere else.
//    Values on a device, and their copies there, get buffers from that
//    device's own pool, planned like the host's (BufferPoolPlan) and
//    allocated once by its runtime.
//
// A copy to a device runs just before the first kernel there that reads the
// value; a graph output's copy back to the host runs just after its producer.
//
// run(): checks the inputs against the graph's input types, allocates the
// graph outputs (they are returned, so each run gets fresh ones) and runs the
// kernels in order. Intermediates live in the preallocated buffers, so run()
// allocates nothing else. Not reentrant: one run at a time per Session (the API's Session
// serialises runs from several threads).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/backend.h"
#include "core/runtime/buffer_pool_plan.h"
#include "core/runtime/device_edges.h"
#include "core/runtime/device_runtime.h"
#include "core/runtime/kernel_cache.h"
#include "core/ir/graph.h"
#include "core/plan/plan.h"
#include "core/ir/tensor.h"
#include "core/ir/tensor_compare.h"

namespace collage {

// Whether consecutive kernels hand values over in a backend's own layout
// (the Session) and the DP charges layouts that way (the optimisation job).
// COLLAGE_NO_LAYOUT_HANDOVER=1 turns both off: a diagnostic switch, to
// measure what the hand-over gains.
bool layoutHandoverEnabled();

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
  // The same, calling `afterKernel` after each kernel with its outputs (in
  // the layout valueLayout says), before any later kernel reads them: the
  // plan check reads them, and may overwrite them (replaying the plan with
  // the reference's values at rounding ties, core/measure/plan_check.h).
  using AfterKernel = std::function<void(size_t group, const std::vector<DLTensor*>& outputs)>;
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const AfterKernel& afterKernel);

  // Graph output `output` (its index in graph.outputs()) written in place
  // into `buffer`, a tensor of its type that the caller owns and that run()
  // returns as that output (sharing its storage). The output must be made by
  // a group that is one Concat on the host whose first input is a graph
  // input read by nothing else: the caller keeps that input's rows already
  // in place at the head of `buffer`, so run() does not run the group's
  // kernel but writes only the Concat's other inputs' rows after them, and
  // never reads the first input (pass any tensor of its type). Why: a decode
  // step's Concat(past, new) -> present would otherwise copy the whole KV
  // cache every step (core/decode/decoder.h, docs/decoding.md). Error naming
  // the output when it is not such a Concat.
  //
  // `offsets` (one per axis before the Concat's axis; empty: all 0) make
  // `buffer` a window of the output, a device's share of a cache split
  // across devices (docs/decoding.md): along each such axis the buffer holds
  // the output's indices [offset, offset + its size), along the Concat's
  // axis any number of rows of which the last ones take the new rows, and
  // the axes after it are whole. run() then writes only the window's new
  // rows, and hands every kernel reading the output `buffer` as it is: the
  // caller must have made each of them read that layout (the decode
  // attention kernel with a shard's stored views, native_cache_parallel.h).
  // Error naming the output for a window that does not fit it.
  void appendInPlace(size_t output, Tensor buffer, const std::vector<int64_t>& offsets = {});
  // The graph outputs bound to a window of themselves (appendInPlace with a
  // buffer other than the output's shape).
  std::vector<ValueId> windowedOutputs() const;
  // Group `group`'s compiled kernel, for a caller that sets it up further
  // (cache parallelism hands the decode attention kernels their shard of
  // the cache, docs/decoding.md). Shared with the KernelCache, if any.
  Kernel& groupKernel(size_t group) const;
  size_t groupCount() const { return kernels_.size(); }
  // The bytes the in-place Concats wrote in the last run (their new rows).
  size_t appendedBytes() const { return appendedBytes_; }

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
  // The layout a value passes between kernels in, when handed over in a
  // backend's own (nullopt: plain memory).
  const std::optional<NativeLayout>& valueLayout(ValueId v) const {
    return layouts_.at(static_cast<size_t>(v));
  }

  // The device each group's backend runs on.
  const Device& groupDevice(size_t group) const { return groupDevices_.at(group); }
  // The copies every run makes, between devices (crossDeviceEdges of the
  // plan); empty when every group runs on the host.
  const std::vector<DeviceEdge>& deviceEdges() const { return deviceEdges_; }
  // As peakBytes(), arenaBytes() and totalValueBytes(), for the memory of the
  // devices other than the host (summed over them): values that live there
  // and the copies made there.
  size_t devicePeakBytes() const { return devicePeakBytes_; }
  size_t deviceArenaBytes() const { return deviceArenaBytes_; }
  size_t deviceTotalValueBytes() const { return deviceTotalValueBytes_; }

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
  // The backend a group runs on.
  Backend* groupBackend(size_t group) const;
  int64_t runsDone() const { return runs_; }
  // Output tensors allocated so far: a run hands out again those its
  // caller has dropped (two per output), so a loop allocates none after its
  // first runs.
  size_t outputAllocations() const { return outputAllocations_; }

 private:
  struct Kernel_;
  // Memory on a device other than the host, given back to its runtime when
  // the Session ends (or when its constructor throws).
  struct DeviceBlock {
    DeviceRuntime* runtime = nullptr;
    void* data = nullptr;
    DeviceBlock(DeviceRuntime* r, void* d) : runtime(r), data(d) {}
    DeviceBlock(DeviceBlock&& o) noexcept;
    DeviceBlock& operator=(DeviceBlock&&) = delete;
    ~DeviceBlock();
  };
  // Where a value, or its copy on another device, is kept (dl_ has one
  // DLTensor per location: first each value where its producer runs, then
  // one per DeviceEdge).
  struct Location {
    ValueId value = kNoValue;
    int pool = 0;         // 0: the host; k: deviceRuntimes_[k - 1]
    int32_t buffer = -1;  // in that pool's plan; -1: not pooled
  };
  void placeOnDevices(const std::vector<NodeSet>& sets);
  void handOverNativeLayouts();
  void planMemory();
  void copy(size_t edge);
  size_t bytesOf(ValueId v) const;
  int poolOf(const Device& device) const;  // 0: the host; -1: no runtime for it
  DeviceRuntime& runtimeOf(int pool) const;

  const Graph& graph_;
  Plan plan_;
  KernelCache* cache_ = nullptr;
  std::vector<size_t> order_;
  std::vector<std::unique_ptr<Kernel_>> kernels_;  // indexed by group

  // Per location: its DLTensor (shape points into graph_; data into a pool
  // buffer, or set by run() for graph inputs and outputs).
  std::vector<DLTensor> dl_;
  std::vector<Location> locations_;
  std::vector<Tensor> buffers_;  // the host pool's
  std::vector<DeviceBlock> deviceBuffers_;

  std::vector<Device> groupDevices_;
  std::vector<DeviceRuntime*> deviceRuntimes_;  // one per device other than the host
  std::vector<DeviceEdge> deviceEdges_;
  std::vector<size_t> outputLocation_;  // per graph output: the location its returned tensor backs
  std::vector<std::vector<size_t>> copiesBefore_;  // per step: edges copied before its kernel
  std::vector<std::vector<size_t>> copiesAfter_;   // per step: edges copied after it
  size_t devicePeakBytes_ = 0;
  size_t deviceArenaBytes_ = 0;
  size_t deviceTotalValueBytes_ = 0;
  size_t peakBytes_ = 0;
  size_t arenaBytes_ = 0;
  size_t totalValueBytes_ = 0;
  std::vector<size_t> nativeBytes_;  // per value: its native layout's size, 0 if plain
  std::vector<std::optional<NativeLayout>> layouts_;  // per value: its native layout, if any
  int nativeLayoutValues_ = 0;

  // appendInPlace: per group, the graph output it writes in place (or -1),
  // and per graph output, the caller's buffer (empty: a fresh tensor).
  std::vector<int> inPlaceOutput_;
  std::vector<Tensor> inPlaceBuffers_;
  std::vector<std::vector<int64_t>> inPlaceOffsets_;  // per graph output: its window's
  void runInPlaceConcat(size_t group);
  // Per graph output: the tensors run() returned lately, handed out again
  // once the caller has dropped them (outputTensor).
  std::vector<std::vector<Tensor>> returnedOutputs_;
  size_t outputAllocations_ = 0;
  Tensor outputTensor(size_t output);
  size_t appendedBytes_ = 0;

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

// How far a plan's outputs may be from the reference executor's: float32
// reordering, no more. Over the 35 whole-plan verifications of the test
// suite (zoo models, control flow, plans on every CPU backend) the largest
// difference was 2.9e-6; a plan whose oneDNN kernel dropped a 2.7e-6 bias
// drifted by 9.2e-5 (2.6e-3 relative) and passed the {1e-3, 1e-4} used before.
inline constexpr Tolerance kPlanTolerance{1e-4, 1e-5};

// What a plan's outputs are checked with: kPlanTolerance, loosened (each
// bound the largest) only by the reduced-precision tolerances its groups'
// backends declare (Backend::reducedPrecisionTolerance), so a plan of
// float32 backends is never held to less.
Tolerance declaredTolerance(const Plan& plan, const BackendLookup& backends);

// The plan check's bounds (core/measure/plan_check.h; the rule and its
// derivation: docs/measurement.md, "The tolerance rule"), each a fraction of
// an output's largest |reference value| (compareScaled).
//
// Float32: a plan's outputs, and each kernel alone, within 1e-4 of that.
inline constexpr double kFloat32Bound = 1e-4;
// A declared Tolerance read as such a bound: its larger of rtol and atol.
double scaledBound(const Tolerance& declared);
// What one group alone is held to: its backend's declared kernel bound
// (reducedPrecisionKernelError), else its declared whole-plan bound, else
// (float32) kFloat32Bound. Never looser because of another group.
double groupBound(const Backend* backend);
// What a plan's outputs are held to: the loosest bound its groups' backends
// declare for whole plans, kFloat32Bound for a plan of float32 backends.
double planBound(const Plan& plan, const BackendLookup& backends);

// Runs the session and the reference executor on `inputs` and compares every
// graph output (compareTensors with `tolerance`).
SessionVerification verifySession(Session& session, const std::vector<Tensor>& inputs,
                                  Tolerance tolerance = kPlanTolerance);

}  // namespace collage
