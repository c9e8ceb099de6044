#include "core/patterns/pattern_generator.h"

#include <unordered_set>

#include "core/ir/error.h"

namespace collage {

std::string GeneratedGroup::toString(const Graph& graph) const {
  return label + " " + SubGraph(graph, nodes).toString();
}

std::string PatternGeneratorStats::toString() const {
  return "{seeds=" + std::to_string(seeds) + ", forks=" + std::to_string(forks) +
         ", emitted=" + std::to_string(emitted) +
         ", stopped by op rule=" + std::to_string(opRuleStops) +
         ", by fusion rule=" + std::to_string(fusionRuleStops) +
         ", by validity=" + std::to_string(validityStops) + "}";
}

PatternGenerator::PatternGenerator(const Graph& graph)
    : graph_(&graph), pdom_(graph), reach_(graph) {}

std::vector<GeneratedGroup> PatternGenerator::generate(const PatternRule& rule,
                                                       const SubGraphLimits& limits,
                                                       PatternGeneratorStats* stats) const {
  const Graph& graph = *graph_;
  const int32_t n = graph.numNodes();
  PatternGeneratorStats local;
  PatternGeneratorStats& st = stats ? *stats : local;
  st = PatternGeneratorStats{};

  std::vector<GeneratedGroup> out;
  std::unordered_set<NodeSet, NodeSetHash> seen;
  auto emit = [&](const NodeSet& group, NodeId seed, NodeId sink, std::string label) {
    if (!seen.insert(group).second) return;
    out.push_back(GeneratedGroup{group, seed, sink, std::move(label)});
    ++st.emitted;
  };

  // Adds `added` to `group` when every new node passes the member rule, the
  // fusion rule accepts the result (its name is left in lastFusion) and the
  // core finds it a valid SubGraph; false, with the stop counted, otherwise.
  std::string lastFusion;
  auto grownInto = [&](NodeSet& group, const NodeSet& added, NodeId seed, NodeId sink) {
    bool memberOk = true;
    added.forEach([&](NodeId m) {
      if (memberOk && !rule.memberRule(graph, m)) memberOk = false;
    });
    if (!memberOk) {
      ++st.opRuleStops;
      return false;
    }
    group |= added;
    std::optional<std::string> fusion = rule.fusionRule(graph, group, seed, sink);
    if (!fusion) {
      ++st.fusionRuleStops;
      return false;
    }
    if (!checkSubGraph(graph, reach_, group, limits).ok()) {
      ++st.validityStops;
      return false;
    }
    lastFusion = *fusion;
    return true;
  };

  // Grows `group` (grown from `seed` up to its post-dominator p) along the
  // post-dominators while the rules accept it, emitting each accepted step.
  auto grow = [&](NodeSet group, NodeId seed, NodeId p) {
    for (;;) {
      NodeId next = pdom_.immediatePostDominator(p);
      if (next == kNoNode || pdom_.isSink(next)) break;
      // All paths from the seed pass through p and then through next, so the
      // nodes on paths from seed to next are the old group plus those on paths
      // from p to next.
      NodeSet added = reach_.between(p, next) - group;
      COLLAGE_CHECK(!added.empty(), "a post-dominator must add nodes to the group");
      if (!grownInto(group, added, seed, next)) break;
      if (rule.emitsGroup(graph, group, seed, next))
        emit(group, seed, next, "fusion:" + lastFusion);
      p = next;
    }
  };

  for (NodeId seed = 0; seed < n; ++seed) {
    if (!rule.opRule(graph, seed)) continue;
    ++st.seeds;
    NodeSet group(n);
    group.insert(seed);
    // A single node is always convex with one exit; only the backend's size
    // or depth limits could refuse it, and then no larger group would pass.
    if (!checkSubGraph(graph, reach_, group, limits).ok()) {
      ++st.validityStops;
      continue;
    }
    emit(group, seed, seed, "op");
    grow(group, seed, seed);
  }

  if (rule.growsFromForks()) {
    for (NodeId fork = 0; fork < n; ++fork) {
      if (graph.successors(fork).size() < 2) continue;
      NodeId join = pdom_.immediatePostDominator(fork);
      if (join == kNoNode || pdom_.isSink(join)) continue;
      ++st.forks;
      NodeSet group(n);
      NodeSet block = reach_.between(fork, join);
      block.erase(fork);
      if (!grownInto(group, block, fork, join)) continue;
      if (rule.emitsGroup(graph, group, fork, join))
        emit(group, fork, join, "fusion:" + lastFusion);
      grow(group, fork, join);
    }
  }
  return out;
}

std::vector<GeneratedGroup> generateGroups(const Graph& graph, const PatternRule& rule,
                                           const SubGraphLimits& limits) {
  return PatternGenerator(graph).generate(rule, limits);
}

}  // namespace collage
