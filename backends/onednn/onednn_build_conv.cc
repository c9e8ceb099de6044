// Builder::buildConv: Conv and ConvTranspose as one oneDNN (de)convolution,
// with leading per-channel scales and shifts folded into the weights and
// bias, and the layout (blocked or plain NCHW) chosen for speed.
#include <algorithm>
#include <type_traits>

#include "backends/onednn/onednn_builder.h"
#include "core/ops/conv_geometry.h"

namespace collage::onednn {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

namespace {

// Weights as oneDNN sees them ([G,] OC/G, IC/G, k...) over ONNX's memory:
// Conv stores [OC, IC/G, k...] (row-major already), ConvTranspose
// [IC, OC/G, k...] = [G][IC/G][OC/G][k...].
memory::desc convWeightsDesc(const ConvGeometry& geo, bool transpose) {
  const int64_t G = geo.group, OC = geo.outChannels, IC = geo.inChannels;
  const int64_t KS = geo.kernelSize();
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
  return memory::desc(wd, memory::data_type::f32, ws);
}

// Constant weights `w` (ONNX's layout) with the fold's per-output-channel scales applied.
std::vector<float> foldedConvWeights(const Operand& w, const Fold& fold, const ConvGeometry& geo,
                                     bool transpose) {
  std::vector<float> wData = w.constant.toFloats();
  if (!fold.scales) return wData;
  const int64_t G = geo.group, OC = geo.outChannels, IC = geo.inChannels;
  const int64_t KS = geo.kernelSize();
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
  return wData;
}

// The bias (a constant `b`, or zeros when absent) with the fold applied.
std::vector<float> foldedConvBias(const Operand& b, const Fold& fold, int64_t OC) {
  std::vector<float> bData = b.present() ? b.constant.toFloats() : std::vector<float>(OC, 0.0f);
  for (int64_t c = 0; c < OC; ++c) bData[c] = bData[c] * fold.scale[c] + fold.shift[c];
  return bData;
}

// The layouts to try, in order (true: blocked), for a convolution with
// post-ops `ops`.
std::vector<bool> convLayoutOrder(const ConvGeometry& geo, bool transpose,
                                  const std::vector<PostOp>& ops, bool inSequence,
                                  bool channelsLast) {
  const ConvLayout setting = convLayoutSetting();
  if (inSequence && setting == ConvLayout::Auto)
    return {true, false};  // a sequence keeps the blocked layout between its convs
  if (setting == ConvLayout::Plain) return {false};
  if (setting == ConvLayout::Blocked) return {true};
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
  if (!transpose && geo.isPointwise() &&
      std::none_of(ops.begin(), ops.end(),
                   [](const PostOp& p) { return p.kind != PostOp::Kind::Eltwise; }) &&
      !channelsLast)
    return {false, true};
  return {true, false};
}

// The descriptors of one convolution, whichever layout it runs in.
// srcPlain and dstPlain are the caller's float32 tensors; `compute` is the
// type the primitive reads src (and weights) in: bf16 for onednn_bf16, the
// source then converted by the reorder source() adds.
struct ConvDescs {
  memory::desc srcPlain, dstPlain, wPlain, wWant, bias;
  memory::dims strides, dil, pl, pr;
  memory::data_type compute = memory::data_type::f32;
};

// The (de)convolution's primitive descriptor, on `any` layouts when `blocked`.
template <class P>
typename P::primitive_desc convPd(const ConvDescs& d, bool blocked,
                                  const dnnl::primitive_attr& attr, const dnnl::engine& engine) {
  const memory::desc src = blocked ? anyDesc(d.srcPlain.dims(), d.compute)
                                   : plainDesc(d.srcPlain.dims(), d.compute);
  const memory::desc dst = blocked ? anyDesc(d.dstPlain.dims()) : d.dstPlain;
  if constexpr (std::is_same_v<P, dnnl::convolution_forward>) {
    typename P::desc desc(prop_kind::forward_inference, algorithm::convolution_direct, src, d.wWant,
                          d.bias, dst, d.strides, d.dil, d.pl, d.pr);
    return typename P::primitive_desc(desc, attr, engine);
  } else {
    typename P::desc desc(prop_kind::forward_inference, algorithm::deconvolution_direct, src,
                          d.wWant, d.bias, dst, d.strides, d.dil, d.pl, d.pr);
    return typename P::primitive_desc(desc, attr, engine);
  }
}

// The first descriptor of `order` that oneDNN makes, preferring JIT code
// to a reference implementation (correct, but orders of magnitude slower);
// with whether it is the blocked one. Nothing made: `error` says why.
template <class P>
std::optional<std::pair<typename P::primitive_desc, bool>> pickConvPd(
    const ConvDescs& d, const std::vector<bool>& order, const dnnl::primitive_attr& blockedAttr,
    const dnnl::primitive_attr& plainAttr, const dnnl::engine& engine, std::string& error) {
  std::optional<std::pair<typename P::primitive_desc, bool>> chosen;
  for (bool blocked : order) {
    try {
      typename P::primitive_desc pd = convPd<P>(d, blocked, blocked ? blockedAttr : plainAttr, engine);
      if (!chosen || (isRef(chosen->first) && !isRef(pd))) chosen.emplace(pd, blocked);
      if (!isRef(pd)) break;
    } catch (const dnnl::error& e) {
      error = e.what();
    }
  }
  return chosen;
}

// `ops` with the first residual Add made oneDNN's sum post-op.
std::vector<PostOp> withResidualAsSum(std::vector<PostOp> ops, const Shape& dst) {
  for (PostOp& p : ops)
    if (isResidualAdd(p, dst)) {
      p.kind = PostOp::Kind::Sum;
      break;
    }
  return ops;
}

}  // namespace

void Builder::buildConv(bool transpose) {
  const Node& node = g_.node(chain_.anchor);
  const Operand x = input(0), w = input(1), b = input(2);
  if (transpose && chain_.pad != kNoNode) refuse(anchorLabel() + "a Pad folds only into a Conv");
  const ConvGeometry geo = transpose ? ConvGeometry::convTranspose(node, x.shape, w.shape)
                                     : ConvGeometry::conv(node, anchorInputShape(), w.shape);
  const size_t k = geo.spatialRank();
  if (k < 1 || k > 3) refuse(anchorLabel() + std::to_string(k) + " spatial dimensions");
  const int64_t OC = geo.outChannels;

  const bool biasFoldable = !b.present() || b.isConstant;
  const Fold fold =
      foldLeading(chain_.postOps, chain_.shape, 1, w.isConstant && biasFoldable, biasFoldable);
  const std::vector<PostOp> ops = simplified(std::vector<PostOp>(
      chain_.postOps.begin() + static_cast<std::ptrdiff_t>(fold.count), chain_.postOps.end()));
  const std::vector<float> wData =
      w.isConstant ? foldedConvWeights(w, fold, geo, transpose) : std::vector<float>();
  const bool hasBias = b.present() || fold.shifts;
  const std::vector<float> bData =
      hasBias && biasFoldable ? foldedConvBias(b, fold, OC) : std::vector<float>();

  ConvDescs d;
  d.strides.assign(geo.strides.begin(), geo.strides.end());
  for (size_t i = 0; i < k; ++i) {
    d.dil.push_back(geo.dilations[i] - 1);
    d.pl.push_back(geo.padsBegin[i] + foldedPadBegin(i));
    d.pr.push_back(geo.padsEnd[i] - geo.outputPadding[i] + foldedPadEnd(i));
  }
  // A folded Transpose's input is the source in channels last: the
  // Conv's dims, nhwc memory (the bytes of the NHWC tensor as stored).
  static const memory::format_tag channelsLast[] = {
      memory::format_tag::acb, memory::format_tag::acdb, memory::format_tag::acdeb};
  d.srcPlain =
      chain_.channelsLastInput == kNoNode
          ? plainDesc(x.shape)
          : memory::desc(dimsOf(anchorInputShape()), memory::data_type::f32, channelsLast[k - 1]);
  d.dstPlain = resultDesc();
  d.wPlain = convWeightsDesc(geo, transpose);
  d.compute = computeType(context_->precision);
  const bool reduced = d.compute != memory::data_type::f32;
  // Run-time weights in bf16 are converted to a plain copy first.
  d.wWant = w.isConstant ? anyDesc(d.wPlain.dims(), d.compute)
            : reduced    ? plainDesc(d.wPlain.dims(), d.compute)
                         : d.wPlain;
  d.bias = hasBias ? plainDesc(memory::dims{OC}) : memory::desc();

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
  // On a blocked destination, a residual Add (a run-time tensor of the
  // result's shape) is oneDNN's sum post-op: the residual is reordered into
  // the destination first. As a binary post-op it would read the plain
  // tensor, which oneDNN's blocked JIT kernels do not support, and the
  // convolution would fall back to im2col + GEMM on NCHW.
  const std::vector<PostOp> blockedOps = withResidualAsSum(ops, chain_.shape);

  const std::optional<memory::format_tag> convTag = activationTag(chain_.shape.size());
  const std::vector<bool> order =
      convLayoutOrder(geo, transpose, ops, link_ != nullptr, convTag && !channelBlocked(*convTag));
  auto finish = [&](const auto& pd, bool blocked) {
    Args args;
    args[DNNL_ARG_SRC] = source(x, d.srcPlain, pd.src_desc());
    args[DNNL_ARG_WEIGHTS] = w.isConstant
                                 ? reorderedConstant(d.wPlain, wData.data(), pd.weights_desc())
                                 : source(w, d.wPlain, pd.weights_desc());
    if (hasBias)
      args[DNNL_ARG_BIAS] = biasFoldable ? constant(d.bias, bData.data()) : operand(b, d.bias);
    addMainStep(pd, std::move(args), blocked ? blockedOps : plainOps);
    if (blocked || !eltwiseOnly) return;
    addInPlaceEltwise(kernel_->steps.back().args.at(DNNL_ARG_DST), ops,
                      (kernel_->postOps.empty() ? "" : "; ") + opsText(ops) +
                          " (eltwise after the convolution)");
  };
  auto pick = [&](auto tag) {
    using P = decltype(tag);
    std::string error;
    const auto chosen =
        pickConvPd<P>(d, order, attrFor(blockedOps), attrFor(plainOps), engine(), error);
    if (!chosen)
      refuse(anchorLabel() + "oneDNN cannot run " + opsText(ops) + " (" + geo.toString() +
             "): " + error);
    // bf16 is a choice for speed: its reference kernel is never one.
    if (reduced && isRef(chosen->first))
      refuse(anchorLabel() + "oneDNN has no bf16 JIT kernel for " + opsText(ops) + " (" +
             geo.toString() + ")");
    finish(chosen->first, chosen->second);
  };
  if (transpose)
    pick(dnnl::deconvolution_forward{});
  else
    pick(dnnl::convolution_forward{});
}

}  // namespace collage::onednn
