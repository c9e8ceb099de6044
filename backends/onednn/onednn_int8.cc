#include "backends/onednn/onednn_int8.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "backends/onednn/onednn_descs.h"
#include "core/ops/op_helpers.h"
#include "core/ops/requantize.h"

namespace collage::onednn {

namespace {

bool isQLinearOp(const std::string& op) { return op == "QLinearConv" || op == "QLinearMatMul"; }
bool isProductOp(const std::string& op) {
  return op == "ConvInteger" || op == "MatMulInteger" || isQLinearOp(op);
}

// Where an integer product keeps its operands: the source, its zero point,
// the weights and theirs.
struct Slots {
  size_t x, xZero, w, wZero;
};
Slots slotsOf(const std::string& op) {
  return isQLinearOp(op) ? Slots{0, 2, 3, 5} : Slots{0, 2, 1, 3};
}

std::string typeName(ElementType t) { return std::string(elementTypeName(t)); }

struct Reader {
  const KernelRequest& request;
  const Graph& g;
  Int8Product& p;
  bool prefix = false;  // refused, but the start of a group that lowers

  bool inGroup(NodeId n) const { return n != kNoNode && request.nodes.contains(n); }
  NodeId producer(ValueId v) const { return v == kNoValue ? kNoNode : g.value(v).producer; }

  // The one consumer of `v` in the group when v leaves it nowhere else.
  NodeId onlyConsumer(ValueId v) const {
    const Value& val = g.value(v);
    if (val.isGraphOutput || val.consumers.size() != 1 || !inGroup(val.consumers[0])) return kNoNode;
    return val.consumers[0];
  }

  // Constant weights and their zero point as int8 values w - zp, with the
  // zero point per output channel (Conv: dimension 0; MatMul: the column).
  std::string readWeights(const Node& anchor) {
    const Slots slots = slotsOf(anchor.op);
    const ValueId wv = anchor.inputs[slots.w];
    const Value& w = g.value(wv);
    if (!w.isConstant())
      return nodeLabel(anchor) + "its weights '" + w.name +
             "' are computed at run time; the oneDNN int8 kernels take constant weights";
    std::vector<int64_t> zp;
    if (anchor.inputs.size() > slots.wZero && anchor.inputs[slots.wZero] != kNoValue) {
      const Value& z = g.value(anchor.inputs[slots.wZero]);
      if (!z.isConstant())
        return nodeLabel(anchor) + "its weight zero point '" + z.name + "' is computed at run time";
      zp = z.constant->toInts();
    }
    const std::vector<int64_t> values = w.constant->toInts();
    const Shape& ws = w.type.shape;
    p.weightsShape = ws;
    p.weights.resize(values.size());
    const int64_t channels = p.kind == Int8Product::Kind::Conv ? ws[0] : ws.back();
    const int64_t inner = p.kind == Int8Product::Kind::Conv
                              ? static_cast<int64_t>(values.size()) / std::max<int64_t>(ws[0], 1)
                              : 1;
    auto zeroOf = [&](int64_t c) { return zp.empty() ? 0 : zp[zp.size() > 1 ? static_cast<size_t>(c) : 0]; };
    // oneDNN's integer convolutions and matmuls take s8 weights with a zero
    // point of 0 only: w - zero point, where every one fits int8.
    bool fits = true;
    for (size_t i = 0; i < values.size() && fits; ++i) {
      const int64_t v = values[i] - zeroOf((static_cast<int64_t>(i) / inner) % channels);
      fits = v >= -128 && v <= 127;
      p.weights[i] = static_cast<int8_t>(v);
    }
    if (fits) return {};
    // Otherwise w - base (base 128 for u8 weights: exact in int8) and a
    // compensation term per channel, (base - zero point) * window sum.
    if (p.kind == Int8Product::Kind::Conv && anchor.attrs.getInt("group", 1) != 1)
      return nodeLabel(anchor) + "weights minus their zero point do not fit int8, and the compensation "
             "for it is built for convolutions of one group only";
    const int64_t base = w.type.elementType == ElementType::UInt8 ? 128 : 0;
    for (size_t i = 0; i < values.size(); ++i) p.weights[i] = static_cast<int8_t>(values[i] - base);
    for (int64_t c = 0; c < channels; ++c) p.weightOffset.push_back(static_cast<int32_t>(base - zeroOf(c)));
    return {};
  }

