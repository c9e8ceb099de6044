#include "core/rewrite/fold_constants.h"

#include <optional>

#include "core/ir/error.h"
#include "core/ops/reference_executor.h"

namespace collage {
namespace {

const Tensor* constantInput(const Graph& g, const Node& node, size_t i) {
  if (i >= node.inputs.size() || node.inputs[i] == kNoValue) return nullptr;
  const Value& v = g.value(node.inputs[i]);
  return v.isConstant() ? &*v.constant : nullptr;
}

// `v` may vanish: one reader, no graph output (then no subgraph reads it).
bool soleReader(const Graph& g, ValueId v, NodeId reader) {
  const Value& val = g.value(v);
  return !val.isGraphOutput && val.consumers.size() == 1 && val.consumers[0] == reader;
}

bool isScaleOrShift(const std::string& op) {
  return op == "Mul" || op == "Div" || op == "Add" || op == "Sub";
}
bool isScale(const std::string& op) { return op == "Mul" || op == "Div"; }

// For y = n(a, b) with one constant input: the index of the constant, when
// it may sit there (right of Sub and Div, either side of Mul and Add).
std::optional<size_t> constSlot(const Graph& g, const Node& n) {
  if (!isScaleOrShift(n.op) || n.inputs.size() != 2 || n.outputs.size() != 1 ||
      n.outputs[0] == kNoValue || n.inputs[0] == kNoValue || n.inputs[1] == kNoValue)
    return std::nullopt;
  const bool c0 = constantInput(g, n, 0) != nullptr, c1 = constantInput(g, n, 1) != nullptr;
  if (c0 == c1) return std::nullopt;
  if (c0 && (n.op == "Sub" || n.op == "Div")) return std::nullopt;
  const TensorType& out = g.value(n.outputs[0]).type;
  if (out.isSequence() || !isFloatingPoint(out.elementType)) return std::nullopt;
  // No broadcast widens the other operand: the constant only scales it.
  if (g.value(n.inputs[c0 ? 1 : 0]).type != out) return std::nullopt;
  return c0 ? 0 : 1;
}

// An anchor with constant weights and where its output channels lie.
struct Anchor {
  int64_t axis = -1;         // the channel axis of the output
  int64_t width = 0;         // the number of channels
  bool hasBiasSlot = false;  // Conv's B, Gemm's C
};

std::optional<Anchor> anchorOf(const Graph& g, NodeId n) {
  const Node& node = g.node(n);
  if (node.outputs.size() != 1 || node.outputs[0] == kNoValue || node.inputs.size() < 2)
    return std::nullopt;
  if (node.inputs[0] == kNoValue || g.value(node.inputs[0]).isConstant()) return std::nullopt;
  const TensorType& yt = g.value(node.outputs[0]).type;
  const Tensor* w = constantInput(g, node, 1);
  if (!w || yt.isSequence() || !isFloatingPoint(yt.elementType) ||
      w->elementType() != yt.elementType)
    return std::nullopt;
  if (node.inputs.size() > 2 && node.inputs[2] != kNoValue && !constantInput(g, node, 2))
    return std::nullopt;
  Anchor a;
  if (node.op == "MatMul") {
    if (node.inputs.size() != 2 || w->rank() < 2 || yt.rank() < 1) return std::nullopt;
    a.axis = yt.rank() - 1;
    a.width = w->shape().back();
  } else if (node.op == "Gemm") {
    if (w->rank() != 2 || yt.rank() != 2) return std::nullopt;
    a.axis = 1;
    a.width = w->shape()[node.attrs.getInt("transB", 0) != 0 ? 0 : 1];
    a.hasBiasSlot = true;
  } else if (node.op == "Conv") {
    if (w->rank() < 3 || yt.rank() < 2) return std::nullopt;
    a.axis = 1;
    a.width = w->shape()[0];
    a.hasBiasSlot = true;
  } else {
    return std::nullopt;
  }
  if (yt.shape[static_cast<size_t>(a.axis)] != a.width) return std::nullopt;
  return a;
}

// Whether constant `c` combined with an output of `type` varies along
// `axis` only (by 1 or `width` values).
bool alongChannels(const Tensor& c, const TensorType& type, const Anchor& a) {
  if (c.rank() > type.rank()) return false;
  const int64_t lead = type.rank() - c.rank();
  for (int64_t i = 0; i < c.rank(); ++i) {
    const int64_t d = c.shape()[static_cast<size_t>(i)];
    if (d != 1 && !(i + lead == a.axis && d == a.width)) return false;
  }
  return true;
}

// A resolved site.
struct Fold {
  bool before = false;  // a scalar scale before the anchor (else after)
  NodeId anchor = kNoNode;
  NodeId bias = kNoNode;  // a bias Add between the anchor and the op
  NodeId op = kNoNode;
  size_t slot = 1;  // the op's constant input
  Anchor info;
  // A scalar scale after a MatMul of two computed tensors goes into one
  // side's anchor, across the layout ops between (attention's scale):
  std::vector<NodeId> path;  // layout ops from the anchor (or its bias) to `through`
  NodeId through = kNoNode;  // that MatMul
};

// The bias Add after an anchor: anchor output's only reader, adding a constant along the channels.
NodeId biasAddAfter(const Graph& g, NodeId anchor, const Anchor& a) {
  const ValueId y = g.node(anchor).outputs[0];
  const Value& yv = g.value(y);
  if (yv.isGraphOutput || yv.consumers.size() != 1) return kNoNode;
  const NodeId b = yv.consumers[0];
  const Node& add = g.node(b);
  const auto slot = constSlot(g, add);
  if (add.op != "Add" || !slot || add.inputs[1 - *slot] != y) return kNoNode;
  if (!alongChannels(*constantInput(g, add, *slot), yv.type, a)) return kNoNode;
  return b;
}

// `n` folded into the anchor before it (directly, or through a bias Add).
// An inference BatchNormalization with constant parameters: y * a + b per
// channel (axis 1), a = scale / sqrt(var + eps), b = B - mean * a.
bool constantBatchNorm(const Graph& g, const Node& n) {
  if (n.op != "BatchNormalization" || n.inputs.size() != 5 || n.outputs.empty() ||
      n.outputs[0] == kNoValue || n.inputs[0] == kNoValue)
    return false;
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.outputs[i] != kNoValue) return false;
  if (n.attrs.getInt("training_mode", 0) != 0) return false;
  for (size_t i = 1; i < 5; ++i)
    if (!constantInput(g, n, i)) return false;
  const TensorType& x = g.value(n.inputs[0]).type;
  return !x.isSequence() && isFloatingPoint(x.elementType) && x.rank() >= 2 &&
         g.value(n.outputs[0]).type == x;
}

std::optional<Fold> foldAfter(const Graph& g, NodeId n) {
  const Node& node = g.node(n);
  const bool bn = constantBatchNorm(g, node);
  const auto slot = bn ? std::optional<size_t>(0) : constSlot(g, node);
  if (!slot) return std::nullopt;
  const ValueId in = bn ? node.inputs[0] : node.inputs[1 - *slot];
  NodeId p = g.value(in).producer;
  if (p == kNoNode || !soleReader(g, in, n)) return std::nullopt;
  Fold f;
  f.op = n;
  f.slot = *slot;
  auto a = anchorOf(g, p);
  if (!a) {  // through a bias Add
    const Node& add = g.node(p);
    const auto bslot = constSlot(g, add);
    if (add.op != "Add" || !bslot) return std::nullopt;
    const ValueId y = add.inputs[1 - *bslot];
    const NodeId q = g.value(y).producer;
    if (q == kNoNode || !(a = anchorOf(g, q)) || biasAddAfter(g, q, *a) != p) return std::nullopt;
    f.bias = p;
    p = q;
  } else if (!isScale(node.op) && !a->hasBiasSlot) {
    return std::nullopt;  // a shift after a MatMul is its bias already
  }
  f.anchor = p;
  f.info = *a;
  if (bn) return f.info.axis == 1 ? std::optional<Fold>(f) : std::nullopt;  // normalises axis 1
  if (!alongChannels(*constantInput(g, node, f.slot), g.value(node.outputs[0]).type, f.info))
    return std::nullopt;
  return f;
}

// `n`, a scalar scale, folded into the anchor that reads it.
std::optional<Fold> foldBefore(const Graph& g, NodeId n) {
  const Node& node = g.node(n);
  const auto slot = constSlot(g, node);
  if (!slot || !isScale(node.op) || constantInput(g, node, *slot)->numElements() != 1)
    return std::nullopt;
  const ValueId m = node.outputs[0];
  const Value& mv = g.value(m);
  if (mv.isGraphOutput || mv.consumers.size() != 1) return std::nullopt;
  const NodeId r = mv.consumers[0];
  const Node& reader = g.node(r);
  auto a = anchorOf(g, r);
  if (!a || reader.inputs[0] != m) return std::nullopt;
  for (size_t i = 1; i < reader.inputs.size(); ++i)
    if (reader.inputs[i] == m) return std::nullopt;
  Fold f;
  f.before = true;
  f.anchor = r;
  f.op = n;
  f.slot = *slot;
  f.info = *a;
  return f;
}

// Ops that only move data: a scalar scale commutes with them.
bool layoutOp(const Graph& g, const Node& n) {
  if (n.op != "Transpose" && n.op != "Reshape" && n.op != "Flatten" && n.op != "Squeeze" &&
      n.op != "Unsqueeze")
    return false;
  return n.inputs.size() == 1 && n.outputs.size() == 1 && n.inputs[0] != kNoValue &&
         n.outputs[0] != kNoValue && !g.value(n.inputs[0]).type.isSequence();
}

// `n`, a scalar scale after a MatMul of two computed tensors, folded into
// the anchor that makes the `side` input of that MatMul (through layout ops).
std::optional<Fold> foldThrough(const Graph& g, NodeId n, size_t side) {
  const Node& node = g.node(n);
  const auto slot = constSlot(g, node);
  if (!slot || !isScale(node.op) || constantInput(g, node, *slot)->numElements() != 1)
    return std::nullopt;
  const ValueId scores = node.inputs[1 - *slot];
  const NodeId mm = g.value(scores).producer;
  if (mm == kNoNode || !soleReader(g, scores, n)) return std::nullopt;
  const Node& matmul = g.node(mm);
  if (matmul.op != "MatMul" || matmul.inputs.size() != 2 || matmul.inputs[0] == matmul.inputs[1])
    return std::nullopt;
  for (ValueId v : matmul.inputs)
    if (v == kNoValue || g.value(v).isConstant()) return std::nullopt;
  Fold f;
  f.op = n;
  f.slot = *slot;
  f.through = mm;
  ValueId v = matmul.inputs[side];
  NodeId reader = mm;
  for (int k = 0; k < 8; ++k) {
    const NodeId p = g.value(v).producer;
    if (p == kNoNode || !soleReader(g, v, reader)) return std::nullopt;
    if (auto a = anchorOf(g, p)) {
      f.anchor = p;
      f.info = *a;
      return f;
    }
    const Node& pn = g.node(p);
    if (pn.op == "Add") {  // a bias after an anchor
      const auto bslot = constSlot(g, pn);
      if (!bslot) return std::nullopt;
      const NodeId q = g.value(pn.inputs[1 - *bslot]).producer;
      std::optional<Anchor> a;
      if (q == kNoNode || !(a = anchorOf(g, q)) || biasAddAfter(g, q, *a) != p) return std::nullopt;
      f.anchor = q;
      f.bias = p;
      f.info = *a;
      return f;
    }
    if (!layoutOp(g, pn)) return std::nullopt;
    f.path.insert(f.path.begin(), p);
    v = pn.inputs[0];
    reader = p;
  }
  return std::nullopt;
}

SubstitutionSite siteOf(const Graph& g, const std::string& rule, const Fold& f) {
  SubstitutionSite s{rule, {}};
  if (f.before) {
    s.nodes = {g.node(f.op).name, g.node(f.anchor).name};
  } else {
    s.nodes.push_back(g.node(f.anchor).name);
    if (f.bias != kNoNode) s.nodes.push_back(g.node(f.bias).name);
    for (NodeId n : f.path) s.nodes.push_back(g.node(n).name);
    if (f.through != kNoNode) s.nodes.push_back(g.node(f.through).name);
    s.nodes.push_back(g.node(f.op).name);
  }
  return s;
}

// A scalar of `type` holding `value`.
Tensor scalarLike(float value, ElementType type) {
  Tensor t = Tensor::scalarFloat(value);
  if (type == ElementType::Float32) return t;
  Node cast{"fold-scale-shift/Cast", "Cast", {}, {0}, {1}};
  cast.attrs.set("to", int64_t{elementTypeToOnnx(type)});
  return evaluateNode(cast, {&t}).at(0);
}

Tensor compute(const std::string& op, const Tensor& a, const Tensor& b) {
  Node n{"fold-scale-shift/" + op, op, {}, {0, 1}, {2}};
  return evaluateNode(n, {&a, &b}).at(0);
}

// The constant `c` (along the channels) as a vector of `width` values.
Tensor channelVector(const Tensor& c, int64_t width) {
  const Tensor flat = c.reshaped({c.numElements()});
  return compute("Add", Tensor(c.elementType(), {width}), flat);
}

// `v` (a vector) shaped to combine with a tensor of rank `rank` along `axis`.
Tensor along(const Tensor& v, int64_t rank, int64_t axis) {
  Shape s(static_cast<size_t>(rank), 1);
  s[static_cast<size_t>(axis)] = v.numElements();
  return v.reshaped(s);
}

class FoldScaleShift : public Substitution {
 public:
  std::string name() const override { return "fold-scale-shift"; }
  std::string describe() const override {
    return "f(Op(x, W [, B]) [+ b]) -> Op(x, W', B') [+ b'], f a constant per-channel Mul, Div, "
           "Add, Sub or BatchNormalization; Op(x * s, W) -> Op(x, W * s), s a scalar, also across "
           "a MatMul and layout ops; Op is Conv, MatMul or Gemm with constant weights";
  }

  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> sites;
    for (NodeId n = 0; n < g.numNodes(); ++n) {
      if (auto f = foldBefore(g, n)) sites.push_back(siteOf(g, name(), *f));
      if (auto f = foldAfter(g, n)) sites.push_back(siteOf(g, name(), *f));
      for (size_t side : {0, 1})  // the first side that folds
        if (auto f = foldThrough(g, n, side)) {
          sites.push_back(siteOf(g, name(), *f));
          break;
        }
    }
    return sites;
  }

  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    if (site.nodes.size() < 2) throw Error(site.toString() + ": expected 2 or more nodes");
    const NodeId first = siteNode(g, site, 0), last = siteNode(g, site, site.nodes.size() - 1);
    std::optional<Fold> f;
    for (const std::optional<Fold>& c : {foldBefore(g, first), foldAfter(g, last),
                                         foldThrough(g, last, 0), foldThrough(g, last, 1)})
      if (c && siteOf(g, name(), *c) == site) f = c;
    if (!f) throw Error(site.toString() + ": the constant no longer folds there");
    const Node op = g.node(f->op);
    const Node anchor = g.node(f->anchor);
    const bool transB = anchor.op == "Gemm" && anchor.attrs.getInt("transB", 0) != 0;
    auto setInput = [&](NodeId n, size_t i, Tensor t, const std::string& suffix) {
      const ValueId v = g.addConstant(uniqueValueName(g, g.node(n).name + suffix), std::move(t));
      Node& node = g.mutableNode(n);
      if (node.inputs.size() <= i) node.inputs.resize(i + 1, kNoValue);
      node.inputs[i] = v;
    };
    RewriteEffect effect;
    effect.removed = {op.name};
    effect.target = {anchor.name};
    if (f->before) {
      const Tensor& c = *constantInput(g, op, f->slot);
      const Tensor& w = *constantInput(g, anchor, 1);
      setInput(f->anchor, 1, compute(op.op, w, c.reshaped({})), "/folded_weight");
      g.mutableNode(f->anchor).inputs[0] = op.inputs[1 - f->slot];
      const std::string y = g.value(anchor.outputs[0]).name;
      effect.outputs.emplace_back(y, y);
    } else {
      // What the op does to each channel: `op v` for Mul, Div, Add, Sub;
      // `* a + b` for a BatchNormalization.
      const bool bn = op.op == "BatchNormalization";
      const int64_t width = f->info.width;
      const ElementType type = g.value(op.outputs[0]).type.elementType;
      Tensor v, a, b;
      if (bn) {
        const Tensor eps =
            scalarLike(op.attrs.getFloat("epsilon", 1e-5f), constantInput(g, op, 4)->elementType());
        const Tensor varEps = compute("Add", *constantInput(g, op, 4), eps);
        const Node sqrt{"fold-scale-shift/Sqrt", "Sqrt", {}, {0}, {1}};
        const Tensor sd = evaluateNode(sqrt, {&varEps}).at(0);
        a = compute("Div", *constantInput(g, op, 1), sd);
        b = compute("Sub", *constantInput(g, op, 2), compute("Mul", *constantInput(g, op, 3), a));
      } else {
        v = channelVector(*constantInput(g, op, f->slot), width);
      }
      const bool scales = bn || isScale(op.op), shifts = bn || !isScale(op.op);
      auto onWeight = [&](const Tensor& w, const Tensor& along) {
        return bn ? compute("Mul", w, along) : compute(op.op, w, along);
      };
      auto onBias = [&](const Tensor& bias) {
        return bn ? compute("Add", compute("Mul", bias, a), b) : compute(op.op, bias, v);
      };
      if (scales) {
        const Tensor& w = *constantInput(g, anchor, 1);
        const Tensor& sv = bn ? a : v;
        const Tensor vw = anchor.op == "Conv" ? along(sv, w.rank(), 0)
                          : transB            ? along(sv, 2, 0)
                                              : sv;
        setInput(f->anchor, 1, onWeight(w, vw), "/folded_weight");
      }
      if (f->bias != kNoNode) {
        const Node& add = g.node(f->bias);
        const size_t bslot = constantInput(g, add, 0) ? 0 : 1;
        const int64_t rank = g.value(add.outputs[0]).type.rank();
        const Tensor nb = onBias(channelVector(*constantInput(g, add, bslot), width));
        setInput(f->bias, bslot, along(nb, rank - f->info.axis, 0), "/folded_bias");
        effect.target.push_back(add.name);
      } else if (f->through != kNoNode && !isScale(op.op)) {
        throw Error(site.toString() + ": only a scale crosses a MatMul");
      } else if (f->info.hasBiasSlot) {
        const Tensor* bias = constantInput(g, anchor, 2);
        if (anchor.op == "Conv" && (bias || shifts)) {  // B = 0 when absent
          setInput(f->anchor, 2, onBias(bias ? *bias : Tensor(type, {width})), "/folded_bias");
        } else if (anchor.op == "Gemm" && (bias || shifts)) {  // beta * C, then beta 1
          Tensor base(type, {width});
          if (bias) {
            const float beta = anchor.attrs.getFloat("beta", 1.0f);
            base =
                compute("Add", base, compute("Mul", *bias, scalarLike(beta, base.elementType())));
          }
          setInput(f->anchor, 2, onBias(base), "/folded_bias");
          g.mutableNode(f->anchor).attrs.set("beta", 1.0f);
        }
      }
      for (NodeId n : f->path) effect.target.push_back(g.node(n).name);
      if (f->through != kNoNode) effect.target.push_back(g.node(f->through).name);
      // The last kept node now produces the op's output (its name kept).
      const ValueId out = op.outputs[0];
      g.mutableNode(f->through != kNoNode ? f->through
                    : f->bias != kNoNode  ? f->bias
                                          : f->anchor)
          .outputs[0] = out;
      g.mutableNode(f->op).outputs[0] =
          g.addValue(uniqueValueName(g, g.value(out).name + "/folded"), g.value(out).type);
      effect.outputs.emplace_back(g.value(out).name, g.value(out).name);
    }
    std::vector<bool> dead(static_cast<size_t>(g.numNodes()), false);
    dead[static_cast<size_t>(f->op)] = true;
    g.removeNodes(dead);
    return effect;
  }
};

}  // namespace

std::unique_ptr<Substitution> makeFoldScaleShift() { return std::make_unique<FoldScaleShift>(); }

}  // namespace collage
