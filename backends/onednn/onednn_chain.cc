#include "backends/onednn/onednn_chain.h"

#include <dnnl_debug.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <map>
#include <utility>
#include <set>

#include "backends/onednn/composite_functions.h"
#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"

namespace collage::onednn {

using dnnl::algorithm;

PostOp PostOp::eltwise(algorithm alg, float alpha, float beta, std::string node) {
  PostOp p;
  p.kind = Kind::Eltwise;
  p.alg = alg;
  p.alpha = alpha;
  p.beta = beta;
  p.node = std::move(node);
  return p;
}

PostOp PostOp::binary(algorithm alg, Operand operand, std::string node) {
  PostOp p;
  p.kind = Kind::Binary;
  p.alg = alg;
  p.operand = std::move(operand);
  p.node = std::move(node);
  return p;
}

std::string FusedChain::describe(const Graph& graph) const {
  std::string s = anchor == kNoNode ? std::string("input") : graph.node(anchor).op;
  if (pad != kNoNode) s = "Pad + " + s;
  if (channelsLastInput != kNoNode) s = "Transpose + " + s;
  for (const PostOp& p : postOps) {
    s += " + ";
    s += p.kind == PostOp::Kind::Sum ? "sum" : dnnl_alg_kind2str(dnnl::convert_to_c(p.alg));
    if (p.kind != PostOp::Kind::Eltwise) s += "[" + shapeToString(p.operand.shape) + "]";
  }
  if (channelsLastOutput != kNoNode) s += " + Transpose";
  return s;
}

bool isAnchorOp(const std::string& op) {
  static const std::set<std::string> anchors = {"Conv",
                                                "ConvTranspose",
                                                "MatMul",
                                                "Gemm",
                                                "MaxPool",
                                                "AveragePool",
                                                "GlobalMaxPool",
                                                "GlobalAveragePool",
                                                "Softmax",
                                                "LogSoftmax",
                                                "BatchNormalization",
                                                "LayerNormalization",
                                                "Concat"};
  return anchors.count(op) != 0;
}

Operand operandOf(const KernelRequest& request, ValueId v) {
  Operand o;
  if (v == kNoValue) return o;
  const Value& val = request.graph->value(v);
  o.shape = val.type.shape;
  if (val.isConstant()) {
    o.isConstant = true;
    o.constant = *val.constant;
    return o;
  }
  auto it = std::find(request.inputs.begin(), request.inputs.end(), v);
  if (it != request.inputs.end()) o.inputIndex = static_cast<int>(it - request.inputs.begin());
  return o;
}

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Walker {
  const KernelRequest& request;
  const Graph& g;
  FusedChain& chain;
  std::set<NodeId> done;
  ValueId result = kNoValue;  // the running result

  bool inGroup(NodeId n) const { return n != kNoNode && request.nodes.contains(n); }

  // Consumers of v inside the group.
  std::vector<NodeId> groupConsumers(ValueId v) const {
    std::vector<NodeId> out;
    for (NodeId c : g.value(v).consumers)
      if (inGroup(c)) out.push_back(c);
    return out;
  }

  // The one node consuming v, if v has exactly one consumer, it is in the
  // group and v does not leave it.
  NodeId soleConsumer(ValueId v) const {
    const Value& val = g.value(v);
    if (val.isGraphOutput || val.consumers.size() != 1 || !inGroup(val.consumers[0]))
      return kNoNode;
    return done.count(val.consumers[0]) ? kNoNode : val.consumers[0];
  }

  // The scalar value of a constant input, or NaN.
  float constScalar(ValueId v) const {
    if (v == kNoValue) return std::nanf("");
    const Value& val = g.value(v);
    if (!val.isConstant() || val.type.numElements() != 1 ||
        val.type.elementType != ElementType::Float32)
      return std::nanf("");
    return val.constant->data<float>()[0];
  }

  // A function of the running result written out as several elementwise
  // ops that fork from it and join again, the forms exporters write:
  // x * Sigmoid(x), x * Clip(x + 3, 0, 6) / 6, x * HardSigmoid(x), GELU as
  // 0.5 * x * (1 + erf(x / sqrt 2)) or with tanh, ... Nothing here names
  // those forms: the ops from the fork on are evaluated with the reference
  // kernels at sample points, and the function they compute, y = f(x), is
  // compared with oneDNN's eltwise algorithms up to y = a * g(x) + b
  // (composite_functions.h). A match becomes one eltwise post-op (and a
  // linear one for a, b); the longest run of ops that matches wins.
  //
  // Returns true when it consumed ops; false with `refusal` set when the ops
  // joined again but compute nothing oneDNN has; false alone when the result
  // does not fork into elementwise ops.
  bool tryComposite(ValueId x, std::string* refusal) {
    std::set<NodeId> readers;
    for (NodeId c : groupConsumers(x))
      if (!done.count(c)) readers.insert(c);
    if (readers.size() < 2 || g.value(x).isGraphOutput) return false;
    // Grow the region in topological order while each node is elementwise
    // over region values and scalar constants; note every prefix after which
    // exactly one region value is still needed (a join).
    std::vector<NodeId> region;
    std::set<ValueId> values = {x};
    std::vector<std::pair<size_t, ValueId>> joins;  // (region size, the joined value)
    for (NodeId n : request.members()) {
      if (done.count(n) || n <= g.value(x).producer) continue;
      const Node& node = g.node(n);
      bool readsRegion = false, elementwise = node.outputs.size() == 1 &&
                                              isScalarFunctionOp(node.op) &&
                                              g.value(node.outputs[0]).type.shape == chain.shape;
      for (ValueId v : node.inputs) {
        if (v == kNoValue) continue;
        if (values.count(v)) readsRegion = true;
        else if (!std::isfinite(constScalar(v))) elementwise = false;
      }
      if (!readsRegion) continue;
      if (!elementwise) break;
      region.push_back(n);
      values.insert(node.outputs[0]);
      // Joined when x and every value made so far, but this node's, are no
      // longer needed outside the region.
      bool joined = true;
      for (ValueId v : values) {
        if (v == node.outputs[0]) continue;
        if (g.value(v).isGraphOutput) joined = false;
        for (NodeId c : g.value(v).consumers)
          if (std::find(region.begin(), region.end(), c) == region.end()) joined = false;
      }
      if (joined) joins.push_back({region.size(), node.outputs[0]});
    }
    if (joins.empty()) return false;
    for (auto it = joins.rbegin(); it != joins.rend(); ++it) {
      const std::vector<NodeId> ops(region.begin(), region.begin() + static_cast<long>(it->first));
      const std::optional<FittedFunction> fit =
          fitEltwise([&](const std::vector<float>& xs) { return evaluate(ops, x, xs); });
      if (!fit) continue;
      const std::string& name = g.node(ops.front()).name;
      if (fit->alg != algorithm::undef)
        chain.postOps.push_back(PostOp::eltwise(fit->alg, fit->alpha, fit->beta, name));
      if (fit->scale != 1.0f || fit->shift != 0.0f)
        chain.postOps.push_back(PostOp::eltwise(algorithm::eltwise_linear, fit->scale, fit->shift, name));
      done.insert(ops.begin(), ops.end());
      result = it->second;
      return true;
    }
    *refusal = nodeLabel(g.node(region.front())) + "with the ops after it up to '" +
               g.value(joins.back().second).name + "' computes a function of '" + g.value(x).name +
               "' that matches no oneDNN eltwise algorithm (" + eltwiseCatalogueNames() + ")";
    return false;
  }

  // The region's ops evaluated on `xs` for x (scalar constants broadcast).
  std::vector<float> evaluate(const std::vector<NodeId>& ops, ValueId x, const std::vector<float>& xs) const {
    const Shape shape = {static_cast<int64_t>(xs.size())};
    std::map<ValueId, Tensor> at;
    at.emplace(x, Tensor::fromFloats(shape, xs));
    for (NodeId n : ops) {
      const Node& node = g.node(n);
      std::vector<Tensor> scalars;
      scalars.reserve(node.inputs.size());
      std::vector<const Tensor*> ins;
      for (ValueId v : node.inputs) {
        if (v == kNoValue) {
          ins.push_back(nullptr);
        } else if (at.count(v)) {
          ins.push_back(&at.at(v));
        } else {
          scalars.push_back(Tensor::scalarFloat(constScalar(v)));
          ins.push_back(&scalars.back());
        }
      }
      Tensor out(ElementType::Float32, shape);
      OpRegistry::instance().get(node.op).reference(node, ins, {&out});
      at.insert_or_assign(node.outputs[0], std::move(out));
    }
    return at.at(g.node(ops.back()).outputs[0]).toFloats();
  }

  void eltwise(const Node& node, algorithm alg, float alpha = 0, float beta = 0) {
    chain.postOps.push_back(PostOp::eltwise(alg, alpha, beta, node.name));
  }

  // Unary ops as eltwise post-ops. Returns false if `node.op` is not one.
  bool mapUnary(const Node& node) {
    struct Plain {
      const char* op;
      algorithm alg;
      float alpha, beta;
    };
    static const Plain plain[] = {
        {"Relu", algorithm::eltwise_relu, 0, 0},
        {"Sigmoid", algorithm::eltwise_logistic, 0, 0},
        {"Tanh", algorithm::eltwise_tanh, 0, 0},
        {"Exp", algorithm::eltwise_exp, 0, 0},
        // No Log: oneDNN 2.6's JIT eltwise_log is not exact at 1 (Log(1) =
        // -1.43e-6, ONNX test_log_example wants 0 within 1e-7).
        {"Sqrt", algorithm::eltwise_sqrt, 0, 0},
        {"Abs", algorithm::eltwise_abs, 0, 0},
        {"Softplus", algorithm::eltwise_soft_relu, 0, 0},
        {"HardSwish", algorithm::eltwise_hardswish, 0, 0},
        {"Neg", algorithm::eltwise_linear, -1, 0},
        {"Reciprocal", algorithm::eltwise_pow, 1, -1},
    };
    for (const Plain& p : plain)
      if (node.op == p.op) {
        eltwise(node, p.alg, p.alpha, p.beta);
        return true;
      }
    const std::string& op = node.op;
    const AttributeMap& a = node.attrs;
    if (op == "LeakyRelu") {
      eltwise(node, algorithm::eltwise_relu, a.getFloat("alpha", 0.01f));
    } else if (op == "Elu") {
      eltwise(node, algorithm::eltwise_elu, a.getFloat("alpha", 1.0f));
    } else if (op == "Selu") {  // gamma * elu_alpha(x)
      eltwise(node, algorithm::eltwise_elu, a.getFloat("alpha", 1.67326319217681884765625f));
      eltwise(node, algorithm::eltwise_linear, a.getFloat("gamma", 1.05070102214813232421875f));
    } else if (op == "HardSigmoid") {  // clip(alpha * x + beta, 0, 1)
      eltwise(node, algorithm::eltwise_linear, a.getFloat("alpha", 0.2f), a.getFloat("beta", 0.5f));
      eltwise(node, algorithm::eltwise_clip_v2, 0.0f, 1.0f);
    } else if (op == "Clip") {  // an absent bound is no bound
      eltwise(node, algorithm::eltwise_clip_v2, a.getFloat("min", -kInf), a.getFloat("max", kInf));
    } else if (op == "Gelu") {
      eltwise(node, a.getString("approximate", "none") == "tanh" ? algorithm::eltwise_gelu_tanh
                                                                 : algorithm::eltwise_gelu_erf);
    } else if (op != "Identity" && op != "Dropout") {
      // (Dropout at inference is the identity; its mask output is checked by the caller.)
      return false;
    }
    return true;
  }

  // The per-channel affine form of an inference BatchNormalization:
  // y = x * s + t with s = scale / sqrt(var + eps), t = B - mean * s.
  std::string mapBatchNorm(const Node& node) {
    if (node.attrs.getInt("training_mode", 0) != 0)
      return nodeLabel(node) + "training_mode is not an inference BatchNormalization";
    for (size_t i = 1; i < 5; ++i)
      if (i >= node.inputs.size() || !g.value(node.inputs[i]).isConstant())
        return nodeLabel(node) +
               "after another op, BatchNormalization needs constant scale, B, mean and var";
    const Shape& x = g.value(node.inputs[0]).type.shape;
    if (x.size() < 2) return nodeLabel(node) + "input of rank < 2";
    const int64_t C = x[1];
    const float eps = node.attrs.getFloat("epsilon", 1e-5f);
    std::vector<float> p[4];
    for (int i = 0; i < 4; ++i) {
      p[i] = g.value(node.inputs[i + 1]).constant->toFloats();
      if (static_cast<int64_t>(p[i].size()) != C)
        return nodeLabel(node) + "parameter " + std::to_string(i + 1) + " is not of size C";
    }
    Shape perChannel(x.size(), 1);
    perChannel[1] = C;
    std::vector<float> s(C), t(C);
    for (int64_t c = 0; c < C; ++c) {
      s[c] = static_cast<float>(p[0][c] / std::sqrt(static_cast<double>(p[3][c]) + eps));
      t[c] = p[1][c] - p[2][c] * s[c];
    }
    Operand so, to;
    so.isConstant = to.isConstant = true;
    so.shape = to.shape = perChannel;
    so.constant = Tensor::fromFloats(perChannel, s);
    to.constant = Tensor::fromFloats(perChannel, t);
    chain.postOps.push_back(PostOp::binary(algorithm::binary_mul, so, node.name));
    chain.postOps.push_back(PostOp::binary(algorithm::binary_add, to, node.name));
    return {};
  }

  static Operand mapConstant(const Operand& o, float (*f)(float)) {
    Operand r = o;
    r.constant = o.constant.clone();
    float* d = r.constant.data<float>();
    for (int64_t i = 0; i < r.constant.numElements(); ++i) d[i] = f(d[i]);
    return r;
  }

  // Two-input ops as binary post-ops (or eltwise ones when both inputs are the result).
  std::string mapBinary(const Node& node) {
    const std::string& op = node.op;
    std::vector<ValueId> ins;
    for (ValueId v : node.inputs)
      if (v != kNoValue) ins.push_back(v);
    if ((op == "Sum" || op == "Mean" || op == "Max" || op == "Min") && ins.size() == 1)
      return {};  // one operand: the identity
    if (ins.size() != 2)
      return nodeLabel(node) + "oneDNN post-ops take two operands, the node has " +
             std::to_string(ins.size());
    const size_t pos = ins[0] == result ? 0 : 1;
    const ValueId other = ins[1 - pos];
    if (g.value(node.outputs[0]).type.shape != chain.shape)
      return nodeLabel(node) + "broadcasting grows the result from " + shapeToString(chain.shape) +
             " to " + shapeToString(g.value(node.outputs[0]).type.shape) +
             "; a post-op keeps the shape of the result";
    if (other == result) {  // x op x
      if (op == "Add" || op == "Sum") {
        eltwise(node, algorithm::eltwise_linear, 2.0f, 0.0f);
      } else if (op == "Mul") {
        eltwise(node, algorithm::eltwise_square);
      } else if (op == "Sub") {
        eltwise(node, algorithm::eltwise_linear, 0.0f, 0.0f);
      } else if (op != "Max" && op != "Min" && op != "Mean") {  // those three: the identity
        return nodeLabel(node) + op + "(x, x) has no oneDNN post-op";
      }
      return {};
    }
    Operand o = operandOf(request, other);
    if (!o.present())
      return nodeLabel(node) + "its other operand '" + g.value(other).name +
             "' is computed inside the group; a post-op reads only inputs and constants";
    const bool scalarConst = o.isConstant && o.constant.numElements() == 1;
    if (op == "Pow") {
      if (pos != 0 || !scalarConst)
        return nodeLabel(node) + "only Pow(x, constant scalar) is an eltwise post-op";
      eltwise(node, algorithm::eltwise_pow, 1.0f, o.constant.toFloats()[0]);
      return {};
    }
    auto bin = [&](algorithm alg, Operand operand) {
      chain.postOps.push_back(PostOp::binary(alg, std::move(operand), node.name));
    };
    if (op == "Add" || op == "Sum") {
      bin(algorithm::binary_add, o);
    } else if (op == "Mean") {
      bin(algorithm::binary_add, o);
      eltwise(node, algorithm::eltwise_linear, 0.5f, 0.0f);
    } else if (op == "Mul") {
      bin(algorithm::binary_mul, o);
    } else if (op == "Max") {
      bin(algorithm::binary_max, o);
    } else if (op == "Min") {
      bin(algorithm::binary_min, o);
    } else if (op == "Sub") {
      if (pos == 0 && o.isConstant) {  // x - c = x + (-c): foldable into a bias
        bin(algorithm::binary_add, mapConstant(o, [](float v) { return -v; }));
      } else if (pos == 0) {
        bin(algorithm::binary_sub, o);
      } else {  // o - x = -x + o
        eltwise(node, algorithm::eltwise_linear, -1.0f, 0.0f);
        bin(algorithm::binary_add, o);
      }
    } else if (op == "Div") {
      if (pos == 0 && o.isConstant) {  // x / c = x * (1/c): foldable into weights
        bin(algorithm::binary_mul, mapConstant(o, [](float v) { return 1.0f / v; }));
      } else if (pos == 0) {
        bin(algorithm::binary_div, o);
      } else {  // o / x = x^-1 * o
        eltwise(node, algorithm::eltwise_pow, 1.0f, -1.0f);
        bin(algorithm::binary_mul, o);
      }
    } else {
      return nodeLabel(node) + "no oneDNN post-op for " + op;
    }
    return {};
  }

  bool consumesResult(const Node& node) const {
    return std::find(node.inputs.begin(), node.inputs.end(), result) != node.inputs.end();
  }

  std::string appendNode(NodeId n) {
    const Node& node = g.node(n);
    if (!consumesResult(node))
      return nodeLabel(node) + "does not consume the result of the nodes before it ('" +
             g.value(result).name + "'); oneDNN fuses only a chain of post-ops";
    std::string why;
    if (tryComposite(result, &why))  // a function of the result written out as several ops
      return done.count(n) ? std::string() : appendNode(n);
    if (!why.empty()) return why;
    for (size_t i = 1; i < node.outputs.size(); ++i) {
      const ValueId v = node.outputs[i];
      if (v != kNoValue && (!g.value(v).consumers.empty() || g.value(v).isGraphOutput))
        return nodeLabel(node) + "its output '" + g.value(v).name +
               "' is used; a post-op has one output";
    }
    if (node.inputs.size() == 1 || node.op == "Clip" || node.op == "Dropout") {
      if (node.inputs[0] != result) return nodeLabel(node) + "the result must be its first input";
      if (!mapUnary(node)) return nodeLabel(node) + "no oneDNN post-op for " + node.op;
    } else if (node.op == "BatchNormalization") {
      if (node.inputs[0] != result) return nodeLabel(node) + "the result must be its input X";
      if (std::string why = mapBatchNorm(node); !why.empty()) return why;
    } else {
      if (std::string why = mapBinary(node); !why.empty()) return why;
    }
    done.insert(n);
    result = node.outputs[0];
    return {};
  }

  std::string checkTypes() const {
    std::string why;
    request.nodes.forEach([&](NodeId n) {
      const Node& node = g.node(n);
      auto check = [&](ValueId v) {
        if (v == kNoValue || !why.empty()) return;
        const TensorType& t = g.value(v).type;
        if (t.elementType != ElementType::Float32)
          why = nodeLabel(node) + "tensor '" + g.value(v).name + "' is " + t.toString() +
                "; the oneDNN backend runs float32 only";
      };
      for (ValueId v : node.inputs) check(v);
      for (ValueId v : node.outputs) check(v);
    });
    return why;
  }

  // A group that starts with a constant-zero Pad of the spatial dimensions
  // feeding a Conv or an AveragePool (Inception's branch pools are exported
  // as Pad + AveragePool): the Pad becomes the anchor's padding, so the
  // padded tensor is never made.
  std::string foldPad(const std::vector<NodeId>& members) {
    const Node& pad = g.node(members[0]);
    const std::string label = nodeLabel(pad);
    if (members.size() < 2) return label + "oneDNN runs a Pad only folded into the Conv or AveragePool after it";
    const Node& next = g.node(members[1]);
    if ((next.op != "Conv" && next.op != "AveragePool") || next.inputs.empty() ||
        next.inputs[0] != pad.outputs[0] || soleConsumer(pad.outputs[0]) != members[1])
      return label + "oneDNN folds a Pad only into a Conv or AveragePool that alone reads it";
    if (pad.attrs.getString("mode", "constant") != "constant" ||
        pad.attrs.getFloat("constant_value", 0.0f) != 0.0f)
      return label + "only a constant-zero Pad folds into " + next.op + "'s padding";
    const int64_t rank = static_cast<int64_t>(g.value(pad.inputs[0]).type.shape.size());
    const PadAmounts amounts = padAmounts(pad, rank);
    for (int64_t d = 0; d < rank; ++d) {
      const bool spatial = d >= 2;
      if (amounts.begin[d] < 0 || amounts.end[d] < 0 ||
          (!spatial && (amounts.begin[d] != 0 || amounts.end[d] != 0)))
        return label + "only non-negative pads of the spatial dimensions fold into " + next.op;
    }
    if (next.op == "AveragePool" && next.attrs.getInt("count_include_pad", 0) == 0) {
      for (int64_t p : next.attrs.getInts("pads", {}))
        if (p != 0)
          return nodeLabel(next) + "its own pads are excluded from the average but the Pad's "
                 "zeros before it are not; oneDNN has no pooling that mixes both";
      if (next.attrs.getString("auto_pad", "NOTSET") != "NOTSET" &&
          next.attrs.getString("auto_pad", "NOTSET") != "VALID")
        return nodeLabel(next) + "auto_pad after a Pad does not fold";
    }
    chain.pad = members[0];
    chain.padBegin.assign(amounts.begin.begin() + 2, amounts.begin.end());
    chain.padEnd.assign(amounts.end.begin() + 2, amounts.end.end());
    done.insert(members[0]);
    return {};
  }

  // A group that starts with a Transpose from channels last into channels
  // first feeding a Conv: the Conv reads the Transpose's input as nhwc.
  std::string foldChannelsLastTranspose(const std::vector<NodeId>& members) {
    const Node& t = g.node(members[0]);
    const std::string label = nodeLabel(t);
    if (members.size() < 2 || t.inputs.size() != 1 || t.outputs.size() != 1)
      return label +
             "oneDNN runs a Transpose only as the channels-last source of the Conv after it";
    const Node& next = g.node(members[1]);
    if (next.op != "Conv" || next.inputs.empty() || next.inputs[0] != t.outputs[0] ||
        soleConsumer(t.outputs[0]) != members[1])
      return label +
             "oneDNN reads a Transpose's input only as the source of a Conv that alone reads it";
    const size_t rank = g.value(t.inputs[0]).type.shape.size();
    std::vector<int64_t> channelsFirst{0, static_cast<int64_t>(rank) - 1};
    for (size_t d = 1; d + 1 < rank; ++d) channelsFirst.push_back(static_cast<int64_t>(d));
    if (rank < 3 || rank > 5 || t.attrs.getInts("perm", {}) != channelsFirst)
      return label +
             "only a Transpose from channels last into channels first (perm 0, r-1, 1, ..., r-2; "
             "rank 3 to 5) becomes a Conv's channels-last source";
    chain.channelsLastInput = members[0];
    done.insert(members[0]);
    return {};
  }

  // A group that ends with a Transpose from channels first into channels
  // last of its result: the Conv writes nhwc (checked after the walk).
  bool endsInChannelsLastTranspose(const std::vector<NodeId>& members) const {
    const Node& t = g.node(members.back());
    if (members.size() < 2 || t.op != "Transpose" || t.inputs.size() != 1 || t.outputs.size() != 1)
      return false;
    const size_t rank = g.value(t.inputs[0]).type.shape.size();
    std::vector<int64_t> channelsLast{0};
    for (size_t d = 2; d < rank; ++d) channelsLast.push_back(static_cast<int64_t>(d));
    channelsLast.push_back(1);
    return rank >= 3 && rank <= 5 && t.attrs.getInts("perm", {}) == channelsLast;
  }

  std::string run() {
    const std::vector<NodeId> members = request.members();
    if (members.empty()) return "empty group";
    if (request.outputs.size() != 1)
      return "the group " + request.toString() + " has " + std::to_string(request.outputs.size()) +
             " outputs; a oneDNN kernel has one";
    if (std::string why = checkTypes(); !why.empty()) return why;
    size_t start = 0;  // the anchor's position (1 after a folded Pad or Transpose)
    if (g.node(members[0]).op == "Transpose") {
      if (std::string why = foldChannelsLastTranspose(members); !why.empty()) return why;
      start = 1;
    } else if (g.node(members[0]).op == "Pad") {
      if (std::string why = foldPad(members); !why.empty()) return why;
      start = 1;
    }
    const Node& first = g.node(members[start]);
    // A node whose first output is omitted (an RNN that gives only Y_h) has
    // no result for a chain to carry.
    if (first.outputs.empty() || first.outputs[0] == kNoValue)
      return nodeLabel(first) + "its first output is omitted; a oneDNN chain carries the first output";
    // An inference BatchNormalization with constant parameters is a
    // per-channel multiply-add: lowered as elementwise ops, it takes any chain
    // of post-ops (oneDNN's own primitive fuses only a Relu).
    bool anchor = isAnchorOp(first.op);
    if (first.op == "BatchNormalization") {
      bool constParams = first.inputs.size() >= 5;
      for (size_t i = 1; constParams && i < 5; ++i)
        constParams = first.inputs[i] != kNoValue && g.value(first.inputs[i]).isConstant();
      anchor = !constParams;
    }
    if (anchor) {
      chain.anchor = members[start];
      for (size_t i = 1; i < first.outputs.size(); ++i) {
        const ValueId v = first.outputs[i];
        if (v != kNoValue && (!g.value(v).consumers.empty() || g.value(v).isGraphOutput))
          return nodeLabel(first) + "its output '" + g.value(v).name +
                 "' is used; oneDNN computes only the first output of " + first.op;
      }
      done.insert(members[start]);
      result = first.outputs[0];
    } else {
      // Elementwise ops alone: the chain starts at an input with the output's shape.
      const Shape& outShape = g.value(first.outputs[0]).type.shape;
      for (ValueId v : first.inputs) {
        if (v == kNoValue) continue;
        Operand o = operandOf(request, v);
        if (o.inputIndex >= 0 && o.shape == outShape) {
          chain.source = o;
          result = v;
          break;
        }
      }
      if (result == kNoValue)
        return nodeLabel(first) + "no input of it is a non-constant tensor of the output's shape " +
               shapeToString(outShape) + " (oneDNN broadcasts only the second operand)";
    }
    chain.shape = g.value(result).type.shape;
    if (endsInChannelsLastTranspose(members)) {
      chain.channelsLastOutput = members.back();
      done.insert(members.back());
    }
    for (NodeId n : members) {
      if (done.count(n)) continue;
      if (std::string why = appendNode(n); !why.empty()) return why;
    }
    if (chain.channelsLastOutput != kNoNode) {
      const Node& t = g.node(chain.channelsLastOutput);
      const std::string label = nodeLabel(t);
      if (chain.anchor == kNoNode || g.node(chain.anchor).op != "Conv")
        return label + "only a Conv writes its result channels last into a Transpose after it";
      if (t.inputs[0] != result || g.value(result).isGraphOutput ||
          g.value(result).consumers.size() != 1)
        return label +
               "a Transpose becomes a Conv's channels-last result only where it alone "
               "reads the end of the chain";
      result = t.outputs[0];
    }
    if (result != request.outputs[0])
      return "the group's output '" + g.value(request.outputs[0]).name +
             "' is not the end of its chain of ops";
    if (chain.anchor == kNoNode && chain.postOps.empty())
      return "the group " + request.toString() + " computes nothing (identity ops only)";
    chain.output = result;
    return {};
  }
};

}  // namespace