  // The product node's source, its zero point and its geometry.
  std::string readAnchor(const Node& anchor) {
    p.kind = anchor.op == "ConvInteger" || anchor.op == "QLinearConv" ? Int8Product::Kind::Conv
                                                                      : Int8Product::Kind::MatMul;
    const Slots slots = slotsOf(anchor.op);
    const ValueId xv = anchor.inputs[slots.x];
    const ValueId zv = anchor.inputs.size() > slots.xZero ? anchor.inputs[slots.xZero] : kNoValue;
    if (p.quantizer != kNoNode) {
      const Node& q = g.node(p.quantizer);
      if (xv != q.outputs[0] || zv != q.outputs[2])
        return nodeLabel(anchor) + "it must read both the quantized tensor and the zero point of " +
               nodeLabel(q) + "in the group";
      p.source = operandOf(request, q.inputs[0]);
      if (p.source.inputIndex < 0)
        return nodeLabel(q) + "its input '" + g.value(q.inputs[0]).name + "' is not an input of the group";
      p.sourceType = ElementType::UInt8;
    } else {
      if (p.staticQuantizer != kNoNode) {
        const Node& q = g.node(p.staticQuantizer);
        if (xv != q.outputs[0])
          return nodeLabel(q) + "the int8 kernel takes a QuantizeLinear that feeds the product's input";
        if (std::string why = readStaticQuantizer(q); !why.empty()) return why;
      } else {
        p.source = operandOf(request, xv);
        if (p.source.inputIndex < 0)
          return nodeLabel(anchor) + "its input '" + g.value(xv).name +
                 "' is a constant or made in the group; the int8 kernels read it as an input";
      }
      p.sourceType = g.value(xv).type.elementType;
      if (zv != kNoValue) {
        p.sourceZeroPoint = operandOf(request, zv);
        if (!p.sourceZeroPoint.present())
          return nodeLabel(anchor) + "its zero point '" + g.value(zv).name + "' is made in the group";
        if (g.value(zv).type.numElements() != 1)
          return nodeLabel(anchor) + "a zero point per row ('" + g.value(zv).name +
                 "') has no oneDNN form; oneDNN takes one source zero point";
      }
    }
    if (p.sourceType != ElementType::UInt8 && p.sourceType != ElementType::Int8)
      return nodeLabel(anchor) + "source of type " + typeName(p.sourceType) + " is not u8 or s8";
    const Shape& xs = g.value(xv).type.shape;
    const Shape& ws = g.value(anchor.inputs[slots.w]).type.shape;
    if (p.kind == Int8Product::Kind::Conv) {
      if (xs.size() < 3 || xs.size() > 5)
        return nodeLabel(anchor) + std::to_string(xs.size() - 2) + " spatial dimensions";
    } else if (xs.size() < 2 || ws.size() != 2) {
      return nodeLabel(anchor) + "the int8 matmul takes [..., M, K] x a constant [K, N], not " +
             shapeToString(xs) + " x " + shapeToString(ws);
    }
    return readWeights(anchor);
  }

  // A QuantizeLinear of a float input of the group with a constant
  // per-tensor scale and zero point.
  std::string readStaticQuantizer(const Node& q) {
    p.source = operandOf(request, q.inputs[0]);
    if (p.source.inputIndex < 0)
      return nodeLabel(q) + "its input '" + g.value(q.inputs[0]).name + "' is not an input of the group";
    const Value& scale = g.value(q.inputs[1]);
    if (!scale.isConstant() || scale.type.numElements() != 1)
      return nodeLabel(q) + "the int8 kernel takes a constant per-tensor scale";
    p.staticScale = scale.constant->toFloats()[0];
    p.staticZeroPoint = 0;
    if (q.inputs.size() > 2 && q.inputs[2] != kNoValue) {
      const Value& z = g.value(q.inputs[2]);
      if (!z.isConstant() || z.type.numElements() != 1)
        return nodeLabel(q) + "the int8 kernel takes a constant per-tensor zero point";
      p.staticZeroPoint = static_cast<int32_t>(z.constant->toInts()[0]);
    }
    const ElementType t = g.value(q.outputs[0]).type.elementType;
    if (t != ElementType::UInt8 && t != ElementType::Int8)
      return nodeLabel(q) + "output of type " + typeName(t) + " is not u8 or s8";
    p.sourceType = t;
    return {};
  }

  // The DequantizeLinear of a QLinear op's result: a constant per-tensor scale and zero point.
  std::string readOutputDequantizer(const Node& dq) {
    const Value& scale = g.value(dq.inputs[1]);
    if (!scale.isConstant() || scale.type.numElements() != 1)
      return nodeLabel(dq) + "the int8 kernel takes a constant per-tensor scale";
    p.outputDequantizeScale = scale.constant->toFloats()[0];
    if (dq.inputs.size() > 2 && dq.inputs[2] != kNoValue) {
      const Value& z = g.value(dq.inputs[2]);
      if (!z.isConstant() || z.type.numElements() != 1)
        return nodeLabel(dq) + "the int8 kernel takes a constant per-tensor zero point";
      p.outputDequantizeZero = static_cast<int32_t>(z.constant->toInts()[0]);
    }
    return {};
  }

