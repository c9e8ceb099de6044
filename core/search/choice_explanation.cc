#include "core/search/choice_explanation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <unordered_map>

#include "core/measure/candidate_costs.h"
#include "core/ir/error.h"

namespace collage {
namespace {

std::string percent(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", p);
  return buf;
}

NodeSet groupSet(const Graph& graph, const PlanGroup& g) {
  NodeSet s(graph.numNodes());
  for (const auto& name : g.nodes)
    if (auto n = graph.findNode(name)) s.insert(*n);
  return s;
}

double epsilonOf(const OptimizationResult* result, const std::string& backend) {
  return result ? result->switchCosts.epsilonInto(backend) : 0.0;
}

// Where a backend of the job runs (the host unless the job found it elsewhere).
Device deviceOf(const OptimizationResult* result, const std::string& backend) {
  if (!result) return Device{};
  auto it = result->deviceCosts.backendDevices.find(backend);
  return it == result->deviceCosts.backendDevices.end() ? Device{} : it->second;
}

struct Cover {
  Cost cost = kInvalidCost;
  std::vector<int32_t> kernels;
};

// The cheapest cover of `target` by measured candidates lying inside it,
// `excluded` left out; each kernel pays its switching cost as in the DP.
// Groups are small (a fused group), so a memoised walk over covered subsets,
// always extending at the lowest uncovered member, is enough.
Cover cheapestCoverInside(const OptimizationResult& result, const NodeSet& target, int32_t excluded) {
  std::unordered_map<NodeSet, Cover, NodeSetHash> memo;
  std::function<Cover(const NodeSet&)> go = [&](const NodeSet& covered) -> Cover {
    NodeSet left = target - covered;
    if (left.empty()) return Cover{0, {}};
    if (auto it = memo.find(covered); it != memo.end()) return it->second;
    Cover best;
    for (int32_t c : result.candidates.startingAt(left.first())) {
      const auto i = static_cast<size_t>(c);
      const Candidate& cand = result.candidates[i];
      if (c == excluded || !cand.nodes.isSubsetOf(left)) continue;
      if (i >= result.measurements.size() || (!result.measured.empty() && !result.measured[i]))
        continue;
      Cost cost = result.measurements[i].cost();
      if (!isKnown(cost)) continue;
      Cover rest = go(covered | cand.nodes);
      Cost total = cost + epsilonOf(&result, cand.backend) + rest.cost;
      if (total < best.cost) {
        best.cost = total;
        best.kernels = {c};
        best.kernels.insert(best.kernels.end(), rest.kernels.begin(), rest.kernels.end());
      }
    }
    memo.emplace(covered, best);
    return best;
  };
  return go(NodeSet(target.capacity()));
}

std::string describeCover(const Graph& graph, const OptimizationResult& result, const Cover& cover) {
  std::string out = std::to_string(cover.kernels.size()) +
                    (cover.kernels.size() == 1 ? " kernel: " : " kernels: ");
  for (size_t k = 0; k < cover.kernels.size(); ++k) {
    const Candidate& c = result.candidates[static_cast<size_t>(cover.kernels[k])];
    out += (k ? ", " : "") + c.backend + " " + opsLabel(graph, c.nodes);
  }
  return out;
}

void explainExactGroup(const PlanGroup& g, const OptimizationResult* result, ChoiceExplanation& e) {
  if (g.origin == PlanOrigin::GraphLevel) {
    e.why = "chosen by the graph-level search, which measured it together with its neighbours";
    return;
  }
  const RunOnChoice* best = nullptr;
  for (const auto& c : e.choices)
    if (c.backend != g.backend && c.runnable && c.measured && (!best || c.medianNs < best->medianNs))
      best = &c;
  if (!result) {
    e.why = "chosen by the " + std::string(planOriginName(g.origin)) +
            " optimizer (no measurements at hand to compare the alternatives)";
    return;
  }
  if (!best) {
    e.why = "the only backend with a valid, measured candidate for exactly these nodes";
    return;
  }
  const Cost mine = g.costNs;
  if (!isKnown(mine)) {
    e.why = "chosen by the optimizer; its own cost is not known";
    return;
  }
  if (mine <= best->medianNs) {
    e.why = "cheapest for exactly these nodes: " +
            percent(100 * (best->medianNs - mine) / best->medianNs) + " faster than " +
            best->backend + " (" + costToString(mine) + " vs " + costToString(best->medianNs) + ")";
    return;
  }
  const std::string faster = best->backend + " alone is " +
                             percent(100 * (mine - best->medianNs) / mine) + " faster (" +
                             costToString(best->medianNs) + " vs " + costToString(mine) + "), ";
  const double epsMine = epsilonOf(result, g.backend), epsBest = epsilonOf(result, best->backend);
  if (mine + epsMine <= best->medianNs + epsBest)
    e.why = faster + "but a kernel boundary into " + best->backend + " costs " +
            costToString(epsBest) + " against " + costToString(epsMine) + " into " + g.backend +
            ", so " + g.backend + " is cheaper once switching is counted";
  else if (const Device mineOn = deviceOf(result, g.backend), bestOn = deviceOf(result, best->backend);
           !(mineOn == bestOn))
    e.why = faster + "but it runs on " + bestOn.toString() + " and " + g.backend + " on " +
            mineOn.toString() + ": with the copies between devices counted, the cover as a " +
            "whole is cheaper with " + g.backend + " here";
  else
    e.why = faster + "but the cover as a whole is cheaper with " + g.backend +
            " here (how its neighbours are grouped decides)";
}

}  // namespace

ChoiceExplanation explainChoice(const Graph& graph, const Plan& plan,
                                const OptimizationResult* result, const NodeSet& nodes) {
  if (nodes.empty()) throw Error("nothing selected to explain");
  ChoiceExplanation e;
  std::vector<NodeSet> sets;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    sets.push_back(groupSet(graph, plan.groups[g]));
    if (sets.back().intersects(nodes)) e.groups.push_back(g);
  }
  if (result) e.choices = runOnChoices(graph, *result, nodes, &plan);

