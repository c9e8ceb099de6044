#include "core/rewrite/merge_siblings.h"

#include <cstring>
#include <map>
#include <optional>

#include "core/ir/error.h"
#include "core/ir/op_kind.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"

namespace collage {
namespace {

const Tensor* constantOf(const Graph& g, const Node& node, size_t i) {
  if (i >= node.inputs.size() || node.inputs[i] == kNoValue) return nullptr;
  const Value& v = g.value(node.inputs[i]);
  return v.isConstant() ? &*v.constant : nullptr;
}

std::string dims(const Shape& s, size_t from = 0, size_t drop = SIZE_MAX) {
  std::string text;
  for (size_t i = from; i < s.size(); ++i)
    text += (i == drop ? std::string("*") : std::to_string(s[i])) + ",";
  return text;
}

// Concatenates constants along `axis` (every other dimension equal).
Tensor concatConstants(const std::vector<const Tensor*>& parts, size_t axis) {
  Shape shape = parts[0]->shape();
  int64_t total = 0;
  for (const Tensor* p : parts) total += p->shape()[axis];
  shape[axis] = total;
  Tensor out(parts[0]->elementType(), shape);
  const size_t es = elementSize(parts[0]->elementType());
  int64_t outer = 1;
  for (size_t i = 0; i < axis; ++i) outer *= shape[i];
  std::vector<size_t> block;
  for (const Tensor* p : parts) {
    Shape tail(p->shape().begin() + static_cast<std::ptrdiff_t>(axis), p->shape().end());
    block.push_back(static_cast<size_t>(numElements(tail)) * es);
  }
  char* dst = static_cast<char*>(out.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (size_t k = 0; k < parts.size(); ++k) {
      std::memcpy(dst, static_cast<const char*>(parts[k]->raw()) + static_cast<size_t>(o) * block[k], block[k]);
      dst += block[k];
    }
  return out;
}

// A sibling that can merge: its anchor, its bias Add (merged too), the key
// siblings must share, and its width along the concatenated axis.
struct Sibling {
  NodeId anchor = kNoNode;
  NodeId bias = kNoNode;
  std::vector<NodeId> chain;  // the bias Add (if any), then elementwise followers
  std::string key;
  int64_t width = 0;
};

// The one-input elementwise op that is `v`'s only reader, keeping its type
// (Relu, Sigmoid, ...): it can run on the merged tensor before the Split.
NodeId unaryFollower(const Graph& g, ValueId v) {
  const Value& val = g.value(v);
  if (val.isGraphOutput || val.consumers.size() != 1) return kNoNode;
  const NodeId c = val.consumers[0];
  const Node& node = g.node(c);
  const OpSchema* schema = OpRegistry::instance().find(node.op);
  if (!schema || schema->kind != OpKind::ElemWise || node.inputs.size() != 1 || node.outputs.size() != 1)
    return kNoNode;
  if (node.outputs[0] == kNoValue || g.value(node.outputs[0]).type != val.type) return kNoNode;
  for (const auto& [name, attr] : node.attrs)
    if (std::holds_alternative<std::shared_ptr<const Graph>>(attr)) return kNoNode;
  return c;
}

// Completes a sibling: its bias (already found) and followers, into chain and key.
void followChain(const Graph& g, Sibling& s) {
  if (s.bias != kNoNode) s.chain.push_back(s.bias);
  ValueId tail = g.node(s.chain.empty() ? s.anchor : s.chain.back()).outputs[0];
  for (int k = 0; k < 3; ++k) {
    const NodeId f = unaryFollower(g, tail);
    if (f == kNoNode) break;
    s.chain.push_back(f);
    s.key += "|then " + g.node(f).op + " " + g.node(f).attrs.toString();
    tail = g.node(f).outputs[0];
  }
}

bool isAnchorOp(const std::string& op) { return op == "MatMul" || op == "Gemm" || op == "Conv"; }

// The Add that adds a constant along the last axis to the anchor's output,
// when it is that output's only reader.
NodeId biasAddOf(const Graph& g, NodeId anchor, int64_t width, std::string* key) {
  const ValueId y = g.node(anchor).outputs[0];
  const Value& yv = g.value(y);
  if (yv.isGraphOutput || yv.consumers.size() != 1) return kNoNode;
  const NodeId a = yv.consumers[0];
  const Node& add = g.node(a);
  if (add.op != "Add" || add.inputs.size() != 2 || add.outputs.size() != 1) return kNoNode;
  const size_t other = add.inputs[0] == y ? 1 : 0;
  if (add.inputs[1 - other] != y || add.inputs[other] == y) return kNoNode;
  const Tensor* b = constantOf(g, add, other);
  if (!b || b->rank() < 1 || b->rank() > yv.type.rank() || b->shape().back() != width) return kNoNode;
  for (size_t i = 0; i + 1 < b->shape().size(); ++i)
    if (b->shape()[i] != 1) return kNoNode;
  if (g.value(add.outputs[0]).type != yv.type || b->elementType() != yv.type.elementType) return kNoNode;
  *key += "+bias" + std::to_string(b->rank()) + (other == 0 ? "L" : "R");
  return a;
}

std::optional<Sibling> siblingOf(const Graph& g, NodeId n, ValueId x) {
  const Node& node = g.node(n);
  if (!isAnchorOp(node.op) || node.inputs.size() < 2 || node.inputs[0] != x) return std::nullopt;
  if (node.outputs.size() != 1 || node.outputs[0] == kNoValue) return std::nullopt;
  const TensorType& xt = g.value(x).type;
  const TensorType& yt = g.value(node.outputs[0]).type;
  if (xt.isSequence() || yt.isSequence()) return std::nullopt;
  const Tensor* w = constantOf(g, node, 1);
  if (!w || w->elementType() != xt.elementType) return std::nullopt;
  Sibling s;
  s.anchor = n;
  s.key = node.op + "|" + node.attrs.toString() + "|" + xt.toString() + "|";
  if (node.op == "MatMul") {
    if (w->rank() != 2 || xt.rank() < 2 || node.inputs.size() != 2) return std::nullopt;
    s.width = w->shape()[1];
    s.key += "K" + std::to_string(w->shape()[0]);
    s.bias = biasAddOf(g, n, s.width, &s.key);
  } else if (node.op == "Gemm") {
    if (node.attrs.getInt("transA", 0) != 0 || w->rank() != 2) return std::nullopt;
    const bool transB = node.attrs.getInt("transB", 0) != 0;
    s.width = w->shape()[transB ? 0 : 1];
    s.key += "K" + std::to_string(w->shape()[transB ? 1 : 0]);
    if (node.inputs.size() > 2 && node.inputs[2] != kNoValue) {
      const Tensor* c = constantOf(g, node, 2);
      if (!c || c->rank() < 1 || c->shape().back() != s.width) return std::nullopt;
      s.key += "|C" + dims(c->shape(), 0, c->shape().size() - 1);
    } else {
      s.bias = biasAddOf(g, n, s.width, &s.key);
    }
  } else {  // Conv
    if (node.attrs.getInt("group", 1) != 1 || w->rank() < 3) return std::nullopt;
    s.width = w->shape()[0];
    s.key += "W" + dims(w->shape(), 1);
    if (node.inputs.size() > 2 && node.inputs[2] != kNoValue) {
      if (!constantOf(g, node, 2)) return std::nullopt;
      s.key += "|B";
    }
  }
  followChain(g, s);
  return s;
}

class MergeSiblings : public Substitution {
 public:
  std::string name() const override { return "merge-siblings"; }
  std::string describe() const override {
    return "Op(x, W_i) [+ b_i] for i = 1..n -> Split(Op(x, W_1|...|W_n) [+ b_1|...|b_n]); Op is MatMul, "
           "Gemm or Conv, weights constant, attributes and other weight dimensions equal";
  }

  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> sites;
    for (ValueId x = 0; x < g.numValues(); ++x) {
      const Value& v = g.value(x);
      if (v.isConstant() || v.consumers.size() < 2) continue;
      std::map<std::string, std::vector<Sibling>> byKey;
      std::vector<std::string> order;
      for (NodeId n : v.consumers)
        if (auto s = siblingOf(g, n, x)) {
          if (!byKey.count(s->key)) order.push_back(s->key);
          byKey[s->key].push_back(*s);
        }
      for (const std::string& key : order) {
        const auto& group = byKey[key];
        if (group.size() < 2) continue;
        SubstitutionSite site{name(), {}};
        for (const Sibling& s : group) site.nodes.push_back(g.node(s.anchor).name);
        for (const Sibling& s : group)
          for (NodeId c : s.chain) site.nodes.push_back(g.node(c).name);
        sites.push_back(std::move(site));
      }
    }
    return sites;
  }

  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    std::vector<NodeId> anchors, rest;
    for (size_t i = 0; i < site.nodes.size(); ++i) {
      const NodeId n = siteNode(g, site, i);
      (isAnchorOp(g.node(n).op) && rest.empty() ? anchors : rest).push_back(n);
    }
    if (anchors.size() < 2 || rest.size() % anchors.size() != 0)
      throw Error(site.toString() + ": not two or more siblings");
    const size_t length = rest.size() / anchors.size();
    const ValueId x = g.node(anchors[0]).inputs[0];
    std::vector<Sibling> sibs;
    const std::optional<Sibling> firstSib = siblingOf(g, anchors[0], x);
    for (size_t i = 0; i < anchors.size(); ++i) {
      auto s = siblingOf(g, anchors[i], x);
      const std::vector<NodeId> chain(rest.begin() + static_cast<std::ptrdiff_t>(i * length),
                                      rest.begin() + static_cast<std::ptrdiff_t>((i + 1) * length));
      if (!s || !firstSib || s->key != firstSib->key || s->chain != chain)
        throw Error(site.toString() + ": '" + g.node(anchors[i]).name + "' cannot merge with '" +
                    g.node(anchors[0]).name + "'");
      sibs.push_back(*s);
    }
    const Node first = g.node(anchors[0]);
    const std::string& op = first.op;
    const bool transB = op == "Gemm" && first.attrs.getInt("transB", 0) != 0;
    const size_t weightAxis = op == "MatMul" ? 1 : op == "Gemm" ? (transB ? 0 : 1) : 0;
    auto concatInput = [&](size_t input, size_t axis, const std::string& suffix) {
      std::vector<const Tensor*> parts;
      for (NodeId a : anchors) parts.push_back(constantOf(g, g.node(a), input));
      if (axis == SIZE_MAX) axis = parts[0]->shape().size() - 1;
      return g.addConstant(uniqueValueName(g, first.name + suffix), concatConstants(parts, axis));
    };
    Node merged{uniqueNodeName(g, first.name + "/merged"), op, first.attrs, {x}, {}};
    merged.inputs.push_back(concatInput(1, weightAxis, "/merged_weight"));
    if (first.inputs.size() > 2 && first.inputs[2] != kNoValue)
      merged.inputs.push_back(concatInput(2, op == "Conv" ? 0 : SIZE_MAX, "/merged_bias"));
    RewriteEffect effect;
    effect.target.push_back(merged.name);
    ValueId last = addNodeWithOutput(g, std::move(merged), g.value(first.outputs[0]).name + "/merged");
    for (size_t k = 0; k < length; ++k) {
      const Node step = g.node(sibs[0].chain[k]);
      Node node{uniqueNodeName(g, step.name + "/merged"), step.op, step.attrs, {}, {}};
      if (k == 0 && sibs[0].bias != kNoNode) {
        std::vector<const Tensor*> parts;
        size_t other = 0;
        for (size_t i = 0; i < sibs.size(); ++i) {
          const Node& add = g.node(sibs[i].bias);
          other = add.inputs[0] == g.node(anchors[i]).outputs[0] ? 1 : 0;
          parts.push_back(constantOf(g, add, other));
        }
        const ValueId bc = g.addConstant(uniqueValueName(g, first.name + "/merged_add_bias"),
                                         concatConstants(parts, parts[0]->shape().size() - 1));
        node.inputs = other == 1 ? std::vector<ValueId>{last, bc} : std::vector<ValueId>{bc, last};
      } else {
        node.inputs = {last};
      }
      effect.target.push_back(node.name);
      last = addNodeWithOutput(g, std::move(node), g.value(last).name + "/" + step.op);
    }
    std::vector<int64_t> widths;
    std::vector<ValueId> outs;
    for (const Sibling& sib : sibs) {
      widths.push_back(sib.width);
      outs.push_back(g.node(sib.chain.empty() ? sib.anchor : sib.chain.back()).outputs[0]);
    }
    const int64_t axis = op == "MatMul" ? g.value(last).type.rank() - 1 : 1;
    Node split{uniqueNodeName(g, first.name + "/split"), "Split", {}, {last}, outs};
    split.attrs.set("axis", axis);
    split.attrs.set("split", widths);
    fillDefaults(split);
    effect.target.push_back(split.name);
    g.addNode(std::move(split));
    std::vector<bool> dead(static_cast<size_t>(g.numNodes()), false);
    for (NodeId n : anchors) dead[static_cast<size_t>(n)] = true;
    for (NodeId n : rest) dead[static_cast<size_t>(n)] = true;
    effect.removed = site.nodes;
    for (ValueId v : outs) effect.outputs.emplace_back(g.value(v).name, g.value(v).name);
    g.removeNodes(dead);
    return effect;
  }
};

// Conv reading x with a constant 4-D weight, group 1, dilation 1.
bool plainConv(const Graph& g, const Node& n, ValueId x) {
  if (n.op != "Conv" || n.inputs.size() < 2 || n.inputs[0] != x) return false;
  const Tensor* w = constantOf(g, n, 1);
  if (!w || w->rank() != 4 || n.attrs.getInt("group", 1) != 1) return false;
  if (n.attrs.getString("auto_pad", "NOTSET") != "NOTSET") return false;
  for (int64_t d : n.attrs.getInts("dilations", {1, 1}))
    if (d != 1) return false;
  return true;
}

Shape kernelOf(const Graph& g, const Node& n) {
  const Shape& w = constantOf(g, n, 1)->shape();
  return {w[2], w[3]};
}

// Whether `small` can take `big`'s kernel and pads and still compute the same.
bool canEnlargeTo(const Graph& g, const Node& small, const Node& big) {
  if (small.attrs.getInts("strides", {1, 1}) != big.attrs.getInts("strides", {1, 1})) return false;
  const Shape k = kernelOf(g, small), K = kernelOf(g, big);
  if (k == K) return false;
  const std::vector<int64_t> p = small.attrs.getInts("pads", {0, 0, 0, 0});
  const std::vector<int64_t> P = big.attrs.getInts("pads", {0, 0, 0, 0});
  if (p.size() != 4 || P.size() != 4) return false;
  for (size_t i = 0; i < 2; ++i) {
    if (K[i] < k[i] || (K[i] - k[i]) % 2 != 0) return false;
    const int64_t grow = (K[i] - k[i]) / 2;
    if (p[i] + grow != P[i] || p[i + 2] + grow != P[i + 2]) return false;
  }
  return true;
}

class EnlargeConvKernel : public Substitution {
 public:
  std::string name() const override { return "enlarge-conv-kernel"; }
  std::string describe() const override {
    return "Conv(x, W) with kernel k beside a sibling Conv(x, W') with kernel K > k -> Conv(x, W zero-padded "
           "to K), pads grown by (K - k) / 2: the same values, and now it merges with the sibling";
  }

  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> sites;
    for (ValueId x = 0; x < g.numValues(); ++x) {
      const Value& v = g.value(x);
      if (v.isConstant() || v.consumers.size() < 2) continue;
      for (NodeId s : v.consumers) {
        if (!plainConv(g, g.node(s), x)) continue;
        std::vector<Shape> seen;
        for (NodeId b : v.consumers) {
          if (b == s || !plainConv(g, g.node(b), x) || !canEnlargeTo(g, g.node(s), g.node(b))) continue;
          const Shape K = kernelOf(g, g.node(b));
          if (std::find(seen.begin(), seen.end(), K) != seen.end()) continue;
          seen.push_back(K);
          sites.push_back(SubstitutionSite{name(), {g.node(s).name, g.node(b).name}});
        }
      }
    }
    return sites;
  }

  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    if (site.nodes.size() != 2) throw Error(site.toString() + ": expected a Conv and its sibling");
    const NodeId s = siteNode(g, site, 0), b = siteNode(g, site, 1);
    const ValueId x = g.node(s).inputs[0];
    if (!plainConv(g, g.node(s), x) || !plainConv(g, g.node(b), x) || !canEnlargeTo(g, g.node(s), g.node(b)))
      throw Error(site.toString() + ": the Convs no longer qualify");
    const Tensor& w = *constantOf(g, g.node(s), 1);
    const Shape k = kernelOf(g, g.node(s)), K = kernelOf(g, g.node(b));
    Tensor big(w.elementType(), {w.shape()[0], w.shape()[1], K[0], K[1]});
    const size_t es = elementSize(w.elementType());
    const int64_t oy = (K[0] - k[0]) / 2, ox = (K[1] - k[1]) / 2;
    for (int64_t mc = 0; mc < w.shape()[0] * w.shape()[1]; ++mc)
      for (int64_t y = 0; y < k[0]; ++y)
        std::memcpy(static_cast<char*>(big.raw()) + static_cast<size_t>((mc * K[0] + y + oy) * K[1] + ox) * es,
                    static_cast<const char*>(w.raw()) + static_cast<size_t>((mc * k[0] + y) * k[1]) * es,
                    static_cast<size_t>(k[1]) * es);
    const std::vector<int64_t> pads = g.node(b).attrs.getInts("pads", {0, 0, 0, 0});
    const ValueId wv = g.addConstant(uniqueValueName(g, g.node(s).name + "/enlarged_weight"), std::move(big));
    Node& node = g.mutableNode(s);
    node.inputs[1] = wv;
    node.attrs.set("kernel_shape", std::vector<int64_t>(K.begin(), K.end()));
    node.attrs.set("pads", pads);
    RewriteEffect effect;
    effect.target = {node.name};
    effect.outputs.emplace_back(g.value(node.outputs[0]).name, g.value(node.outputs[0]).name);
    g.removeNodes({});  // drops the old weight if nothing else reads it
    return effect;
  }
};

}  // namespace