ChainAnalysis analyzeChain(const KernelRequest& request) {
  ChainAnalysis a;
  Walker w{request, *request.graph, a.chain, {}, kNoValue};
  try {
    a.refusal = w.run();
  } catch (const Error& e) {  // a malformed attribute: not a kernel we can build
    a.refusal = e.what();
  }
  return a;
}

namespace {

// The group's nodes assigned to chains, in member order: each anchor (and
// each Pad) starts a chain, an anchor after a lone Pad continues its chain,
// and any other node continues the chain whose result it reads.
std::vector<std::vector<NodeId>> assignChains(const Graph& g, const std::vector<NodeId>& members) {
  std::vector<std::vector<NodeId>> chains;
  std::map<ValueId, size_t> resultOf;  // a chain's running result -> the chain
  for (NodeId n : members) {
    const Node& node = g.node(n);
    size_t c = chains.size();
    const bool anchor = isAnchorOp(node.op) && node.op != "BatchNormalization";
    if (anchor && !node.inputs.empty()) {
      // An anchor reading a chain that is only a Pad continues it (the Pad folds into it).
      auto it = resultOf.find(node.inputs[0]);
      if (it != resultOf.end() && chains[it->second].size() == 1 &&
          g.node(chains[it->second][0]).op == "Pad") {
        c = it->second;
        resultOf.erase(it);
      }
    }
    if (node.op == "Pad") {
      // starts a chain of its own, which the anchor after it joins
    } else if (!anchor) {
      for (ValueId v : node.inputs) {
        auto it = resultOf.find(v);
        if (v != kNoValue && it != resultOf.end()) {
          c = it->second;
          resultOf.erase(it);
          break;
        }
      }
    }
    if (c == chains.size()) chains.emplace_back();
    chains[c].push_back(n);
    if (!node.outputs.empty() && node.outputs[0] != kNoValue) resultOf[node.outputs[0]] = c;
  }
  return chains;
}

// The chains ordered so that each follows those it reads (Kahn's algorithm,
// stable): `order` lists them, `placed` gives each one's position. False
// when they depend on each other.
bool orderChains(const std::vector<KernelRequest>& requests, const std::map<ValueId, size_t>& madeBy,
                 std::vector<size_t>& order, std::vector<size_t>& placed) {
  const size_t count = requests.size();
  placed.assign(count, SIZE_MAX);
  while (order.size() < count) {
    bool progress = false;
    for (size_t c = 0; c < count; ++c) {
      if (placed[c] != SIZE_MAX) continue;
      bool ready = true;
      for (ValueId v : requests[c].inputs) {
        auto it = madeBy.find(v);
        if (it != madeBy.end() && placed[it->second] == SIZE_MAX) ready = false;
      }
      if (!ready) continue;
      placed[c] = order.size();
      order.push_back(c);
      progress = true;
    }
    if (!progress) return false;
  }
  return true;
}

}  // namespace

