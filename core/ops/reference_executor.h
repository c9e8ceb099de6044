// Runs a graph op by op with the registry's reference kernels: the ground
// truth every backend is checked against. It favours obvious correctness over
// speed; intermediate tensors are released after their last reader.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/ir/graph.h"
#include "core/ir/tensor.h"

namespace collage {

// Evaluates one node on the given inputs (nullptr for absent optional ones).
// Output types are inferred from the input types. Errors name the node.
std::vector<Tensor> evaluateNode(const Node& node, const std::vector<const Tensor*>& inputs);

class ReferenceExecutor {
 public:
  explicit ReferenceExecutor(const Graph& graph);

  // Inputs in the order of graph.inputs(); outputs in the order of graph.outputs().
  // Checks every input's type against the graph and names the tensor if it differs.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  // Inputs by name; every graph input must be given.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs) const;
  // The values of `wanted` (any values of the graph) on these inputs.
  std::vector<Tensor> valuesOf(const std::vector<Tensor>& inputs,
                               const std::vector<ValueId>& wanted) const;

 private:
  const Graph& graph_;
  std::vector<int32_t> lastUse_;  // per value: index of the last node reading it
};

// Random inputs for every graph input: floats uniform in [-1, 1), integers in
// [0, 10) (token ids and indices stay in range for the zoo), bools random.
std::vector<Tensor> randomInputs(const Graph& graph, uint64_t seed = 0);

}  // namespace collage
