// What the user imposes on a placement: pins (these nodes run on that
// backend; pins beat the search) and forbids (that backend must not run these
// nodes). Nodes are selected by name, by regular expression over names
// (`re:^layer1\.`) or by op type (`op:Conv`). A pinned group (`a+b+c`) must
// run as exactly one kernel of the pinned backend.
#pragma once

#include <string>
#include <vector>

#include "core/patterns/candidate.h"
#include "core/ir/graph.h"

namespace collage {

struct NodeSelector {
  enum class Kind { Name, Regex, OpType };
  Kind kind = Kind::Name;
  std::string text;

  // "conv1", "re:^conv", "op:Conv"
  static NodeSelector parse(const std::string& spec);
  std::vector<NodeId> select(const Graph& graph) const;
  std::string toString() const;
};

struct Pin {
  std::vector<NodeSelector> nodes;  // several = one group ('a+b')
  bool group = false;
  std::string backend;
};

struct Forbid {
  NodeSelector nodes;
  std::string backend;
};

struct PlacementConstraints {
  std::vector<Pin> pins;
  std::vector<Forbid> forbids;

  // "conv1=onednn", "op:Conv=openblas", "conv1+relu1=onednn"
  static Pin parsePin(const std::string& text);
  // "op:Softmax=native"
  static Forbid parseForbid(const std::string& text);
  bool empty() const { return pins.empty() && forbids.empty(); }
};

// Which candidates the constraints allow (a mask over the set). Throws Error
// when a selector matches no node, or a pin leaves a node with no allowed
// candidate (naming the node, the backend and why).
std::vector<bool> allowedCandidates(const Graph& graph, const CandidateSet& candidates,
                                    const PlacementConstraints& constraints);

}  // namespace collage
