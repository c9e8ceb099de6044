#include "backends/onednn/onednn_kernel.h"

#include <dnnl_debug.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>

#include "core/ops/conv_geometry.h"
#include "core/ops/op_helpers.h"
#include "core/ir/threading.h"

namespace collage::onednn {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using Args = std::unordered_map<int, memory>;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Columns per panel of a wide constant matmul (see buildPanelMatMul).
constexpr int64_t kMatMulPanel = 768;

memory::dims dimsOf(const Shape& s) {
  if (s.empty()) return {1};  // oneDNN has no rank-0 tensors; a scalar is [1]
  return memory::dims(s.begin(), s.end());
}

memory::dims rowMajorStrides(const memory::dims& d) {
  memory::dims s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * d[i];
  return s;
}

// Plain row-major float32: the layout of every tensor at a kernel boundary.
// (memory::dims and Shape are the same type; a rank-0 shape becomes [1].)
memory::desc plainDesc(const memory::dims& d) {
  const memory::dims dims = dimsOf(d);
  return memory::desc(dims, memory::data_type::f32, rowMajorStrides(dims));
}

memory::desc anyDesc(const memory::dims& d) {
  return memory::desc(d, memory::data_type::f32, memory::format_tag::any);
}

// `s` with leading 1s up to `rank` dimensions (numpy broadcasting alignment).
Shape padTo(const Shape& s, size_t rank) {
  Shape r(rank > s.size() ? rank - s.size() : 0, 1);
  r.insert(r.end(), s.begin(), s.end());
  return r;
}

// oneDNN's channel block on this CPU: 16 with AVX-512, 8 with AVX2 (what
// its JIT convolutions choose).
int64_t blockChannels() {
  static const int64_t block =
      dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core ? 16 : 8;
  return block;
}

// The layout oneDNN chose for `md` instead of plain NCHW, if it is one it
// may hand over: channel-blocked (nChw8c with AVX2's JIT convolutions,
// nChw16c with AVX-512's) or channels-last (nhwc, which AVX-512's brgemm
// convolutions choose), for ranks 3 to 5.
std::optional<memory::format_tag> nativeTagOf(const memory::desc& md) {
  using tag = memory::format_tag;
  static const tag tags[] = {tag::nCw8c,    tag::nCw16c,   tag::nChw8c, tag::nChw16c,
                             tag::nCdhw8c,  tag::nCdhw16c, tag::nwc,   tag::nhwc,
                             tag::ndhwc};
  for (tag t : tags)
    if (memory::desc(md.dims(), memory::data_type::f32, t, true) == md) return t;
  return std::nullopt;
}

// The layout oneDNN's JIT convolutions choose for activations of `rank`
// (4 or 5) on this CPU, asked once of a sample 3x3 convolution created with
// format_tag::any: nhwc with AVX-512's brgemm kernels, nChw8c with AVX2's.
// Pools and other layout-free steps use it too, so that every oneDNN kernel
// of a plan offers the same layout at its boundary and the Session can hand
// the tensors over between them (a pool in nChw16c after a convolution in
// nhwc would need a reorder pair between them).
std::optional<memory::format_tag> activationTag(size_t rank) {
  auto probe = [](size_t r) -> std::optional<memory::format_tag> {
    try {
      const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
      memory::dims src{1, 32}, wei{32, 32}, strides, pads;
      for (size_t i = 2; i < r; ++i) {
        src.push_back(14);
        wei.push_back(3);
        strides.push_back(1);
        pads.push_back(1);
      }
      const memory::desc any(src, memory::data_type::f32, memory::format_tag::any);
      const memory::desc w(wei, memory::data_type::f32, memory::format_tag::any);
      dnnl::convolution_forward::desc d(prop_kind::forward_inference, algorithm::convolution_direct,
                                        any, w, memory::desc(), any, strides, pads, pads);
      dnnl::convolution_forward::primitive_desc pd(d, engine);
      return nativeTagOf(pd.src_desc());
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
  };
  static const std::optional<memory::format_tag> tag4 = probe(4), tag5 = probe(5);
  return rank == 4 ? tag4 : rank == 5 ? tag5 : std::nullopt;
}

// Whether `tag` pads the channels to a block (nChw16c) rather than keeping
// them last (nhwc, any channel count).
bool channelBlocked(memory::format_tag tag) {
  using t = memory::format_tag;
  return tag != t::nwc && tag != t::nhwc && tag != t::ndhwc;
}

bool isRef(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

std::string kindName(dnnl::primitive::kind k) {
  switch (k) {
    case dnnl::primitive::kind::reorder:
      return "reorder";
    case dnnl::primitive::kind::convolution:
      return "convolution";
    case dnnl::primitive::kind::deconvolution:
      return "deconvolution";
    case dnnl::primitive::kind::eltwise:
      return "eltwise";
    case dnnl::primitive::kind::softmax_v2:
      return "softmax";
    case dnnl::primitive::kind::pooling_v2:
      return "pooling";
    case dnnl::primitive::kind::batch_normalization:
      return "batch_normalization";
    case dnnl::primitive::kind::layer_normalization:
      return "layer_normalization";
    case dnnl::primitive::kind::binary:
      return "binary";
    case dnnl::primitive::kind::matmul:
      return "matmul";
    default:
      return "primitive";
  }
}

// Which layout a convolution computes in. The kernel's boundary is always
// plain (NCHW); `Blocked` lets oneDNN pick its preferred layout for src and
// dst (nChw8c on AVX2) and reorders around the primitive, `Plain` runs the
// primitive on NCHW directly.
enum class ConvLayout { Auto, Plain, Blocked };

ConvLayout convLayoutSetting() {
  const char* v = std::getenv("COLLAGE_ONEDNN_CONV_LAYOUT");
  if (!v) return ConvLayout::Auto;
  const std::string s(v);
  if (s == "plain") return ConvLayout::Plain;
  if (s == "blocked") return ConvLayout::Blocked;
  return ConvLayout::Auto;
}

// The combined affine map of leading post-ops that multiply or add a constant
// varying along one dimension (the output channel) only:
// result * scale[c] + shift[c]. Anchors with constant weights take it into
// their weights and bias, which removes those post-ops altogether.
struct Fold {
  size_t count = 0;  // leading post-ops folded
  bool scales = false, shifts = false;
  std::vector<float> scale, shift;
};

Fold foldLeading(const std::vector<PostOp>& ops, const Shape& dst, size_t channelDim, bool allowMul,
                 bool allowAdd) {
  Fold f;
  const int64_t C = dst[channelDim];
  f.scale.assign(static_cast<size_t>(C), 1.0f);
  f.shift.assign(static_cast<size_t>(C), 0.0f);
  for (const PostOp& p : ops) {
    if (p.kind != PostOp::Kind::Binary || !p.operand.isConstant) break;
    const bool mul = p.alg == algorithm::binary_mul, add = p.alg == algorithm::binary_add;
    if (!(mul && allowMul) && !(add && allowAdd)) break;
    if (p.operand.shape.size() > dst.size()) break;
    const Shape s = padTo(p.operand.shape, dst.size());
    bool perChannel = true;
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] != 1 && !(i == channelDim && s[i] == C)) perChannel = false;
    if (!perChannel) break;
    const std::vector<float> v = p.operand.constant.toFloats();
    for (int64_t c = 0; c < C; ++c) {
      const float x = v[v.size() == 1 ? 0 : static_cast<size_t>(c)];
      if (mul) {
        f.scale[c] *= x;
        f.shift[c] *= x;
      } else {
        f.shift[c] += x;
      }
    }
    f.scales = f.scales || mul;
    f.shifts = f.shifts || add;
    ++f.count;
  }
  return f;
}

struct Refusal {
  std::string reason;
};

Operand scalarOperand(float v) {
  Operand o;
  o.isConstant = true;
  o.constant = Tensor::fromFloats({1}, {v});
  o.shape = {1};
  return o;
}

float clampTo(float x, float lo, float hi) { return std::min(std::max(x, lo), hi); }

// oneDNN 2.6's JIT post-op injector keeps one eltwise injector per
// algorithm, so a second eltwise post-op of the same algorithm silently runs
// with the first one's alpha and beta (seen with jit:avx2, jit_1x1, jit_dw
// convolutions, jit:uni binary and gemm:jit matmul: linear(2,1) then
// linear(1,1) gives 3, not 2). This pass makes every eltwise algorithm appear
// with one set of parameters: adjacent linear and clip ops are merged, and a
// later linear or clip that still differs becomes binary ops on a scalar;
// any other repeat is refused.
std::vector<PostOp> legalized(const std::vector<PostOp>& ops) {
  std::vector<PostOp> merged;
  for (const PostOp& p : ops) {
    PostOp* q = merged.empty() ? nullptr : &merged.back();
    if (q && p.kind == PostOp::Kind::Eltwise && q->kind == PostOp::Kind::Eltwise) {
      if (p.alg == algorithm::eltwise_linear && q->alg == algorithm::eltwise_linear) {
        // p(q(x)) = pa * (qa * x + qb) + pb
        q->beta = p.alpha * q->beta + p.beta;
        q->alpha = p.alpha * q->alpha;
        continue;
      }
      if (p.alg == algorithm::eltwise_clip_v2 && q->alg == algorithm::eltwise_clip_v2) {
        q->alpha = clampTo(q->alpha, p.alpha, p.beta);
        q->beta = clampTo(q->beta, p.alpha, p.beta);
        continue;
      }
    }
    if (p.kind == PostOp::Kind::Eltwise && p.alg == algorithm::eltwise_linear && p.alpha == 1.0f &&
        p.beta == 0.0f)
      continue;  // the identity
    merged.push_back(p);
  }
  std::vector<PostOp> out;
  std::vector<const PostOp*> seen;
  for (const PostOp& p : merged) {
    if (p.kind == PostOp::Kind::Eltwise) {
      auto first =
          std::find_if(seen.begin(), seen.end(), [&](const PostOp* s) { return s->alg == p.alg; });
      if (first == seen.end()) {
        seen.push_back(&p);
      } else if ((*first)->alpha != p.alpha || (*first)->beta != p.beta) {
        if (p.alg == algorithm::eltwise_linear) {
          if (p.alpha != 1.0f)
            out.push_back(PostOp::binary(algorithm::binary_mul, scalarOperand(p.alpha), p.node));
          if (p.beta != 0.0f)
            out.push_back(PostOp::binary(algorithm::binary_add, scalarOperand(p.beta), p.node));
          continue;
        }
        if (p.alg == algorithm::eltwise_clip_v2) {
          if (p.alpha > -kInf)
            out.push_back(PostOp::binary(algorithm::binary_max, scalarOperand(p.alpha), p.node));
          if (p.beta < kInf)
            out.push_back(PostOp::binary(algorithm::binary_min, scalarOperand(p.beta), p.node));
          continue;
        }
        throw Refusal{"node '" + p.node + "': oneDNN 2.6 runs two " +
                      dnnl_alg_kind2str(dnnl::convert_to_c(p.alg)) +
                      " post-ops in one kernel with the first one's parameters"};
      }
    }
    out.push_back(p);
  }
  return out;
}

// Scalar-constant binary post-ops as eltwise ones (cheaper, and they need no
// operand memory), then legalized.
std::vector<PostOp> simplified(std::vector<PostOp> ops) {
  for (PostOp& p : ops) {
    if (p.kind != PostOp::Kind::Binary || !p.operand.isConstant ||
        p.operand.constant.numElements() != 1)
      continue;
    const float c = p.operand.constant.toFloats()[0];
    switch (p.alg) {
      case algorithm::binary_add:
        p = PostOp::eltwise(algorithm::eltwise_linear, 1.0f, c, p.node);
        break;
      case algorithm::binary_sub:
        p = PostOp::eltwise(algorithm::eltwise_linear, 1.0f, -c, p.node);
        break;
      case algorithm::binary_mul:
        p = PostOp::eltwise(algorithm::eltwise_linear, c, 0.0f, p.node);
        break;
      case algorithm::binary_max:
        p = PostOp::eltwise(algorithm::eltwise_clip_v2, c, kInf, p.node);
        break;
      case algorithm::binary_min:
        p = PostOp::eltwise(algorithm::eltwise_clip_v2, -kInf, c, p.node);
        break;
      default:
        break;  // Div by a constant was turned into Mul by the analysis
    }
  }
  return legalized(ops);
}

class Builder {
 public:
  Builder(std::shared_ptr<Context> context, const KernelRequest& request, const FusedChain& chain)
      : context_(std::move(context)),
        request_(request),
        g_(*request.graph),
        chain_(chain),
        ownKernel_(std::make_unique<OneDnnKernel>(context_)),
        kernel_(ownKernel_.get()) {}
  // One chain of a sequence: its steps are appended to `kernel`, its inputs
  // and output wired as `link` says.
  Builder(std::shared_ptr<Context> context, const KernelRequest& request, const FusedChain& chain,
          OneDnnKernel* kernel, ChainLink* link)
      : context_(std::move(context)),
        request_(request),
        g_(*request.graph),
        chain_(chain),
        kernel_(kernel),
        link_(link) {}