  // QDQ: the DequantizeLinear of a run-time u8/s8 tensor, with a constant
  // per-tensor scale and zero point.
  // (inGroup: the DequantizeLinear is a member, its input the kernel's source.)
  std::string readDequantizer(const Node& dq, bool inGroup = true) {
    if (inGroup) {
      p.source = operandOf(request, dq.inputs[0]);
      if (p.source.inputIndex < 0)
        return nodeLabel(dq) + "its input '" + g.value(dq.inputs[0]).name + "' is not an input of the group";
    }
    p.sourceType = g.value(dq.inputs[0]).type.elementType;
    if (p.sourceType != ElementType::UInt8 && p.sourceType != ElementType::Int8)
      return nodeLabel(dq) + "source of type " + typeName(p.sourceType) + " is not u8 or s8";
    const Value& scale = g.value(dq.inputs[1]);
    if (!scale.isConstant() || scale.type.numElements() != 1)
      return nodeLabel(dq) + "the int8 kernel takes a constant per-tensor scale";
    p.dequantizeScale = scale.constant->toFloats()[0];
    if (dq.inputs.size() > 2 && dq.inputs[2] != kNoValue) {
      const Value& z = g.value(dq.inputs[2]);
      if (!z.isConstant() || z.type.numElements() != 1)
        return nodeLabel(dq) + "the int8 kernel takes a constant per-tensor zero point";
      p.sourceZeroPoint = operandOf(request, dq.inputs[2]);
    }
    return {};
  }

  // Float weights that are int8 values k times a scale per tensor or per
  // output channel, exactly as DequantizeLinear made them (float(k) * s ==
  // w for every weight): k into `weights`, s into `scales`.
  std::string readQuantizedFloatWeights(const Node& anchor, std::vector<float>& scales) {
    const Value& w = g.value(anchor.inputs[1]);
    if (!w.isConstant())
      return nodeLabel(anchor) + "its weights '" + w.name + "' are computed at run time; the int8 kernels take constant weights";
    std::vector<float> values = w.constant->toFloats();
    Shape ws = w.type.shape;
    if (anchor.op == "Gemm" && anchor.attrs.getInt("transB", 0) != 0) {  // [N, K] -> [K, N]
      std::vector<float> t(values.size());
      for (int64_t n = 0; n < ws[0]; ++n)
        for (int64_t k = 0; k < ws[1]; ++k) t[static_cast<size_t>(k * ws[0] + n)] = values[static_cast<size_t>(n * ws[1] + k)];
      values.swap(t);
      ws = {ws[1], ws[0]};
    }
    const bool conv = p.kind == Int8Product::Kind::Conv;
    const int64_t C = conv ? ws[0] : ws.back();
    const int64_t inner = conv ? static_cast<int64_t>(values.size()) / std::max<int64_t>(C, 1) : 1;
    auto channelOf = [&](size_t i) { return (static_cast<int64_t>(i) / inner) % C; };
    std::vector<float> maxAbs(static_cast<size_t>(C), 0.0f);
    float all = 0.0f;
    for (size_t i = 0; i < values.size(); ++i) {
      maxAbs[static_cast<size_t>(channelOf(i))] = std::max(maxAbs[static_cast<size_t>(channelOf(i))], std::fabs(values[i]));
      all = std::max(all, std::fabs(values[i]));
    }
    p.weightsShape = ws;
    p.weights.assign(values.size(), 0);
    // Whether scale s reproduces every weight of channel c (all channels: c < 0).
    // A channel's weights are a contiguous run of `inner` (Conv, [C, ...]) or
    // every C-th value (MatMul, [K, C]): visited directly, not by a scan of
    // all weights per channel, which is quadratic in a layer's size.
    auto exact = [&](float s, int64_t c) {
      const size_t n = values.size();
      const size_t first = c < 0 ? 0 : static_cast<size_t>(conv ? c * inner : c);
      const size_t end = c < 0 || !conv ? n : static_cast<size_t>((c + 1) * inner);
      const size_t step = c < 0 || conv ? 1 : static_cast<size_t>(C);
      for (size_t i = first; i < end; i += step) {
        const float k = s == 0.0f ? 0.0f : std::nearbyint(values[i] / s);
        if (k < -128 || k > 127 || k * s != values[i]) return false;
        p.weights[i] = static_cast<int8_t>(k);
      }
      return true;
    };
    // The scale symmetric quantization gives (max |w| = 127 s), or a neighbour
    // of it where the division rounded.
    auto find = [&](float top, int64_t c) -> std::optional<float> {
      const float s = top / 127.0f;
      for (float t : {s, std::nextafter(s, 0.0f), std::nextafter(s, 1.0f)})
        if (exact(t, c)) return t;
      return std::nullopt;
    };
    if (const std::optional<float> s = find(all, -1)) {
      scales.assign(1, *s);
      return {};
    }
    scales.resize(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      const std::optional<float> s = find(maxAbs[static_cast<size_t>(c)], c);
      if (!s)
        return nodeLabel(anchor) + "its float weights are not int8 values times a scale per tensor or per "
               "output channel; the int8 kernel needs their integers";
      scales[static_cast<size_t>(c)] = *s;
    }
    return {};
  }

