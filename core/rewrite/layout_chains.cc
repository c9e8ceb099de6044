#include "core/rewrite/layout_chains.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>

#include "core/ir/error.h"

namespace collage {
namespace {

// The producer of a node's data input, when it is a node.
NodeId dataProducer(const Graph& g, NodeId n) {
  const Node& node = g.node(n);
  if (node.inputs.empty() || node.inputs[0] == kNoValue) return kNoNode;
  return g.value(node.inputs[0]).producer;
}

// Whether the value `y` may vanish (its readers read another value instead).
bool removable(const Graph& g, ValueId y) {
  return !g.value(y).isGraphOutput && !readBySubgraphOwner(g, y);
}

// Drops `n` when its output is read no more, then finalizes.
RewriteEffect finish(Graph& g, const SubstitutionSite& site, const std::vector<NodeId>& maybeDead,
                     const std::vector<std::string>& target, const std::string& before, const std::string& after) {
  RewriteEffect effect;
  effect.target = target;
  effect.outputs.emplace_back(before, after);
  std::vector<bool> dead(static_cast<size_t>(g.numNodes()), false);
  // Recount readers: edits so far are not finalized.
  std::vector<int> readers(static_cast<size_t>(g.numValues()), 0);
  for (const Node& node : g.nodes())
    for (ValueId v : node.inputs)
      if (v != kNoValue) ++readers[static_cast<size_t>(v)];
  for (NodeId n : maybeDead) {
    if (n == kNoNode) continue;
    const ValueId y = g.node(n).outputs[0];
    if (readers[static_cast<size_t>(y)] == 0 && !g.value(y).isGraphOutput) {
      dead[static_cast<size_t>(n)] = true;
      effect.removed.push_back(g.node(n).name);
    }
  }
  (void)site;
  g.removeNodes(dead);
  return effect;
}

std::vector<int64_t> permOf(const Graph& g, const Node& n) {
  std::vector<int64_t> perm = n.attrs.getInts("perm", {});
  if (perm.empty()) {  // default: reverse the axes
    perm.resize(static_cast<size_t>(g.value(n.inputs[0]).type.rank()));
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  return perm;
}

bool isIdentity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

bool plainTranspose(const Graph& g, NodeId n) {
  const Node& node = g.node(n);
  return node.op == "Transpose" && node.inputs.size() == 1 && node.outputs.size() == 1 &&
         !g.value(node.inputs[0]).type.isSequence();
}

class CollapseTransposes : public Substitution {
 public:
  std::string name() const override { return "collapse-transposes"; }
  std::string describe() const override {
    return "Transpose(Transpose(x, p), q) -> Transpose(x, p∘q), and Transpose(x, identity) -> x";
  }

  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> sites;
    for (NodeId n = 0; n < g.numNodes(); ++n) {
      if (!plainTranspose(g, n)) continue;
      const NodeId p = dataProducer(g, n);
      if (p != kNoNode && plainTranspose(g, p)) {
        if (isIdentity(composed(g, p, n)) && !removable(g, g.node(n).outputs[0])) continue;
        sites.push_back(SubstitutionSite{name(), {g.node(p).name, g.node(n).name}});
      } else if (isIdentity(permOf(g, g.node(n))) && removable(g, g.node(n).outputs[0])) {
        sites.push_back(SubstitutionSite{name(), {g.node(n).name}});
      }
    }
    return sites;
  }

  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    if (site.nodes.empty() || site.nodes.size() > 2) throw Error(site.toString() + ": expected 1 or 2 Transposes");
    const NodeId last = siteNode(g, site, site.nodes.size() - 1);
    const NodeId first = site.nodes.size() == 2 ? siteNode(g, site, 0) : kNoNode;
    if (!plainTranspose(g, last) || (first != kNoNode && (!plainTranspose(g, first) || dataProducer(g, last) != first)))
      throw Error(site.toString() + ": not a Transpose chain");
    const std::vector<int64_t> perm = first == kNoNode ? permOf(g, g.node(last)) : composed(g, first, last);
    const ValueId x = g.node(first == kNoNode ? last : first).inputs[0];
    const ValueId y = g.node(last).outputs[0];
    const std::string yName = g.value(y).name;
    if (isIdentity(perm)) {
      if (!removable(g, y)) throw Error(site.toString() + ": '" + yName + "' cannot be removed");
      replaceUses(g, y, x);
      const std::string xName = g.value(x).name;
      std::vector<NodeId> maybe = {last};
      if (first != kNoNode) maybe.push_back(first);
      g.mutableNode(last).inputs.clear();  // read no more: dropped below
      return finish(g, site, maybe, {}, yName, xName);
    }
    Node& node = g.mutableNode(last);
    node.inputs[0] = x;
    node.attrs.set("perm", perm);
    return finish(g, site, {first}, {node.name}, yName, yName);
  }