  std::unique_ptr<Kernel> build() {
    buildSteps();
    return std::move(ownKernel_);
  }

  void buildSteps() {
    if (chain_.anchor == kNoNode) {
      buildElementwise();
    } else {
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
  }

 private:
  [[noreturn]] void refuse(const std::string& why) const { throw Refusal{why}; }
  std::string anchorLabel() const { return nodeLabel(g_.node(chain_.anchor)); }
  const dnnl::engine& engine() const { return context_->engine; }

  // ---- memories

  memory bound(const memory::desc& md, int index, bool output) {
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
        if (have == plainDesc(have.dims()) && md == plainDesc(md.dims()) && have.get_size() == md.get_size())
          return memory(md, engine(), in.internal.get_data_handle());
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
  // A sequence's intermediate read as is (any layout); null otherwise.
  memory internalInput(const Operand& o) const {
    if (!link_ || o.isConstant || o.inputIndex < 0) return memory();
    const ChainLink::Input& in = link_->inputs.at(static_cast<size_t>(o.inputIndex));
    return in.outer < 0 ? in.internal : memory();
  }
  bool outputInternal() const { return link_ && link_->outputInternal; }
  // The kernel output this chain writes: its own group output inside a
  // sequence (a region may have several), output 0 for a lone chain.
  int outputIndex() const { return link_ ? link_->outerOutput : 0; }
  memory owned(const memory::desc& md) {
    memory m(md, engine());
    kernel_->owned.push_back(m);
    return m;
  }
  memory constant(const memory::desc& md, const void* data) {
    memory m = owned(md);
    std::memcpy(m.get_data_handle(), data, md.get_size());
    return m;
  }
  // A constant given in layout `from`, stored in the layout `to` the primitive wants.
  memory reorderedConstant(const memory::desc& from, const void* data, const memory::desc& to) {
    if (from == to) return constant(to, data);
    memory src(from, engine(), const_cast<void*>(data));
    memory dst = owned(to);
    dnnl::stream stream(engine());  // not the kernels' stream: another thread may be running one
    dnnl::reorder(src, dst).execute(stream, src, dst);
    stream.wait();
    return dst;
  }
  memory operand(const Operand& o, const memory::desc& md) {
    COLLAGE_CHECK(o.present(), "operand without a source");
    return o.isConstant ? constant(md, o.constant.raw()) : bound(md, o.inputIndex, false);
  }
  // A primitive's source: the caller's plain buffer, reordered first if the
  // primitive wants another layout.
  memory source(const Operand& o, const memory::desc& plain, const memory::desc& want) {
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
    // layout (an Inception block's branches) share one reorder.
    const int outer = outerIndex(o);
    for (const auto& [index, copy] : kernel_->inputCopies)
      if (index == outer && copy.get_desc() == want) return copy;
    memory user = operand(o, plain);
    memory internal = owned(want);
    addStep(dnnl::reorder::primitive_desc(user, internal),
            {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, internal}});
    kernel_->inputCopies.emplace_back(outer, internal);
    return internal;
  }
  // The kernel's input index of a run-time operand of this chain.
  int outerIndex(const Operand& o) const {
    return link_ ? link_->inputs.at(static_cast<size_t>(o.inputIndex)).outer : o.inputIndex;
  }
  // A copy of group input `o` in a blocked layout that an earlier chain made; null if none.
  memory blockedCopyOf(const Operand& o) const {
    if (o.isConstant || o.inputIndex < 0) return memory();
    const int outer = outerIndex(o);
    for (const auto& [index, copy] : kernel_->inputCopies)
      if (index == outer && copy.get_desc() != plainDesc(o.shape)) return copy;
    return memory();
  }

  template <class PD>
  void addStep(const PD& pd, Args args) {
    const memory::desc scratch = pd.scratchpad_desc();
    if (scratch.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = owned(scratch);
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
    kernel_->postOps += (kernel_->postOps.empty() ? "" : "; ") + opsText(ops);
    bindPostOps(ops, args);
    const memory::desc dstMd = pd.dst_desc();
    // Inside a sequence the result stays in the primitive's layout.
    const bool keep = dstMd == plain || outputInternal();
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
    memory user = bound(plain, 0, true);
    addStep(dnnl::reorder::primitive_desc(dst, user), {{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, user}});
  }

  // ---- post-ops

  memory::desc operandDesc(const PostOp& p) const {
    const Shape shape = padTo(p.operand.shape, chain_.shape.size());
    if (elementwiseTag_ && shape == chain_.shape)
      return memory::desc(dimsOf(shape), memory::data_type::f32, *elementwiseTag_);
    return plainDesc(shape);
  }

  dnnl::primitive_attr attrFor(const std::vector<PostOp>& ops) const {
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

  void bindPostOps(const std::vector<PostOp>& ops, Args& args) {
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].kind == PostOp::Kind::Binary)
        args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1] =
            elementwiseTag_ ? source(ops[i].operand, plainDesc(padTo(ops[i].operand.shape,
                                                                      chain_.shape.size())),
                                     operandDesc(ops[i]))
                            : operand(ops[i].operand, operandDesc(ops[i]));
  }

