#include "core/search/op_level_optimizer.h"

#include <algorithm>
#include <chrono>
#include <queue>
#include <unordered_map>

#include "core/ir/error.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

struct State {
  Cost cost = kInvalidCost;
  int32_t parent = -1;     // index into states
  int32_t candidate = -1;  // the candidate that led here
  bool done = false;
};

// A search state: the covered nodes and, when some backend runs off the host,
// the open values and where they are (DeviceCopyCharges).
struct StateKey {
  NodeSet set;
  std::vector<DeviceCopyCharges::OpenValue> open;
  std::vector<LayoutCharges::Pending> pending;  // values whose layout hand-over is still possible
  bool operator==(const StateKey& o) const {
    return set == o.set && open == o.open && pending == o.pending;
  }
};

struct StateKeyHash {
  size_t operator()(const StateKey& k) const {
    size_t h = NodeSetHash{}(k.set);
    for (DeviceCopyCharges::OpenValue v : k.open)
      h = (h ^ std::hash<uint64_t>{}(v)) * 1099511628211ull;  // FNV-style mixing
    for (LayoutCharges::Pending v : k.pending) h = (h ^ std::hash<uint64_t>{}(v + 1)) * 1099511628211ull;
    return h;
  }
};

Cost kernelCost(const OpLevelProblem& p, int32_t c) {
  Cost cost = p.costs[c];
  if (!isKnown(cost)) return kInvalidCost;
  if (p.epsilon) cost += p.epsilon((*p.candidates)[c].backend);
  return cost;
}

bool usable(const OpLevelProblem& p, int32_t c) {
  return (p.allowed.empty() || p.allowed[c]) && isKnown(p.costs[c]);
}

[[noreturn]] void noCover(const OpLevelProblem& p, NodeId n) {
  const Node& node = p.graph->node(n);
  std::string why;
  const DeviceCopyCharges charges(*p.graph, *p.candidates, p.device, p.copyCost);
  for (int32_t c : p.candidates->covering(n)) {
    const Candidate& cand = (*p.candidates)[c];
    why += "\n  " + cand.toString(*p.graph) + ": " +
           (!p.allowed.empty() && !p.allowed[c] ? "excluded by a pin or forbid"
                                                : costToString(p.costs[c]));
    const std::string copies = charges.unmeasuredReason(c);
    if (!copies.empty()) why += " (" + copies + ")";
  }
  throw Error("no placement covers node '" + node.name + "' (" + node.op + ")" +
              (why.empty() ? ": no candidate contains it" : ": its candidates are" + why));
}

// Extends a partial cover greedily (cheapest usable candidate at the lowest
// uncovered node): used after a cancellation, so the caller still gets a plan.
void completeGreedily(const OpLevelProblem& p, NodeSet covered, OpLevelResult& r) {
  const int32_t n = p.graph->numNodes();
  while (true) {
    NodeId low = covered.firstMissing();
    if (low >= n) return;
    int32_t best = -1;
    for (int32_t c : p.candidates->startingAt(low)) {
      if (!usable(p, c) || (*p.candidates)[c].nodes.intersects(covered)) continue;
      if (best < 0 || kernelCost(p, c) < kernelCost(p, best)) best = c;
    }
    if (best < 0) noCover(p, low);
    r.chosen.push_back(best);
    r.total += kernelCost(p, best);
    covered |= (*p.candidates)[best].nodes;
  }
}

// The cost of a complete cover that extends `covered` greedily, as
// completeGreedily does, or +inf at a dead end. Only for progress events: a
// Dijkstra search has no complete plan until it ends, so each event reports
// the plan through the frontier's cheapest state (an upper bound that falls
// to the optimum).
Cost greedyCompletionCost(const OpLevelProblem& p, NodeSet covered, Cost cost) {
  const int32_t n = p.graph->numNodes();
  while (true) {
    NodeId low = covered.firstMissing();
    if (low >= n) return cost;
    int32_t best = -1;
    for (int32_t c : p.candidates->startingAt(low)) {
      if (!usable(p, c) || (*p.candidates)[c].nodes.intersects(covered)) continue;
      if (best < 0 || kernelCost(p, c) < kernelCost(p, best)) best = c;
    }
    if (best < 0) return kInvalidCost;
    cost += kernelCost(p, best);
    covered |= (*p.candidates)[best].nodes;
  }
}

}  // namespace