 private:
  // y = Transpose(Transpose(x, p), q): y's axis j is x's axis p[q[j]].
  static std::vector<int64_t> composed(const Graph& g, NodeId first, NodeId second) {
    const std::vector<int64_t> p = permOf(g, g.node(first)), q = permOf(g, g.node(second));
    std::vector<int64_t> r;
    for (int64_t j : q) r.push_back(p.at(static_cast<size_t>(j)));
    return r;
  }
};

bool reshapeLike(const Graph& g, NodeId n) {
  const Node& node = g.node(n);
  if (node.op != "Reshape" && node.op != "Flatten" && node.op != "Squeeze" && node.op != "Unsqueeze")
    return false;
  // The importer turns a constant shape or axes input into an attribute.
  return node.inputs.size() == 1 && node.outputs.size() == 1 && !g.value(node.inputs[0]).type.isSequence();
}

class CollapseReshapes : public Substitution {
 public:
  std::string name() const override { return "collapse-reshapes"; }
  std::string describe() const override {
    return "R2(R1(x)) -> Reshape(x, R2's static output shape), and R(x) of x's own shape -> x; R is "
           "Reshape, Flatten, Squeeze or Unsqueeze";
  }

  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> sites;
    for (NodeId n = 0; n < g.numNodes(); ++n) {
      if (!reshapeLike(g, n)) continue;
      const NodeId p = dataProducer(g, n);
      const ValueId y = g.node(n).outputs[0];
      if (p != kNoNode && reshapeLike(g, p)) {
        if (g.value(y).type.shape == g.value(g.node(p).inputs[0]).type.shape && !removable(g, y)) continue;
        sites.push_back(SubstitutionSite{name(), {g.node(p).name, g.node(n).name}});
      } else if (g.value(y).type.shape == g.value(g.node(n).inputs[0]).type.shape && removable(g, y)) {
        sites.push_back(SubstitutionSite{name(), {g.node(n).name}});
      }
    }
    return sites;
  }

  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    if (site.nodes.empty() || site.nodes.size() > 2) throw Error(site.toString() + ": expected 1 or 2 reshapes");
    const NodeId last = siteNode(g, site, site.nodes.size() - 1);
    const NodeId first = site.nodes.size() == 2 ? siteNode(g, site, 0) : kNoNode;
    if (!reshapeLike(g, last) || (first != kNoNode && (!reshapeLike(g, first) || dataProducer(g, last) != first)))
      throw Error(site.toString() + ": not a reshape chain");
    const ValueId x = g.node(first == kNoNode ? last : first).inputs[0];
    const ValueId y = g.node(last).outputs[0];
    const std::string yName = g.value(y).name;
    const Shape shape = g.value(y).type.shape;
    if (shape == g.value(x).type.shape) {
      if (!removable(g, y)) throw Error(site.toString() + ": '" + yName + "' cannot be removed");
      replaceUses(g, y, x);
      const std::string xName = g.value(x).name;
      std::vector<NodeId> maybe = {last};
      if (first != kNoNode) maybe.push_back(first);
      g.mutableNode(last).inputs.clear();
      return finish(g, site, maybe, {}, yName, xName);
    }
    Node& node = g.mutableNode(last);
    node.op = "Reshape";
    node.inputs[0] = x;
    node.attrs = AttributeMap{};
    node.attrs.set("shape", std::vector<int64_t>(shape.begin(), shape.end()));
    bool zero = false;
    for (int64_t d : shape) zero = zero || d == 0;
    node.attrs.set("allowzero", int64_t{zero ? 1 : 0});
    return finish(g, site, {first}, {node.name}, yName, yName);
  }
};

}  // namespace

std::unique_ptr<Substitution> makeCollapseTransposes() { return std::make_unique<CollapseTransposes>(); }
std::unique_ptr<Substitution> makeCollapseReshapes() { return std::make_unique<CollapseReshapes>(); }

}  // namespace collage

