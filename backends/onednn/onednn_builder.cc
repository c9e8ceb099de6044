#include "backends/onednn/onednn_builder.h"

#include <cstring>

#include "core/ir/memory_budget.h"

namespace collage::onednn {

using dnnl::memory;

Builder::Builder(std::shared_ptr<Context> context, const KernelRequest& request,
                 const FusedChain& chain)
    : context_(std::move(context)),
      request_(request),
      g_(*request.graph),
      chain_(chain),
      ownKernel_(std::make_unique<OneDnnKernel>(context_)),
      kernel_(ownKernel_.get()) {}

Builder::Builder(std::shared_ptr<Context> context, const KernelRequest& request,
                 const FusedChain& chain, OneDnnKernel* kernel, ChainLink* link)
    : context_(std::move(context)),
      request_(request),
      g_(*request.graph),
      chain_(chain),
      kernel_(kernel),
      link_(link) {}

std::unique_ptr<Kernel> Builder::build() {
  buildSteps();
  return std::move(ownKernel_);
}

void Builder::buildSteps() {
  if (chain_.anchor == kNoNode) {
    buildElementwise();
    return;
  }
  const std::string& op = g_.node(chain_.anchor).op;
  if (op == "Conv")
    buildConv(false);
  else if (op == "ConvTranspose")
    buildConv(true);
  else if (op == "MatMul" || op == "Gemm")
    buildMatMul(op == "Gemm");
  else if (op == "MaxPool" || op == "AveragePool" || op == "GlobalMaxPool" ||
           op == "GlobalAveragePool")
    buildPool();
  else if (op == "BatchNormalization")
    buildBatchNorm();
  else if (op == "LayerNormalization")
    buildLayerNorm();
  else if (op == "Softmax" || op == "LogSoftmax")
    buildSoftmax(op == "LogSoftmax");
  else if (op == "Concat")
    buildConcat();
  else
    refuse("no oneDNN lowering for " + op);
}

// ---- memories

memory Builder::bound(const memory::desc& md, int index, bool output) {
  if (link_ && output && link_->outputInternal) {
    // An intermediate of a sequence: the next chains read this memory.
    if (link_->produced && link_->produced.get_desc() == md) return link_->produced;
    memory m = owned(md);
    link_->produced = m;
    return m;
  }
  if (link_ && !output) {
    const ChainLink::Input& in = link_->inputs.at(static_cast<size_t>(index));
    if (in.outer < 0) {
      // Made by an earlier chain, in whatever layout it chose.
      const memory::desc have = in.internal.get_desc();
      if (have == md) return in.internal;
      // The same plain bytes seen with other dims (a LayerNormalization's
      // [outer, inner] view of a [1, S, H] result): no copy. A plain
      // intermediate is never switched to another buffer by the layout
      // hand-over (only blocked ones are), so the view stays valid.
      if (samePlainBytes(have, md)) return memory(md, engine(), in.internal.get_data_handle());
      memory m = owned(md);
      addStep(dnnl::reorder::primitive_desc(in.internal, m),
              {{DNNL_ARG_FROM, in.internal}, {DNNL_ARG_TO, m}});
      return m;
    }
    index = in.outer;
  }
  if (output) index = outputIndex();
  memory m(md, engine(), DNNL_MEMORY_NONE);
  kernel_->bindings.push_back({m, output, index});
  return m;
}

memory Builder::internalInput(const Operand& o) const {
  if (!link_ || o.isConstant || o.inputIndex < 0) return memory();
  const ChainLink::Input& in = link_->inputs.at(static_cast<size_t>(o.inputIndex));
  return in.outer < 0 ? in.internal : memory();
}

memory Builder::owned(const memory::desc& md) {
  // The kernel's own tensors (constants, a sequence's intermediates, its
  // scratchpad) together must fit in this machine's memory: refused before
  // allocating (core/ir/memory_budget.h), as a sequence that materialises a
  // long prompt's attention scores would take 64 GiB at 32k tokens.
  size_t bytes = md.get_size();
  for (const memory& held : kernel_->owned) bytes += held.get_desc().get_size();
  if (std::string why = memoryRefusal({{"oneDNN's own tensors for this kernel (the last of " +
                                            std::to_string(md.get_size()) + " bytes)",
                                        bytes}});
      !why.empty())
    throw DoesNotFitInMemory(why);
  memory m(md, engine());
  kernel_->owned.push_back(m);
  return m;
}

memory Builder::constant(const memory::desc& md, const void* data) {
  memory m = owned(md);
  std::memcpy(m.get_data_handle(), data, md.get_size());
  return m;
}

memory Builder::reorderedConstant(const memory::desc& from, const void* data, const memory::desc& to) {
  if (from == to) return constant(to, data);
  memory src(from, engine(), const_cast<void*>(data));
  memory dst = owned(to);
  dnnl::stream stream(engine());  // not the kernels' stream: another thread may be running one
  dnnl::reorder(src, dst).execute(stream, src, dst);
  stream.wait();
  return dst;
}

memory Builder::operand(const Operand& o, const memory::desc& md) {
  COLLAGE_CHECK(o.present(), "operand without a source");
  return o.isConstant ? constant(md, o.constant.raw()) : bound(md, o.inputIndex, false);
}

memory Builder::source(const Operand& o, const memory::desc& plain, const memory::desc& want) {
  if (memory in = internalInput(o)) {
    if (in.get_desc() == want) return in;  // blocked from the previous chain: no reorder
    memory internal = owned(want);
    addStep(dnnl::reorder::primitive_desc(in, internal),
            {{DNNL_ARG_FROM, in}, {DNNL_ARG_TO, internal}});
    return internal;
  }
  if (plain == want) return operand(o, plain);
  if (o.isConstant) return reorderedConstant(plain, o.constant.raw(), want);
  // Several chains of a sequence reading one group input in the same
  // layout (an Inception block's branches) share one reorder. Only copies of
  // the input as stored are shared: a transposed view (a bf16 Gemm's transA)
  // converted to the same desc holds other values.
  const int outer = outerIndex(o);
  const bool asStored = plain == plainDesc(plain.dims());
  if (asStored)
    for (const auto& [index, copy] : kernel_->inputCopies)
      if (index == outer && copy.get_desc() == want) return copy;
  memory user = operand(o, plain);
  memory internal = owned(want);
  addStep(dnnl::reorder::primitive_desc(user, internal),
          {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, internal}});
  if (asStored) kernel_->inputCopies.emplace_back(outer, internal);
  return internal;
}

