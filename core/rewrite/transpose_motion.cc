#include "core/rewrite/transpose_motion.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>
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

// ---- cancel-transposes -----------------------------------------------------

int64_t normalizedAxis(int64_t axis, size_t rank) {
  return axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
}

// Whether `n` computes the same thing in any layout once its attributes
// (Pad's pads and axes, Concat's axis) and constants follow: the region's
// ops. Computed inputs must be of the output's shape (no broadcasting
// between them), constants never widen the output.
bool layoutFree(const Graph& g, NodeId n) {
  const Node& node = g.node(n);
  if (node.outputs.size() != 1 || node.outputs[0] == kNoValue || node.inputs.empty()) return false;
  const TensorType& out = g.value(node.outputs[0]).type;
  if (out.isSequence()) return false;
  for (const auto& [name, attr] : node.attrs)
    if (std::holds_alternative<std::shared_ptr<const Graph>>(attr)) return false;
  if (node.op == "Pad") {
    // The importer makes constant pads and axes attributes; a computed one stays an input.
    if (!node.attrs.has("pads") || node.inputs[0] == kNoValue ||
        g.value(node.inputs[0]).isConstant())
      return false;
    for (size_t i = 1; i < node.inputs.size(); ++i)
      if (node.inputs[i] != kNoValue && !(g.value(node.inputs[i]).isConstant() && i == 2))
        return false;
    return true;
  }
  const OpSchema* schema = OpRegistry::instance().find(node.op);
  const bool concat = node.op == "Concat";
  if (!concat &&
      (!schema || (schema->kind != OpKind::ElemWise && schema->kind != OpKind::Broadcast) ||
       node.attrs.has("axis")))
    return false;
  bool computed = false;
  for (ValueId v : node.inputs) {
    if (v == kNoValue) continue;
    const Value& val = g.value(v);
    if (val.type.isSequence()) return false;
    if (!val.isConstant()) {
      if (!concat && val.type.shape != out.shape) return false;
      if (concat && val.type.rank() != out.rank()) return false;
      computed = true;
    } else if (concat) {
      if (val.type.rank() != out.rank()) return false;
    } else if (schema->kind == OpKind::ElemWise) {
      if (val.constant->numElements() != 1) return false;
    } else if (val.type.rank() > out.rank()) {
      return false;
    }
  }
  return computed;
}

// The region a Transpose by p starts (cancel-transposes, transpose_motion.h).
struct LayoutRegion {
  std::vector<int64_t> perm;           // p: each region value is Transpose(its source, p)
  std::vector<NodeId> ops;             // the layout-free ops, ascending
  std::map<ValueId, ValueId> entries;  // an entry value -> its source (un-transposed)
  std::set<NodeId> siblings;           // Transposes by p^-1 that give an entry's source
  std::vector<NodeId> exits;           // Transposes by p^-1 of a region value that vanish
  std::vector<ValueId> kept;           // region ops' outputs read elsewhere: a Transpose by p each
  std::vector<NodeId> deadEntries;     // entry Transposes left without readers
  std::vector<NodeId> liveEntries;     // entry Transposes something else still reads
  int saved() const {
    return static_cast<int>(deadEntries.size() + exits.size()) - static_cast<int>(kept.size());
  }
  // Every node of the site: the seed first, then in node order.
  std::vector<NodeId> nodes(NodeId seed) const {
    std::set<NodeId> all(ops.begin(), ops.end());
    all.insert(siblings.begin(), siblings.end());
    all.insert(exits.begin(), exits.end());
    all.insert(deadEntries.begin(), deadEntries.end());
    all.insert(liveEntries.begin(), liveEntries.end());
    all.erase(seed);
    std::vector<NodeId> out{seed};
    out.insert(out.end(), all.begin(), all.end());
    return out;
  }
};

bool transposeBy(const Graph& g, NodeId n, const std::vector<int64_t>& perm) {
  return n != kNoNode && plainTranspose(g, n) && permOf(g, g.node(n)) == perm;
}

