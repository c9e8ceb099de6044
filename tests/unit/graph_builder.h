// Small graphs built by hand for the unit tests: inputs, random constants
// and nodes whose output types come from the op registry's shape inference.
#pragma once

#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/node_set.h"
#include "core/ops/op_registry.h"

namespace collage {

// Builds small graphs by hand: inputs, random constants and nodes whose
// output types come from the op registry's shape inference.
class GraphBuilder {
 public:
  explicit GraphBuilder(uint64_t seed = 7) : rng_(seed) {}

  ValueId input(const Shape& s) { return g_.addInput(fresh("in"), {ElementType::Float32, s}); }

  ValueId constant(const Shape& s, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(static_cast<size_t>(numElements(s)));
    for (float& x : v) x = d(rng_);
    return g_.addConstant(fresh("c"), Tensor::fromFloats(s, v));
  }
  ValueId scalar(float v) { return g_.addConstant(fresh("c"), Tensor::scalarFloat(v)); }

  // Adds a node (attribute defaults filled in as the importer does); nodes
  // added after beginGroup() form the group under test.
  ValueId op(const std::string& opName, std::vector<ValueId> ins, AttributeMap attrs = {},
             int outputs = 1) {
    const OpSchema& schema = OpRegistry::instance().get(opName);
    for (const AttributeSpec& a : schema.attributes)
      if (!attrs.has(a.name) && a.defaultValue) attrs.set(a.name, *a.defaultValue);
    // Shape inference may look at which outputs the node has (MaxPool's Indices).
    Node n{fresh(opName), opName, attrs, ins, std::vector<ValueId>(outputs, 0)};
    std::vector<TensorType> types;
    for (ValueId v : ins) types.push_back(v == kNoValue ? TensorType{} : g_.value(v).type);
    std::vector<TensorType> outs = inferNode(n, types);
    n.outputs.clear();
    for (int i = 0; i < outputs && i < static_cast<int>(outs.size()); ++i)
      n.outputs.push_back(g_.addValue(fresh("t"), outs[i]));
    if (grouping_) group_.push_back(n.name);
    g_.addNode(n);
    return n.outputs[0];
  }

  void beginGroup() { grouping_ = true; }
  void endGroup() { grouping_ = false; }
  const Shape& shape(ValueId v) const { return g_.value(v).type.shape; }

  // Finalises the graph with `out` as its output; returns the group's nodes.
  NodeSet finish(ValueId out) {
    g_.markOutput(out);
    g_.finalize();
    NodeSet s(g_.numNodes());
    for (const std::string& name : group_) s.insert(*g_.findNode(name));
    return s;
  }
  Graph& graph() { return g_; }

 private:
  std::string fresh(const std::string& base) { return base + std::to_string(counter_++); }

  Graph g_;
  std::mt19937 rng_;
  int counter_ = 0;
  bool grouping_ = true;
  std::vector<std::string> group_;
};

inline AttributeMap attrs(std::initializer_list<std::pair<std::string, Attribute>> list) {
  AttributeMap m;
  for (const auto& [k, v] : list) m.set(k, v);
  return m;
}
using Ints = std::vector<int64_t>;

}  // namespace collage