namespace collage {
namespace {

// The split axis of a Split node, non-negative.
int64_t splitAxis(const Graph& g, const Node& split) {
  const int64_t rank = g.value(split.inputs[0]).type.rank();
  int64_t a = split.attrs.getInt("axis", 0);
  return a < 0 ? a + rank : a;
}

// The layout op reading each output of `split`, when every output has
// exactly one reader, all of one kind ("Transpose" or reshape-like).
std::optional<std::vector<NodeId>> layoutReaders(const Graph& g, NodeId s, std::string* kind) {
  const Node& split = g.node(s);
  if (split.op != "Split" || split.inputs.empty() || split.outputs.size() < 2) return std::nullopt;
  if (g.value(split.inputs[0]).type.isSequence()) return std::nullopt;
  std::vector<NodeId> readers;
  for (ValueId y : split.outputs) {
    if (y == kNoValue) return std::nullopt;
    const Value& v = g.value(y);
    if (v.isGraphOutput || v.consumers.size() != 1) return std::nullopt;
    const NodeId r = v.consumers[0];
    const std::string k = plainTranspose(g, r) ? "Transpose" : reshapeLike(g, r) ? "reshape" : "";
    if (k.empty() || g.node(r).inputs[0] != y) return std::nullopt;
    if (readers.empty()) *kind = k;
    if (k != *kind) return std::nullopt;
    readers.push_back(r);
  }
  return readers;
}

int64_t product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

// For reshapes after a split on axis a: the axis b of the outputs' shapes
// where they split alike, or -1.
int64_t reshapeSplitAxis(const Graph& g, const Node& split, const std::vector<NodeId>& readers) {
  const Shape& x = g.value(split.inputs[0]).type.shape;
  const size_t a = static_cast<size_t>(splitAxis(g, split));
  const int64_t pre = product(x, 0, a), suf = product(x, a + 1, x.size());
  const Shape& s0 = g.value(g.node(readers[0]).outputs[0]).type.shape;
  for (size_t b = 0; b < s0.size(); ++b) {
    bool ok = true;
    for (size_t i = 0; i < readers.size() && ok; ++i) {
      const Shape& si = g.value(g.node(readers[i]).outputs[0]).type.shape;
      const int64_t ni = g.value(split.outputs[i]).type.shape[a];
      ok = si.size() == s0.size() && product(si, 0, b) == pre &&
           Shape(si.begin() + static_cast<std::ptrdiff_t>(b) + 1, si.end()) ==
               Shape(s0.begin() + static_cast<std::ptrdiff_t>(b) + 1, s0.end()) &&
           si[b] * product(si, b + 1, si.size()) == ni * suf;
      for (size_t k = 0; k < b && ok; ++k) ok = si[k] == s0[k];
    }
    if (ok) return static_cast<int64_t>(b);
  }
  return -1;
}

class SinkSplit : public Substitution {
 public:
  std::string name() const override { return "sink-split"; }
  std::string describe() const override {
    return "Transpose(Split(x)_i, p_i) -> Transpose(Split(Transpose(x, p_0))_i, p_0^-1 p_i), and R_i(Split(x)_i) -> "
           "Split(Reshape(x)); every Split output read by one layout op of one kind";
  }

  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> sites;
    for (NodeId n = 0; n < g.numNodes(); ++n) {
      std::string kind;
      auto readers = layoutReaders(g, n, &kind);
      if (!readers) continue;
      if (kind == "reshape" && reshapeSplitAxis(g, g.node(n), *readers) < 0) continue;
      SubstitutionSite site{name(), {g.node(n).name}};
      for (NodeId r : *readers) site.nodes.push_back(g.node(r).name);
      sites.push_back(std::move(site));
    }
    return sites;
  }

  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    const NodeId s = siteNode(g, site, 0);
    std::string kind;
    auto readers = layoutReaders(g, s, &kind);
    if (!readers || readers->size() + 1 != site.nodes.size())
      throw Error(site.toString() + ": not a Split read by layout ops");
    for (size_t i = 0; i < readers->size(); ++i)
      if (g.node((*readers)[i]).name != site.nodes[i + 1]) throw Error(site.toString() + ": readers changed");
    const Node split = g.node(s);
    const ValueId x = split.inputs[0];
    const int64_t a = splitAxis(g, split);
    std::vector<int64_t> sizes;
    for (ValueId y : split.outputs) sizes.push_back(g.value(y).type.shape[static_cast<size_t>(a)]);
    RewriteEffect effect;
    std::vector<bool> dead(static_cast<size_t>(g.numNodes()), false);
    dead[static_cast<size_t>(s)] = true;
    effect.removed.push_back(split.name);
    Node layout{uniqueNodeName(g, g.node((*readers)[0]).name + "/before_split"), "", {}, {x}, {}};
    Node newSplit{uniqueNodeName(g, split.name + "/after_layout"), "Split", {}, {}, {}};
    std::vector<ValueId> outs;
    if (kind == "Transpose") {
      const std::vector<int64_t> p = permOf(g, g.node((*readers)[0]));
      std::vector<int64_t> pinv(p.size());
      for (size_t j = 0; j < p.size(); ++j) pinv[static_cast<size_t>(p[j])] = static_cast<int64_t>(j);
      layout.op = "Transpose";
      layout.attrs.set("perm", p);
      newSplit.attrs.set("axis", pinv[static_cast<size_t>(a)]);
      const ValueId z = addNodeWithOutput(g, std::move(layout), g.value(x).name + "/transposed");
      effect.target.push_back(g.nodes().back().name);
      for (NodeId r : *readers) {
        const std::vector<int64_t> pi = permOf(g, g.node(r));
        std::vector<int64_t> q;
        for (int64_t m : pi) q.push_back(pinv[static_cast<size_t>(m)]);
        if (isIdentity(q)) {
          outs.push_back(g.node(r).outputs[0]);
          dead[static_cast<size_t>(r)] = true;
          effect.removed.push_back(g.node(r).name);
        } else {
          Shape zs = g.value(z).type.shape;
          zs[static_cast<size_t>(pinv[static_cast<size_t>(a)])] = g.value(g.node(r).inputs[0]).type.shape[static_cast<size_t>(a)];
          const ValueId w = g.addValue(uniqueValueName(g, g.value(g.node(r).outputs[0]).name + "/split_part"),
                                       TensorType{g.value(z).type.elementType, zs});
          outs.push_back(w);
          Node& node = g.mutableNode(r);
          node.inputs[0] = w;
          node.attrs.set("perm", q);
          effect.target.push_back(node.name);
        }
      }
      newSplit.inputs = {z};
    } else {
      const int64_t b = reshapeSplitAxis(g, split, *readers);
      if (b < 0) throw Error(site.toString() + ": the reshapes do not split alike");
      Shape shape = g.value(g.node((*readers)[0]).outputs[0]).type.shape;
      std::vector<int64_t> parts;
      int64_t total = 0;
      for (NodeId r : *readers) {
        parts.push_back(g.value(g.node(r).outputs[0]).type.shape[static_cast<size_t>(b)]);
        total += parts.back();
      }
      shape[static_cast<size_t>(b)] = total;
      layout.op = "Reshape";
      layout.attrs.set("shape", std::vector<int64_t>(shape.begin(), shape.end()));
      bool zero = false;
      for (int64_t d : shape) zero = zero || d == 0;
      layout.attrs.set("allowzero", int64_t{zero ? 1 : 0});
      const ValueId z = addNodeWithOutput(g, std::move(layout), g.value(x).name + "/reshaped");
      effect.target.push_back(g.nodes().back().name);
      for (NodeId r : *readers) {
        outs.push_back(g.node(r).outputs[0]);
        dead[static_cast<size_t>(r)] = true;
        effect.removed.push_back(g.node(r).name);
      }
      newSplit.inputs = {z};
      newSplit.attrs.set("axis", b);
      sizes = parts;
    }
    newSplit.attrs.set("split", sizes);
    newSplit.outputs = outs;
    fillDefaults(newSplit);
    effect.target.insert(effect.target.begin() + 1, newSplit.name);
    g.addNode(std::move(newSplit));
    for (NodeId r : *readers) effect.outputs.emplace_back(g.value(g.node(r).outputs[0]).name, g.value(g.node(r).outputs[0]).name);
    g.removeNodes(dead);
    return effect;
  }
};

}  // namespace