  // QDQ: DequantizeLinear -> Conv / MatMul; the float result carries on as post-ops.
  std::string readQdqAnchor(const Node& dq) {
    const NodeId a = onlyConsumer(dq.outputs[0]);
    if (a == kNoNode || (g.node(a).op != "Conv" && g.node(a).op != "MatMul" && g.node(a).op != "Gemm") ||
        g.node(a).inputs[0] != dq.outputs[0])
      return nodeLabel(dq) + "the int8 kernel takes a DequantizeLinear that only a Conv, MatMul or Gemm of "
             "the group reads, as its input";
    return readQdqProduct(a);
  }

  // The float product of QDQ (its source's scale in dequantizeScale): int8
  // weights recovered, the float result carried on as post-ops.
  std::string readQdqProduct(NodeId a) {
    const Node& anchor = g.node(a);
    if (anchor.op == "Gemm" && (anchor.attrs.getInt("transA", 0) != 0 || anchor.attrs.getFloat("alpha", 1.0f) != 1.0f ||
                                anchor.attrs.getFloat("beta", 1.0f) != 1.0f))
      return nodeLabel(anchor) + "the int8 kernel takes a Gemm without transA, alpha or beta";
    p.anchor = a;
    p.kind = anchor.op == "Conv" ? Int8Product::Kind::Conv : Int8Product::Kind::MatMul;
    p.shape = g.value(anchor.outputs[0]).type.shape;
    const Shape& xs = g.value(anchor.inputs[0]).type.shape;
    if (anchor.op == "Gemm" && g.value(anchor.inputs[1]).type.rank() != 2)
      return nodeLabel(anchor) + "a Gemm of rank other than 2";
    if (p.kind == Int8Product::Kind::Conv && (xs.size() < 3 || xs.size() > 5))
      return nodeLabel(anchor) + std::to_string(xs.size() - 2) + " spatial dimensions";
    if (p.kind == Int8Product::Kind::MatMul && (xs.size() < 2 || g.value(anchor.inputs[1]).type.rank() != 2))
      return nodeLabel(anchor) + "the int8 matmul takes [..., M, K] x a constant [K, N]";
    std::vector<float> ws;
    if (std::string why = readQuantizedFloatWeights(anchor, ws); !why.empty()) return why;
    for (float w : ws) p.weightScale.push_back(p.dequantizeScale * w);
    p.floatOutput = p.hasScale = true;
    if (anchor.inputs.size() > 2 && anchor.inputs[2] != kNoValue) {  // a Conv's bias per channel, a Gemm's C
      const Value& b = g.value(anchor.inputs[2]);
      if (!b.isConstant()) return nodeLabel(anchor) + "its bias '" + b.name + "' is computed at run time";
      Shape shape(p.shape.size(), 1);
      if (p.kind == Int8Product::Kind::Conv) {
        shape[1] = p.outChannels();
      } else {  // C broadcast to [M, N]: numpy alignment from the right
        const Shape padded = padTo(b.type.shape, p.shape.size());
        shape = padded;
      }
      Operand o;
      o.isConstant = true;
      o.shape = shape;
      o.constant = Tensor::fromFloats(shape, b.constant->toFloats());
      p.postOps.push_back(PostOp::binary(dnnl::algorithm::binary_add, o, anchor.name));
    }
    return {};
  }

  // A constant float input of `node` at `slot`: its values (one, or `count`).
  std::string constFloats(const Node& node, size_t slot, int64_t count, const char* what,
                          std::vector<float>& out) const {
    const Value& v = g.value(node.inputs[slot]);
    if (!v.isConstant())
      return nodeLabel(node) + "its " + what + " '" + v.name +
             "' is computed at run time; the int8 kernel takes it as a constant";
    out = v.constant->toFloats();
    if (out.size() != 1 && static_cast<int64_t>(out.size()) != count)
      return nodeLabel(node) + "its " + what + " has " + std::to_string(out.size()) +
             " values; oneDNN takes one, or one per output channel";
    return {};
  }

  // QLinearConv / QLinearMatMul: the requantizing scale, output zero point and int32 bias.
  std::string readRequantization(const Node& anchor) {
    const int64_t C = p.outChannels();
    std::vector<float> xs, ws, ys;
    if (std::string why = constFloats(anchor, 1, 1, "source scale", xs); !why.empty()) return why;
    if (std::string why = constFloats(anchor, 4, C, "weight scale", ws); !why.empty()) return why;
    if (std::string why = constFloats(anchor, 6, 1, "output scale", ys); !why.empty()) return why;
    const Value& yz = g.value(anchor.inputs[7]);
    if (!yz.isConstant())
      return nodeLabel(anchor) + "its output zero point '" + yz.name + "' is computed at run time";
    p.requantize = true;
    p.outputType = yz.type.elementType;
    p.outputZeroPoint = static_cast<int32_t>(yz.constant->toInts()[0]);
    // The reference's float expression, left to right: x_scale * w_scale[c] / y_scale.
    for (float w : ws) p.requantScale.push_back(requantizeScale(xs[0], w, ys[0]));
    if (anchor.inputs.size() > 8 && anchor.inputs[8] != kNoValue) {
      const Value& b = g.value(anchor.inputs[8]);
      if (!b.isConstant()) return nodeLabel(anchor) + "its bias '" + b.name + "' is computed at run time";
      for (int64_t v : b.constant->toInts()) p.intBias.push_back(static_cast<int32_t>(v));
    }
    return {};
  }

