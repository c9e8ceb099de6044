#include "backends/cublas/matmul_plan.h"

#include <vector>

#include "core/ir/sub_graph.h"
#include "core/ops/runtime_inputs.h"

namespace collage::cublas {

std::string epilogueName(Epilogue e) {
  switch (e) {
    case Epilogue::None:
      return "none";
    case Epilogue::Bias:
      return "bias";
    case Epilogue::Relu:
      return "relu";
    case Epilogue::ReluBias:
      return "relu_bias";
    case Epilogue::Gelu:
      return "gelu";
    case Epilogue::GeluBias:
      return "gelu_bias";
  }
  return "?";
}

std::string MatmulPlan::toString() const {
  if (!refusal.empty()) return "refused: " + refusal;
  std::string s = "matmul " + std::to_string(batch) + "x[" + std::to_string(m) + "x" +
                  std::to_string(n) + "x" + std::to_string(k) + "]";
  if (transA) s += " transA";
  if (transB) s += " transB";
  if (c != kNoValue) s += " beta";
  if (epilogue != Epilogue::None) s += " " + epilogueName(epilogue);
  return s;
}

namespace {

bool isFloat(const Graph& g, ValueId v) {
  const TensorType& t = g.value(v).type;
  if (t.elementType != ElementType::Float32) return false;
  for (int64_t d : t.shape)
    if (d < 0) return false;
  return true;
}

MatmulPlan refuse(std::string why) {
  MatmulPlan p;
  p.refusal = std::move(why);
  return p;
}

MatmulPlan planAnchor(const Graph& g, const Node& n) {
  MatmulPlan p;
  if (n.inputs.size() < 2) return refuse(n.op + " without two inputs");
  p.a = n.inputs[0];
  p.b = n.inputs[1];
  if (!isFloat(g, p.a) || !isFloat(g, p.b) || !isFloat(g, n.outputs[0]))
    return refuse(n.op + " that is not float32 with static shapes");
  const Shape& sa = g.value(p.a).type.shape;
  const Shape& sb = g.value(p.b).type.shape;
  p.output = n.outputs[0];
  if (n.op == "Gemm") {
    if (sa.size() != 2 || sb.size() != 2) return refuse("Gemm with operands that are not matrices");
    p.transA = n.attrs.getInt("transA", 0) != 0;
    p.transB = n.attrs.getInt("transB", 0) != 0;
    p.m = p.transA ? sa[1] : sa[0];
    p.k = p.transA ? sa[0] : sa[1];
    p.n = p.transB ? sb[0] : sb[1];
    p.lda = sa[1];
    p.ldb = sb[1];
    p.alpha = n.attrs.getFloat("alpha", 1.0f);
    const float beta = n.attrs.getFloat("beta", 1.0f);
    if (n.inputs.size() > 2 && n.inputs[2] != kNoValue) {
      const ValueId c = n.inputs[2];
      if (!isFloat(g, c)) return refuse("Gemm C that is not float32");
      const Shape& sc = g.value(c).type.shape;
      const bool vector =
          (sc.size() == 1 && sc[0] == p.n) || (sc.size() == 2 && sc[0] == 1 && sc[1] == p.n);
      if (vector && beta == 1.0f) {
        p.bias = c;
        p.epilogue = Epilogue::Bias;
      } else if (sc == Shape{p.m, p.n}) {
        p.c = c;
        p.beta = beta;
      } else {
        return refuse("Gemm C of shape that is neither a row vector nor [m, n]");
      }
    }
    return p;
  }
  // MatMul with NumPy batching: [..., m, k] x [..., k, n].
  if (sa.size() < 2 || sb.size() < 2) return refuse("MatMul with a vector operand");
  p.m = sa[sa.size() - 2];
  p.k = sa.back();
  p.n = sb.back();
  p.lda = p.k;
  p.ldb = p.n;
  const Shape& so = g.value(p.output).type.shape;
  for (size_t d = 0; d + 2 < so.size(); ++d) p.batch *= so[d];
  auto batchOf = [](const Shape& s) {
    int64_t b = 1;
    for (size_t d = 0; d + 2 < s.size(); ++d) b *= s[d];
    return b;
  };
  const int64_t ba = batchOf(sa), bb = batchOf(sb);
  // One operand may be shared by every batch (its batch dims all 1); a
  // partial broadcast ([2,1,..] x [1,3,..]) is not one strided batch.
  if ((ba != p.batch && ba != 1) || (bb != p.batch && bb != 1))
    return refuse("MatMul whose batch dimensions broadcast partially");
  p.batchStrideA = ba == 1 ? 0 : p.m * p.k;
  p.batchStrideB = bb == 1 ? 0 : p.k * p.n;
  return p;
}

}  // namespace

MatmulPlan planMatmul(const Graph& g, const NodeSet& nodes) {
  const std::vector<NodeId> members = nodes.members();
  if (members.empty()) return refuse("empty group");
  // The epilogue takes its parameters (Clip's bounds) at plan time.
  if (std::string why = runtimeInputRefusal(g, members, "cuBLASLt"); !why.empty()) return refuse(why);
  const Node& anchor = g.node(members.front());
  if (anchor.op != "MatMul" && anchor.op != "Gemm")
    return refuse("the group does not start with MatMul or Gemm");
  MatmulPlan p = planAnchor(g, anchor);
  if (!p.refusal.empty()) return p;
  size_t used = 1;
  NodeId next = soleConsumerIn(g, nodes, p.output);
  // An Add of a vector over the last axis: the bias epilogue.
  if (next != kNoNode && g.node(next).op == "Add" && p.epilogue == Epilogue::None &&
      p.c == kNoValue) {
    const Node& add = g.node(next);
    const ValueId other = add.inputs[0] == p.output ? add.inputs[1] : add.inputs[0];
    const Shape& so = g.value(p.output).type.shape;
    const Shape& sv = g.value(other).type.shape;
    bool vector = isFloat(g, other) && !sv.empty() && sv.back() == p.n &&
                  g.value(add.outputs[0]).type.shape == so;
    for (size_t d = 0; d + 1 < sv.size(); ++d) vector = vector && sv[d] == 1;
    if (!vector) return refuse("Add that is not a bias over the last axis");
    p.bias = other;
    p.epilogue = Epilogue::Bias;
    p.output = add.outputs[0];
    ++used;
    next = soleConsumerIn(g, nodes, p.output);
  }
  if (next != kNoNode) {
    const Node& act = g.node(next);
    const bool bias = p.epilogue == Epilogue::Bias;
    if (act.op == "Relu") {
      p.epilogue = bias ? Epilogue::ReluBias : Epilogue::Relu;
    } else if (act.op == "Gelu" && act.attrs.getString("approximate", "none") == "tanh") {
      // cuBLASLt's GELU epilogue is the tanh approximation; an exact (erf)
      // Gelu is left to another backend rather than answered approximately.
      p.epilogue = bias ? Epilogue::GeluBias : Epilogue::Gelu;
    } else {
      return refuse(act.op + " after the product is not an epilogue cuBLASLt has");
    }
    p.output = act.outputs[0];
    ++used;
  }
  if (used != members.size()) return refuse("nodes beyond product, bias and activation");
  return p;
}

}  // namespace collage::cublas
