#include "core/rewrite/layout_chains.h"

#include <numeric>

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