  // Whether `v` is the quantizer's scale times constants (Mul(x_scale, W_scale)
  // in the group, or x_scale itself): fills weightScale.
  bool readDynamicScale(ValueId v, std::set<NodeId>& used) {
    if (p.quantizer == kNoNode) return false;
    const ValueId qs = g.node(p.quantizer).outputs[1];
    if (v == qs) {
      p.weightScale = {1.0f};
      return true;
    }
    const NodeId m = producer(v);
    if (!inGroup(m) || g.node(m).op != "Mul" || onlyConsumer(v) == kNoNode) return false;
    const Node& mul = g.node(m);
    if (mul.inputs.size() != 2) return false;
    const int at = mul.inputs[0] == qs ? 0 : mul.inputs[1] == qs ? 1 : -1;
    if (at < 0) return false;
    const Value& c = g.value(mul.inputs[1 - at]);
    if (!c.isConstant() || c.type.elementType != ElementType::Float32) return false;
    // One value, or one per output channel laid along the channel axis.
    const int64_t C = p.outChannels();
    const int64_t n = c.type.numElements();
    if (n != 1) {
      const Shape padded = padTo(c.type.shape, p.shape.size());
      const size_t axis = p.kind == Int8Product::Kind::Conv ? 1 : p.shape.size() - 1;
      for (size_t d = 0; d < padded.size(); ++d)
        if (padded[d] != (d == axis ? C : 1)) return false;
    }
    p.weightScale = c.constant->toFloats();
    used.insert(m);
    return true;
  }

  // The float rest of the group after `result` as post-ops (the float chain
  // analysis), into p.postOps; `result` becomes the chain's end.
  std::string readFloatTail(const std::vector<NodeId>& rest, ValueId& result, const Node& anchor) {
    const KernelRequest sub = KernelRequest::of(g, NodeSet::of(g.numNodes(), rest), request.origin);
    const ChainAnalysis chain = analyzeChain(sub);
    if (!chain.ok()) return chain.refusal;
    const Operand& from = chain.chain.source;
    if (chain.chain.anchor != kNoNode || from.inputIndex < 0 ||
        sub.inputs[static_cast<size_t>(from.inputIndex)] != result)
      return "the float ops " + sub.toString() + " after " + nodeLabel(anchor) +
             "are not a chain of post-ops on its result '" + g.value(result).name + "'";
    for (PostOp op : chain.chain.postOps) {
      if (op.kind == PostOp::Kind::Binary && !op.operand.isConstant) {
        const ValueId v = sub.inputs[static_cast<size_t>(op.operand.inputIndex)];
        op.operand = operandOf(request, v);
        if (op.operand.inputIndex < 0)
          return "post-op " + op.node + " reads '" + g.value(v).name + "', made inside the int8 group";
      }
      p.postOps.push_back(op);
    }
    result = chain.chain.output;
    return {};
  }

  // The QuantizeLinear at the end of a float chain whose end is `result`:
  // alone reading it, a constant per-tensor scale and zero point. `result`
  // becomes its u8/s8 output.
  std::string readOutputQuantizer(ValueId& result) {
    const Node& q = g.node(p.outputQuantizer);
    if (!p.floatOutput || !p.weightOffset.empty())
      return nodeLabel(q) + "the int8 kernel ends in a QuantizeLinear only where its result is float (QDQ, "
             "dynamic) and its weights fit int8";
    if (q.inputs[0] != result || onlyConsumer(result) != p.outputQuantizer)
      return nodeLabel(q) + "it must alone read the end of the float chain, '" + g.value(result).name + "'";
    const Value& scale = g.value(q.inputs[1]);
    if (!scale.isConstant() || scale.type.numElements() != 1)
      return nodeLabel(q) + "the int8 kernel takes a constant per-tensor output scale";
    p.outputQuantizeScale = scale.constant->toFloats()[0];
    if (!std::isfinite(p.outputQuantizeScale) || p.outputQuantizeScale == 0.0f)
      return nodeLabel(q) + "its scale " + std::to_string(p.outputQuantizeScale) + " is zero or not finite";
    p.outputQuantizeZero = 0;
    if (q.inputs.size() > 2 && q.inputs[2] != kNoValue) {
      const Value& z = g.value(q.inputs[2]);
      if (!z.isConstant() || z.type.numElements() != 1)
        return nodeLabel(q) + "the int8 kernel takes a constant per-tensor output zero point";
      p.outputQuantizeZero = static_cast<int32_t>(z.constant->toInts()[0]);
    }
    const ElementType t = g.value(q.outputs[0]).type.elementType;
    if (t != ElementType::UInt8 && t != ElementType::Int8)
      return nodeLabel(q) + "output of type " + typeName(t) + " is not u8 or s8";
    p.outputType = t;
    result = q.outputs[0];
    return {};
  }

