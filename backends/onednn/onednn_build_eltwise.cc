// Builder::buildElementwise: a chain with no anchor, elementwise ops alone,
// as one eltwise or binary primitive carrying the rest as post-ops.
#include <algorithm>

#include "backends/onednn/onednn_builder.h"

namespace collage::onednn {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

// Where the convolutions' layout keeps channels last (nhwc, AVX-512), an
// elementwise chain on a 4-D or 5-D tensor runs in it: its operands are
// tensors of the result's shape (reordered in, like the source) or
// broadcast over the spatial dimensions (a per-channel scale, the
// squeeze-excitation weights: the same bytes in either layout). Alone, the
// kernel reorders at its boundary; between oneDNN kernels the Session
// hands the tensors over and the layout stays the same through the SE
// block and the residual Add. Channel-blocked layouts (AVX2's nChw8c)
// would pad the channels: those chains stay plain.
std::optional<memory::format_tag> Builder::elementwiseLayout(const std::vector<PostOp>& ops) const {
  const size_t rank = chain_.shape.size();
  if (rank != 4 && rank != 5) return std::nullopt;
  if (convLayoutSetting() == ConvLayout::Plain) return std::nullopt;
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
void Builder::buildElementwise() {
  const std::vector<PostOp> ops = simplified(chain_.postOps);
  resultTag_ = elementwiseLayout(ops);
  const memory::desc plain = plainDesc(chain_.shape);
  const memory::desc md =
      resultTag_ ? memory::desc(dimsOf(chain_.shape), memory::data_type::f32, *resultTag_)
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

}  // namespace collage::onednn