std::unique_ptr<Substitution> makeMergeSiblings() { return std::make_unique<MergeSiblings>(); }
std::unique_ptr<Substitution> makeEnlargeConvKernel() { return std::make_unique<EnlargeConvKernel>(); }

}  // namespace collage

namespace collage {
namespace {

// A constant cut along `axis` into pieces of `sizes` (their sum, its dim).
std::vector<Tensor> splitConstant(const Tensor& t, int64_t axis, const std::vector<int64_t>& sizes) {
  Node split{"unmerge-split/Split", "Split", {}, {0}, std::vector<ValueId>(sizes.size(), 1)};
  split.attrs.set("axis", axis);
  split.attrs.set("split", sizes);
  fillDefaults(split);
  return evaluateNode(split, {&t});
}

// What a Split undoes: the anchor, its chain (bias Add, elementwise ops)
// and the Split, with the channel axis and the pieces' widths.
struct Merged {
  NodeId anchor = kNoNode;
  std::vector<NodeId> chain;  // bias Add (if any), then elementwise ops, in order
  NodeId split = kNoNode;
  std::vector<int64_t> sizes;
};

// The channel axis of an anchor's output (Conv, Gemm: 1; MatMul: the last).
int64_t channelAxis(const Graph& g, const Node& anchor) {
  return anchor.op == "MatMul" ? g.value(anchor.outputs[0]).type.rank() - 1 : 1;
}

// An anchor whose weights can be cut by output channel: constant weights
// (and B / C), group 1, the data input computed.
bool cuttableAnchor(const Graph& g, NodeId n) {
  const Node& node = g.node(n);
  if (!isAnchorOp(node.op) || node.inputs.size() < 2 || node.outputs.size() != 1 || node.outputs[0] == kNoValue)
    return false;
  if (node.inputs[0] == kNoValue || g.value(node.inputs[0]).isConstant()) return false;
  const Tensor* w = constantOf(g, node, 1);
  const TensorType& yt = g.value(node.outputs[0]).type;
  if (!w || yt.isSequence()) return false;
  if (node.inputs.size() > 2 && node.inputs[2] != kNoValue && !constantOf(g, node, 2)) return false;
  if (node.op == "MatMul") return node.inputs.size() == 2 && w->rank() >= 2 && yt.rank() >= 1;
  if (node.op == "Gemm") return w->rank() == 2;
  return node.attrs.getInt("group", 1) == 1 && w->rank() >= 3;
}

// A constant combined with an output of `type`: its size along `axis`
// (aligned from the right), 1 when it does not reach that axis.
int64_t dimAlong(const Tensor& c, const TensorType& type, int64_t axis) {
  const int64_t i = axis - (type.rank() - c.rank());
  return i < 0 ? 1 : c.shape()[static_cast<size_t>(i)];
}

std::optional<Merged> mergedBefore(const Graph& g, NodeId s) {
  const Node& split = g.node(s);
  if (split.op != "Split" || split.inputs.size() != 1 || split.outputs.size() < 2) return std::nullopt;
  for (ValueId v : split.outputs)
    if (v == kNoValue) return std::nullopt;
  Merged m;
  m.split = s;
  ValueId v = split.inputs[0];
  NodeId reader = s;
  std::vector<NodeId> chain;
  for (int k = 0; k < 5; ++k) {
    const Value& val = g.value(v);
    if (val.isGraphOutput || val.consumers.size() != 1 || val.consumers[0] != reader || val.producer == kNoNode)
      return std::nullopt;
    const NodeId p = val.producer;
    if (cuttableAnchor(g, p)) {
      m.anchor = p;
      break;
    }
    const Node& node = g.node(p);
    if (node.op == "Add" && node.inputs.size() == 2 && node.outputs.size() == 1) {
      const size_t other = constantOf(g, node, 0) ? 0 : 1;
      if (!constantOf(g, node, other) || constantOf(g, node, 1 - other)) return std::nullopt;
      if (g.value(node.outputs[0]).type != g.value(node.inputs[1 - other]).type) return std::nullopt;
      chain.insert(chain.begin(), p);
      v = node.inputs[1 - other];
    } else if (!node.inputs.empty() && node.inputs[0] != kNoValue && unaryFollower(g, node.inputs[0]) == p) {
      chain.insert(chain.begin(), p);
      v = node.inputs[0];
    } else {
      return std::nullopt;
    }
    reader = p;
  }
  if (m.anchor == kNoNode) return std::nullopt;
  // At most one Add, and right after the anchor (a bias).
  for (size_t i = 0; i < chain.size(); ++i)
    if (g.node(chain[i]).op == "Add" && i != 0) return std::nullopt;
  m.chain = chain;
  const Node& anchor = g.node(m.anchor);
  const TensorType& yt = g.value(anchor.outputs[0]).type;
  const int64_t axis = channelAxis(g, anchor);
  int64_t a = split.attrs.getInt("axis", 0);
  if (a < 0) a += g.value(split.inputs[0]).type.rank();
  if (a != axis) return std::nullopt;
  for (ValueId o : split.outputs) m.sizes.push_back(g.value(o).type.shape[static_cast<size_t>(axis)]);
  // The bias Add's constant varies along the channels at most.
  if (!m.chain.empty() && g.node(m.chain[0]).op == "Add") {
    const Node& add = g.node(m.chain[0]);
    const Tensor& b = *constantOf(g, add, constantOf(g, add, 0) ? 0 : 1);
    if (b.rank() > yt.rank()) return std::nullopt;
    for (int64_t i = 0; i < yt.rank(); ++i) {
      const int64_t d = dimAlong(b, yt, i);
      if (i != axis && d != 1 && d != yt.shape[static_cast<size_t>(i)]) return std::nullopt;
    }
  }
  return m;
}

SubstitutionSite siteOf(const Graph& g, const std::string& rule, const Merged& m) {
  SubstitutionSite site{rule, {g.node(m.anchor).name}};
  for (NodeId n : m.chain) site.nodes.push_back(g.node(n).name);
  site.nodes.push_back(g.node(m.split).name);
  return site;
}

class UnmergeSplit : public Substitution {
 public:
  std::string name() const override { return "unmerge-split"; }
  std::string describe() const override {
    return "Split(f(Op(x, W) [+ b])) along the output channels -> f(Op(x, W_i) [+ b_i]) for each piece: the "
           "inverse of merge-siblings; Op is MatMul, Gemm or Conv with constant weights, every value between "
           "read once";
  }

  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> sites;
    for (NodeId n = 0; n < g.numNodes(); ++n)
      if (auto m = mergedBefore(g, n)) sites.push_back(siteOf(g, name(), *m));
    return sites;
  }

  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    const NodeId s = siteNode(g, site, site.nodes.size() - 1);
    const auto m = mergedBefore(g, s);
    if (!m || siteOf(g, name(), *m) != site) throw Error(site.toString() + ": no longer an anchor read by a Split");
    const Node anchor = g.node(m->anchor);
    const Node split = g.node(s);
    const TensorType yt = g.value(anchor.outputs[0]).type;
    const int64_t axis = channelAxis(g, anchor);
    const size_t n = m->sizes.size();
    // The anchor's constants, cut by output channel (a broadcast one is shared).
    auto cut = [&](const Node& node, size_t input, int64_t constAxis) {
      const Tensor& c = *constantOf(g, node, input);
      std::vector<ValueId> parts;
      if (constAxis < 0 || c.shape()[static_cast<size_t>(constAxis)] == 1) {
        parts.assign(n, node.inputs[input]);
        return parts;
      }
      std::vector<Tensor> pieces = splitConstant(c, constAxis, m->sizes);
      for (size_t i = 0; i < n; ++i)
        parts.push_back(g.addConstant(uniqueValueName(g, g.value(node.inputs[input]).name + "/part" + std::to_string(i)),
                                      std::move(pieces[i])));
      return parts;
    };
    // Where each constant input's channels lie (-1: it has none).
    auto constAxisOf = [&](const Tensor& c, const TensorType& against) {
      const int64_t i = axis - (against.rank() - c.rank());
      return i < 0 ? int64_t{-1} : i;
    };
    const Tensor& w = *constantOf(g, anchor, 1);
    const int64_t wAxis = anchor.op == "Conv" ? 0
                          : anchor.op == "Gemm" ? (anchor.attrs.getInt("transB", 0) != 0 ? 0 : 1)
                                                : w.rank() - 1;
    const std::vector<ValueId> ws = cut(anchor, 1, wAxis);
    std::vector<ValueId> bs;
    if (anchor.inputs.size() > 2 && anchor.inputs[2] != kNoValue) {
      const Tensor& b = *constantOf(g, anchor, 2);
      bs = cut(anchor, 2, anchor.op == "Conv" ? 0 : constAxisOf(b, yt));
    }
    std::vector<std::vector<ValueId>> chainConsts;
    for (NodeId c : m->chain) {
      const Node& node = g.node(c);
      if (node.op != "Add" || node.inputs.size() != 2 || !(constantOf(g, node, 0) || constantOf(g, node, 1))) {
        chainConsts.emplace_back();
        continue;
      }
      const size_t other = constantOf(g, node, 0) ? 0 : 1;
      chainConsts.push_back(cut(node, other, constAxisOf(*constantOf(g, node, other), yt)));
    }
    RewriteEffect effect;
    for (size_t i = 0; i < n; ++i) {
      const std::string part = "/part" + std::to_string(i);
      Node a{uniqueNodeName(g, anchor.name + part), anchor.op, anchor.attrs, {anchor.inputs[0], ws[i]}, {}};
      if (!bs.empty()) a.inputs.push_back(bs[i]);
      effect.target.push_back(a.name);
      ValueId last = addNodeWithOutput(g, std::move(a), g.value(split.outputs[i]).name + "/" + anchor.op);
      for (size_t k = 0; k < m->chain.size(); ++k) {
        const Node step = g.node(m->chain[k]);
        Node node{uniqueNodeName(g, step.name + part), step.op, step.attrs, step.inputs, {}};
        for (size_t j = 0; j < node.inputs.size(); ++j) {
          const ValueId in = node.inputs[j];
          if (in != kNoValue && g.value(in).isConstant() && !chainConsts[k].empty())
            node.inputs[j] = chainConsts[k][i];
          else if (in != kNoValue && !g.value(in).isConstant())
            node.inputs[j] = last;
        }
        effect.target.push_back(node.name);
        if (k + 1 == m->chain.size()) {  // the last one makes the piece, under its name
          node.outputs = {split.outputs[i]};
          g.addNode(std::move(node));
          last = split.outputs[i];
        } else {
          last = addNodeWithOutput(g, std::move(node), g.value(split.outputs[i]).name + "/" + step.op);
        }
      }
      if (m->chain.empty()) {  // the anchor makes the piece: hand it the Split's output
        Node& made = g.mutableNode(g.numNodes() - 1);
        made.outputs = {split.outputs[i]};
      }
    }
    std::vector<bool> dead(static_cast<size_t>(g.numNodes()), false);
    dead[static_cast<size_t>(m->anchor)] = true;
    for (NodeId c : m->chain) dead[static_cast<size_t>(c)] = true;
    dead[static_cast<size_t>(s)] = true;
    effect.removed = site.nodes;
    for (ValueId o : split.outputs) effect.outputs.emplace_back(g.value(o).name, g.value(o).name);
    // The Split no longer makes its outputs: the new nodes do.
    for (ValueId& o : g.mutableNode(s).outputs) o = kNoValue;
    g.removeNodes(dead);
    return effect;
  }
};

}  // namespace

std::unique_ptr<Substitution> makeUnmergeSplit() { return std::make_unique<UnmergeSplit>(); }

}  // namespace collage
