#include "core/patterns/pattern_generator.h"

#include <unordered_set>

#include "core/ir/error.h"

namespace collage {

std::string GeneratedGroup::toString(const Graph& graph) const {
  return label + " " + SubGraph(graph, nodes).toString();
}

std::string PatternGeneratorStats::toString() const {
  return "{seeds=" + std::to_string(seeds) + ", emitted=" + std::to_string(emitted) +
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

    for (NodeId p = seed;;) {
      NodeId next = pdom_.immediatePostDominator(p);
      if (next == kNoNode || pdom_.isSink(next)) break;
      // All paths from the seed pass through p and then through next, so the
      // nodes on paths from seed to next are the old group plus those on paths
      // from p to next.
      NodeSet added = reach_.between(p, next) - group;
      COLLAGE_CHECK(!added.empty(), "a post-dominator must add nodes to the group");
      bool opOk = true;
      added.forEach([&](NodeId m) {
        if (opOk && !rule.memberRule(graph, m)) opOk = false;
      });
      if (!opOk) {
        ++st.opRuleStops;
        break;
      }
      group |= added;
      std::optional<std::string> fusion = rule.fusionRule(graph, group, seed, next);
      if (!fusion) {
        ++st.fusionRuleStops;
        break;
      }
      if (!checkSubGraph(graph, reach_, group, limits).ok()) {
        ++st.validityStops;
        break;
      }
      emit(group, seed, next, "fusion:" + *fusion);
      p = next;
    }
  }
  return out;
}

std::vector<GeneratedGroup> generateGroups(const Graph& graph, const PatternRule& rule,
                                           const SubGraphLimits& limits) {
  return PatternGenerator(graph).generate(rule, limits);
}

}  // namespace collage