std::unique_ptr<Substitution> makeSinkSplit() { return std::make_unique<SinkSplit>(); }

}  // namespace collage

namespace collage {
namespace {

// A Slice of x that cuts one axis with step 1: (axis, start), or nothing.
std::optional<std::pair<int64_t, int64_t>> sliceRange(const Graph& g, const Node& n, ValueId x) {
  if (n.op != "Slice" || n.inputs.size() != 1 || n.inputs[0] != x || n.outputs.size() != 1) return std::nullopt;
  const Shape& in = g.value(x).type.shape;
  const Shape& out = g.value(n.outputs[0]).type.shape;
  if (in.size() != out.size()) return std::nullopt;
  int64_t axis = -1;
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != out[i]) {
      if (axis >= 0) return std::nullopt;
      axis = static_cast<int64_t>(i);
    }
  if (axis < 0) return std::nullopt;
  const std::vector<int64_t> starts = n.attrs.getInts("starts", {});
  std::vector<int64_t> axes = n.attrs.getInts("axes", {});
  const std::vector<int64_t> steps = n.attrs.getInts("steps", {});
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  const int64_t rank = static_cast<int64_t>(in.size()), dim = in[static_cast<size_t>(axis)];
  for (size_t k = 0; k < axes.size() && k < starts.size(); ++k) {
    const int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
    if (k < steps.size() && steps[k] != 1) return std::nullopt;
    if (a != axis) continue;
    int64_t s = starts[k] < 0 ? starts[k] + dim : starts[k];
    s = std::clamp<int64_t>(s, 0, dim);
    return std::make_pair(axis, s);
  }
  return std::nullopt;
}

class SlicesToSplit : public Substitution {
 public:
  std::string name() const override { return "slices-to-split"; }
  std::string describe() const override {
    return "Slice(x, [s_i, e_i) on axis a) for i = 1..n, tiling the axis -> Split(x, axis a)";
  }

