// Candidates: every (valid sub-graph, backend) pair the placement search may
// choose from, with the pattern or rule that produced it.
//
// Enumeration asks each chosen backend's spec: every enabled pattern is
// matched over the graph (overlapping matches included) and the backend's
// pattern rule, if any, runs the pattern generator. Each group is checked once
// by the core (checkSubGraph with the backend's limits); duplicates (same
// nodes, same backend) keep the first origin. Candidates are indexed by their
// first node in topological order, which is how the op-level search walks them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/patterns/backend_spec.h"
#include "core/ir/graph.h"
#include "core/ir/node_set.h"
#include "core/patterns/pattern_rule.h"
#include "core/ir/sub_graph.h"

namespace collage {

struct Candidate {
  NodeSet nodes;
  std::string backend;
  std::string origin;  // "pattern:conv_relu", "rule:fusion:anchor_elemwise", "rule:op"
  std::map<std::string, NodeId> captures;

  NodeId firstNode() const { return nodes.first(); }
  // "onednn pattern:conv_relu {conv1 Conv, relu1 Relu}"
  std::string toString(const Graph& graph) const;
};

class CandidateSet {
 public:
  CandidateSet() = default;
  explicit CandidateSet(int32_t numNodes) : byFirstNode_(static_cast<size_t>(numNodes)) {}

  // Adds unless the same nodes on the same backend are already there; returns
  // whether it was added.
  bool add(Candidate candidate);

  const std::vector<Candidate>& all() const { return candidates_; }
  size_t size() const { return candidates_.size(); }
  const Candidate& operator[](size_t i) const { return candidates_[i]; }
  // Indices of the candidates whose lowest node is n.
  const std::vector<int32_t>& startingAt(NodeId n) const { return byFirstNode_.at(n); }
  // Indices of every candidate containing n.
  std::vector<int32_t> covering(NodeId n) const;
  // Nodes no candidate covers.
  std::vector<NodeId> uncovered() const;

 private:
  std::vector<Candidate> candidates_;
  std::vector<std::vector<int32_t>> byFirstNode_;
  std::map<std::string, std::vector<int32_t>> byBackend_;  // to deduplicate quickly
};

// Where a backend's capabilities come from: its spec, and optionally a rule
// written in C++ (PatternRule) that the backend supplies in code.
struct BackendCapabilities {
  const BackendSpec* spec = nullptr;
  std::shared_ptr<const PatternRule> codeRule;
};

struct EnumerationOptions {
  // Throw an Error naming every uncovered node (with its op) when some node
  // has no candidate at all.
  bool requireFullCover = true;
};

CandidateSet enumerateCandidates(const Graph& graph, const std::vector<BackendCapabilities>& backends,
                                 const EnumerationOptions& options = {});

}  // namespace collage