  std::string opsText(const std::vector<PostOp>& ops) const {
    FusedChain c = chain_;
    c.postOps = ops;
    return c.describe(g_);
  }

  // The anchor's input i; input 0 is the Pad's input when a Pad is folded in.
  Operand input(size_t i) const {
    const Node& node = g_.node(chain_.anchor);
    if (i == 0 && chain_.pad != kNoNode) return operandOf(request_, g_.node(chain_.pad).inputs[0]);
    return i < node.inputs.size() ? operandOf(request_, node.inputs[i]) : Operand{};
  }
  // The shape the anchor's op sees at input 0 (padded when a Pad is folded in).
  const Shape& anchorInputShape() const {
    return g_.value(g_.node(chain_.anchor).inputs[0]).type.shape;
  }
  int64_t foldedPadBegin(size_t d) const { return chain_.pad == kNoNode ? 0 : chain_.padBegin.at(d); }
  int64_t foldedPadEnd(size_t d) const { return chain_.pad == kNoNode ? 0 : chain_.padEnd.at(d); }

  // ---- Conv / ConvTranspose

  void buildConv(bool transpose) {
    const Node& node = g_.node(chain_.anchor);
    const Operand x = input(0), w = input(1), b = input(2);
    if (transpose && chain_.pad != kNoNode) refuse(anchorLabel() + "a Pad folds only into a Conv");
    const ConvGeometry geo = transpose ? ConvGeometry::convTranspose(node, x.shape, w.shape)
                                       : ConvGeometry::conv(node, anchorInputShape(), w.shape);
    const size_t k = geo.spatialRank();
    if (k < 1 || k > 3) refuse(anchorLabel() + std::to_string(k) + " spatial dimensions");
    const int64_t G = geo.group, OC = geo.outChannels, IC = geo.inChannels;
    const int64_t KS = geo.kernelSize();

    // Weights as oneDNN sees them ([G,] OC/G, IC/G, k...) over ONNX's memory:
    // Conv stores [OC, IC/G, k...] (row-major already), ConvTranspose
    // [IC, OC/G, k...] = [G][IC/G][OC/G][k...].
    memory::dims wd;
    if (G > 1) wd.push_back(G);
    wd.push_back(OC / G);
    wd.push_back(IC / G);
    wd.insert(wd.end(), geo.kernel.begin(), geo.kernel.end());
    memory::dims ws = rowMajorStrides(wd);
    if (transpose) {
      const size_t o = G > 1 ? 1 : 0;  // position of the OC/G dimension
      ws[o] = KS;
      ws[o + 1] = (OC / G) * KS;
      if (G > 1) ws[0] = (IC / G) * (OC / G) * KS;
    }
    const memory::desc wPlain(wd, memory::data_type::f32, ws);

    const bool biasFoldable = !b.present() || b.isConstant;
    const Fold fold =
        foldLeading(chain_.postOps, chain_.shape, 1, w.isConstant && biasFoldable, biasFoldable);
    const std::vector<PostOp> ops = simplified(std::vector<PostOp>(
        chain_.postOps.begin() + static_cast<std::ptrdiff_t>(fold.count), chain_.postOps.end()));

    std::vector<float> wData;
    if (w.isConstant) {
      wData = w.constant.toFloats();
      if (fold.scales) {
        // Output channel of each weight: Conv rows are output channels;
        // ConvTranspose's are input channels, its second dimension OC/G.
        for (size_t i = 0; i < wData.size(); ++i) {
          const int64_t e = static_cast<int64_t>(i);
          int64_t oc;
          if (!transpose) {
            oc = e / ((IC / G) * KS);
          } else {
            const int64_t ic = e / ((OC / G) * KS), j = (e / KS) % (OC / G);
            oc = (ic / (IC / G)) * (OC / G) + j;
          }
          wData[i] *= fold.scale[oc];
        }
      }
    }
    const bool hasBias = b.present() || fold.shifts;
    std::vector<float> bData;
    if (hasBias && biasFoldable) {
      bData = b.present() ? b.constant.toFloats() : std::vector<float>(OC, 0.0f);
      for (int64_t c = 0; c < OC; ++c) bData[c] = bData[c] * fold.scale[c] + fold.shift[c];
    }

    memory::dims strides(geo.strides.begin(), geo.strides.end());
    memory::dims dil, pl, pr;
    for (size_t i = 0; i < k; ++i) {
      dil.push_back(geo.dilations[i] - 1);
      pl.push_back(geo.padsBegin[i] + foldedPadBegin(i));
      pr.push_back(geo.padsEnd[i] - geo.outputPadding[i] + foldedPadEnd(i));
    }

    const memory::desc srcPlain = plainDesc(x.shape), dstPlain = plainDesc(chain_.shape);
    const memory::desc wWant = w.isConstant ? anyDesc(wd) : wPlain;
    const memory::desc biasMd = hasBias ? plainDesc(memory::dims{OC}) : memory::desc();
    // oneDNN 2.6's convolution on plain NCHW memory (gemm-based: what a
    // pointwise conv runs there) applies eltwise post-ops in a slow loop: a
    // 1x1 40->240 conv at 28x28 took 66 us alone and 492 us with HardSwish as
    // a post-op (AVX-512; 3-7x for every pointwise conv of MobileNetV3). On
    // plain memory, a chain of eltwise ops therefore runs after the
    // convolution as JIT eltwise primitives, in place on its still-hot output,
    // as for matrix products.
    const bool eltwiseOnly =
        !ops.empty() && std::all_of(ops.begin(), ops.end(),
                                    [](const PostOp& p) { return p.kind == PostOp::Kind::Eltwise; });
    const std::vector<PostOp> plainOps = eltwiseOnly ? std::vector<PostOp>() : ops;
    const dnnl::primitive_attr plainAttr = attrFor(plainOps);

    const std::optional<memory::format_tag> convTag = activationTag(chain_.shape.size());
    const bool channelsLast = convTag && !channelBlocked(*convTag);
    ConvLayout setting = convLayoutSetting();
    std::vector<bool> blockedOrder;
    if (link_ && setting == ConvLayout::Auto)
      blockedOrder = {true, false};  // a sequence keeps the blocked layout between its convs
    else if (setting == ConvLayout::Plain)
      blockedOrder = {false};
    else if (setting == ConvLayout::Blocked)
      blockedOrder = {true};
    // Measured (1 thread, AVX2, reorders included): a 3x3 64->64 conv at
    // 56x56 runs 3-4x faster blocked (jit:avx2, 82 GFLOP/s) than on NCHW
    // (gemm:jit with im2col, 22 GFLOP/s); a pointwise 1x1 256->64 is a plain
    // sgemm on NCHW (85-94 GFLOP/s) and loses to the reorders blocked (70).
    // But gemm:jit applies binary post-ops element by element: a 1x1 64->256
    // + residual + Relu takes 190 ms on NCHW against 1.7 ms blocked with sum.
    // That held for a lone kernel on AVX2. Where the convolutions' layout is
    // channels last (AVX-512's brgemm kernels), the 1x1 runs blocked too:
    // brgconv_1x1 is as fast as the sgemm there, and next to other oneDNN
    // kernels the Session hands the tensors over, so the layout stays the
    // same across the plan instead of reordering around every pointwise conv.
    else if (!transpose && geo.isPointwise() &&
             std::none_of(ops.begin(), ops.end(),
                          [](const PostOp& p) { return p.kind != PostOp::Kind::Eltwise; }) &&
             !channelsLast)
      blockedOrder = {false, true};
    else
      blockedOrder = {true, false};

    // On a blocked destination, a residual Add (a run-time tensor of the
    // result's shape) is oneDNN's sum post-op: the residual is reordered into
    // the destination first. As a binary post-op it would read the plain
    // tensor, which oneDNN's blocked JIT kernels do not support, and the
    // convolution would fall back to im2col + GEMM on NCHW.
    std::vector<PostOp> blockedOps = ops;
    for (PostOp& p : blockedOps)
      if (p.kind == PostOp::Kind::Binary && p.alg == algorithm::binary_add &&
          !p.operand.isConstant && padTo(p.operand.shape, chain_.shape.size()) == chain_.shape) {
        p.kind = PostOp::Kind::Sum;
        break;
      }
    const dnnl::primitive_attr blockedAttr = attrFor(blockedOps);

    auto makePd = [&](bool blocked, auto tag) {
      const dnnl::primitive_attr& attr = blocked ? blockedAttr : plainAttr;
      const memory::desc src = blocked ? anyDesc(dimsOf(x.shape)) : srcPlain;
      const memory::desc dst = blocked ? anyDesc(dimsOf(chain_.shape)) : dstPlain;
      using P = decltype(tag);
      if constexpr (std::is_same_v<P, dnnl::convolution_forward>) {
        dnnl::convolution_forward::desc d(prop_kind::forward_inference,
                                          algorithm::convolution_direct, src, wWant, biasMd, dst,
                                          strides, dil, pl, pr);
        return dnnl::convolution_forward::primitive_desc(d, attr, engine());
      } else {
        dnnl::deconvolution_forward::desc d(prop_kind::forward_inference,
                                            algorithm::deconvolution_direct, src, wWant, biasMd,
                                            dst, strides, dil, pl, pr);
        return dnnl::deconvolution_forward::primitive_desc(d, attr, engine());
      }
    };
    auto finish = [&](const auto& pd, bool blocked) {
      Args args;
      args[DNNL_ARG_SRC] = source(x, srcPlain, pd.src_desc());
      args[DNNL_ARG_WEIGHTS] = w.isConstant
                                   ? reorderedConstant(wPlain, wData.data(), pd.weights_desc())
                                   : operand(w, wPlain);
      if (hasBias)
        args[DNNL_ARG_BIAS] = biasFoldable ? constant(biasMd, bData.data()) : operand(b, biasMd);
      addMainStep(pd, std::move(args), blocked ? blockedOps : plainOps);
      if (blocked || !eltwiseOnly) return;
      const memory out = kernel_->steps.back().args.at(DNNL_ARG_DST);
      for (const PostOp& p : ops)
        addStep(dnnl::eltwise_forward::primitive_desc(
                    dnnl::eltwise_forward::desc(prop_kind::forward_inference, p.alg, out.get_desc(),
                                                p.alpha, p.beta),
                    attrFor({}), engine()),
                {{DNNL_ARG_SRC, out}, {DNNL_ARG_DST, out}});
      kernel_->postOps += (kernel_->postOps.empty() ? "" : "; ") + opsText(ops) +
                          " (eltwise after the convolution)";
    };
    auto pick = [&](auto tag) {
      using PD = typename decltype(tag)::primitive_desc;
      PD chosen;
      bool have = false, chosenBlocked = false;
      std::string error;
      for (bool blocked : blockedOrder) {
        try {
          PD pd = makePd(blocked, tag);
          // A reference implementation is a last resort: it is correct but
          // orders of magnitude slower than the JIT ones.
          if (!have || (isRef(chosen) && !isRef(pd))) {
            chosen = pd;
            chosenBlocked = blocked;
            have = true;
          }
          if (!isRef(pd)) break;
        } catch (const dnnl::error& e) {
          error = e.what();
        }
      }
      if (!have)
        refuse(anchorLabel() + "oneDNN cannot run " + opsText(ops) + " (" + geo.toString() +
               "): " + error);
      finish(chosen, chosenBlocked);
    };
    if (transpose)
      pick(dnnl::deconvolution_forward{});
    else
      pick(dnnl::convolution_forward{});
  }