// A value may vanish from its readers: no graph output, no subgraph reads it.
bool replaceable(const Graph& g, ValueId v) {
  return !g.value(v).isGraphOutput && !readBySubgraphOwner(g, v);
}

std::optional<LayoutRegion> layoutRegion(const Graph& g, NodeId seed) {
  if (!plainTranspose(g, seed)) return std::nullopt;
  LayoutRegion r;
  r.perm = permOf(g, g.node(seed));
  const std::vector<int64_t> inv = inverse(r.perm);
  // A perm that is its own inverse would make one Transpose both an entry
  // and an exit: left to collapse-transposes and sink-transpose.
  if (inv == r.perm) return std::nullopt;
  std::set<NodeId> ops;
  std::set<ValueId> inside;  // region ops' outputs
  auto entryOf = [&](ValueId v) -> std::optional<std::pair<ValueId, NodeId>> {
    const NodeId p = g.value(v).producer;
    if (transposeBy(g, p, r.perm)) return std::make_pair(g.node(p).inputs[0], kNoNode);
    for (NodeId c : g.value(v).consumers)
      if (transposeBy(g, c, inv)) return std::make_pair(g.node(c).outputs[0], c);
    return std::nullopt;
  };
  auto addEntry = [&](ValueId v) {
    if (r.entries.count(v)) return;
    const auto e = entryOf(v);
    r.entries[v] = e->first;
    if (e->second != kNoNode) r.siblings.insert(e->second);
  };
  addEntry(g.node(seed).outputs[0]);
  // An input is ready when it is in, an entry, or made by layout-free ops
  // from such (a Concat of two blocks' outputs that a skip path's Add reads):
  // a few ops up, which then join too.
  std::function<bool(ValueId, int)> ready = [&](ValueId in, int depth) {
    if (in == kNoValue || g.value(in).isConstant() || inside.count(in) || r.entries.count(in) ||
        entryOf(in))
      return true;
    const NodeId p = g.value(in).producer;
    if (depth == 0 || p == kNoNode || ops.count(p) || !layoutFree(g, p)) return false;
    for (ValueId v : g.node(p).inputs)
      if (!ready(v, depth - 1)) return false;
    return true;
  };
  std::function<void(NodeId)> admit = [&](NodeId c) {
    if (ops.count(c)) return;
    for (ValueId in : g.node(c).inputs) {
      if (in == kNoValue || g.value(in).isConstant() || inside.count(in)) continue;
      if (r.entries.count(in) || entryOf(in))
        addEntry(in);
      else
        admit(g.value(in).producer);
    }
    ops.insert(c);
    inside.insert(g.node(c).outputs[0]);
  };
  constexpr int kUp = 4;
  // Grow to a fixed point: an op joins once each of its computed inputs is ready.
  for (bool grew = true; grew;) {
    grew = false;
    std::vector<ValueId> values(inside.begin(), inside.end());
    for (const auto& [v, src] : r.entries) values.push_back(v);
    for (ValueId v : values)
      for (NodeId c : g.value(v).consumers) {
        if (ops.count(c) || !layoutFree(g, c) || r.entries.count(g.node(c).outputs[0])) continue;
        bool ok = true;
        for (ValueId in : g.node(c).inputs) ok = ok && ready(in, kUp);
        if (!ok) continue;
        admit(c);
        grew = true;
      }
  }
  r.ops.assign(ops.begin(), ops.end());
  // Readers of the region's values outside it: exits vanish, others keep a Transpose.
  for (ValueId v : inside) {
    bool elsewhere = g.value(v).isGraphOutput || readBySubgraphOwner(g, v);
    for (NodeId c : g.value(v).consumers) {
      if (ops.count(c)) continue;
      if (transposeBy(g, c, inv) && replaceable(g, g.node(c).outputs[0]))
        r.exits.push_back(c);
      else
        elsewhere = true;
    }
    if (elsewhere) r.kept.push_back(v);
  }
  for (const auto& [v, src] : r.entries) {
    for (NodeId c : g.value(v).consumers)
      if (!ops.count(c) && !r.siblings.count(c) && transposeBy(g, c, inv) &&
          replaceable(g, g.node(c).outputs[0]))
        r.exits.push_back(c);
    const NodeId p = g.value(v).producer;
    if (!transposeBy(g, p, r.perm)) continue;
    bool read = !replaceable(g, v);
    for (NodeId c : g.value(v).consumers)
      read = read || !(ops.count(c) || std::count(r.exits.begin(), r.exits.end(), c));
    (read ? r.liveEntries : r.deadEntries).push_back(p);
  }
  std::sort(r.exits.begin(), r.exits.end());
  r.exits.erase(std::unique(r.exits.begin(), r.exits.end()), r.exits.end());
  if (r.saved() <= 0) return std::nullopt;
  return r;
}

