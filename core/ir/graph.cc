#include "core/ir/graph.h"

#include <algorithm>
#include <queue>
#include <sstream>

#include "core/ir/error.h"
#include "core/ir/hashing.h"

namespace collage {

ValueId Graph::addValue(const std::string& name, TensorType type) {
  if (!name.empty() && valueByName_.count(name))
    throw Error("tensor '" + name + "' is defined twice");
  Value v;
  v.name = name;
  v.type = std::move(type);
  values_.push_back(std::move(v));
  ValueId id = static_cast<ValueId>(values_.size() - 1);
  if (!name.empty()) valueByName_[name] = id;
  return id;
}

ValueId Graph::addInput(const std::string& name, TensorType type) {
  ValueId id = addValue(name, std::move(type));
  values_[id].isGraphInput = true;
  inputs_.push_back(id);
  return id;
}

ValueId Graph::addConstant(const std::string& name, Tensor t) {
  TensorType type = t.type();
  ValueId id = addValue(name, type);
  values_[id].constant = std::move(t);
  return id;
}

NodeId Graph::addNode(Node node) {
  nodes_.push_back(std::move(node));
  return static_cast<NodeId>(nodes_.size() - 1);
}

void Graph::markOutput(ValueId v) {
  values_.at(v).isGraphOutput = true;
  if (std::find(outputs_.begin(), outputs_.end(), v) == outputs_.end()) outputs_.push_back(v);
}

void Graph::finalize() {
  const size_t n = nodes_.size();
  // Producers, checking single assignment.
  std::vector<NodeId> producerOf(values_.size(), kNoNode);
  for (size_t i = 0; i < n; ++i) {
    for (ValueId v : nodes_[i].outputs) {
      if (v == kNoValue) continue;
      COLLAGE_CHECK(v >= 0 && static_cast<size_t>(v) < values_.size(), "bad value id");
      if (producerOf[v] != kNoNode || values_[v].isGraphInput || values_[v].isConstant())
        throw Error("tensor '" + values_[v].name + "' is produced twice (node '" +
                    nodes_[i].name + "')");
      producerOf[v] = static_cast<NodeId>(i);
    }
  }
  // Kahn's algorithm, always taking the lowest original index ready: stable.
  std::vector<int> indegree(n, 0);
  std::vector<std::vector<NodeId>> succ(n);
  for (size_t i = 0; i < n; ++i) {
    for (ValueId v : nodes_[i].inputs) {
      if (v == kNoValue) continue;
      COLLAGE_CHECK(v >= 0 && static_cast<size_t>(v) < values_.size(), "bad value id");
      const Value& val = values_[v];
      NodeId p = producerOf[v];
      if (p == kNoNode) {
        if (!val.isGraphInput && !val.isConstant())
          throw Error("node '" + nodes_[i].name + "' (" + nodes_[i].op + ") reads tensor '" +
                      val.name + "', which no node, input or initializer defines");
        continue;
      }
      succ[p].push_back(static_cast<NodeId>(i));
      ++indegree[i];
    }
  }
  std::priority_queue<NodeId, std::vector<NodeId>, std::greater<>> ready;
  for (size_t i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push(static_cast<NodeId>(i));
  std::vector<NodeId> order;
  order.reserve(n);
  while (!ready.empty()) {
    NodeId u = ready.top();
    ready.pop();
    order.push_back(u);
    for (NodeId s : succ[u])
      if (--indegree[s] == 0) ready.push(s);
  }
  if (order.size() != n) {
    for (size_t i = 0; i < n; ++i)
      if (indegree[i] > 0)
        throw Error("the graph has a cycle through node '" + nodes_[i].name + "' (" +
                    nodes_[i].op + ")");
  }
  std::vector<Node> sorted;
  sorted.reserve(n);
  for (NodeId id : order) sorted.push_back(std::move(nodes_[id]));
  nodes_ = std::move(sorted);

  for (auto& v : values_) {
    v.producer = kNoNode;
    v.producerOutput = 0;
    v.consumers.clear();
  }
  nodeByName_.clear();
  for (size_t i = 0; i < n; ++i) {
    const Node& node = nodes_[i];
    if (!node.name.empty()) nodeByName_[node.name] = static_cast<NodeId>(i);
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (node.outputs[o] == kNoValue) continue;
      values_[node.outputs[o]].producer = static_cast<NodeId>(i);
      values_[node.outputs[o]].producerOutput = static_cast<int>(o);
    }
    for (ValueId v : node.inputs) {
      if (v == kNoValue) continue;
      auto& c = values_[v].consumers;
      if (c.empty() || c.back() != static_cast<NodeId>(i)) c.push_back(static_cast<NodeId>(i));
    }
  }
  for (ValueId o : outputs_) {
    const Value& v = values_[o];
    if (v.producer == kNoNode && !v.isGraphInput && !v.isConstant())
      throw Error("graph output '" + v.name + "' is not produced by any node");
  }
}

void Graph::removeNodes(const std::vector<bool>& dead) {
  std::vector<Node> kept;
  kept.reserve(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (i >= dead.size() || !dead[i]) kept.push_back(std::move(nodes_[i]));
  nodes_ = std::move(kept);
  std::vector<bool> used(values_.size(), false);
  for (ValueId v : inputs_) used[v] = true;
  for (ValueId v : outputs_) used[v] = true;
  for (const Node& node : nodes_) {
    for (ValueId v : node.inputs)
      if (v != kNoValue) used[v] = true;
    for (ValueId v : node.outputs)
      if (v != kNoValue) used[v] = true;
  }
  std::vector<ValueId> remap(values_.size(), kNoValue);
  std::vector<Value> values;
  for (size_t v = 0; v < values_.size(); ++v) {
    if (!used[v]) continue;
    remap[v] = static_cast<ValueId>(values.size());
    values.push_back(std::move(values_[v]));
  }
  values_ = std::move(values);
  auto map = [&](ValueId& v) {
    if (v != kNoValue) v = remap[v];
  };
  for (Node& node : nodes_) {
    for (ValueId& v : node.inputs) map(v);
    for (ValueId& v : node.outputs) map(v);
  }
  for (ValueId& v : inputs_) map(v);
  for (ValueId& v : outputs_) map(v);
  valueByName_.clear();
  for (size_t v = 0; v < values_.size(); ++v)
    if (!values_[v].name.empty()) valueByName_[values_[v].name] = static_cast<ValueId>(v);
  finalize();
}

std::optional<ValueId> Graph::findValue(const std::string& name) const {
  auto it = valueByName_.find(name);
  if (it == valueByName_.end()) return std::nullopt;
  return it->second;
}

std::optional<NodeId> Graph::findNode(const std::string& name) const {
  auto it = nodeByName_.find(name);
  if (it == nodeByName_.end()) return std::nullopt;
  return it->second;
}

namespace {
const TensorType kUndefinedType{};
}

const TensorType& Graph::inputType(NodeId n, size_t i) const {
  const Node& node = this->node(n);
  if (i >= node.inputs.size() || node.inputs[i] == kNoValue) return kUndefinedType;
  return values_[node.inputs[i]].type;
}

const TensorType& Graph::outputType(NodeId n, size_t i) const {
  const Node& node = this->node(n);
  if (i >= node.outputs.size() || node.outputs[i] == kNoValue) return kUndefinedType;
  return values_[node.outputs[i]].type;
}

std::vector<NodeId> Graph::successors(NodeId n) const {
  std::vector<NodeId> out;
  for (ValueId v : node(n).outputs)
    if (v != kNoValue) out.insert(out.end(), values_[v].consumers.begin(), values_[v].consumers.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<NodeId> Graph::predecessors(NodeId n) const {
  std::vector<NodeId> out;
  for (ValueId v : node(n).inputs)
    if (v != kNoValue && values_[v].producer != kNoNode) out.push_back(values_[v].producer);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string Graph::toString() const {
  std::ostringstream os;
  auto valueName = [&](ValueId v) { return v == kNoValue ? std::string("-") : values_[v].name; };
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    os << "#" << i << " " << node.op << " '" << node.name << "' (";
    for (size_t k = 0; k < node.inputs.size(); ++k) os << (k ? ", " : "") << valueName(node.inputs[k]);
    os << ") -> (";
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      os << (k ? ", " : "") << valueName(node.outputs[k]);
      if (node.outputs[k] != kNoValue) os << ": " << values_[node.outputs[k]].type.toString();
    }
    os << ")";
    if (node.attrs.size()) os << " " << node.attrs.toString();
    os << "\n";
  }
  return os.str();
}

std::string Graph::digest() const {
  std::string text = toString();
  for (ValueId v : inputs_) text += "in " + values_[v].name + ": " + values_[v].type.toString() + "\n";
  for (ValueId v : outputs_) text += "out " + values_[v].name + "\n";
  for (int32_t s : outerInputSlots) text += "slot " + std::to_string(s) + "\n";
  for (const Value& v : values_) {
    if (!v.isConstant() || (v.consumers.empty() && !v.isGraphOutput)) continue;
    const Tensor& t = *v.constant;
    text += "const " + v.name + ": " + t.type().toString() + " ";
    text += t.isSequence() ? t.toString()
                           : stableHashHex(std::string_view(static_cast<const char*>(t.raw()), t.byteSize()));
    text += "\n";
  }
  return stableHashHex(text);
}

}  // namespace collage