  // ---- MatMul / Gemm

  void buildMatMul(bool gemm) {
    const Node& node = g_.node(chain_.anchor);
    const Operand a = input(0), b = input(1), c = gemm ? input(2) : Operand{};
    const Shape& y = chain_.shape;
    const size_t r = y.size();
    if (a.shape.size() < 2 || b.shape.size() < 2)
      refuse(anchorLabel() + "a 1-D operand (" + shapeToString(a.shape) + " x " +
             shapeToString(b.shape) + ") has no oneDNN matmul");
    const bool transA = gemm && node.attrs.getInt("transA", 0) != 0;
    const bool transB = gemm && node.attrs.getInt("transB", 0) != 0;
    const int64_t N = y[r - 1];

    // A: transposition is a strided view; B: constants are made [..., K, N]
    // plain here (so scales can be folded into columns), run-time ones are viewed.
    memory::desc aMd = plainDesc(padTo(a.shape, r));
    if (transA)
      aMd = memory::desc({a.shape[1], a.shape[0]}, memory::data_type::f32, {1, a.shape[1]});
    Shape bShape = padTo(b.shape, r);
    std::vector<float> bData;
    memory::desc bMd = plainDesc(bShape);
    if (transB) {
      bShape = {b.shape[1], b.shape[0]};
      bMd = b.isConstant
                ? plainDesc(bShape)
                : memory::desc({b.shape[1], b.shape[0]}, memory::data_type::f32, {1, b.shape[1]});
    }
    if (b.isConstant) {
      bData = b.constant.toFloats();
      if (transB) {
        std::vector<float> t(bData.size());
        const int64_t rows = b.shape[0], cols = b.shape[1];
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = bData[i * cols + j];
        bData.swap(t);
      }
    }

    // Gemm's alpha and beta * C become leading post-ops, so that they fold
    // into B and the bias like any other scale or shift.
    std::vector<PostOp> all;
    if (gemm) {
      const float alpha = node.attrs.getFloat("alpha", 1.0f);
      const float beta = node.attrs.getFloat("beta", 1.0f);
      if (alpha != 1.0f) {
        Operand s;
        s.isConstant = true;
        s.constant = Tensor::scalarFloat(alpha);
        all.push_back(PostOp::binary(algorithm::binary_mul, s, node.name));
      }
      if (c.present() && beta != 0.0f) {
        Operand cc = c;
        if (c.isConstant) {
          cc.constant = c.constant.clone();
          float* d = cc.constant.data<float>();
          for (int64_t i = 0; i < cc.constant.numElements(); ++i) d[i] *= beta;
        } else if (beta != 1.0f) {
          refuse(anchorLabel() + "a non-constant C with beta != 1");
        }
        all.push_back(PostOp::binary(algorithm::binary_add, cc, node.name));
      }
    }
    all.insert(all.end(), chain_.postOps.begin(), chain_.postOps.end());

    const Fold fold = foldLeading(all, y, r - 1, b.isConstant, true);
    const std::vector<PostOp> ops = simplified(
        std::vector<PostOp>(all.begin() + static_cast<std::ptrdiff_t>(fold.count), all.end()));
    if (fold.scales)
      for (size_t i = 0; i < bData.size(); ++i) bData[i] *= fold.scale[i % N];
    std::vector<float> biasData;
    memory::desc biasMd;
    if (fold.shifts) {
      biasData = fold.shift;
      Shape bs(r, 1);
      bs[r - 1] = N;
      biasMd = plainDesc(bs);
    }

    const memory::desc dstMd = plainDesc(y);
    const memory::desc bWant = b.isConstant ? anyDesc(dimsOf(bShape)) : bMd;
    // oneDNN 2.6's gemm-based matmul (the one on AVX2) applies eltwise and
    // binary post-ops in a scalar loop after the product: BERT's 128x768x3072
    // product with the erf GELU took twice as long as the product alone.
    // Its sum post-op is the GEMM's beta, free. So a leading run-time addend
    // of the result's shape (a residual) becomes sum, and trailing eltwise
    // ops run afterwards as JIT eltwise primitives in place on the output.
    std::vector<PostOp> mmOps = ops, after;
    if (!mmOps.empty() && mmOps[0].kind == PostOp::Kind::Binary &&
        mmOps[0].alg == algorithm::binary_add && !mmOps[0].operand.isConstant &&
        padTo(mmOps[0].operand.shape, y.size()) == y)
      mmOps[0].kind = PostOp::Kind::Sum;
    const size_t lead = !mmOps.empty() && mmOps[0].kind == PostOp::Kind::Sum ? 1 : 0;
    if (mmOps.size() > lead &&
        std::all_of(mmOps.begin() + static_cast<std::ptrdiff_t>(lead), mmOps.end(),
                    [](const PostOp& p) { return p.kind == PostOp::Kind::Eltwise; })) {
      after.assign(mmOps.begin() + static_cast<std::ptrdiff_t>(lead), mmOps.end());
      mmOps.resize(lead);
    } else if (lead == 0 || mmOps.size() > lead) {
      mmOps = ops;  // other chains: post-ops as lowered
    }
    try {
      const int64_t K = bShape[bShape.size() - 2];
      memory out;  // the plain output, for the eltwise steps after the product
      if (b.isConstant && b.shape.size() == 2 && mmOps.empty() && !outputInternal() &&
          N >= 2 * kMatMulPanel && static_cast<int64_t>(bData.size()) == K * N) {
        out = buildPanelMatMul(a, aMd, bData, K, N, fold.shifts ? biasData.data() : nullptr);
      } else {
        const dnnl::primitive_attr attr = attrFor(mmOps);
        dnnl::matmul::primitive_desc pd =
            fold.shifts
                ? dnnl::matmul::primitive_desc(dnnl::matmul::desc(aMd, bWant, biasMd, dstMd), attr,
                                               engine())
                : dnnl::matmul::primitive_desc(dnnl::matmul::desc(aMd, bWant, dstMd), attr, engine());
        Args args;
        args[DNNL_ARG_SRC] = operand(a, aMd);
        args[DNNL_ARG_WEIGHTS] =
            b.isConstant ? reorderedConstant(bMd, bData.data(), pd.weights_desc()) : operand(b, bMd);
        if (fold.shifts) args[DNNL_ARG_BIAS] = constant(biasMd, biasData.data());
        addMainStep(pd, std::move(args), mmOps);
        // The matmul wrote the plain output directly (its dst is plain).
        out = kernel_->steps.back().args.at(DNNL_ARG_DST);
      }
      if (!after.empty()) {
        for (const PostOp& p : after) {
          dnnl::eltwise_forward::primitive_desc epd(
              dnnl::eltwise_forward::desc(prop_kind::forward_inference, p.alg, out.get_desc(),
                                          p.alpha, p.beta),
              attrFor({}), engine());
          addStep(epd, {{DNNL_ARG_SRC, out}, {DNNL_ARG_DST, out}});
        }
        kernel_->postOps += " (eltwise after the product)";
      }
    } catch (const dnnl::error& e) {
      refuse(anchorLabel() + "oneDNN cannot run " + opsText(ops) + " for " +
             shapeToString(a.shape) + " x " + shapeToString(b.shape) + ": " + e.what());
    }
  }

