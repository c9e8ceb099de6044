#include "core/rewrite/substitution.h"

#include <algorithm>

#include "core/ir/error.h"
#include "core/ops/op_registry.h"
#include "core/rewrite/fold_constants.h"
#include "core/rewrite/layout_chains.h"
#include "core/rewrite/merge_siblings.h"
#include "core/rewrite/substitution_spec_file.h"
#include "core/rewrite/transpose_motion.h"

namespace collage {

std::string SubstitutionSite::toString() const {
  std::string text = rule + " at ";
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i == 4 && nodes.size() > 5) {
      text += ", ... (" + std::to_string(nodes.size()) + " nodes)";
      break;
    }
    text += (i ? ", " : "") + nodes[i];
  }
  return text;
}

const std::vector<std::unique_ptr<Substitution>>& standardSubstitutions() {
  static const std::vector<std::unique_ptr<Substitution>> rules = [] {
    std::vector<std::unique_ptr<Substitution>> r;
    r.push_back(makeMergeSiblings());
    r.push_back(makeEnlargeConvKernel());
    r.push_back(makeCollapseTransposes());
    r.push_back(makeCollapseReshapes());
    r.push_back(makeSlicesToSplit());
    r.push_back(makeSinkSplit());
    r.push_back(makeFoldScaleShift());
    r.push_back(makeSinkTranspose());
    r.push_back(makeHoistTranspose());
    r.push_back(makeCancelTransposes());
    r.push_back(makeUnmergeSplit());
    return r;
  }();
  return rules;
}

const Substitution* findSubstitution(const std::string& name) {
  for (const auto& r : standardSubstitutions())
    if (r->name() == name) return r.get();
  return findSpecSubstitution(name);  // rules in spec files (substitution_spec_file.h)
}

std::string uniqueNodeName(const Graph& graph, const std::string& base) {
  if (!graph.findNode(base)) return base;
  for (int i = 2;; ++i) {
    std::string name = base + "#" + std::to_string(i);
    if (!graph.findNode(name)) return name;
  }
}

std::string uniqueValueName(const Graph& graph, const std::string& base) {
  if (!graph.findValue(base)) return base;
  for (int i = 2;; ++i) {
    std::string name = base + "#" + std::to_string(i);
    if (!graph.findValue(name)) return name;
  }
}

NodeId siteNode(const Graph& graph, const SubstitutionSite& site, size_t i) {
  COLLAGE_CHECK(i < site.nodes.size(), "site node index out of range");
  auto id = graph.findNode(site.nodes[i]);
  if (!id) throw Error(site.toString() + ": the graph has no node '" + site.nodes[i] + "'");
  return *id;
}

void fillDefaults(Node& node) {
  for (const AttributeSpec& a : OpRegistry::instance().get(node.op).attributes)
    if (!node.attrs.has(a.name) && a.defaultValue) node.attrs.set(a.name, *a.defaultValue);
}

ValueId addNodeWithOutput(Graph& g, Node node, const std::string& outputBase) {
  fillDefaults(node);
  std::vector<TensorType> types;
  for (ValueId v : node.inputs) types.push_back(v == kNoValue ? TensorType{} : g.value(v).type);
  node.outputs = {0};
  const std::vector<TensorType> out = inferNode(node, types);
  node.outputs = {g.addValue(uniqueValueName(g, outputBase), out.at(0))};
  const ValueId v = node.outputs[0];
  g.addNode(std::move(node));
  return v;
}

void replaceUses(Graph& graph, ValueId from, ValueId to) {
  const std::vector<NodeId> readers = graph.value(from).consumers;
  for (NodeId n : readers)
    for (ValueId& v : graph.mutableNode(n).inputs)
      if (v == from) v = to;
}

bool readBySubgraphOwner(const Graph& graph, ValueId v) {
  for (NodeId n : graph.value(v).consumers)
    for (const auto& [name, attr] : graph.node(n).attrs)
      if (std::holds_alternative<std::shared_ptr<const Graph>>(attr)) return true;
  return false;
}

}  // namespace collage
