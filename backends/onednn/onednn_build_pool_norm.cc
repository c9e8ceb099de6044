// Builder's anchors without weights: pooling, Concat, BatchNormalization
// (run-time statistics), LayerNormalization and Softmax, each one oneDNN
// primitive with the chain's post-ops where oneDNN fuses them.
#include <algorithm>

#include "backends/onednn/onednn_builder.h"
#include "core/ops/conv_geometry.h"

namespace collage::onednn {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

// ---- pooling

void Builder::buildPool() {
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
  const std::vector<PostOp> ops = simplified(chain_.postOps);
  // oneDNN 2.6's JIT pooling reads a binary post-op's operand of the
  // result's shape in the destination's layout, whatever its descriptor
  // says: a plain [1, 48, 2, 2] residual added after a MaxPool on nhwc
  // memory came out with 190 of 192 elements wrong. Such operands are
  // reordered into the destination's layout (the blocked input's, named
  // explicitly), or the pool runs on plain memory where that layout has no
  // name. Operands broadcast along a dimension are read right.
  const bool fullOperand = std::any_of(ops.begin(), ops.end(), [&](const PostOp& p) {
    return p.kind == PostOp::Kind::Binary && padTo(p.operand.shape, chain_.shape.size()) == chain_.shape;
  });
  if (in && in.get_desc() != plainDesc(x.shape) && fullOperand) {
    resultTag_ = nativeTagOf(in.get_desc());
    if (!resultTag_) in = memory();
  }
  const bool blockedIn = in && in.get_desc() != plainDesc(x.shape);
  const memory::desc srcMd = blockedIn ? in.get_desc() : plainDesc(x.shape);
  const memory::desc dstMd =
      !blockedIn   ? plainDesc(chain_.shape)
      : resultTag_ ? memory::desc(dimsOf(chain_.shape), memory::data_type::f32, *resultTag_)
                   : anyDesc(dimsOf(chain_.shape));
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
void Builder::buildConcat() {
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
void Builder::buildBatchNorm() {
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

void Builder::buildLayerNorm() {
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

void Builder::buildSoftmax(bool log) {
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

}  // namespace collage::onednn