  // A product with a wide constant B ([K, N], N >= 2 panels) as one matmul
  // per panel of kMatMulPanel columns, each writing its columns of the plain
  // output in place (a strided view). Measured at 1 thread (AVX2, gemm:jit):
  // 128x768 x 768x3072 ran at 26 GFLOP/s as one product against 36 for each
  // 768-column panel. The output is this chain's kernel output (the caller's buffer).
  memory buildPanelMatMul(const Operand& a, const memory::desc& aMd,
                          const std::vector<float>& bData, int64_t K, int64_t N, const float* bias) {
    const Shape& y = chain_.shape;
    const memory::dims yd = dimsOf(y), ys = rowMajorStrides(yd);
    const memory src = operand(a, aMd);
    for (int64_t n0 = 0; n0 < N; n0 += kMatMulPanel) {
      const int64_t nc = std::min(kMatMulPanel, N - n0);
      memory::dims cd = yd;
      cd.back() = nc;
      const memory::desc dstMd(cd, memory::data_type::f32, ys);
      std::vector<float> panel(static_cast<size_t>(K * nc));
      for (int64_t k = 0; k < K; ++k)
        std::copy_n(bData.begin() + k * N + n0, nc, panel.begin() + k * nc);
      const Shape bs = padTo(Shape{K, nc}, y.size());
      Shape biasShape(y.size(), 1);
      biasShape.back() = nc;
      const memory::desc biasMd = bias ? plainDesc(biasShape) : memory::desc();
      dnnl::matmul::primitive_desc pd =
          bias ? dnnl::matmul::primitive_desc(
                     dnnl::matmul::desc(aMd, anyDesc(dimsOf(bs)), biasMd, dstMd), attrFor({}),
                     engine())
               : dnnl::matmul::primitive_desc(dnnl::matmul::desc(aMd, anyDesc(dimsOf(bs)), dstMd),
                                              attrFor({}), engine());
      Args args;
      args[DNNL_ARG_SRC] = src;
      args[DNNL_ARG_WEIGHTS] = reorderedConstant(plainDesc(bs), panel.data(), pd.weights_desc());
      if (bias) args[DNNL_ARG_BIAS] = constant(biasMd, bias + n0);
      memory dst(dstMd, engine(), DNNL_MEMORY_NONE);
      kernel_->bindings.push_back(
          {dst, true, outputIndex(), static_cast<size_t>(n0) * sizeof(float)});
      args[DNNL_ARG_DST] = dst;
      addStep(pd, std::move(args));
    }
    // The trailing eltwise steps below act on the whole output.
    memory whole(plainDesc(y), engine(), DNNL_MEMORY_NONE);
    kernel_->bindings.push_back({whole, true, outputIndex(), 0});
    kernel_->postOps += (kernel_->postOps.empty() ? "" : "; ") +
                        std::to_string((N + kMatMulPanel - 1) / kMatMulPanel) + " column panels";
    return whole;
  }

