#include "backends/onednn/onednn_post_ops.h"

#include <dnnl_debug.h>

#include <algorithm>
#include <limits>

#include "backends/onednn/onednn_descs.h"

namespace collage::onednn {

using dnnl::algorithm;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Operand scalarOperand(float v) {
  Operand o;
  o.isConstant = true;
  o.constant = Tensor::fromFloats({1}, {v});
  o.shape = {1};
  return o;
}

float clampTo(float x, float lo, float hi) { return std::min(std::max(x, lo), hi); }

}  // namespace

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

bool isResidualAdd(const PostOp& p, const Shape& dst) {
  return p.kind == PostOp::Kind::Binary && p.alg == algorithm::binary_add && !p.operand.isConstant &&
         padTo(p.operand.shape, dst.size()) == dst;
}

}  // namespace collage::onednn
