#include "core/patterns/candidate.h"

#include "core/patterns/pattern_generator.h"
#include "core/patterns/pattern_matcher.h"

namespace collage {

std::string Candidate::toString(const Graph& graph) const {
  std::string s = backend + " " + origin + " {";
  bool first = true;
  nodes.forEach([&](NodeId n) {
    if (!first) s += ", ";
    first = false;
    s += graph.node(n).name + " " + graph.node(n).op;
  });
  return s + "}";
}

bool CandidateSet::add(Candidate candidate) {
  auto& same = byBackend_[candidate.backend];
  for (int32_t i : same)
    if (candidates_[i].nodes == candidate.nodes) return false;
  const int32_t index = static_cast<int32_t>(candidates_.size());
  NodeId first = candidate.firstNode();
  COLLAGE_CHECK(first != kNoNode, "empty candidate");
  same.push_back(index);
  byFirstNode_.at(first).push_back(index);
  candidates_.push_back(std::move(candidate));
  return true;
}

std::vector<int32_t> CandidateSet::covering(NodeId n) const {
  std::vector<int32_t> out;
  for (size_t i = 0; i < candidates_.size(); ++i)
    if (candidates_[i].nodes.contains(n)) out.push_back(static_cast<int32_t>(i));
  return out;
}

std::vector<NodeId> CandidateSet::uncovered() const {
  if (byFirstNode_.empty()) return {};
  NodeSet covered(static_cast<int32_t>(byFirstNode_.size()));
  for (const auto& c : candidates_) covered |= c.nodes;
  std::vector<NodeId> out;
  for (NodeId n = 0; n < covered.capacity(); ++n)
    if (!covered.contains(n)) out.push_back(n);
  return out;
}

namespace {

bool hasSequences(const Graph& graph) {
  for (ValueId v = 0; v < graph.numValues(); ++v)
    if (graph.value(v).type.isSequence()) return true;
  return false;
}

// True if a sequence would enter or leave the group. A sequence never crosses
// a kernel boundary (backends exchange tensors), so such a group is no
// candidate on any backend; the nodes a sequence links run as one group.
bool passesASequence(const Graph& graph, const NodeSet& nodes) {
  bool passes = false;
  nodes.forEach([&](NodeId n) {
    const Node& node = graph.node(n);
    for (ValueId v : node.inputs) {
      const Value* value = v == kNoValue ? nullptr : &graph.value(v);
      if (!value || !value->type.isSequence() || value->isConstant()) continue;  // constants stay inside
      passes = passes || value->producer == kNoNode || !nodes.contains(value->producer);
    }
    for (ValueId v : node.outputs) {
      if (v == kNoValue || !graph.value(v).type.isSequence()) continue;
      const Value& value = graph.value(v);
      passes = passes || value.isGraphOutput;
      for (NodeId c : value.consumers) passes = passes || !nodes.contains(c);
    }
  });
  return passes;
}

}  // namespace

CandidateSet enumerateCandidates(const Graph& graph, const std::vector<BackendCapabilities>& backends,
                                 const EnumerationOptions& options) {
  CandidateSet set(graph.numNodes());
  const bool sequences = hasSequences(graph);
  auto offer = [&](Candidate c) {
    if (!sequences || !passesASequence(graph, c.nodes)) set.add(std::move(c));
  };
  // One generator for every rule: it builds the post-dominator tree and the
  // reachability sets once, and the validity checks reuse the latter.
  PatternGenerator generator(graph);
  const GraphReachability& reach = generator.reachability();
  PatternMatcher matcher(graph);
  for (const auto& b : backends) {
    const BackendSpec& spec = *b.spec;
    for (const auto& entry : spec.patterns) {
      if (!entry.enabled) continue;
      for (PatternMatch& m : matcher.findMatches(entry.pattern)) {
        if (!checkSubGraph(graph, reach, m.nodes, spec.limits)) continue;
        offer(Candidate{std::move(m.nodes), spec.name, "pattern:" + entry.name,
                        std::move(m.captures)});
      }
    }
    std::vector<const PatternRule*> rules;
    if (spec.rule) rules.push_back(spec.rule.get());
    if (b.codeRule) rules.push_back(b.codeRule.get());
    for (const PatternRule* rule : rules) {
      for (GeneratedGroup& g : generator.generate(*rule, spec.limits))
        offer(Candidate{std::move(g.nodes), spec.name, "rule:" + g.label, {}});
      // A group the rule names whole must be convex; the spec's size and exit
      // limits are for grown groups, and the backend that names it runs it.
      const SubGraphLimits convexOnly{0, 0, 0, true};
      for (auto& [nodes, label] : rule->wholeGroups(graph))
        if (checkSubGraph(graph, reach, nodes, convexOnly))
          offer(Candidate{std::move(nodes), spec.name, "rule:" + label, {}});
    }
  }
  if (options.requireFullCover) {
    std::vector<NodeId> missing = set.uncovered();
    if (!missing.empty()) {
      std::string names;
      std::string backendNames;
      for (const auto& b : backends) backendNames += (backendNames.empty() ? "" : ", ") + b.spec->name;
      for (size_t i = 0; i < missing.size() && i < 20; ++i)
        names += (i ? ", " : "") + std::string("'") + graph.node(missing[i]).name + "' (" +
                 graph.node(missing[i]).op + ")";
      if (missing.size() > 20) names += ", and " + std::to_string(missing.size() - 20) + " more";
      throw Error("no backend among [" + backendNames + "] can run " +
                  std::to_string(missing.size()) + " node(s): " + names);
    }
  }
  return set;
}

}  // namespace collage