  // ---- pooling

  void buildPool() {
    const Node& node = g_.node(chain_.anchor);
    const Operand x = input(0);
    if (x.shape.size() < 3 || x.shape.size() > 5)
      refuse(anchorLabel() + "oneDNN pools tensors of rank 3 to 5, not " + shapeToString(x.shape));
    const size_t k = x.shape.size() - 2;
    const bool global = node.op.rfind("Global", 0) == 0;
    const bool isMax = node.op == "MaxPool" || node.op == "GlobalMaxPool";
    memory::dims kernel, strides, dil, pl, pr;
    bool includePad = false;
    if (global) {
      kernel.assign(x.shape.begin() + 2, x.shape.end());
      strides.assign(k, 1);
      dil.assign(k, 0);
      pl.assign(k, 0);
      pr.assign(k, 0);
    } else {
      const ConvGeometry geo = ConvGeometry::pool(node, anchorInputShape());
      // A folded Pad's zeros are part of every window they fall in.
      includePad = !isMax && (node.attrs.getInt("count_include_pad", 0) != 0 || chain_.pad != kNoNode);
      for (size_t i = 0; i < k; ++i) {
        kernel.push_back(geo.kernel[i]);
        strides.push_back(geo.strides[i]);
        dil.push_back(geo.dilations[i] - 1);
        pl.push_back(geo.padsBegin[i] + foldedPadBegin(i));
        // oneDNN sizes the output with floor; ceil_mode's extra window is
        // end padding that oneDNN must be told about.
        const int64_t in = geo.inputSpatial[i], out = geo.outputSpatial[i];
        int64_t end = geo.padsEnd[i];
        const int64_t effK = geo.effectiveKernel(i);
        if ((in + geo.padsBegin[i] + end - effK) / geo.strides[i] + 1 != out) {
          const int64_t needed = (out - 1) * geo.strides[i] + effK - in - geo.padsBegin[i];
          if (includePad && needed > end)
            refuse(
                anchorLabel() +
                "count_include_pad with ceil_mode windows past the pads has no oneDNN equivalent");
          end = needed;
        }
        pr.push_back(end + foldedPadEnd(i));
      }
    }
    const algorithm alg = isMax        ? algorithm::pooling_max
                          : includePad ? algorithm::pooling_avg_include_padding
                                       : algorithm::pooling_avg_exclude_padding;
    // In a sequence, a blocked input is pooled as is (JIT, blocked output);
    // on NCHW oneDNN 2.6 has only a slow simple_nchw pooling. A group input
    // that another chain already reordered to a blocked layout is read from
    // that copy.
    memory in = internalInput(x);
    if (!in) in = blockedCopyOf(x);
    const std::optional<memory::format_tag> tag = activationTag(x.shape.size());
    if (!in && !x.isConstant && tag && (!channelBlocked(*tag) || x.shape[1] % blockChannels() == 0)) {
      // A plain input, in the convolutions' layout (channels last, or
      // channel blocks it fills whole): reordered in and the result out,
      // around the JIT pooling; next to other oneDNN kernels the Session
      // then hands the tensors over and both reorders go.
      in = source(x, plainDesc(x.shape), memory::desc(dimsOf(x.shape), memory::data_type::f32, *tag));
    }
    const bool blockedIn = in && in.get_desc() != plainDesc(x.shape);
    const memory::desc srcMd = blockedIn ? in.get_desc() : plainDesc(x.shape);
    const memory::desc dstMd = blockedIn ? anyDesc(dimsOf(chain_.shape)) : plainDesc(chain_.shape);
    const std::vector<PostOp> ops = simplified(chain_.postOps);
    try {
      dnnl::pooling_v2_forward::desc d(prop_kind::forward_inference, alg, srcMd, dstMd, strides,
                                       kernel, dil, pl, pr);
      dnnl::pooling_v2_forward::primitive_desc pd(d, attrFor(ops), engine());
      addMainStep(pd, {{DNNL_ARG_SRC, blockedIn ? in : operand(x, srcMd)}}, ops);
    } catch (const dnnl::error& e) {
      refuse(anchorLabel() + "oneDNN cannot run " + opsText(ops) + ": " + e.what());
    }
  }

  // ---- Concat