// `c` (rank <= rank) transposed by `perm` at full rank.
Tensor permuteFullRank(const Tensor& c, size_t rank, const std::vector<int64_t>& perm) {
  Shape aligned(rank - static_cast<size_t>(c.rank()), 1);
  aligned.insert(aligned.end(), c.shape().begin(), c.shape().end());
  Node t{"transpose-motion/Transpose", "Transpose", {}, {0}, {1}};
  t.attrs.set("perm", perm);
  const Tensor a = c.reshaped(aligned);
  return evaluateNode(t, {&a}).at(0);
}

RewriteEffect rewriteRegion(Graph& g, const LayoutRegion& r) {
  const std::vector<int64_t>& p = r.perm;
  const std::vector<int64_t> inv = inverse(p);
  const size_t rank = p.size();
  RewriteEffect effect;
  std::map<ValueId, ValueId> source = r.entries;  // region value -> un-transposed value
  // The region ops' outputs, un-transposed, under new names.
  for (NodeId n : r.ops) {
    const ValueId v = g.node(n).outputs[0];
    const TensorType& t = g.value(v).type;
    Shape shape(rank);
    for (size_t j = 0; j < rank; ++j) shape[static_cast<size_t>(p[j])] = t.shape[j];
    source[v] = g.addValue(uniqueValueName(g, g.value(v).name + "/unpermuted"),
                           TensorType{t.elementType, shape});
  }
  for (NodeId n : r.ops) {
    Node& node = g.mutableNode(n);
    const size_t outRank = static_cast<size_t>(g.value(node.outputs[0]).type.rank());
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId in = node.inputs[i];
      if (in == kNoValue) continue;
      const Value& val = g.value(in);
      if (!val.isConstant()) {
        g.mutableNode(n).inputs[i] = source.at(in);
        continue;
      }
      if (node.op == "Pad" || (val.constant->numElements() == 1 && val.type.rank() <= 1)) continue;
      Tensor permuted = node.op == "Concat" ? permuteFullRank(*val.constant, outRank, inv)
                                            : permuteConstant(*val.constant, outRank, inv);
      const std::string cname = permutedName(g, val.name);
      const ValueId c = g.addConstant(cname, std::move(permuted));
      g.mutableNode(n).inputs[i] = c;
    }
    Node& m = g.mutableNode(n);
    if (m.op == "Concat") {
      m.attrs.set("axis", p[static_cast<size_t>(normalizedAxis(m.attrs.getInt("axis", 0), rank))]);
    } else if (m.op == "Pad") {
      const std::vector<int64_t> pads = m.attrs.getInts("pads", {});
      if (m.attrs.has("axes")) {
        std::vector<int64_t> axes = m.attrs.getInts("axes", {});
        for (int64_t& a : axes) a = p[static_cast<size_t>(normalizedAxis(a, rank))];
        m.attrs.set("axes", axes);
      } else {
        if (pads.size() != 2 * rank)
          throw Error("Pad '" + m.name + "': " + std::to_string(pads.size()) + " pads for rank " +
                      std::to_string(rank));
        std::vector<int64_t> moved(pads.size());
        for (size_t j = 0; j < rank; ++j) {
          moved[static_cast<size_t>(p[j])] = pads[j];
          moved[rank + static_cast<size_t>(p[j])] = pads[rank + j];
        }
        m.attrs.set("pads", moved);
      }
    }
    const ValueId v = m.outputs[0];
    m.outputs[0] = source.at(v);
    effect.target.push_back(m.name);
  }
  // A region value read elsewhere: one Transpose by p makes it, under its name.
  for (ValueId v : r.kept) {
    Node t;
    t.name = uniqueNodeName(g, g.node(g.value(v).producer).name + "/transpose");
    t.op = "Transpose";
    t.attrs.set("perm", p);
    t.inputs = {source.at(v)};
    t.outputs = {v};
    effect.target.push_back(t.name);
    effect.outputs.emplace_back(g.value(v).name, g.value(v).name);
    g.addNode(std::move(t));
  }
  // The exits' readers read the un-transposed value.
  for (NodeId e : r.exits) {
    const ValueId out = g.node(e).outputs[0];
    const ValueId to = source.at(g.node(e).inputs[0]);
    // Two exits of one value are one value now: compared once.
    const bool listed = std::any_of(effect.outputs.begin(), effect.outputs.end(),
                                    [&](const auto& o) { return o.second == g.value(to).name; });
    if (!g.value(out).consumers.empty() && !listed)
      effect.outputs.emplace_back(g.value(out).name, g.value(to).name);
    replaceUses(g, out, to);
    effect.removed.push_back(g.node(e).name);
  }
  for (NodeId s : r.siblings) {
    effect.target.push_back(g.node(s).name);
    const ValueId out = g.node(s).outputs[0];
    if (g.value(out).isGraphOutput || g.value(out).consumers.size() > 0)
      effect.outputs.emplace_back(g.value(out).name, g.value(out).name);
  }
  for (NodeId e : r.liveEntries) {
    effect.target.push_back(g.node(e).name);
    const ValueId out = g.node(e).outputs[0];
    effect.outputs.emplace_back(g.value(out).name, g.value(out).name);
  }
  std::vector<bool> dead(static_cast<size_t>(g.numNodes()), false);
  for (NodeId e : r.exits) dead[static_cast<size_t>(e)] = true;
  for (NodeId e : r.deadEntries) {
    dead[static_cast<size_t>(e)] = true;
    effect.removed.push_back(g.node(e).name);
  }
  g.removeNodes(dead);
  return effect;
}