  // analyzeDequantizedInput: the anchor is the group's first node.
  std::string runDequantizedInput() {
    const std::vector<NodeId> members = request.members();
    if (members.empty() || request.outputs.size() != 1) return "not one float product with one output";
    const Node& anchor = g.node(members[0]);
    if (anchor.op != "Conv" && anchor.op != "MatMul" && anchor.op != "Gemm") return "no float product first";
    const NodeId dqNode = producer(anchor.inputs[0]);
    if (dqNode == kNoNode || inGroup(dqNode) || g.node(dqNode).op != "DequantizeLinear")
      return nodeLabel(anchor) + "its input is not made by a DequantizeLinear";
    const Node& dq = g.node(dqNode);
    // The DequantizeLinear's scale and zero point, to quantize its result again.
    const Operand x = operandOf(request, anchor.inputs[0]);
    if (x.inputIndex < 0) return nodeLabel(anchor) + "its input is not an input of the group";
    if (std::string why = readDequantizer(dq, false); !why.empty()) return why;
    p.requantizedSource = true;
    p.source = x;
    p.staticScale = p.dequantizeScale;
    p.staticZeroPoint = p.sourceZeroPoint.isConstant ? static_cast<int32_t>(p.sourceZeroPoint.constant.toInts()[0]) : 0;
    if (std::string why = readQdqProduct(members[0]); !why.empty()) return why;
    ValueId result = anchor.outputs[0];
    std::vector<NodeId> rest;
    for (size_t i = 1; i < members.size(); ++i)
      if (members[i] != p.outputQuantizer) rest.push_back(members[i]);
    if (!rest.empty())
      if (std::string why = readFloatTail(rest, result, anchor); !why.empty()) return why;
    if (p.outputQuantizer != kNoNode)
      if (std::string why = readOutputQuantizer(result); !why.empty()) return why;
    if (result != request.outputs[0])
      return "the group's output '" + g.value(request.outputs[0]).name + "' is not the end of its int8 chain";
    p.output = result;
    return {};
  }

