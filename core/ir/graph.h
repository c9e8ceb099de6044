// The core graph IR: Values (tensors with a static TensorType) and Nodes (ONNX
// ops with attributes), nodes stored in topological order. A node's index in
// that order is its identity inside the core (TVM's post-DFS index): NodeSets,
// candidates, plans and searches all speak in these indices.
//
// Constants (ONNX initializers and folded shape subgraphs) are Values that
// carry a Tensor and have no producer. Absent optional inputs are kNoValue.
//
// Subgraphs. If, Loop and Scan hold their bodies as graph attributes (a
// Graph each). A body reads values of the enclosing graph by name in ONNX;
// here every such outer value is made explicit, so that liveness, the
// pattern generator and the Session see the dependency: the owning node's
// inputs are its ONNX inputs followed by the outer values its bodies read
// (outer constants are copied into the body instead), and a body's inputs()
// are its formal inputs followed by one input per outer value it reads, at
// the node input positions listed in outerInputSlots.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/attribute.h"
#include "core/ir/tensor.h"

namespace collage {

using ValueId = int32_t;
using NodeId = int32_t;
inline constexpr ValueId kNoValue = -1;
inline constexpr NodeId kNoNode = -1;

struct Value {
  std::string name;
  TensorType type;
  NodeId producer = kNoNode;   // kNoNode for graph inputs and constants
  int producerOutput = 0;      // which output of the producer
  std::vector<NodeId> consumers;  // each consuming node once, ascending
  std::optional<Tensor> constant;  // set for initializers / folded values
  bool isGraphInput = false;
  bool isGraphOutput = false;

  bool isConstant() const { return constant.has_value(); }
};

struct Node {
  std::string name;  // ONNX node name; unique (the importer invents one if empty)
  std::string op;    // ONNX op type: "Conv", "Relu", ...
  AttributeMap attrs;
  std::vector<ValueId> inputs;   // kNoValue for an absent optional input
  std::vector<ValueId> outputs;  // kNoValue for an absent optional output
};

class Graph {
 public:
  // Building. Values and nodes may be added in any order; finalize() sorts the
  // nodes topologically (stable: keeps the given order where it is valid),
  // fills producers and consumers, and checks that the graph is a DAG with
  // every input defined. Call it once after building and after any edit.
  ValueId addValue(const std::string& name, TensorType type);
  ValueId addInput(const std::string& name, TensorType type);
  ValueId addConstant(const std::string& name, Tensor value);
  NodeId addNode(Node node);
  void markOutput(ValueId v);
  void finalize();
  // Editing (graph substitutions, core/rewrite/): drops the nodes marked in
  // `dead` (indexed by NodeId), then every value no node, input or output
  // uses any more (value ids change), and finalizes again.
  void removeNodes(const std::vector<bool>& dead);

  // Access.
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  Node& mutableNode(NodeId id) { return nodes_.at(static_cast<size_t>(id)); }
  int32_t numNodes() const { return static_cast<int32_t>(nodes_.size()); }
  const std::vector<Value>& values() const { return values_; }
  const Value& value(ValueId id) const { return values_.at(static_cast<size_t>(id)); }
  Value& mutableValue(ValueId id) { return values_.at(static_cast<size_t>(id)); }
  int32_t numValues() const { return static_cast<int32_t>(values_.size()); }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  std::optional<ValueId> findValue(const std::string& name) const;
  std::optional<NodeId> findNode(const std::string& name) const;

  // The type of a node's i-th input (kNoValue inputs give an Undefined type).
  const TensorType& inputType(NodeId n, size_t i) const;
  const TensorType& outputType(NodeId n, size_t i) const;
  // Nodes that consume any output of n / produce any input of n (no duplicates, ascending).
  std::vector<NodeId> successors(NodeId n) const;
  std::vector<NodeId> predecessors(NodeId n) const;

  std::string name;
  std::map<std::string, int64_t> opsetImports;  // domain ("" = ai.onnx) -> version
  std::string sourcePath;  // the file it came from, for messages
  // For a subgraph: where each input after the formal ones comes from among
  // the owning node's inputs (see "Subgraphs" above). Empty for a model graph.
  std::vector<int32_t> outerInputSlots;
  int32_t numFormalInputs() const {
    return static_cast<int32_t>(inputs_.size() - outerInputSlots.size());
  }

  // A stable digest of everything that decides what the graph computes
  // (nodes, attributes, types, constant values), for signatures.
  std::string digest() const;

  // One line per node: "#3 Conv 'conv1' (x, w) -> (y: float32[1x64x112x112]) {...}".
  std::string toString() const;

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  std::map<std::string, ValueId> valueByName_;
  std::map<std::string, NodeId> nodeByName_;
};

}  // namespace collage