int Builder::outerIndex(const Operand& o) const {
  return link_ ? link_->inputs.at(static_cast<size_t>(o.inputIndex)).outer : o.inputIndex;
}

memory Builder::blockedCopyOf(const Operand& o) const {
  if (o.isConstant || o.inputIndex < 0) return memory();
  const int outer = outerIndex(o);
  for (const auto& [index, copy] : kernel_->inputCopies)
    if (index == outer && copy.get_desc() != plainDesc(o.shape) &&
        copy.get_desc().data_type() == memory::data_type::f32)  // not a bf16 conversion
      return copy;
  return memory();
}

// ---- post-ops

memory::desc Builder::operandDesc(const PostOp& p) const {
  const Shape shape = padTo(p.operand.shape, chain_.shape.size());
  if (resultTag_ && shape == chain_.shape)
    return memory::desc(dimsOf(shape), memory::data_type::f32, *resultTag_);
  return plainDesc(shape);
}

dnnl::primitive_attr Builder::attrFor(const std::vector<PostOp>& ops) const {
  dnnl::post_ops po;
  for (const PostOp& p : ops) {
    if (p.kind == PostOp::Kind::Eltwise)
      po.append_eltwise(1.0f, p.alg, p.alpha, p.beta);
    else if (p.kind == PostOp::Kind::Sum)
      po.append_sum(1.0f);
    else
      po.append_binary(p.alg, operandDesc(p));
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // allocated once, at compile
  return attr;
}

void Builder::bindPostOps(const std::vector<PostOp>& ops, Args& args) {
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == PostOp::Kind::Binary)
      args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1] =
          resultTag_ ? source(ops[i].operand, plainDesc(padTo(ops[i].operand.shape,
                                                                    chain_.shape.size())),
                                   operandDesc(ops[i]))
                          : operand(ops[i].operand, operandDesc(ops[i]));
}

std::string Builder::opsText(const std::vector<PostOp>& ops) const {
  FusedChain c = chain_;
  c.postOps = ops;
  return c.describe(g_);
}

memory::desc Builder::resultDesc() const {
  static const memory::format_tag channelsLast[] = {
      memory::format_tag::acb, memory::format_tag::acdb, memory::format_tag::acdeb};
  if (chain_.channelsLastOutput == kNoNode || chain_.shape.size() < 3 || chain_.shape.size() > 5)
    return plainDesc(chain_.shape);
  return memory::desc(dimsOf(chain_.shape), memory::data_type::f32,
                      channelsLast[chain_.shape.size() - 3]);
}

Operand Builder::input(size_t i) const {
  const Node& node = g_.node(chain_.anchor);
  if (i == 0 && chain_.pad != kNoNode) return operandOf(request_, g_.node(chain_.pad).inputs[0]);
  if (i == 0 && chain_.channelsLastInput != kNoNode)
    return operandOf(request_, g_.node(chain_.channelsLastInput).inputs[0]);
  return i < node.inputs.size() ? operandOf(request_, node.inputs[i]) : Operand{};
}

const Shape& Builder::anchorInputShape() const {
  return g_.value(g_.node(chain_.anchor).inputs[0]).type.shape;
}

void Builder::addInPlaceEltwise(const memory& out, const std::vector<PostOp>& ops,
                                const std::string& where) {
  for (const PostOp& p : ops)
    addStep(dnnl::eltwise_forward::primitive_desc(
                dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, p.alg,
                                            out.get_desc(), p.alpha, p.beta),
                attrFor({}), engine()),
            {{DNNL_ARG_SRC, out}, {DNNL_ARG_DST, out}});
  kernel_->postOps += where;
}

}  // namespace collage::onednn
