// Lowering a group of nodes for oneDNN, step two: a FusedChain (see
// onednn_chain.h) becomes a short list of primitives with every argument
// bound. All one-time work happens here: primitive creation (oneDNN JITs its
// kernels then), weight reordering into the layout the primitive prefers,
// folding per-channel scales and shifts into weights and bias, scratchpad
// allocation. Kernel::run only binds the caller's buffers and executes.
#pragma once

#include <dnnl.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/onednn/channels_transpose.h"
#include "backends/onednn/onednn_chain.h"
#include "backends/onednn/onednn_precision.h"
#include "core/runtime/backend.h"

namespace collage::onednn {

// One engine and one stream for all the kernels of a backend, and the
// precision its convolutions and matrix products compute in.
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  Precision precision = Precision::F32;
};

class OneDnnKernel final : public Kernel {
 public:
  struct Step {
    dnnl::primitive primitive;
    std::unordered_map<int, dnnl::memory> args;
    std::string impl;  // oneDNN's implementation name ("jit:avx2", "gemm:jit", ...)
    // A reorder that runs as our channels transpose (channels_transpose.h),
    // decided on its first run, once the layout hand-over has settled the
    // memories it reads and writes.
    bool inspected = false;
    std::optional<ChannelsTranspose> transpose;
  };
  // A memory whose buffer is the caller's: one of the kernel's inputs or outputs.
  struct Binding {
    dnnl::memory memory;
    bool isOutput = false;
    int index = 0;
    size_t byteOffset = 0;  // into the caller's buffer (a panel of a wide matmul's output)
  };

  explicit OneDnnKernel(std::shared_ptr<Context> context) : context_(std::move(context)) {}
  void run(const std::vector<const DLTensor*>& inputs,
           const std::vector<DLTensor*>& outputs) override;

  // "reorder(simple:any) -> convolution(jit:avx2) -> reorder(simple:any)": what
  // oneDNN chose, for messages and the report.
  std::string describe() const;

  // Layout hand-over: a blocked result reordered to the plain output as the
  // last use of the output's buffer, or a plain input whose only use is one
  // reorder into a blocked copy, can skip that reorder.
  std::optional<NativeLayout> nativeOutputLayout(size_t output) const override;
  std::optional<NativeLayout> nativeInputLayout(size_t input) const override;
  void useNativeOutputLayout(size_t output) override;
  void useNativeInputLayout(size_t input) override;

  std::vector<Step> steps;
  std::vector<Binding> bindings;
  std::vector<dnnl::memory> owned;  // constants and intermediates kept alive
  // Compile time only: the kernel's inputs already reordered to another
  // layout (input index, the copy), so that chains reading the same input
  // share the reorder.
  std::vector<std::pair<int, dnnl::memory>> inputCopies;
  std::string postOps;              // the chain as lowered (after folding), for describe()

 private:
  // The one step that touches the caller's buffer `index` (an input or an
  // output), if it is a reorder between that buffer and a blocked memory of
  // the kernel that no other step writes; its position in `steps`, or -1.
  int handOverStep(bool output, size_t index) const;
  // An input whose every use is a reorder into memories of one native
  // layout that other steps also write (a residual copied into a sum
  // post-op's destination): that layout; the copies can read it instead.
  std::optional<dnnl::memory::desc> copiedInputLayout(size_t input) const;

  std::shared_ptr<Context> context_;
};

// Executes the steps in order on `stream` and waits for them; a reorder
// that is a channels transpose runs ours, every other step oneDNN's.
void executeSteps(std::vector<OneDnnKernel::Step>& steps, dnnl::stream& stream);

// Runs a lowering on the backend's thread count, turning each way oneDNN or
// the lowering can say no (Refusal, dnnl::error, Error) into a refusal.
CompileResult guardedLowering(const std::function<CompileResult()>& lower);

// Builds the kernel for an analysed group, or refuses with the reason oneDNN gave.
CompileResult lowerChain(const std::shared_ptr<Context>& context, const KernelRequest& request,
                         const FusedChain& chain);

// How one chain of a sequence is wired: each of its request's inputs is the
// kernel's input `outer` or (outer < 0) the memory an earlier chain made;
// its result is the kernel's output `outerOutput`, or (outputInternal) a
// memory of the kernel in the layout its primitive chose (`produced`, set by
// the lowering), or both: then the kernel's output is a plain copy of it.
struct ChainLink {
  struct Input {
    int outer = -1;
    dnnl::memory internal;
  };
  std::vector<Input> inputs;
  bool outputInternal = false;
  int outerOutput = 0;  // -1: read by later chains only
  dnnl::memory produced;
};

// Builds one kernel that runs the chains of a sequence in order, keeping
// oneDNN's blocked layout between them (reorders only at the kernel's
// boundary and where a primitive wants another layout).
CompileResult lowerSequence(const std::shared_ptr<Context>& context, const ChainSequence& sequence);

}  // namespace collage::onednn
