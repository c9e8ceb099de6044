// OneDnnKernel at run time (bind the caller's buffers, execute the steps),
// its layout hand-over between kernels of a region, and the two entry
// points that build kernels with the Builder (onednn_builder.h).
#include "backends/onednn/onednn_kernel.h"

#include <functional>

#include <dnnl_debug.h>
#include <omp.h>

#include <algorithm>

#include "backends/onednn/onednn_builder.h"
#include "core/ir/memory_budget.h"
#include "core/ir/threading.h"

namespace collage::onednn {

using dnnl::memory;

void OneDnnKernel::run(const std::vector<const DLTensor*>& inputs,
                       const std::vector<DLTensor*>& outputs) {
  const int threads = threadCount();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  for (Binding& b : bindings) {
    const DLTensor* t = b.isOutput ? outputs[b.index] : inputs[b.index];
    b.memory.set_data_handle(static_cast<char*>(t->data) + t->byte_offset + b.byteOffset);
  }
  executeSteps(steps, context_->stream);
}

void executeSteps(std::vector<OneDnnKernel::Step>& steps, dnnl::stream& stream) {
  for (OneDnnKernel::Step& s : steps) {
    if (!s.inspected) {
      s.inspected = true;
      if (s.primitive.get_kind() == dnnl::primitive::kind::reorder)
        s.transpose = channelsTransposeOf(s.args.at(DNNL_ARG_FROM).get_desc(), s.args.at(DNNL_ARG_TO).get_desc());
    }
    if (s.transpose) {
      stream.wait();  // the steps before it have written its source
      runChannelsTranspose(*s.transpose, s.args.at(DNNL_ARG_FROM).get_data_handle(),
                           s.args.at(DNNL_ARG_TO).get_data_handle());
    } else {
      s.primitive.execute(stream, s.args);
    }
  }
  stream.wait();
}

int OneDnnKernel::handOverStep(bool output, size_t index) const {
  // The memories bound to the caller's buffer (an input read at several
  // places may be bound more than once).
  std::vector<memory> bound;
  for (const Binding& b : bindings) {
    if (b.isOutput != output || static_cast<size_t>(b.index) != index) continue;
    if (b.byteOffset != 0 || (output && !bound.empty())) return -1;  // a panel of the buffer
    // A view of the buffer in another layout (a folded Transpose's input
    // read as a Conv's nhwc source): its layout names other dims.
    const memory::desc md = b.memory.get_desc();
    if (md != plainDesc(md.dims(), md.data_type())) return -1;
    bound.push_back(b.memory);
  }
  if (bound.empty()) return -1;
  const int here = output ? DNNL_ARG_TO : DNNL_ARG_FROM, there = output ? DNNL_ARG_FROM : DNNL_ARG_TO;
  // Every use of the caller's buffer must be a reorder from it (to it, for
  // an output: then only one).
  std::vector<size_t> uses;
  for (size_t s = 0; s < steps.size(); ++s)
    for (const auto& [arg, m] : steps[s].args) {
      if (std::find(bound.begin(), bound.end(), m) == bound.end()) continue;
      if (arg != here || steps[s].primitive.get_kind() != dnnl::primitive::kind::reorder) return -1;
      uses.push_back(s);
    }
  if (uses.empty() || (output && uses.size() > 1)) return -1;
  // The hand-over replaces a reorder whose other end is a blocked memory
  // that, for an input, no other step writes: a pure copy of the input.
  // (Other reorders of an input, such as a residual copied into a sum
  // post-op's destination, then read that copy instead.)
  for (size_t s : uses) {
    const memory other = steps[s].args.at(there);
    if (!nativeTagOf(other.get_desc())) continue;
    bool pure = true;
    for (size_t t = 0; t < steps.size() && pure && !output; ++t) {
      if (t == s) continue;
      for (const auto& [arg, m] : steps[t].args)
        if (m == other && (arg == DNNL_ARG_DST || arg == DNNL_ARG_TO)) pure = false;
    }
    if (pure) return static_cast<int>(s);
  }
  return -1;
}

namespace {
}  // namespace

std::optional<NativeLayout> OneDnnKernel::nativeOutputLayout(size_t output) const {
  const int s = handOverStep(true, output);
  if (s < 0) return std::nullopt;
  return handOverLayoutOf(steps[static_cast<size_t>(s)].args.at(DNNL_ARG_FROM).get_desc());
}

std::optional<NativeLayout> OneDnnKernel::nativeInputLayout(size_t input) const {
  const int s = handOverStep(false, input);
  if (s >= 0) return handOverLayoutOf(steps[static_cast<size_t>(s)].args.at(DNNL_ARG_TO).get_desc());
  if (const std::optional<memory::desc> md = copiedInputLayout(input)) return handOverLayoutOf(*md);
  return std::nullopt;
}

std::optional<memory::desc> OneDnnKernel::copiedInputLayout(size_t input) const {
  std::vector<memory> bound;
  for (const Binding& b : bindings) {
    if (b.isOutput || static_cast<size_t>(b.index) != input) continue;
    if (b.byteOffset != 0) return std::nullopt;
    const memory::desc md = b.memory.get_desc();
    if (md != plainDesc(md.dims(), md.data_type()))
      return std::nullopt;  // a view in another layout, as above
    bound.push_back(b.memory);
  }
  if (bound.empty()) return std::nullopt;
  std::optional<memory::desc> layout;
  for (const Step& step : steps)
    for (const auto& [arg, m] : step.args) {
      if (std::find(bound.begin(), bound.end(), m) == bound.end()) continue;
      if (arg != DNNL_ARG_FROM || step.primitive.get_kind() != dnnl::primitive::kind::reorder)
        return std::nullopt;
      // A bf16 kernel converts its input into a native layout: it can read
      // the float32 tensor in that layout instead and convert from there.
      memory::desc to = step.args.at(DNNL_ARG_TO).get_desc();
      if (const std::optional<memory::desc> f32 = float32Twin(to)) to = *f32;
      if (!nativeTagOf(to) || (layout && *layout != to)) return std::nullopt;
      layout = to;
    }
  return layout;
}

void OneDnnKernel::useNativeOutputLayout(size_t output) {
  const int s = handOverStep(true, output);
  COLLAGE_CHECK(s >= 0, "no blocked output to hand over");
  const memory blocked = steps[static_cast<size_t>(s)].args.at(DNNL_ARG_FROM);
  for (Binding& b : bindings)
    if (b.isOutput && static_cast<size_t>(b.index) == output) b.memory = blocked;
  steps.erase(steps.begin() + s);
}

void OneDnnKernel::useNativeInputLayout(size_t input) {
  const int s = handOverStep(false, input);
  memory blocked;
  if (s >= 0) {
    blocked = steps[static_cast<size_t>(s)].args.at(DNNL_ARG_TO);
  } else {
    // No pure copy to drop (the input is only copied into a sum post-op's
    // destination): the copies stay, reading the blocked tensor.
    const std::optional<memory::desc> md = copiedInputLayout(input);
    COLLAGE_CHECK(md.has_value(), "no blocked input to take over");
    blocked = memory(*md, context_->engine, DNNL_MEMORY_NONE);
  }
  std::vector<memory> plain;
  for (Binding& b : bindings)
    if (!b.isOutput && static_cast<size_t>(b.index) == input) {
      plain.push_back(b.memory);
      b.memory = blocked;
    }
  if (s >= 0) steps.erase(steps.begin() + s);
  // The other reorders of the input now start from the blocked copy.
  for (Step& step : steps) {
    auto from = step.args.find(DNNL_ARG_FROM);
    if (from == step.args.end() || std::find(plain.begin(), plain.end(), from->second) == plain.end())
      continue;
    const memory to = step.args.at(DNNL_ARG_TO);
    const dnnl::reorder::primitive_desc pd(blocked, to);
    step.primitive = dnnl::reorder(pd);
    step.impl = "reorder(" + std::string(pd.impl_info_str()) + ")";
    from->second = blocked;
  }
}

std::string OneDnnKernel::describe() const {
  std::string s;
  for (const Step& step : steps) s += (s.empty() ? "" : " -> ") + step.impl;
  return postOps.empty() ? s : s + " [" + postOps + "]";
}

CompileResult guardedLowering(const std::function<CompileResult()>& lower) {
  const int threads = threadCount();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  try {
    return lower();
  } catch (const Refusal& r) {
    return CompileResult::refuse(r.reason);
  } catch (const dnnl::error& e) {
    return CompileResult::refuse("oneDNN: " + std::string(e.what()));
  } catch (const DoesNotFitInMemory&) {
    throw;  // the machine's memory now, not a kernel oneDNN cannot build (Builder::owned)
  } catch (const Error& e) {
    return CompileResult::refuse(e.what());
  }
}

CompileResult lowerSequence(const std::shared_ptr<Context>& context, const ChainSequence& sequence) {
  return guardedLowering([&] {
    auto kernel = std::make_unique<OneDnnKernel>(context);
    std::vector<ChainLink> links(sequence.parts.size());
    for (size_t i = 0; i < sequence.parts.size(); ++i) {
      const ChainSequence::Part& part = sequence.parts[i];
      ChainLink& link = links[i];
      link.outputInternal = part.readLater;
      link.outerOutput = part.groupOutput;
      for (const auto& [outer, producer] : part.inputs) {
        ChainLink::Input in;
        in.outer = outer;
        if (outer < 0) in.internal = links.at(static_cast<size_t>(producer)).produced;
        link.inputs.push_back(in);
      }
      Builder(context, part.request, part.chain, kernel.get(), &link).buildSteps();
      if (link.outputInternal && !link.produced)
        return CompileResult::refuse("chain " + std::to_string(i + 1) + " of the sequence (" +
                                     part.chain.describe(*part.request.graph) +
                                     ") made no intermediate result");
      if (link.outputInternal && link.outerOutput >= 0) {
        // Read by later chains and by the group's consumers: later chains
        // keep the primitive's layout, the consumers get a plain copy.
        const memory::desc plain = plainDesc(part.chain.shape);
        memory user(plain, context->engine, DNNL_MEMORY_NONE);
        kernel->bindings.push_back({user, true, link.outerOutput});
        // A plain result made with other dims (a LayerNormalization's
        // [outer, inner] view of [1, S, H]) is copied as the same bytes.
        memory from = link.produced;
        if (from.get_desc() != plain && samePlainBytes(from.get_desc(), plain))
          from = memory(plain, context->engine, from.get_data_handle());
        const dnnl::reorder::primitive_desc pd(from, user);
        kernel->steps.push_back({dnnl::reorder(pd),
                                 {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, user}},
                                 "reorder(" + std::string(pd.impl_info_str()) + ")"});
      }
    }
    return CompileResult::ok(std::move(kernel));
  });
}

CompileResult lowerChain(const std::shared_ptr<Context>& context, const KernelRequest& request,
                         const FusedChain& chain) {
  return guardedLowering([&] { return CompileResult::ok(Builder(context, request, chain).build()); });
}

}  // namespace collage::onednn
