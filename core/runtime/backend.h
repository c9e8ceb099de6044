// The Backend interface: what a library that runs parts of a model must
// provide. A backend never sees the placement algorithm; it is asked to
// compile one candidate (a group of nodes) at a time and may refuse.
//
// The contract follows oneDNN's: compile() does every one-time thing (JIT,
// weight packing and reordering, workspace allocation); Kernel::run() only
// computes, so what the measurer times is the kernel itself. Tensors at
// kernel boundaries are DLPack views of plain row-major memory on the
// backend's device, so CPU backends exchange them with no copy.
#pragma once

#include <dlpack/dlpack.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/device.h"
#include "core/ir/graph.h"
#include "core/ir/node_set.h"
#include "core/ir/tensor_compare.h"
#include "core/patterns/backend_spec.h"  // BackendKind
#include "core/patterns/pattern_rule.h"

namespace collage {

class DeviceRuntime;  // core/runtime/device_runtime.h

// What a backend is asked to compile: a group of nodes of a graph, with the
// order of its data inputs and outputs fixed (Kernel::run follows it).
// Constants read by the group are not inputs: the kernel takes them at
// compile time (so it can pack weights once).
struct KernelRequest {
  const Graph* graph = nullptr;
  NodeSet nodes;
  std::vector<ValueId> inputs;   // non-constant values read from outside (SubGraph::dataInputs)
  std::vector<ValueId> outputs;  // values used outside or graph outputs (SubGraph::outputs)
  std::string origin;            // the pattern or rule that produced it, for messages

  // Builds the request for a node set (inputs/outputs derived from the graph).
  static KernelRequest of(const Graph& graph, const NodeSet& nodes, std::string origin = "");
  std::vector<NodeId> members() const { return nodes.members(); }
  std::string toString() const;  // "{conv1 Conv, relu1 Relu}"
};

// A backend's own memory layout for a tensor (oneDNN's blocked nChw8c), as a
// kernel offers to write or read it at its boundary instead of plain
// row-major memory.
struct NativeLayout {
  std::string name;  // compared for equality only: it must say everything (layout, type, dims)
  size_t bytes = 0;  // buffer the layout needs (padding may make it larger than plain)
  bool operator==(const NativeLayout&) const = default;
};

// Channels last ([N][spatial...][C], nhwc for rank 4) is not one library's
// own: oneDNN's int8 convolutions read and write it, and an elementwise
// kernel of any backend can run over it as well as over plain memory. Every
// backend names it so, and a value passes in it across backends.
NativeLayout channelsLastLayout(const Shape& dims, ElementType type);

class Kernel {
 public:
  virtual ~Kernel() = default;
  // inputs/outputs follow KernelRequest::inputs/outputs; outputs are
  // pre-allocated by the caller. Must be callable repeatedly; not reentrant.
  virtual void run(const std::vector<const DLTensor*>& inputs,
                   const std::vector<DLTensor*>& outputs) = 0;

  // Layout hand-over between kernels (optional). A kernel that converts an
  // output from its own layout to plain memory as its last step, or an input
  // from plain memory to its own layout as a pure copy, names that layout
  // here. When a value's producer and every one of its consumers name the
  // same layout, the Session switches them (useNative...) before the first
  // run: the value then stays in that layout and both copies are skipped.
  // Measured kernels are never switched, so this is a cross-kernel effect:
  // the end-to-end check sees it, isolated costs do not.
  virtual std::optional<NativeLayout> nativeOutputLayout(size_t /*output*/) const { return std::nullopt; }
  virtual std::optional<NativeLayout> nativeInputLayout(size_t /*input*/) const { return std::nullopt; }
  virtual void useNativeOutputLayout(size_t /*output*/) {}
  virtual void useNativeInputLayout(size_t /*input*/) {}
  // Whether the kernel runs at the same cost in the layouts it offers as in
  // plain memory (an elementwise pass computes element by element in any
  // order): the hand-over then saves its neighbours' reorders, none of its
  // own, so it is neither measured again in them nor charged a reorder
  // where the hand-over fails (core/search/layout_charges.h).
  virtual bool layoutAgnostic() const { return false; }
};

// A compiled kernel, or the backend's reason for refusing the request.
struct CompileResult {
  std::unique_ptr<Kernel> kernel;
  std::string refusal;

  static CompileResult refuse(std::string reason) { return {nullptr, std::move(reason)}; }
  static CompileResult ok(std::unique_ptr<Kernel> k) { return {std::move(k), {}}; }
  explicit operator bool() const { return kernel != nullptr; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;     // "onednn": also the spec file's name
  virtual std::string version() const = 0;  // the library's own runtime version
  virtual Device device() const { return Device{}; }
  // Memory and copies on device(), for the Session to keep this backend's
  // tensors there (core/runtime/device_runtime.h). Null for host backends;
  // a backend on another device without one cannot be placed by a Session.
  virtual DeviceRuntime* deviceRuntime() { return nullptr; }
  virtual BackendKind kind() const { return BackendKind::OpLibrary; }
  // Compiles a group; an unsupported combination is a refusal, never a crash.
  virtual CompileResult compile(const KernelRequest& request) = 0;
  // The nodes of `request` that compile() would run on the registry's
  // reference kernels as they are, where those are scalar loops on one
  // thread (not the reference sgemm behind the float Conv and MatMul):
  // written for obvious correctness, thousands of times slower than a
  // library's kernel at a large model's sizes (an integer convolution at
  // 1024x1024 needs minutes). Answered without compiling; empty (the
  // default) = none. The
  // optimizer estimates such a kernel from these nodes' FLOPs before it
  // measures it, and does not measure it where a far faster candidate covers
  // the same nodes (core/measure/reference_skips.h): a kernel nobody would
  // choose must not cost a measurement that cannot finish.
  virtual NodeSet referenceNodes(const KernelRequest& /*request*/) const { return {}; }
  // A pattern rule written in C++ (opRule/fusionRule), for capabilities too
  // rich for the spec file's declarative [rule]; null for most backends.
  virtual std::shared_ptr<const PatternRule> codeRule() const { return nullptr; }
  // A backend that trades precision for speed (bf16 or TF32 arithmetic)
  // declares how far its results may be from the float32 reference: a plan
  // that uses it is checked within the loosest such tolerance
  // (declaredTolerance, session.h). nullopt: float32, checked as the
  // reference is.
  virtual std::optional<Tolerance> reducedPrecisionTolerance() const { return std::nullopt; }
  // How far one of its kernels alone, on the reference's inputs, may err, as
  // a fraction of each output's largest |value| (the plan check holds each
  // group to its own backend's bound, groupBound in session.h). 0: not
  // declared (a reduced-precision backend's kernels are then held to its
  // whole-plan bound; a float32 backend's to float32's).
  virtual double reducedPrecisionKernelError() const { return 0; }

  // Graph libraries (the graph-level search, core/search/graph_level_search.h):
  // a backend that compiles a *region* (any convex set of nodes, not a
  // pattern) as one kernel optimised across its nodes, keeping its own
  // layout between them. regionRefusal says, without compiling, why the
  // region cannot be one such kernel; empty means compile() will take it.
  virtual bool compilesRegions() const { return false; }
  virtual std::string regionRefusal(const KernelRequest& /*region*/) const {
    return name() + " does not compile regions";
  }
};

}  // namespace collage