  // In a sequence the inputs an earlier chain made stay in their blocked
  // layout, and the other inputs are reordered to it, so an Inception
  // block's branches are joined without a trip through NCHW; otherwise (or
  // when oneDNN has no blocked concat for these shapes) it copies NCHW.
  void buildConcat() {
    const Node& node = g_.node(chain_.anchor);
    const std::vector<PostOp> ops = simplified(chain_.postOps);
    if (!ops.empty()) refuse(anchorLabel() + "oneDNN's concat takes no post-ops (" + opsText(ops) + ")");
    const int64_t rank = static_cast<int64_t>(chain_.shape.size());
    const int axis = static_cast<int>(normalizeAxis(node, node.attrs.getInt("axis", 0), rank));
    std::vector<Operand> parts;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const Operand o = input(i);
      if (o.present() && numElements(o.shape) > 0) parts.push_back(o);
    }
    if (parts.empty()) refuse(anchorLabel() + "every input is empty");
    std::optional<memory::format_tag> blocked;
    for (const Operand& o : parts)
      if (memory in = internalInput(o); in && !blocked) blocked = nativeTagOf(in.get_desc());
    auto attempt = [&](std::optional<memory::format_tag> tag) {
      const size_t stepsBefore = kernel_->steps.size(), copiesBefore = kernel_->inputCopies.size();
      Args args;
      std::vector<memory::desc> srcs;
      for (const Operand& o : parts) {
        const memory::desc plain = plainDesc(o.shape);
        const memory::desc want =
            tag ? memory::desc(dimsOf(o.shape), memory::data_type::f32, *tag) : plain;
        memory m = source(o, plain, want);
        args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(srcs.size())] = m;
        srcs.push_back(m.get_desc());
      }
      try {
        dnnl::concat::primitive_desc pd(axis, srcs, engine(), attrFor(ops));
        if (tag && isRef(pd)) throw dnnl::error(dnnl_unimplemented, "only a reference concat");
        addMainStep(pd, std::move(args), ops);
        return true;
      } catch (const dnnl::error&) {
        if (!tag) throw;
        kernel_->steps.resize(stepsBefore);  // drop the reorders made for this attempt
        kernel_->inputCopies.resize(copiesBefore);
        return false;
      }
    };
    try {
      if (!blocked || !attempt(blocked)) attempt(std::nullopt);
    } catch (const dnnl::error& e) {
      refuse(anchorLabel() + "oneDNN cannot concatenate " + std::to_string(parts.size()) +
             " tensors on axis " + std::to_string(axis) + ": " + e.what());
    }
  }

  // ---- normalisations and softmax

  // BatchNormalization with run-time statistics or parameters (constant ones
  // are lowered as a per-channel multiply-add, see onednn_chain.cc).
  void buildBatchNorm() {
    const Node& node = g_.node(chain_.anchor);
    if (node.attrs.getInt("training_mode", 0) != 0)
      refuse(anchorLabel() + "training_mode is not an inference BatchNormalization");
    const Operand x = input(0);
    if (x.shape.size() < 2) refuse(anchorLabel() + "input of rank < 2");
    auto flags = dnnl::normalization_flags::use_global_stats |
                 dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    const std::vector<PostOp> ops = simplified(chain_.postOps);
    if (ops.size() == 1 && ops[0].kind == PostOp::Kind::Eltwise &&
        ops[0].alg == algorithm::eltwise_relu && ops[0].alpha == 0.0f)
      flags = flags | dnnl::normalization_flags::fuse_norm_relu;
    else if (!ops.empty())
      refuse(anchorLabel() + "oneDNN batch normalization fuses only a Relu after it, not " +
             opsText(ops));
    const memory::desc md = plainDesc(x.shape), cMd = plainDesc(memory::dims{x.shape[1]});
    try {
      dnnl::batch_normalization_forward::desc d(prop_kind::forward_inference, md,
                                                node.attrs.getFloat("epsilon", 1e-5f), flags);
      dnnl::batch_normalization_forward::primitive_desc pd(d, attrFor({}), engine());
      Args args{{DNNL_ARG_SRC, operand(x, md)},
                {DNNL_ARG_SCALE, operand(input(1), cMd)},
                {DNNL_ARG_SHIFT, operand(input(2), cMd)},
                {DNNL_ARG_MEAN, operand(input(3), cMd)},
                {DNNL_ARG_VARIANCE, operand(input(4), cMd)}};
      addMainStep(pd, std::move(args), {});
    } catch (const dnnl::error& e) {
      refuse(anchorLabel() + "oneDNN cannot run it: " + e.what());
    }
  }

  void buildLayerNorm() {
    const Node& node = g_.node(chain_.anchor);
    const Operand x = input(0), scale = input(1), bias = input(2);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank < 1) refuse(anchorLabel() + "a scalar input");
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", -1), rank);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d) (d < axis ? outer : inner) *= x.shape[d];
    if (numElements(scale.shape) != inner || (bias.present() && numElements(bias.shape) != inner))
      refuse(anchorLabel() + "Scale/B must have the normalised dimensions' size " +
             std::to_string(inner) + " (no broadcasting in oneDNN)");
    // oneDNN normalises over the last dimension: the data is viewed as
    // [outer, inner] unless post-ops need the real shape (axis = -1, rank <= 5).
    const std::vector<PostOp> ops = simplified(chain_.postOps);
    const bool keepShape = !ops.empty() && axis == rank - 1 && rank >= 2 && rank <= 5;
    if (!ops.empty() && !keepShape)
      refuse(anchorLabel() + "post-ops after a LayerNormalization over more than the last axis");
    const memory::desc md = keepShape ? plainDesc(x.shape) : plainDesc(memory::dims{outer, inner});
    const memory::desc cMd = plainDesc(memory::dims{inner});
    auto flags = dnnl::normalization_flags::use_scale;
    if (bias.present()) flags = flags | dnnl::normalization_flags::use_shift;
    try {
      dnnl::layer_normalization_forward::desc d(prop_kind::forward_inference, md,
                                                node.attrs.getFloat("epsilon", 1e-5f), flags);
      dnnl::layer_normalization_forward::primitive_desc pd(d, attrFor(ops), engine());
      Args args{{DNNL_ARG_SRC, operand(x, md)}, {DNNL_ARG_SCALE, operand(scale, cMd)}};
      if (bias.present()) args[DNNL_ARG_SHIFT] = operand(bias, cMd);
      bindPostOps(ops, args);
      args[DNNL_ARG_DST] = bound(md, 0, true);  // same bytes as the plain output
      addStep(pd, std::move(args));
    } catch (const dnnl::error& e) {
      refuse(anchorLabel() + "oneDNN cannot run " + opsText(ops) + ": " + e.what());
    }
  }

  void buildSoftmax(bool log) {
    const Node& node = g_.node(chain_.anchor);
    const Operand x = input(0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank < 1) refuse(anchorLabel() + "a scalar input");
    const int64_t axis = normalizeAxis(node, node.attrs.getInt("axis", -1), rank);
    const std::vector<PostOp> ops = simplified(chain_.postOps);
    const memory::desc md = plainDesc(x.shape);
    try {
      dnnl::softmax_v2_forward::desc d(prop_kind::forward_inference,
                                       log ? algorithm::softmax_log : algorithm::softmax_accurate,
                                       md, md, static_cast<int>(axis));
      dnnl::softmax_v2_forward::primitive_desc pd(d, attrFor(ops), engine());
      addMainStep(pd, {{DNNL_ARG_SRC, operand(x, md)}}, ops);
    } catch (const dnnl::error& e) {
      refuse(anchorLabel() + "oneDNN cannot run " + opsText(ops) + ": " + e.what());
    }
  }

  // ---- elementwise ops alone

  // Where the convolutions' layout keeps channels last (nhwc, AVX-512), an
  // elementwise chain on a 4-D or 5-D tensor runs in it: its operands are
  // tensors of the result's shape (reordered in, like the source) or
  // broadcast over the spatial dimensions (a per-channel scale, the
  // squeeze-excitation weights: the same bytes in either layout). Alone, the
  // kernel reorders at its boundary; between oneDNN kernels the Session
  // hands the tensors over and the layout stays the same through the SE
  // block and the residual Add. Channel-blocked layouts (AVX2's nChw8c)
  // would pad the channels: those chains stay plain.
  std::optional<memory::format_tag> elementwiseLayout(const std::vector<PostOp>& ops) const {
    const size_t rank = chain_.shape.size();
    if (rank != 4 && rank != 5) return std::nullopt;
    if (const char* v = std::getenv("COLLAGE_ONEDNN_CONV_LAYOUT"); v && std::string(v) == "plain")
      return std::nullopt;
    const std::optional<memory::format_tag> tag = activationTag(rank);
    if (!tag || channelBlocked(*tag) || chain_.source.isConstant || !chain_.source.present() ||
        padTo(chain_.source.shape, rank) != chain_.shape)
      return std::nullopt;
    for (const PostOp& p : ops) {
      if (p.kind != PostOp::Kind::Binary) continue;
      const Shape s = padTo(p.operand.shape, rank);
      if (s == chain_.shape) continue;
      if (std::any_of(s.begin() + 2, s.end(), [](int64_t d) { return d != 1; }))
        return std::nullopt;  // broadcast along a spatial dimension
    }
    return tag;
  }

  // The first op is the primitive (eltwise or binary), the rest its post-ops;
  // or a binary "add 0" carries the whole chain as post-ops. oneDNN 2.6 runs
  // an eltwise primitive with post-ops only in its reference implementation,
  // a binary one with them in JIT code, so the latter goes first then.
  void buildElementwise() {
    const std::vector<PostOp> ops = simplified(chain_.postOps);
    elementwiseTag_ = elementwiseLayout(ops);
    const memory::desc plain = plainDesc(chain_.shape);
    const memory::desc md =
        elementwiseTag_ ? memory::desc(dimsOf(chain_.shape), memory::data_type::f32, *elementwiseTag_)
                        : plain;
    auto src = [&] { return source(chain_.source, plain, md); };
    const memory::desc zeroMd = plainDesc(Shape(chain_.shape.size(), 1));
    static const float zero = 0.0f;
    enum class Form { Eltwise, Binary, AddZero };
    if (ops.empty()) {
      // Every op was an identity (a Mul by 1, an Add of 0): a copy, as x + 0.
      const dnnl::binary::primitive_desc pd(
          dnnl::binary::desc(algorithm::binary_add, md, zeroMd, md), attrFor({}), engine());
      addMainStep(pd,
                  {{DNNL_ARG_SRC_0, src()},
                   {DNNL_ARG_SRC_1, constant(zeroMd, &zero)}},
                  {});
      return;
    }
    const std::vector<PostOp> rest(ops.begin() + 1, ops.end());
    const PostOp& first = ops[0];

    std::vector<Form> forms;
    if (first.kind == PostOp::Kind::Binary)
      forms = {Form::Binary, Form::AddZero};
    else if (rest.empty())
      forms = {Form::Eltwise, Form::AddZero};
    else
      forms = {Form::AddZero, Form::Eltwise};

    std::string error;
    for (bool allowRef : {false, true})
      for (Form form : forms) {
        try {
          if (form == Form::Eltwise) {
            dnnl::eltwise_forward::desc d(prop_kind::forward_inference, first.alg, md, first.alpha,
                                          first.beta);
            dnnl::eltwise_forward::primitive_desc pd(d, attrFor(rest), engine());
            if (isRef(pd) && !allowRef) continue;
            addMainStep(pd, {{DNNL_ARG_SRC, src()}}, rest);
          } else if (form == Form::Binary) {
            const memory::desc src1 = operandDesc(first);
            dnnl::binary::primitive_desc pd(dnnl::binary::desc(first.alg, md, src1, md),
                                            attrFor(rest), engine());
            if (isRef(pd) && !allowRef) continue;
            addMainStep(pd,
                        {{DNNL_ARG_SRC_0, src()},
                         {DNNL_ARG_SRC_1,
                          source(first.operand,
                                 plainDesc(padTo(first.operand.shape, chain_.shape.size())), src1)}},
                        rest);
          } else {
            dnnl::binary::primitive_desc pd(
                dnnl::binary::desc(algorithm::binary_add, md, zeroMd, md), attrFor(ops), engine());
            if (isRef(pd) && !allowRef) continue;
            addMainStep(pd,
                        {{DNNL_ARG_SRC_0, src()},
                         {DNNL_ARG_SRC_1, constant(zeroMd, &zero)}},
                        ops);
          }
          return;
        } catch (const dnnl::error& e) {
          error = e.what();
        }
      }
    refuse("oneDNN cannot run " + opsText(ops) + " on " + shapeToString(chain_.shape) + ": " +
           error);
  }

  std::shared_ptr<Context> context_;
  const KernelRequest& request_;
  const Graph& g_;
  const FusedChain& chain_;
  std::unique_ptr<OneDnnKernel> ownKernel_;
  OneDnnKernel* kernel_;
  ChainLink* link_ = nullptr;
  // An elementwise chain's layout when it is not plain (elementwiseLayout).
  std::optional<memory::format_tag> elementwiseTag_;
};

}  // namespace

