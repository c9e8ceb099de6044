#include "core/rewrite/transpose_motion.h"

#include <numeric>
#include <optional>
#include <variant>

#include "core/ir/error.h"
#include "core/ir/op_kind.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"

namespace collage {
namespace {

bool plainTranspose(const Graph& g, NodeId n) {
  const Node& node = g.node(n);
  return node.op == "Transpose" && node.inputs.size() == 1 && node.outputs.size() == 1 &&
         node.inputs[0] != kNoValue && node.outputs[0] != kNoValue &&
         !g.value(node.inputs[0]).type.isSequence();
}

std::vector<int64_t> permOf(const Graph& g, const Node& n) {
  std::vector<int64_t> perm = n.attrs.getInts("perm", {});
  if (perm.empty()) {  // default: reverse the axes
    perm.resize(static_cast<size_t>(g.value(n.inputs[0]).type.rank()));
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  return perm;
}

std::vector<int64_t> inverse(const std::vector<int64_t>& p) {
  std::vector<int64_t> q(p.size());
  for (size_t i = 0; i < p.size(); ++i) q[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return q;
}

// An elementwise op a Transpose can cross: the index of its data input (the
// others are constants), or nothing.
std::optional<size_t> movableElementwise(const Graph& g, NodeId n) {
  const Node& node = g.node(n);
  const OpSchema* schema = OpRegistry::instance().find(node.op);
  if (!schema || node.outputs.size() != 1 || node.outputs[0] == kNoValue || node.inputs.empty())
    return std::nullopt;
  if (schema->kind != OpKind::ElemWise && schema->kind != OpKind::Broadcast) return std::nullopt;
  if (node.attrs.has("axis")) return std::nullopt;
  for (const auto& [name, attr] : node.attrs)
    if (std::holds_alternative<std::shared_ptr<const Graph>>(attr)) return std::nullopt;
  std::optional<size_t> data;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (node.inputs[i] == kNoValue) continue;
    const Value& v = g.value(node.inputs[i]);
    if (v.type.isSequence()) return std::nullopt;
    if (v.isConstant()) {
      // ElemWise: only scalar parameters; Broadcast: one constant operand.
      if (schema->kind == OpKind::ElemWise && v.constant->numElements() != 1) return std::nullopt;
      continue;
    }
    if (data) return std::nullopt;
    data = i;
  }
  if (!data) return std::nullopt;
  if (schema->kind == OpKind::Broadcast && node.inputs.size() != 2) return std::nullopt;
  const TensorType& in = g.value(node.inputs[*data]).type;
  const TensorType& out = g.value(node.outputs[0]).type;
  if (out.isSequence() || out.shape != in.shape) return std::nullopt;  // never widened
  for (size_t i = 0; i < node.inputs.size(); ++i)
    if (i != *data && node.inputs[i] != kNoValue && g.value(node.inputs[i]).type.rank() > in.rank())
      return std::nullopt;
  return data;
}

// The constant `c` (rank <= rank) aligned to `rank` and transposed by
// `perm`, leading 1s dropped again (broadcasting puts them back).
Tensor permuteConstant(const Tensor& c, size_t rank, const std::vector<int64_t>& perm) {
  Shape aligned(rank - static_cast<size_t>(c.rank()), 1);
  aligned.insert(aligned.end(), c.shape().begin(), c.shape().end());
  Node t{"transpose-motion/Transpose", "Transpose", {}, {0}, {1}};
  t.attrs.set("perm", perm);
  const Tensor a = c.reshaped(aligned);
  Tensor out = evaluateNode(t, {&a}).at(0);
  Shape s = out.shape();
  size_t lead = 0;
  while (lead < s.size() && s[lead] == 1) ++lead;
  return out.reshaped(Shape(s.begin() + static_cast<std::ptrdiff_t>(lead), s.end()));
}

// A name for the permuted copy of constant `name`: a copy of a copy takes
// the original's name back, so that moving there and back gives the same graph.
std::string permutedName(const Graph& g, const std::string& name) {
  const std::string suffix = "/permuted";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return uniqueValueName(g, name.substr(0, name.size() - suffix.size()));
  return uniqueValueName(g, name + suffix);
}

// Moves transpose `t` across elementwise `f`: down when `down` (t reads x
// and f reads t), else up (f reads x and t reads f). Both nodes keep their
// names; the value between them keeps its name and takes its new type.
RewriteEffect swap(Graph& g, NodeId t, NodeId f, size_t data, bool down) {
  const std::vector<int64_t> p = permOf(g, g.node(t));
  const NodeId top = down ? t : f, bottom = down ? f : t;
  const ValueId x = g.node(top).inputs[down ? 0 : data];
  const ValueId mid = g.node(top).outputs[0];
  const ValueId y = g.node(bottom).outputs[0];
  const size_t rank = p.size();
  // The constants of f meet the other layout now.
  const std::vector<int64_t> q = down ? inverse(p) : p;
  Node& fn = g.mutableNode(f);
  for (size_t i = 0; i < fn.inputs.size(); ++i) {
    if (i == data || fn.inputs[i] == kNoValue) continue;
    const Value& c = g.value(fn.inputs[i]);
    // A scalar meets every layout as it is.
    if (c.constant->numElements() == 1 && c.type.rank() <= 1) continue;
    Tensor permuted = permuteConstant(*c.constant, rank, q);
    const std::string cname = permutedName(g, c.name);
    g.mutableNode(f).inputs[i] = g.addConstant(cname, std::move(permuted));
  }
  // New types: the elementwise op's output type on the other layout.
  const TensorType xType = g.value(x).type;
  const ElementType fOut = g.value(g.node(f).outputs[0]).type.elementType;
  Shape transposed;
  for (int64_t a : p) transposed.push_back(xType.shape[static_cast<size_t>(a)]);
  Node& tn = g.mutableNode(t);
  Node& fm = g.mutableNode(f);
  tn.attrs.set("perm", p);
  if (down) {  // x -> f -> mid -> t -> y
    fm.inputs[data] = x;
    fm.outputs[0] = mid;
    tn.inputs[0] = mid;
    tn.outputs[0] = y;
    g.mutableValue(mid).type = TensorType{fOut, xType.shape};
  } else {  // x -> t -> mid -> f -> y
    tn.inputs[0] = x;
    tn.outputs[0] = mid;
    fm.inputs[data] = mid;
    fm.outputs[0] = y;
    g.mutableValue(mid).type = TensorType{xType.elementType, transposed};
  }
  RewriteEffect effect;
  effect.target = {g.node(down ? f : t).name, g.node(down ? t : f).name};
  effect.outputs.emplace_back(g.value(y).name, g.value(y).name);
  // Nothing dies but the constants no node reads any more.
  g.removeNodes(std::vector<bool>(static_cast<size_t>(g.numNodes()), false));
  return effect;
}

// The value between the two nodes may change meaning: one reader, no graph output.
bool innerValue(const Graph& g, ValueId v, NodeId reader) {
  const Value& val = g.value(v);
  return !val.isGraphOutput && val.consumers.size() == 1 && val.consumers[0] == reader;
}

// Sink: Transpose t whose only reader is a movable f reading it as data.
std::optional<std::pair<NodeId, size_t>> sinkSite(const Graph& g, NodeId t) {
  if (!plainTranspose(g, t)) return std::nullopt;
  const ValueId mid = g.node(t).outputs[0];
  if (g.value(mid).consumers.size() != 1) return std::nullopt;
  const NodeId f = g.value(mid).consumers[0];
  if (!innerValue(g, mid, f)) return std::nullopt;
  const auto data = movableElementwise(g, f);
  if (!data || g.node(f).inputs[*data] != mid) return std::nullopt;
  return std::make_pair(f, *data);
}

// Hoist: Transpose t reading a movable f whose only reader it is.
std::optional<std::pair<NodeId, size_t>> hoistSite(const Graph& g, NodeId t) {
  if (!plainTranspose(g, t)) return std::nullopt;
  const ValueId mid = g.node(t).inputs[0];
  const NodeId f = g.value(mid).producer;
  if (f == kNoNode || !innerValue(g, mid, t)) return std::nullopt;
  const auto data = movableElementwise(g, f);
  if (!data) return std::nullopt;
  return std::make_pair(f, *data);
}

class SinkTranspose : public Substitution {
 public:
  std::string name() const override { return "sink-transpose"; }
  std::string describe() const override {
    return "f(Transpose(x, p) [, c]) -> Transpose(f(x [, c permuted by p^-1]), p); f elementwise "
           "(one input, or a broadcasting op with a constant c); the Transpose's output read by "
           "f only";
  }
  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> sites;
    for (NodeId t = 0; t < g.numNodes(); ++t)
      if (auto s = sinkSite(g, t))
        sites.push_back({name(), {g.node(t).name, g.node(s->first).name}});
    return sites;
  }
  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    if (site.nodes.size() != 2)
      throw Error(site.toString() + ": expected a Transpose and an elementwise op");
    const NodeId t = siteNode(g, site, 0), f = siteNode(g, site, 1);
    const auto s = sinkSite(g, t);
    if (!s || s->first != f)
      throw Error(site.toString() + ": the Transpose no longer sinks across that op");
    return swap(g, t, f, s->second, true);
  }
};

class HoistTranspose : public Substitution {
 public:
  std::string name() const override { return "hoist-transpose"; }
  std::string describe() const override {
    return "Transpose(f(x [, c]), p) -> f(Transpose(x, p) [, c permuted by p]); f elementwise "
           "(one input, or a broadcasting op with a constant c); f's output read by the "
           "Transpose only";
  }
  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> sites;
    for (NodeId t = 0; t < g.numNodes(); ++t)
      if (auto s = hoistSite(g, t))
        sites.push_back({name(), {g.node(s->first).name, g.node(t).name}});
    return sites;
  }
  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    if (site.nodes.size() != 2)
      throw Error(site.toString() + ": expected an elementwise op and a Transpose");
    const NodeId f = siteNode(g, site, 0), t = siteNode(g, site, 1);
    const auto s = hoistSite(g, t);
    if (!s || s->first != f)
      throw Error(site.toString() + ": the Transpose no longer hoists across that op");
    return swap(g, t, f, s->second, false);
  }
};

}  // namespace

std::unique_ptr<Substitution> makeSinkTranspose() { return std::make_unique<SinkTranspose>(); }
std::unique_ptr<Substitution> makeHoistTranspose() { return std::make_unique<HoistTranspose>(); }

}  // namespace collage