  std::vector<SubstitutionSite> find(const Graph& g) const override {
    std::vector<SubstitutionSite> sites;
    for (ValueId x = 0; x < g.numValues(); ++x) {
      const Value& v = g.value(x);
      if (v.consumers.size() < 2 || v.type.isSequence()) continue;
      if (auto site = tiling(g, x)) sites.push_back(*site);
    }
    return sites;
  }

  RewriteEffect apply(Graph& g, const SubstitutionSite& site) const override {
    const NodeId first = siteNode(g, site, 0);
    const ValueId x = g.node(first).inputs.empty() ? kNoValue : g.node(first).inputs[0];
    auto now = x == kNoValue ? std::nullopt : tiling(g, x);
    if (!now || now->nodes != site.nodes) throw Error(site.toString() + ": the slices no longer tile an axis");
    const int64_t axis = sliceRange(g, g.node(first), x)->first;
    std::vector<int64_t> sizes;
    std::vector<ValueId> outs;
    std::vector<bool> dead(static_cast<size_t>(g.numNodes()), false);
    RewriteEffect effect;
    for (size_t i = 0; i < site.nodes.size(); ++i) {
      const NodeId n = siteNode(g, site, i);
      const ValueId y = g.node(n).outputs[0];
      sizes.push_back(g.value(y).type.shape[static_cast<size_t>(axis)]);
      outs.push_back(y);
      dead[static_cast<size_t>(n)] = true;
      effect.outputs.emplace_back(g.value(y).name, g.value(y).name);
    }
    Node split{uniqueNodeName(g, site.nodes[0] + "/split"), "Split", {}, {x}, outs};
    split.attrs.set("axis", axis);
    split.attrs.set("split", sizes);
    fillDefaults(split);
    effect.target = {split.name};
    effect.removed = site.nodes;
    g.addNode(std::move(split));
    g.removeNodes(dead);
    return effect;
  }

 private:
  // The Slices of x that tile one axis, in range order (the first axis that has such a set).
  std::optional<SubstitutionSite> tiling(const Graph& g, ValueId x) const {
    std::map<int64_t, std::vector<std::pair<int64_t, NodeId>>> byAxis;
    for (NodeId n : g.value(x).consumers)
      if (auto r = sliceRange(g, g.node(n), x)) byAxis[r->first].push_back({r->second, n});
    for (auto& [axis, slices] : byAxis) {
      if (slices.size() < 2) continue;
      std::sort(slices.begin(), slices.end());
      int64_t at = 0;
      bool ok = true;
      for (const auto& [start, n] : slices) {
        ok = ok && start == at;
        at += g.value(g.node(n).outputs[0]).type.shape[static_cast<size_t>(axis)];
      }
      if (!ok || at != g.value(x).type.shape[static_cast<size_t>(axis)]) continue;
      SubstitutionSite site{name(), {}};
      for (const auto& sn : slices) site.nodes.push_back(g.node(sn.second).name);
      return site;
    }
    return std::nullopt;
  }
};

}  // namespace

std::unique_ptr<Substitution> makeSlicesToSplit() { return std::make_unique<SlicesToSplit>(); }

}  // namespace collage
