// The Builder: one FusedChain (onednn_chain.h) built into the steps of a
// OneDnnKernel, every argument bound. Internal to the oneDNN backend: the
// rest of the tree asks lowerChain and lowerSequence (onednn_kernel.h).
//
// The class is split by seam over several files:
//
//   onednn_builder.cc        dispatch on the anchor op, memory binding
//                            (the caller's buffers, constants, reorders,
//                            a sequence's intermediates), post-op attributes
//   onednn_build_conv.cc     Conv, ConvTranspose
//   onednn_build_matmul.cc   MatMul, Gemm, wide constant products in panels
//   onednn_build_pool_norm.cc  pooling, Concat, BatchNormalization,
//                            LayerNormalization, Softmax
//   onednn_build_eltwise.cc  elementwise chains with no anchor
//
// Every build* either appends its steps to the kernel or throws Refusal
// (onednn_post_ops.h) with the reason; a dnnl::error may escape too, and
// lowerChain reports either as a refused compile.
#pragma once

#include <dnnl.hpp>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/onednn/onednn_chain.h"
#include "backends/onednn/onednn_descs.h"
#include "backends/onednn/onednn_kernel.h"
#include "backends/onednn/onednn_post_ops.h"
#include "core/ops/op_helpers.h"

namespace collage::onednn {

class Builder {
 public:
  using memory = dnnl::memory;
  using Args = std::unordered_map<int, memory>;

  // A lone chain: build() returns a kernel of its own.
  Builder(std::shared_ptr<Context> context, const KernelRequest& request, const FusedChain& chain);
  // One chain of a sequence: its steps are appended to `kernel`, its inputs
  // and output wired as `link` says.
  Builder(std::shared_ptr<Context> context, const KernelRequest& request, const FusedChain& chain,
          OneDnnKernel* kernel, ChainLink* link);

  std::unique_ptr<Kernel> build();
  // Appends the chain's steps: the build* of its anchor's family.
  void buildSteps();

 private:
  [[noreturn]] void refuse(const std::string& why) const { throw Refusal{why}; }
  std::string anchorLabel() const { return nodeLabel(g_.node(chain_.anchor)); }
  const dnnl::engine& engine() const { return context_->engine; }

  // ---- memories (onednn_builder.cc)

  // A memory of the caller's buffer (kernel input `index`, or this chain's
  // output), or inside a sequence the memory an earlier chain made.
  memory bound(const memory::desc& md, int index, bool output);
  // A sequence's intermediate read as is (any layout); null otherwise.
  memory internalInput(const Operand& o) const;
  bool outputInternal() const { return link_ && link_->outputInternal; }
  // The kernel output this chain writes: its own group output inside a
  // sequence (a region may have several), output 0 for a lone chain.
  int outputIndex() const { return link_ ? link_->outerOutput : 0; }
  memory owned(const memory::desc& md);
  memory constant(const memory::desc& md, const void* data);
  // A constant given in layout `from`, stored in the layout `to` the primitive wants.
  memory reorderedConstant(const memory::desc& from, const void* data, const memory::desc& to);
  memory operand(const Operand& o, const memory::desc& md);
  // A primitive's source: the caller's plain buffer, reordered first if the
  // primitive wants another layout.
  memory source(const Operand& o, const memory::desc& plain, const memory::desc& want);
  // The kernel's input index of a run-time operand of this chain.
  int outerIndex(const Operand& o) const;
  // A copy of group input `o` in a blocked layout that an earlier chain made; null if none.
  memory blockedCopyOf(const Operand& o) const;

