#include "core/patterns/candidate_signature.h"

#include <map>

#include "core/ir/hashing.h"

namespace collage {

CandidateSignature candidateSignature(const Graph& graph, const NodeSet& nodes) {
  // Members are numbered by their rank in topological order; outside data
  // values by first use; constants by their type only (a kernel's speed does
  // not depend on weight values).
  std::map<NodeId, int> memberIndex;
  int k = 0;
  nodes.forEach([&](NodeId n) { memberIndex[n] = k++; });
  std::map<ValueId, int> externalIndex;
  std::string text;
  nodes.forEach([&](NodeId n) {
    const Node& node = graph.node(n);
    text += node.op + " " + node.attrs.toString() + " (";
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (i) text += ", ";
      ValueId v = node.inputs[i];
      if (v == kNoValue) {
        text += "-";
        continue;
      }
      const Value& val = graph.value(v);
      if (val.isConstant()) {
        text += "const " + val.type.toString();
      } else if (val.producer != kNoNode && nodes.contains(val.producer)) {
        text += "%" + std::to_string(memberIndex[val.producer]) + "." +
                std::to_string(val.producerOutput);
      } else {
        auto [it, inserted] = externalIndex.emplace(v, static_cast<int>(externalIndex.size()));
        text += "in" + std::to_string(it->second) + " " + val.type.toString();
      }
    }
    text += ") -> (";
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (o) text += ", ";
      ValueId v = node.outputs[o];
      if (v == kNoValue) {
        text += "-";
        continue;
      }
      const Value& val = graph.value(v);
      text += val.type.toString();
      bool escapes = val.isGraphOutput;
      for (NodeId c : val.consumers) escapes = escapes || !nodes.contains(c);
      if (escapes) text += " out";
    }
    text += ")\n";
  });
  return CandidateSignature{text, stableHashHex(text)};
}

}  // namespace collage
