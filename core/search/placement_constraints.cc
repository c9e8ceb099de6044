#include "core/search/placement_constraints.h"

#include <regex>

#include "core/ir/error.h"

namespace collage {

NodeSelector NodeSelector::parse(const std::string& spec) {
  NodeSelector s;
  if (spec.rfind("re:", 0) == 0) {
    s.kind = Kind::Regex;
    s.text = spec.substr(3);
    try {
      std::regex check(s.text);
    } catch (const std::regex_error& e) {
      throw Error("bad regular expression '" + s.text + "': " + e.what());
    }
  } else if (spec.rfind("op:", 0) == 0) {
    s.kind = Kind::OpType;
    s.text = spec.substr(3);
  } else {
    s.text = spec;
  }
  if (s.text.empty()) throw Error("empty node selector '" + spec + "'");
  return s;
}

std::vector<NodeId> NodeSelector::select(const Graph& graph) const {
  std::vector<NodeId> out;
  std::regex re;
  if (kind == Kind::Regex) re = std::regex(text);
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    const Node& node = graph.node(n);
    bool hit = kind == Kind::Name     ? node.name == text
               : kind == Kind::OpType ? node.op == text
                                      : std::regex_search(node.name, re);
    if (hit) out.push_back(n);
  }
  return out;
}

std::string NodeSelector::toString() const {
  return (kind == Kind::Regex ? "re:" : kind == Kind::OpType ? "op:" : "") + text;
}

namespace {
std::pair<std::string, std::string> splitAssignment(const std::string& text, const char* what) {
  auto eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw Error(std::string("bad ") + what + " '" + text + "': expected NODES=BACKEND");
  return {text.substr(0, eq), text.substr(eq + 1)};
}
}  // namespace

Pin PlacementConstraints::parsePin(const std::string& text) {
  auto [lhs, backend] = splitAssignment(text, "pin");
  Pin pin;
  pin.backend = backend;
  size_t start = 0;
  while (true) {
    size_t plus = lhs.find('+', start);
    pin.nodes.push_back(NodeSelector::parse(lhs.substr(start, plus - start)));
    if (plus == std::string::npos) break;
    start = plus + 1;
  }
  pin.group = pin.nodes.size() > 1;
  return pin;
}

Forbid PlacementConstraints::parseForbid(const std::string& text) {
  auto [lhs, backend] = splitAssignment(text, "forbid");
  return Forbid{NodeSelector::parse(lhs), backend};
}

std::vector<bool> allowedCandidates(const Graph& graph, const CandidateSet& candidates,
                                    const PlacementConstraints& constraints) {
  std::vector<bool> allowed(candidates.size(), true);
  auto selectOrThrow = [&](const NodeSelector& s) {
    auto nodes = s.select(graph);
    if (nodes.empty()) throw Error("'" + s.toString() + "' matches no node of the model");
    return nodes;
  };
  for (const auto& f : constraints.forbids) {
    NodeSet nodes = NodeSet::of(graph.numNodes(), selectOrThrow(f.nodes));
    for (size_t i = 0; i < candidates.size(); ++i)
      if (candidates[i].backend == f.backend && candidates[i].nodes.intersects(nodes))
        allowed[i] = false;
  }
  for (const auto& pin : constraints.pins) {
    NodeSet nodes(graph.numNodes());
    for (const auto& s : pin.nodes)
      for (NodeId n : selectOrThrow(s)) nodes.insert(n);
    if (pin.group) {
      // Exactly one kernel of that backend, covering exactly these nodes.
      bool found = false;
      for (size_t i = 0; i < candidates.size(); ++i) {
        if (!candidates[i].nodes.intersects(nodes)) continue;
        bool exact = candidates[i].backend == pin.backend && candidates[i].nodes == nodes;
        if (exact && allowed[i]) found = true;
        else allowed[i] = false;
      }
      if (!found)
        throw Error("pin '" + pin.backend + "': " + pin.backend +
                    " has no valid candidate covering exactly " + nodes.toString() +
                    " (no pattern or rule of it matches that group)");
      continue;
    }
    // Each selected node on that backend (in any of its groups).
    for (size_t i = 0; i < candidates.size(); ++i)
      if (candidates[i].nodes.intersects(nodes) && candidates[i].backend != pin.backend)
        allowed[i] = false;
    nodes.forEach([&](NodeId n) {
      bool any = false;
      for (int32_t i : candidates.covering(n)) any = any || allowed[i];
      if (!any)
        throw Error("cannot pin node '" + graph.node(n).name + "' (" + graph.node(n).op +
                    ") to " + pin.backend + ": it has no valid candidate there");
    });
  }
  return allowed;
}

}  // namespace collage
