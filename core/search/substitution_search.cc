#include "core/search/substitution_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <set>

#include "core/ir/error.h"
#include "core/ir/hashing.h"
#include "core/rewrite/equivalence_check.h"
#include "core/rewrite/substitution_spec_file.h"

namespace collage {
namespace {

// The shape of a site, without names: sites of one shape form one move.
std::string siteShape(const Graph& g, const SubstitutionSite& site) {
  std::string text = site.rule;
  for (const std::string& name : site.nodes) {
    const Node& node = g.node(*g.findNode(name));
    text += "|" + node.op + " " + node.attrs.toString() + " (";
    for (ValueId v : node.inputs)
      text += v == kNoValue ? std::string("-,") : g.value(v).type.toString() + ",";
    text += ")";
  }
  return text;
}

struct State {
  Graph graph;
  std::vector<SubstitutionSite> applied;
  std::vector<SubstitutionStep> steps;
  Cost cost = kUnknownCost;
  int64_t order = 0;  // ties: the earlier found first
};

struct ByCost {
  bool operator()(const std::shared_ptr<State>& a, const std::shared_ptr<State>& b) const {
    return a->cost != b->cost ? a->cost > b->cost : a->order > b->order;
  }
};

}  // namespace

std::string canonicalGraphKey(const Graph& graph, ConstantHashes* constantHashes) {
  // Bottom-up (nodes are in topological order): a value's hash is what
  // computes it, never its name, except a graph input's.
  std::vector<uint64_t> valueHash(static_cast<size_t>(graph.numValues()), 0);
  ConstantHashes local;
  ConstantHashes& constants = constantHashes ? *constantHashes : local;
  for (ValueId v = 0; v < graph.numValues(); ++v) {
    const Value& value = graph.value(v);
    if (value.isGraphInput) {
      valueHash[static_cast<size_t>(v)] = stableHash("input " + value.name);
    } else if (value.isConstant()) {
      // By contents, hashed once per storage: two branches may each make a
      // different constant of one name, never two contents in one storage
      // (the cache holds a copy, so the storage outlives the graph).
      const Tensor& t = *value.constant;
      const std::string type = value.type.toString();
      auto [it, fresh] = constants.try_emplace({t.raw(), type}, ConstantHash{t, 0});
      if (fresh)
        it->second.hash = stableHash(type + "|" + std::string(static_cast<const char*>(t.raw()), t.byteSize()));
      valueHash[static_cast<size_t>(v)] = it->second.hash;
    }
  }
  std::vector<uint64_t> nodeHashes;
  nodeHashes.reserve(static_cast<size_t>(graph.numNodes()));
  for (const Node& node : graph.nodes()) {
    std::string text = node.op + " " + node.attrs.toString() + " (";
    for (ValueId v : node.inputs)
      text += v == kNoValue ? std::string("-,") : std::to_string(valueHash[static_cast<size_t>(v)]) + ",";
    text += ") ->";
    for (ValueId v : node.outputs) text += v == kNoValue ? std::string(" -") : " " + graph.value(v).type.toString();
    const uint64_t h = stableHash(text);
    nodeHashes.push_back(h);
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (node.outputs[i] != kNoValue)
        valueHash[static_cast<size_t>(node.outputs[i])] = stableHash(std::to_string(h) + "#" + std::to_string(i));
  }
  std::sort(nodeHashes.begin(), nodeHashes.end());
  std::string key;
  for (uint64_t h : nodeHashes) key += std::to_string(h) + "\n";
  for (ValueId v : graph.outputs())
    key += "out " + graph.value(v).name + " " + std::to_string(valueHash[static_cast<size_t>(v)]) + "\n";
  return key;
}

SubstitutionSearchResult searchSubstitutions(const Graph& start, const GraphCostFn& cost,
                                             const SubstitutionSearchOptions& options,
                                             SearchObserver* observer, const CancellationToken* cancel) {
  auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::vector<const Substitution*> rules = options.rules;
  if (rules.empty()) {
    for (const auto& r : standardSubstitutions()) rules.push_back(r.get());
    for (const Substitution* r : specSubstitutions()) rules.push_back(r);  // rules in spec files
  }

  SubstitutionSearchResult result;
  std::set<std::string> noted;
  auto note = [&](const std::string& text) {
    if (noted.insert(text).second) result.notes.push_back(text);
  };
  auto costOf = [&](const Graph& g, const std::vector<SubstitutionSite>& sites) -> Cost {
    ++result.graphsCosted;
    try {
      const Cost c = cost(g, sites);
      return std::isnan(c) ? kInvalidCost : c;
    } catch (const Error& e) {
      note(std::string("a rewritten graph could not be placed: ") + e.what());
      return kInvalidCost;
    }
  };
  // Equivalence checks, kept per source region (constants by contents): the
  // same site met again through another order of moves is not run again.
  std::map<std::string, bool> checked;

  // The moves of `rule` on `g`: its sites grouped by shape, in the order first met.
  auto movesOf = [&](const Substitution* rule, const Graph& g) {
    std::vector<std::string> shapes;
    std::map<std::string, std::vector<SubstitutionSite>> byShape;
    for (const SubstitutionSite& site : rule->find(g)) {
      const std::string shape = siteShape(g, site);
      if (!byShape.count(shape)) shapes.push_back(shape);
      byShape[shape].push_back(site);
    }
    std::vector<std::vector<SubstitutionSite>> moves;
    for (const std::string& shape : shapes) moves.push_back(std::move(byShape[shape]));
    return moves;
  };
  // `state` with a move applied (the sites that pass their check), not costed.
  auto applyMove = [&](const State& state, const Substitution* rule, const std::vector<SubstitutionSite>& sites) {
    auto child = std::make_shared<State>();
    child->graph = state.graph;
    SubstitutionStep step{rule->name(), {}, state.cost, kUnknownCost};
    for (const SubstitutionSite& site : sites) {
      // An earlier site of this move may have used this one's nodes.
      const std::vector<SubstitutionSite> now = rule->find(child->graph);
      if (std::find(now.begin(), now.end(), site) == now.end()) continue;
      Graph after = child->graph;
      RewriteEffect effect;
      try {
        effect = rule->apply(after, site);
      } catch (const Error& e) {
        note(site.toString() + ": " + e.what());
        continue;
      }
      const std::string key = rewriteCheckKey(child->graph, site);
      auto it = checked.find(key);
      if (it == checked.end()) {
        ++result.checks;
        const std::string why = checkRewrite(child->graph, after, site, effect, options.valueRanges);
        if (!why.empty()) note(ruleOrigin(*rule) + site.toString() + ": dropped, not equivalent: " + why);
        it = checked.emplace(key, why.empty()).first;
      }
      if (!it->second) continue;
      child->graph = std::move(after);
      step.sites.push_back(site);
    }
    child->applied = state.applied;
    child->applied.insert(child->applied.end(), step.sites.begin(), step.sites.end());
    child->steps = state.steps;
    child->steps.push_back(step);
    return child;
  };
  auto costChild = [&](State& child) {
    child.cost = costOf(child.graph, child.applied);
    child.steps.back().after = child.cost;
    result.tried.push_back(child.steps.back());
  };

  auto first = std::make_shared<State>();
  first->graph = start;
  first->cost = costOf(start, {});
  result.startCost = first->cost;
  // The budget is the search's own: costing the start graph (measuring its
  // candidates, which placement needs anyway) does not count.
  t0 = std::chrono::steady_clock::now();
  // Forced rules first, wherever they hold, whatever they cost: the user's
  // override (as a pin is for placement). The search goes on from there.
  for (const std::string& name : options.forcedRules) {
    const Substitution* rule = findSubstitution(name);
    if (!rule) throw Error("no substitution rule '" + name + "'");
    for (int round = 0; round < 100; ++round) {
      bool any = false;
      for (const auto& sites : movesOf(rule, first->graph)) {
        auto child = applyMove(*first, rule, sites);
        if (child->steps.back().sites.empty()) continue;
        costChild(*child);
        first = child;
        any = true;
      }
      if (!any) break;
    }
  }
  std::shared_ptr<State> best = first;
  ConstantHashes constantHashes;
  std::set<std::string> seen{canonicalGraphKey(first->graph, &constantHashes)};
  std::priority_queue<std::shared_ptr<State>, std::vector<std::shared_ptr<State>>, ByCost> queue;
  queue.push(first);
  int64_t order = 0;

  while (!queue.empty()) {
    if (cancel && cancel->cancelled()) {
      result.cancelled = true;
      break;
    }
    if (elapsed() > options.budgetSeconds || result.graphsCosted >= options.maxGraphs) {
      result.budgetSpent = true;
      break;
    }
    const std::shared_ptr<State> state = queue.top();
    queue.pop();
    if (state->cost >= options.alpha * best->cost && state != first) continue;  // the best moved on
    ++result.graphsExpanded;
    for (const Substitution* rule : rules) {
      for (const auto& sites : movesOf(rule, state->graph)) {
        if (elapsed() > options.budgetSeconds || result.graphsCosted >= options.maxGraphs) break;
        auto child = applyMove(*state, rule, sites);
        if (child->steps.back().sites.empty()) continue;
        if (!seen.insert(canonicalGraphKey(child->graph, &constantHashes)).second) {
          ++result.cacheHits;
          continue;
        }
        costChild(*child);
        child->order = ++order;
        const bool better = child->cost < best->cost;
        if (better) best = child;
        if (child->cost < options.alpha * best->cost) queue.push(child);
        if (observer)
          observer->onSearchStep(SearchStepEvent{"substitutions", result.graphsExpanded, result.graphsCosted,
                                                 best->cost, child->cost, elapsed(), result.cacheHits,
                                                 std::max(0.0, options.budgetSeconds - elapsed()), better,
                                                 result.startCost > 0 ? best->cost / result.startCost : 0});
      }
    }
  }
  result.graph = best->graph;
  result.applied = best->applied;
  result.steps = best->steps;
  result.bestCost = best->cost;
  result.seconds = elapsed();
  return result;
}

std::string describeSubstitutions(const SubstitutionSearchResult& result) {
  char line[512];
  std::snprintf(line, sizeof line,
                "substitutions: %d graph(s) costed, %d expanded, %d reached twice, %d check(s), %.1f s%s; "
                "DP cost %.3f -> %.3f ms",
                result.graphsCosted, result.graphsExpanded, result.cacheHits, result.checks, result.seconds,
                result.budgetSpent ? " (budget spent)" : "", result.startCost / 1e6, result.bestCost / 1e6);
  std::string text = line;
  if (result.steps.empty()) text += "\n  none applied: no rewrite made the placement cheaper";
  for (const SubstitutionStep& s : result.steps) {
    std::snprintf(line, sizeof line, "\n  %-20s %3zu site(s): %.3f -> %.3f ms (%+.3f ms)", s.rule.c_str(),
                  s.sites.size(), s.before / 1e6, s.after / 1e6, (s.after - s.before) / 1e6);
    text += line;
  }
  if (!result.tried.empty()) text += "\n  moves costed:";
  for (const SubstitutionStep& s : result.tried) {
    std::snprintf(line, sizeof line, "\n    %-20s %3zu site(s) (%s): %.3f -> %.3f ms", s.rule.c_str(), s.sites.size(),
                  s.sites.front().toString().c_str(), s.before / 1e6, s.after / 1e6);
    text += line;
  }
  for (const std::string& n : result.notes) text += "\n  note: " + n;
  return text;
}

}  // namespace collage