ChainSequence analyzeSequence(const KernelRequest& request) {
  ChainSequence seq;
  const Graph& g = *request.graph;
  const std::vector<NodeId> members = request.members();
  const std::vector<std::vector<NodeId>> chains = assignChains(g, members);
  seq.severalChains = chains.size() >= 2;
  if (!seq.severalChains) {
    seq.refusal = "the group " + request.toString() + " is not a sequence of two or more chains";
    return seq;
  }
  // Requests, and which chain makes each value.
  std::vector<KernelRequest> requests;
  std::map<ValueId, size_t> madeBy;
  for (size_t c = 0; c < chains.size(); ++c) {
    requests.push_back(KernelRequest::of(g, NodeSet::of(g.numNodes(), chains[c]), request.origin));
    if (requests.back().outputs.size() != 1) {
      seq.refusal = "the chain " + requests.back().toString() + " of the group has " +
                    std::to_string(requests.back().outputs.size()) + " outputs; it needs one";
      return seq;
    }
    madeBy[requests.back().outputs[0]] = c;
  }
  std::vector<size_t> order, placed;
  if (!orderChains(requests, madeBy, order, placed)) {
    seq.refusal = "the chains of the group " + request.toString() + " depend on each other";
    return seq;
  }
  // Which chains later chains read, and which make the group's outputs.
  std::vector<bool> readLater(chains.size(), false);
  for (size_t c = 0; c < chains.size(); ++c)
    for (ValueId v : requests[c].inputs)
      if (auto it = madeBy.find(v); it != madeBy.end()) readLater[it->second] = true;
  for (size_t c : order) {
    ChainSequence::Part part;
    part.request = requests[c];
    part.readLater = readLater[c];
    const auto out = std::find(request.outputs.begin(), request.outputs.end(), part.request.outputs[0]);
    if (out != request.outputs.end()) part.groupOutput = static_cast<int>(out - request.outputs.begin());
    ChainAnalysis a = analyzeChain(part.request);
    if (!a.ok()) {
      seq.refusal = a.refusal;
      return seq;
    }
    part.chain = a.chain;
    if (a.chain.channelsLastInput != kNoNode || a.chain.channelsLastOutput != kNoNode) {
      seq.refusal =
          "a Transpose folds into a Conv of a lone chain only (" + part.request.toString() + ")";
      return seq;
    }
    for (ValueId v : part.request.inputs) {
      auto it = madeBy.find(v);
      if (it != madeBy.end()) {
        part.inputs.emplace_back(-1, static_cast<int>(placed[it->second]));
      } else {
        auto o = std::find(request.inputs.begin(), request.inputs.end(), v);
        if (o == request.inputs.end()) {
          seq.refusal = "value '" + g.value(v).name + "' is neither an input of the group nor made in it";
          return seq;
        }
        part.inputs.emplace_back(static_cast<int>(o - request.inputs.begin()), -1);
      }
    }
    seq.parts.push_back(std::move(part));
  }
  return seq;
}

}  // namespace collage::onednn