  std::string run() {
    const std::vector<NodeId> members = request.members();
    std::set<NodeId> used;
    for (NodeId n : members) {
      const Node& node = g.node(n);
      if (node.op == "DynamicQuantizeLinear") {
        if (p.quantizer != kNoNode) return nodeLabel(node) + "a second quantizer in one int8 group";
        p.quantizer = n;
        used.insert(n);
      } else if (node.op == "DequantizeLinear" && inGroup(producer(node.inputs[0])) &&
                 isProductOp(g.node(producer(node.inputs[0])).op)) {
        p.outputDequantizer = n;  // of a QLinear op's result
        used.insert(n);
      } else if (node.op == "DequantizeLinear") {
        if (p.dequantizer != kNoNode) return nodeLabel(node) + "a second DequantizeLinear in one int8 group";
        p.dequantizer = n;
        used.insert(n);
      } else if (node.op == "QuantizeLinear" && inGroup(producer(node.inputs[0]))) {
        // Of a float computed in the group: the output's quantizer.
        if (p.outputQuantizer != kNoNode) return nodeLabel(node) + "a second QuantizeLinear at the end of one int8 group";
        p.outputQuantizer = n;
        used.insert(n);
      } else if (node.op == "QuantizeLinear") {
        if (p.staticQuantizer != kNoNode) return nodeLabel(node) + "a second QuantizeLinear in one int8 group";
        p.staticQuantizer = n;
        used.insert(n);
      } else if (isProductOp(node.op)) {
        if (p.anchor != kNoNode) return nodeLabel(node) + "a second integer product in one int8 group";
        p.anchor = n;
        used.insert(n);
      }
    }
    // QDQ with its QuantizeLinear in front: QuantizeLinear -> DequantizeLinear
    // -> Conv/MatMul, the quantized tensor read by the DequantizeLinear
    // alone. The kernel quantizes its float input as the reference does
    // (exactly) and runs the integer product on those integers: the float
    // tensor between two such kernels stays in the convolution's layout,
    // and neither a QuantizeLinear kernel nor a u8 reorder runs between them.
    const bool quantizedInFront = p.staticQuantizer != kNoNode && p.dequantizer != kNoNode &&
                                  g.node(p.dequantizer).inputs[0] == g.node(p.staticQuantizer).outputs[0];
    if (quantizedInFront && onlyConsumer(g.node(p.staticQuantizer).outputs[0]) != p.dequantizer)
      return nodeLabel(g.node(p.staticQuantizer)) + "its quantized tensor is read outside the group; the int8 "
             "kernel keeps it inside";
    if (p.staticQuantizer != kNoNode && p.dequantizer != kNoNode && !quantizedInFront)
      return nodeLabel(g.node(p.staticQuantizer)) + "the int8 kernel takes a QuantizeLinear in front of its "
             "DequantizeLinear only, or one at its end";
    // Conv/MatMul/Gemm -> post-ops -> QuantizeLinear, the product reading a
    // DequantizeLinear outside the group: as analyzeDequantizedInput, with
    // the output quantized.
    if (p.outputQuantizer != kNoNode && p.anchor == kNoNode && p.dequantizer == kNoNode && p.quantizer == kNoNode &&
        p.staticQuantizer == kNoNode)
      return runDequantizedInput();
    if (p.staticQuantizer != kNoNode && p.quantizer != kNoNode)
      return nodeLabel(g.node(p.staticQuantizer)) + "a QuantizeLinear with another quantizer in one group";
    if (p.anchor == kNoNode && p.staticQuantizer != kNoNode && !quantizedInFront) {  // the quantizer alone
      if (members.size() != 1) return nodeLabel(g.node(p.staticQuantizer)) + "the int8 kernel runs a QuantizeLinear alone or before a QLinear op";
      const Node& q = g.node(p.staticQuantizer);
      p.shape = g.value(q.outputs[0]).type.shape;
      return readStaticQuantizer(q);
    }
    if (p.dequantizer != kNoNode && (p.quantizer != kNoNode || p.anchor != kNoNode))
      return nodeLabel(g.node(p.dequantizer)) + "a DequantizeLinear with another quantized product in one group";
    ValueId result = kNoValue;
    if (p.dequantizer != kNoNode) {
      const Node& dq = g.node(p.dequantizer);
      if (quantizedInFront)
        if (std::string why = readStaticQuantizer(g.node(p.staticQuantizer)); !why.empty()) return why;
      if (std::string why = readDequantizer(dq, !quantizedInFront); !why.empty()) return why;
      if (members.size() == 1) {  // the dequantizer alone
        p.shape = g.value(dq.outputs[0]).type.shape;
        return {};
      }
      if (quantizedInFront && members.size() == 2) {
        prefix = true;  // the rule grows it on to the product
        return nodeLabel(dq) + "a QuantizeLinear and DequantizeLinear pair runs in an int8 kernel only "
               "with the Conv, MatMul or Gemm that reads it";
      }
      if (std::string why = readQdqAnchor(dq); !why.empty()) return why;
      used.insert(p.anchor);
      result = g.node(p.anchor).outputs[0];
    } else if (p.anchor == kNoNode) {
      if (p.quantizer != kNoNode && members.size() == 1) {  // the quantizer alone
        const Node& q = g.node(p.quantizer);
        p.source = operandOf(request, q.inputs[0]);
        if (p.source.inputIndex < 0) return nodeLabel(q) + "its input is a constant";
        p.shape = g.value(q.inputs[0]).type.shape;
        return {};
      }
      return "the group " + request.toString() + " has no integer product (ConvInteger, MatMulInteger)";
    }
    const Node& anchor = g.node(p.anchor);
    if (p.dequantizer == kNoNode) {
      p.shape = g.value(anchor.outputs[0]).type.shape;
      if (std::string why = readAnchor(anchor); !why.empty()) return why;
      result = anchor.outputs[0];
    }
    if (p.staticQuantizer != kNoNode && !quantizedInFront && !isQLinearOp(anchor.op))
      return nodeLabel(g.node(p.staticQuantizer)) + "the int8 kernel takes a QuantizeLinear only before a QLinear op";
    if (p.outputQuantizer != kNoNode && isQLinearOp(anchor.op))
      return nodeLabel(g.node(p.outputQuantizer)) + "the int8 kernel takes a QuantizeLinear at the end of a group "
             "with a float result only, not after " + anchor.op;
    if (p.outputDequantizer != kNoNode && !isQLinearOp(anchor.op))
      return nodeLabel(g.node(p.outputDequantizer)) + "the int8 kernel takes a DequantizeLinear only after a QLinear op";
    if (isQLinearOp(anchor.op)) {
      const size_t expected = 1 + (p.staticQuantizer != kNoNode ? 1 : 0) + (p.outputDequantizer != kNoNode ? 1 : 0);
      if (members.size() != expected)
        return nodeLabel(anchor) + "the int8 kernel takes a QLinear op alone, or with the QuantizeLinear "
               "before it and the DequantizeLinear after it";
      if (std::string why = readRequantization(anchor); !why.empty()) return why;
      if (p.outputDequantizer != kNoNode) {
        const Node& dq = g.node(p.outputDequantizer);
        if (dq.inputs[0] != result || onlyConsumer(result) != p.outputDequantizer)
          return nodeLabel(dq) + "it must alone read the result of " + nodeLabel(anchor);
        if (std::string why = readOutputDequantizer(dq); !why.empty()) return why;
        result = dq.outputs[0];
      }
    }
    if (request.outputs.size() != 1)
      return "the int8 group " + request.toString() + " has " + std::to_string(request.outputs.size()) +
             " outputs; the kernel makes one";

    const NodeId cast = p.requantize || p.dequantizer != kNoNode ? kNoNode : onlyConsumer(result);
    if (cast != kNoNode) {
      const Node& c = g.node(cast);
      if (c.op != "Cast" || g.value(c.outputs[0]).type.elementType != ElementType::Float32)
        return nodeLabel(c) + "after " + anchor.op +
               " the int8 kernel takes a Cast to float32 (then float post-ops)";
      p.floatOutput = true;
      used.insert(cast);
      result = c.outputs[0];
      // The dequantizing Mul by the source's dynamic scale (times the weights').
      const NodeId mul = onlyConsumer(result);
      if (mul != kNoNode && g.node(mul).op == "Mul" && g.node(mul).inputs.size() == 2) {
        const Node& m = g.node(mul);
        const ValueId other = m.inputs[0] == result ? m.inputs[1] : m.inputs[0];
        if (g.value(m.outputs[0]).type.shape == p.shape && readDynamicScale(other, used)) {
          p.hasScale = true;
          p.scaleFromQuantizer = true;
          used.insert(mul);
          result = m.outputs[0];
        }
      }
    }
    // The rest: float post-ops on `result`, read by the float chain analysis.
    std::vector<NodeId> rest;
    for (NodeId n : members)
      if (!used.count(n)) rest.push_back(n);
    if (!rest.empty()) {
      if (!p.floatOutput)
        return nodeLabel(g.node(rest.front())) + "follows the int32 result of " + nodeLabel(anchor) +
               "without a Cast to float32";
      if (std::string why = readFloatTail(rest, result, anchor); !why.empty()) return why;
    }
    if (p.outputQuantizer != kNoNode)
      if (std::string why = readOutputQuantizer(result); !why.empty()) return why;
    if (result != request.outputs[0])
      return "the group's output '" + g.value(request.outputs[0]).name + "' is not the end of its int8 chain";
    p.output = result;
    return {};
  }
};

}  // namespace

std::string Int8Product::describe(const Graph& graph) const {
  std::string s = requantizedSource            ? "QuantizeLinear (undoing a DequantizeLinear)"
                  : quantizer != kNoNode         ? "DynamicQuantizeLinear"
                  : dequantizer != kNoNode && staticQuantizer != kNoNode ? "QuantizeLinear + DequantizeLinear"
                  : dequantizer != kNoNode     ? "DequantizeLinear"
                  : staticQuantizer != kNoNode ? "QuantizeLinear"
                                               : "";
  if (anchor == kNoNode) return s;
  if (!s.empty()) s += " + ";
  s += graph.node(anchor).op + (sourceType == ElementType::UInt8 ? " u8s8" : " s8s8");
  if (!weightOffset.empty()) s += " + zero-point compensation";
  s += floatOutput ? " -> f32" : requantize ? (outputType == ElementType::UInt8 ? " -> u8" : " -> s8") : " -> s32";
  if (hasScale) s += weightScale.size() > 1 ? " * scale[c]" : " * scale";
  for (const PostOp& op : postOps) s += " + " + op.node;
  if (outputDequantizer != kNoNode) s += " + DequantizeLinear";
  if (outputQuantizer != kNoNode) s += outputType == ElementType::UInt8 ? " + QuantizeLinear -> u8" : " + QuantizeLinear -> s8";
  return s;
}

bool isInt8MemberOp(const std::string& op) {
  return op == "DynamicQuantizeLinear" || op == "DequantizeLinear" || op == "QuantizeLinear" ||
         isProductOp(op) || op == "Cast";
}

bool isInt8Group(const KernelRequest& request) {
  bool any = false;
  request.nodes.forEach([&](NodeId n) {
    const std::string& op = request.graph->node(n).op;
    if (op == "DynamicQuantizeLinear" || op == "DequantizeLinear" || op == "QuantizeLinear" || isProductOp(op))
      any = true;
  });
  return any;
}

Int8Analysis analyzeDequantizedInput(const KernelRequest& request) {
  Int8Analysis a;
  Reader r{request, *request.graph, a.product};
  try {
    a.refusal = r.runDequantizedInput();
  } catch (const Error& e) {
    a.refusal = e.what();
  }
  return a;
}

Int8Analysis analyzeInt8(const KernelRequest& request) {
  Int8Analysis a;
  Reader r{request, *request.graph, a.product};
  try {
    a.refusal = r.run();
  } catch (const Error& e) {
    a.refusal = e.what();
  }
  a.prefix = !a.ok() && r.prefix;
  return a;
}

}  // namespace collage::onednn