OpLevelResult optimizeOpLevel(const OpLevelProblem& p, SearchObserver* observer,
                              const CancellationToken* cancel) {
  COLLAGE_CHECK(p.graph && p.candidates && p.costs.size() == p.candidates->size(),
                "malformed op-level problem");
  auto start = Clock::now();
  const int32_t n = p.graph->numNodes();
  OpLevelResult r;
  const DeviceCopyCharges copies(*p.graph, *p.candidates, p.device, p.copyCost);
  const LayoutCharges* layouts = p.layouts && p.layouts->active() ? p.layouts : nullptr;
  std::vector<State> states;
  std::vector<StateKey> keys;
  std::unordered_map<StateKey, int32_t, StateKeyHash> index;
  using Entry = std::pair<Cost, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;  // lazy deletion

  auto push = [&](StateKey key, Cost cost, int32_t parent, int32_t cand) {
    auto [it, inserted] = index.emplace(key, static_cast<int32_t>(states.size()));
    if (inserted) {
      states.push_back(State{cost, parent, cand, false});
      keys.push_back(std::move(key));
    } else if (cost < states[it->second].cost && !states[it->second].done) {
      states[it->second] = State{cost, parent, cand, false};
    } else {
      return;
    }
    ++r.statesPushed;
    queue.emplace(cost, it->second);
  };
  COLLAGE_CHECK(p.placed.capacity() == 0 || p.placed.capacity() == n,
                "op-level problem: `placed` is a NodeSet of another graph");
  push(StateKey{p.placed.capacity() == 0 ? NodeSet(n) : p.placed, {}, {}}, 0.0, -1, -1);
  int32_t goal = -1;
  int32_t deepest = 0;  // the popped state with most nodes, for a cancelled search
  const int64_t stepPeriod = std::clamp<int64_t>(n / 64, 1, 2048);
  int steps = 0;
  Cost bestSample = kInvalidCost;  // cheapest greedy completion seen, for the events
  while (!queue.empty()) {
    auto [cost, s] = queue.top();
    queue.pop();
    if (states[s].done || cost > states[s].cost) continue;
    states[s].done = true;
    ++r.statesExpanded;
    if (keys[s].set.count() > keys[deepest].set.count()) deepest = s;
    NodeId low = keys[s].set.firstMissing();
    if (low >= n) {
      goal = s;
      break;
    }
    if (cancel && cancel->cancelled()) {
      r.cancelled = true;
      break;
    }
    // About 64 events over a search (states expanded are of the order of the
    // node count): enough for a chart, cheap next to the search itself.
    if (observer && r.statesExpanded % stepPeriod == 0) {
      Cost sample = greedyCompletionCost(p, keys[s].set, cost);
      if (sample < bestSample) bestSample = sample;
      observer->onSearchStep(SearchStepEvent{
          "op-level", ++steps, static_cast<int>(r.statesExpanded),
          isKnown(bestSample) ? bestSample : cost, isKnown(sample) ? sample : cost,
          std::chrono::duration<double>(Clock::now() - start).count()});
    }
    bool any = false;
    const StateKey here = keys[s];  // push() may move keys
    for (int32_t c : p.candidates->startingAt(low)) {
      if (!usable(p, c)) continue;
      const NodeSet& nodes = (*p.candidates)[c].nodes;
      if (nodes.intersects(here.set)) continue;
      StateKey next{here.set | nodes, {}, {}};
      Cost step = kernelCost(p, c);
      if (layouts) {
        step = layouts->kernelNs(c, p.costs[c]);
        if (p.epsilon) step += p.epsilon((*p.candidates)[c].backend);
        step += layouts->add(here.set, here.pending, c, &next.pending);
      }
      if (copies.active()) {
        const Cost copy = copies.add(here.set, here.open, c, &next.open);
        if (!isKnown(copy)) continue;  // an unmeasured copy is not free: never taken
        step += copy;
      }
      any = true;
      push(std::move(next), cost + step, s, c);
    }
    if (!any && r.statesExpanded == 1 && queue.empty()) noCover(p, low);
  }
  auto unwind = [&](int32_t s) {
    std::vector<int32_t> chosen;
    for (; s >= 0 && states[s].candidate >= 0; s = states[s].parent) chosen.push_back(states[s].candidate);
    return std::vector<int32_t>(chosen.rbegin(), chosen.rend());
  };
  if (goal >= 0) {
    r.chosen = unwind(goal);
    r.total = states[goal].cost;
  } else {
    if (!r.cancelled) {
      // Every path died: find a node with no usable candidate to name it.
      NodeId low = keys[deepest].set.firstMissing();
      noCover(p, low < n ? low : 0);
    }
    r.chosen = unwind(deepest);
    r.total = states[deepest].cost;
    completeGreedily(p, keys[deepest].set, r);
    // The greedy part ignores devices: charge the cover's copies as a whole.
    if (copies.active()) {
      r.total = copies.coverCost(r.chosen);
      for (int32_t c : r.chosen) r.total += kernelCost(p, c);
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (observer) {
    observer->onSearchStep(SearchStepEvent{"op-level", steps + 1,
                                           static_cast<int>(r.statesExpanded), r.total, r.total,
                                           r.seconds});
    r.steps = steps + 1;
  }
  return r;
}

OpLevelResult singleBackendPlacement(const OpLevelProblem& problem, const std::string& backend,
                                     const std::string& fallback) {
  OpLevelProblem p = problem;
  const CandidateSet& cs = *p.candidates;
  NodeSet runnable(p.graph->numNodes());
  for (size_t i = 0; i < cs.size(); ++i)
    if (cs[i].backend == backend && usable(problem, static_cast<int32_t>(i))) runnable |= cs[i].nodes;
  p.allowed.assign(cs.size(), false);
  for (size_t i = 0; i < cs.size(); ++i) {
    const bool base = problem.allowed.empty() || problem.allowed[i];
    if (cs[i].backend == backend) p.allowed[i] = base;
    // The fallback runs single nodes the backend cannot.
    else if (cs[i].backend == fallback && cs[i].nodes.count() == 1 &&
             !runnable.contains(cs[i].nodes.first()))
      p.allowed[i] = base;
  }
  return optimizeOpLevel(p);
}

std::string completeBackend(const OpLevelProblem& problem, const std::vector<std::string>& order) {
  const CandidateSet& cs = *problem.candidates;
  for (const std::string& backend : order) {
    NodeSet alone(problem.graph->numNodes());
    for (size_t i = 0; i < cs.size(); ++i)
      if (cs[i].backend == backend && cs[i].nodes.count() == 1 &&
          usable(problem, static_cast<int32_t>(i)))
        alone |= cs[i].nodes;
    if (alone.count() == problem.graph->numNodes()) return backend;
  }
  return "";
}

OpLevelResult priorityPlacement(const OpLevelProblem& p, const std::vector<std::string>& order) {
  auto start = Clock::now();
  const int32_t n = p.graph->numNodes();
  OpLevelResult r;
  r.total = 0;
  NodeSet covered(n);
  while (true) {
    NodeId low = covered.firstMissing();
    if (low >= n) break;
    int32_t pick = -1;
    for (const auto& backend : order) {
      for (int32_t c : p.candidates->startingAt(low)) {
        const Candidate& cand = (*p.candidates)[c];
        if (cand.backend != backend || !usable(p, c) || cand.nodes.intersects(covered)) continue;
        if (pick < 0 || cand.nodes.count() > (*p.candidates)[pick].nodes.count()) pick = c;
      }
      if (pick >= 0) break;
    }
    if (pick < 0) noCover(p, low);
    r.chosen.push_back(pick);
    r.total += kernelCost(p, pick);
    covered |= (*p.candidates)[pick].nodes;
  }
  r.total += DeviceCopyCharges(*p.graph, *p.candidates, p.device, p.copyCost).coverCost(r.chosen);
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

}  // namespace collage