  if (e.groups.empty()) {
    e.why = "no group of the plan holds these nodes";
    return e;
  }
  if (e.groups.size() > 1) {
    NodeSet all(graph.numNodes());
    Cost sum = 0;
    for (size_t g : e.groups) {
      all |= sets[g];
      sum += plan.groups[g].costNs + epsilonOf(result, plan.groups[g].backend);
    }
    e.why = "these nodes run as " + std::to_string(e.groups.size()) + " kernels of the plan";
    const RunOnChoice* single = nullptr;
    for (const auto& c : e.choices)
      if (c.runnable && c.measured && (!single || c.medianNs < single->medianNs)) single = &c;
    if (all == nodes && single && isKnown(sum))
      e.why += " (" + costToString(sum) + " with switching); as one kernel, " + single->backend +
               " would take " + costToString(single->medianNs + epsilonOf(result, single->backend));
    return e;
  }

  const size_t gi = e.groups.front();
  const PlanGroup& g = plan.groups[gi];
  e.backend = g.backend;
  e.origin = g.origin;
  e.exactGroup = sets[gi] == nodes;
  if (g.origin == PlanOrigin::User) {
    e.why = "pinned by the user (a manual override or --pin); the optimizer keeps it";
    if (!e.exactGroup) e.why += " as part of " + plan.describeGroup(gi);
    return e;
  }
  if (e.exactGroup) {
    explainExactGroup(g, result, e);
    return e;
  }

  // A part of a bigger fused group: that group against the other covers.
  e.groupCostNs = g.costNs + epsilonOf(result, g.backend);
  e.why = "the optimizer runs these nodes inside a bigger fused group, " + plan.describeGroup(gi) +
          ", at " + costToString(e.groupCostNs);
  if (!result) return e;
  int32_t chosen = -1;
  for (int32_t c : result->candidates.startingAt(sets[gi].first()))
    if (result->candidates[static_cast<size_t>(c)].backend == g.backend &&
        result->candidates[static_cast<size_t>(c)].nodes == sets[gi])
      chosen = c;
  Cover other = cheapestCoverInside(*result, sets[gi], chosen);
  e.alternativeCostNs = other.cost;
  if (isKnown(other.cost)) {
    e.alternative = describeCover(graph, *result, other);
    e.why += " (switching included); the cheapest other way to run its " +
             std::to_string(sets[gi].count()) + " nodes costs " + costToString(other.cost) + " (" +
             e.alternative + ")";
  } else {
    e.why += "; no other measured cover of its " + std::to_string(sets[gi].count()) +
             " nodes exists";
  }
  return e;
}

}  // namespace collage
