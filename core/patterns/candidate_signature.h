// The canonical signature of a group of nodes: its ops, attributes, shapes,
// element types and internal edges, never node or tensor names. Two groups
// with the same signature run the same kernel, so a measurement taken in one
// model is a cache hit in another.
#pragma once

#include <string>

#include "core/ir/graph.h"
#include "core/ir/node_set.h"

namespace collage {

struct CandidateSignature {
  std::string text;  // canonical, human-readable: one line per member node
  std::string hash;  // stableHashHex(text)
};

CandidateSignature candidateSignature(const Graph& graph, const NodeSet& nodes);

}  // namespace collage