class CancelTransposes : public Substitution {
 public:
  std::string name() const override { return "cancel-transposes"; }
  std::string describe() const override {
    return "a region entered through Transposes by p (elementwise ops, Pad, Concat; other inputs "
           "already transposed by p^-1 elsewhere, or constants) runs un-transposed; its exits by "
           "p^-1 "
           "vanish, other readers get one Transpose by p; where the graph loses Transposes";
  }
  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> sites;
    std::set<NodeId> covered;
    for (NodeId t = 0; t < g.numNodes(); ++t) {
      if (covered.count(t)) continue;
      const auto r = layoutRegion(g, t);
      if (!r) continue;
      SubstitutionSite site{name(), {}};
      for (NodeId n : r->nodes(t)) {
        covered.insert(n);
        site.nodes.push_back(g.node(n).name);
      }
      sites.push_back(std::move(site));
    }
    return sites;
  }
  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    if (site.nodes.empty()) throw Error(site.toString() + ": expected a Transpose first");
    const NodeId seed = siteNode(g, site, 0);
    const auto r = layoutRegion(g, seed);
    std::vector<std::string> names;
    if (r)
      for (NodeId n : r->nodes(seed)) names.push_back(g.node(n).name);
    if (!r || names != site.nodes)
      throw Error(site.toString() + ": the Transposes there no longer cancel (the region changed)");
    return rewriteRegion(g, *r);
  }
};

}  // namespace

std::unique_ptr<Substitution> makeSinkTranspose() { return std::make_unique<SinkTranspose>(); }
std::unique_ptr<Substitution> makeHoistTranspose() { return std::make_unique<HoistTranspose>(); }
std::unique_ptr<Substitution> makeCancelTransposes() {
  return std::make_unique<CancelTransposes>();
}

}  // namespace collage