void OneDnnKernel::run(const std::vector<const DLTensor*>& inputs,
                       const std::vector<DLTensor*>& outputs) {
  const int threads = threadCount();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  for (Binding& b : bindings) {
    const DLTensor* t = b.isOutput ? outputs[b.index] : inputs[b.index];
    b.memory.set_data_handle(static_cast<char*>(t->data) + t->byte_offset + b.byteOffset);
  }
  for (Step& s : steps) s.primitive.execute(context_->stream, s.args);
  context_->stream.wait();
}

int OneDnnKernel::handOverStep(bool output, size_t index) const {
  // The memories bound to the caller's buffer (an input read at several
  // places may be bound more than once).
  std::vector<memory> bound;
  for (const Binding& b : bindings) {
    if (b.isOutput != output || static_cast<size_t>(b.index) != index) continue;
    if (b.byteOffset != 0 || (output && !bound.empty())) return -1;  // a panel of the buffer
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
NativeLayout layoutOf(const memory::desc& md) {
  std::string dims;
  for (memory::dim d : md.dims()) dims += (dims.empty() ? "" : "x") + std::to_string(d);
  const char* tag = dnnl_fmt_tag2str(static_cast<dnnl_format_tag_t>(*nativeTagOf(md)));
  return {"onednn f32 " + dims + " " + tag, md.get_size()};
}
}  // namespace

std::optional<NativeLayout> OneDnnKernel::nativeOutputLayout(size_t output) const {
  const int s = handOverStep(true, output);
  if (s < 0) return std::nullopt;
  return layoutOf(steps[static_cast<size_t>(s)].args.at(DNNL_ARG_FROM).get_desc());
}

std::optional<NativeLayout> OneDnnKernel::nativeInputLayout(size_t input) const {
  const int s = handOverStep(false, input);
  if (s >= 0) return layoutOf(steps[static_cast<size_t>(s)].args.at(DNNL_ARG_TO).get_desc());
  if (const std::optional<memory::desc> md = copiedInputLayout(input)) return layoutOf(*md);
  return std::nullopt;
}

std::optional<memory::desc> OneDnnKernel::copiedInputLayout(size_t input) const {
  std::vector<memory> bound;
  for (const Binding& b : bindings) {
    if (b.isOutput || static_cast<size_t>(b.index) != input) continue;
    if (b.byteOffset != 0) return std::nullopt;
    bound.push_back(b.memory);
  }
  if (bound.empty()) return std::nullopt;
  std::optional<memory::desc> layout;
  for (const Step& step : steps)
    for (const auto& [arg, m] : step.args) {
      if (std::find(bound.begin(), bound.end(), m) == bound.end()) continue;
      if (arg != DNNL_ARG_FROM || step.primitive.get_kind() != dnnl::primitive::kind::reorder)
        return std::nullopt;
      const memory::desc to = step.args.at(DNNL_ARG_TO).get_desc();
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

namespace {
// Runs a lowering on the backend's thread count, turning each way oneDNN or
// the lowering can say no into a refusal.
template <class Lower>
CompileResult guardedLowering(Lower lower) {
  const int threads = threadCount();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  try {
    return lower();
  } catch (const Refusal& r) {
    return CompileResult::refuse(r.reason);
  } catch (const dnnl::error& e) {
    return CompileResult::refuse("oneDNN: " + std::string(e.what()));
  } catch (const Error& e) {
    return CompileResult::refuse(e.what());
  }
}
}  // namespace

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
        const memory::desc made = from.get_desc();
        if (made != plain && made == plainDesc(made.dims()) && made.get_size() == plain.get_size())
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
