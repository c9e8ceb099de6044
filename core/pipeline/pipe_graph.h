// The DAG the pipeline planner works on: nodes (operators, or whole groups of
// a plan) and the bytes each edge carries per sample.
//
//   x ──4 KiB/sample──▶ conv ──16 KiB──▶ relu ──▶ ...
//
// It is deliberately smaller than core/ir's Graph: the partitioner needs only
// who feeds whom and how many bytes cross an edge for one sample (what a
// stage boundary there costs on a link). Times and memory come from a
// StageCostModel (stage_cost.h), keyed by the same node ids. pipeGraphOf
// derives one from a model's Graph (one node per operator); planning on a
// plan's groups instead (one node per group) is for the CLI piece.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace collage {

class Graph;

struct PipeEdge {
  int from = 0;
  int to = 0;
  double bytesPerSample = 0;  // what crosses this edge for one sample
};

class PipeGraph {
 public:
  int addNode(std::string name);
  // Throws collage::Error for an unknown node, a self-loop or negative bytes.
  void addEdge(int from, int to, double bytesPerSample);

  int size() const { return static_cast<int>(names_.size()); }
  const std::string& name(int node) const { return names_.at(node); }
  const std::vector<PipeEdge>& edges() const { return edges_; }
  const std::vector<int>& predecessors(int node) const { return preds_.at(node); }
  const std::vector<int>& successors(int node) const { return succs_.at(node); }

  // Kahn's order, smallest id first among the ready nodes (deterministic).
  // Throws collage::Error naming a node on a cycle: the planner needs a DAG.
  std::vector<int> topologicalOrder() const;

  // "a, b, c" for a sorted list of node ids.
  std::string names(const std::vector<int>& nodes) const;

 private:
  std::vector<std::string> names_;
  std::vector<PipeEdge> edges_;
  std::vector<std::vector<int>> preds_, succs_;  // node ids, each edge once
};

// The operators of `graph` and the values between them. A value's bytes per
// sample are its bytes over `batch`, the batch the model's static shapes were
// made for (activations scale with the batch; a value that does not, such as
// a shape, is small). Constants are weights, which the cost model counts, and
// graph inputs arrive at whichever stage reads them: neither is an edge.
PipeGraph pipeGraphOf(const Graph& graph, int64_t batch);

}  // namespace collage