  template <class PD>
  void addStep(const PD& pd, Args args) {
    const memory::desc scratch = pd.scratchpad_desc();
    if (scratch.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = owned(scratch);
    warmLazyKernels(pd);
    dnnl::primitive p(pd.get());
    kernel_->steps.push_back(
        {p, std::move(args), kindName(pd.get_kind()) + "(" + pd.impl_info_str() + ")"});
  }

  // Runs `pd` with `args` (DNNL_ARG_DST added) writing the kernel's output,
  // through an internal buffer and a reorder if the primitive's dst layout
  // is not plain. A sum post-op's addend is first copied (reordered) into
  // the destination.
  template <class PD>
  void addMainStep(const PD& pd, Args args, const std::vector<PostOp>& ops) {
    const memory::desc plain = plainDesc(chain_.shape);
    const memory::desc user = resultDesc();
    kernel_->postOps += (kernel_->postOps.empty() ? "" : "; ") + opsText(ops);
    bindPostOps(ops, args);
    const memory::desc dstMd = pd.dst_desc();
    // Inside a sequence the result stays in the primitive's layout.
    const bool keep = dstMd == user || outputInternal();
    const memory dst = keep ? bound(dstMd, 0, true) : owned(dstMd);
    for (const PostOp& p : ops)
      if (p.kind == PostOp::Kind::Sum) {
        memory addend = internalInput(p.operand);
        if (!addend) addend = operand(p.operand, plain);
        addStep(dnnl::reorder::primitive_desc(addend, dst),
                {{DNNL_ARG_FROM, addend}, {DNNL_ARG_TO, dst}});
      }
    args[DNNL_ARG_DST] = dst;
    addStep(pd, std::move(args));
    if (keep) return;
    memory out = bound(user, 0, true);
    addStep(dnnl::reorder::primitive_desc(dst, out), {{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, out}});
  }

  // Eltwise `ops` as JIT eltwise primitives of their own, in place on `out`
  // (a result still hot in cache), where oneDNN would run them as slow
  // post-ops; `where` says so in describe().
  void addInPlaceEltwise(const memory& out, const std::vector<PostOp>& ops, const std::string& where);

  // ---- post-ops (onednn_builder.cc)

  memory::desc operandDesc(const PostOp& p) const;
  dnnl::primitive_attr attrFor(const std::vector<PostOp>& ops) const;
  void bindPostOps(const std::vector<PostOp>& ops, Args& args);
  std::string opsText(const std::vector<PostOp>& ops) const;

  // The result as the caller's buffer holds it: plain, or channels last
  // where a Transpose after the Conv is folded in (FusedChain::channelsLastOutput).
  memory::desc resultDesc() const;

  // ---- the anchor's inputs (onednn_builder.cc)

  // The anchor's input i; input 0 is the Pad's input when a Pad is folded in.
  Operand input(size_t i) const;
  // The shape the anchor's op sees at input 0 (padded when a Pad is folded in).
  const Shape& anchorInputShape() const;
  int64_t foldedPadBegin(size_t d) const { return chain_.pad == kNoNode ? 0 : chain_.padBegin.at(d); }
  int64_t foldedPadEnd(size_t d) const { return chain_.pad == kNoNode ? 0 : chain_.padEnd.at(d); }

  // ---- one family of anchors a file
  void buildConv(bool transpose);  // onednn_build_conv.cc
  void buildMatMul(bool gemm);     // onednn_build_matmul.cc
  memory buildPanelMatMul(const Operand& a, const memory::desc& aMd, const memory::desc& aWant,
                          const std::vector<float>& bData, int64_t K, int64_t N, const float* bias);
  void buildPool();  // onednn_build_pool_norm.cc
  void buildConcat();
  void buildBatchNorm();
  void buildLayerNorm();
  void buildSoftmax(bool log);
  void buildElementwise();  // onednn_build_eltwise.cc
  std::optional<memory::format_tag> elementwiseLayout(const std::vector<PostOp>& ops) const;

  std::shared_ptr<Context> context_;
  const KernelRequest& request_;
  const Graph& g_;
  const FusedChain& chain_;
  std::unique_ptr<OneDnnKernel> ownKernel_;
  OneDnnKernel* kernel_;
  ChainLink* link_ = nullptr;
  // The layout of the chain's result when it is not plain and its post-ops'
  // operands of the result's shape are given in it (operandDesc,
  // bindPostOps): an elementwise chain's (elementwiseLayout), a pool's on a
  // blocked input. oneDNN 2.6's JIT kernels read such an operand in the
  // destination's layout whatever its descriptor says.
  std::optional<memory::format_tag> resultTag_;
};

}  // namespace collage::onednn
