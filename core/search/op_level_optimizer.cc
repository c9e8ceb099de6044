#include "core/search/op_level_optimizer.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <tuple>
#include <unordered_map>

#include "core/ir/error.h"
#include "core/search/dp_order.h"

namespace collage {
namespace {

using Clock = std::chrono::steady_clock;

// CPU time of the calling thread, seconds (the search runs on one).
double threadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

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

namespace {

// A state of a frontier: how it was reached and a lower bound of what is left.
struct Entry {
  Cost cost = kInvalidCost;
  Cost left = 0;           // no cover of the uncovered nodes costs less
  int32_t parent = -1;     // into the trail; -1 = the start
  int32_t candidate = -1;  // the candidate that led here; -1 = the start
};
struct TrailStep {
  int32_t parent;
  int32_t candidate;
};
using Frontier = std::unordered_map<StateKey, Entry, StateKeyHash>;

// What a live state takes: its key's heap parts, the map's node and bucket.
size_t stateBytes(const StateKey& k) {
  return sizeof(StateKey) + sizeof(Entry) + 48 + static_cast<size_t>(k.set.capacity() + 63) / 64 * 8 +
         (k.open.size() + k.pending.size()) * 8;
}

// The step from `here` by candidate c as the DP charges it; `next` receives
// the key after it. Unknown when a copy it needs is unmeasured.
Cost stepCost(const OpLevelProblem& p, const LayoutCharges* layouts, const DeviceCopyCharges& copies,
              const StateKey& here, int32_t c, StateKey* next) {
  next->set = here.set | (*p.candidates)[c].nodes;
  next->open.clear();
  next->pending.clear();
  Cost step = kernelCost(p, c);
  if (layouts) {
    step = layouts->kernelNs(c, p.costs[c]);
    if (p.epsilon) step += p.epsilon((*p.candidates)[c].backend);
    step += layouts->add(here.set, here.pending, c, &next->pending);
  }
  if (copies.active()) {
    const Cost copy = copies.add(here.set, here.open, c, &next->open);
    if (!isKnown(copy)) return kUnknownCost;
    step += copy;
  }
  return step;
}

// The third exact rule (op_level_optimizer.h), for values waiting at a
// join. A pending value whose one participant left is node J (a Concat that
// gathers the outputs of a chain, kept while the chain goes on) is decided
// when the candidate covering J is placed, by that candidate alone, and
// after it the value is gone from the state. So states that differ only in such values (same
// covered set, open values, and other pending values) have the same
// futures but for the charges that candidate makes: for each way X_J of
// covering each such J (any candidate containing J, not yet excluded),
// the state with the least cost + charges is as good as any other. A state
// that is the least for no combination of X_J cannot lead to a cheaper
// plan, and is dropped. Without it, k values waiting at one join with
// two layouts each make up to 3^k states; with it, at most as many as the
// ways to cover the joins. Returns how many it dropped.
// `covering` lists, per node, the usable candidates that contain it (looked up
// once per search: CandidateSet::covering scans every candidate, and this
// runs at every frontier).
int64_t dropUndecidedJoins(const CandidateSet& cs, const std::vector<std::vector<int32_t>>& covering,
                           const LayoutCharges& layouts, Frontier& here, size_t& liveStates, size_t& liveBytes) {
  // Enumerating the combinations costs states x combinations: past this, the
  // group keeps its states (exact either way).
  constexpr size_t kMaxCombinations = 256;
  std::unordered_map<StateKey, std::vector<Frontier::iterator>, StateKeyHash> groups;
  for (auto it = here.begin(); it != here.end(); ++it) {
    StateKey rest{it->first.set, it->first.open, {}};
    for (LayoutCharges::Pending e : it->first.pending)
      if (layouts.lastParticipant(it->first.set, LayoutCharges::pendingValue(e)) == kNoNode) rest.pending.push_back(e);
    groups[std::move(rest)].push_back(it);
  }
  if (groups.size() == here.size()) return 0;
  int64_t dropped = 0;
  std::vector<LayoutCharges::Pending> scratch;
  for (auto& [rest, members] : groups) {
    if (members.size() < 2) continue;
    const NodeSet& set = rest.set;
    // The joins these states wait at, and the candidates that can cover each.
    std::vector<NodeId> joins;
    for (const Frontier::iterator& it : members)
      for (LayoutCharges::Pending e : it->first.pending) {
        const NodeId j = layouts.lastParticipant(set, LayoutCharges::pendingValue(e));
        if (j != kNoNode) joins.push_back(j);
      }
    std::sort(joins.begin(), joins.end());
    joins.erase(std::unique(joins.begin(), joins.end()), joins.end());
    std::vector<std::vector<int32_t>> ways;
    size_t combinations = 1;
    for (NodeId j : joins) {
      std::vector<int32_t> w;
      for (int32_t c : covering[static_cast<size_t>(j)])
        if (!cs[c].nodes.intersects(set)) w.push_back(c);
      if (w.empty()) break;  // a dead end for all of them: left to the search
      combinations *= w.size();
      if (combinations > kMaxCombinations) break;
      ways.push_back(std::move(w));
    }
    if (ways.size() != joins.size() || combinations > kMaxCombinations) continue;
    // Per state, the charges of each way of covering each join: only the
    // waiting values differ between the group's states (the rest is the same
    // for all, and adds the same to every state).
    const size_t n = members.size();
    std::vector<std::vector<std::vector<Cost>>> charge(n);
    for (size_t s = 0; s < n; ++s) {
      charge[s].resize(ways.size());
      for (size_t j = 0; j < ways.size(); ++j)
        for (int32_t c : ways[j])
          charge[s][j].push_back(layouts.add(set, members[s]->first.pending, c, &scratch));
    }
    std::vector<bool> keep(n, false);
    std::vector<size_t> pick(ways.size(), 0);
    for (size_t k = 0; k < combinations; ++k) {
      size_t rem = k;
      for (size_t j = 0; j < ways.size(); ++j) {
        pick[j] = rem % ways[j].size();
        rem /= ways[j].size();
      }
      size_t best = n;
      Cost bestValue = kInvalidCost;
      for (size_t s = 0; s < n; ++s) {
        Cost value = members[s]->second.cost;
        for (size_t j = 0; j < ways.size(); ++j) value += charge[s][j][pick[j]];
        // Ties go to the earlier path, as the search's own order does.
        const Entry& e = members[s]->second;
        if (best == n || value < bestValue ||
            (value == bestValue && std::tie(e.cost, e.parent, e.candidate) <
                                       std::tie(members[best]->second.cost, members[best]->second.parent,
                                                members[best]->second.candidate))) {
          best = s;
          bestValue = value;
        }
      }
      keep[best] = true;
    }
    for (size_t s = 0; s < n; ++s) {
      if (keep[s]) continue;
      liveBytes -= std::min(liveBytes, stateBytes(members[s]->first));
      --liveStates;
      ++dropped;
      here.erase(members[s]);
    }
  }
  return dropped;
}

}  // namespace

OpLevelResult optimizeOpLevel(const OpLevelProblem& p, SearchObserver* observer,
                              const CancellationToken* cancel) {
  COLLAGE_CHECK(p.graph && p.candidates && p.costs.size() == p.candidates->size(),
                "malformed op-level problem");
  auto start = Clock::now();
  const double cpuStart = threadCpuSeconds();
  const int32_t n = p.graph->numNodes();
  const CandidateSet& cs = *p.candidates;
  OpLevelResult r;
  const DeviceCopyCharges copies(*p.graph, cs, p.device, p.copyCost);
  const LayoutCharges* layouts = p.layouts && p.layouts->active() ? p.layouts : nullptr;
  COLLAGE_CHECK(p.placed.capacity() == 0 || p.placed.capacity() == n,
                "op-level problem: `placed` is a NodeSet of another graph");
  const NodeSet placed = p.placed.capacity() == 0 ? NodeSet(n) : p.placed;

  // The walk order and each candidate's first position in it.
  std::vector<bool> usableMask(cs.size());
  for (size_t c = 0; c < cs.size(); ++c) usableMask[c] = usable(p, static_cast<int32_t>(c));
  DpOrder order;
  if (p.order.empty()) {
    order = chooseDpOrder(*p.graph, cs, usableMask, layouts || copies.active());
  } else {
    order.order = p.order;
    order.name = "given";
    std::vector<bool> seen(static_cast<size_t>(n), false);
    COLLAGE_CHECK(static_cast<int32_t>(p.order.size()) == n, "op-level problem: `order` is not a permutation of the nodes");
    for (NodeId m : p.order) {
      COLLAGE_CHECK(m >= 0 && m < n && !seen[static_cast<size_t>(m)],
                    "op-level problem: `order` is not a permutation of the nodes");
      seen[static_cast<size_t>(m)] = true;
    }
    order.width = dpOrderWidth(*p.graph, cs, usableMask, order.order, layouts || copies.active());
  }
  r.order = order.name;
  r.orderWidth = order.width.max;
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) pos[static_cast<size_t>(order.order[static_cast<size_t>(i)])] = i;
  std::vector<std::vector<int32_t>> startAt(static_cast<size_t>(n));
  std::vector<std::vector<int32_t>> coveringAt(layouts ? static_cast<size_t>(n) : 0);  // for the join rule
  // Each node's cheapest share of a candidate's kernel cost: what remains
  // costs at least the shares of its nodes (layout and copy charges only add).
  std::vector<Cost> share(static_cast<size_t>(n), kInvalidCost);
  for (size_t ci = 0; ci < cs.size(); ++ci) {
    if (!usableMask[ci]) continue;
    const auto c = static_cast<int32_t>(ci);
    int32_t first = n;
    cs[ci].nodes.forEach([&](NodeId m) { first = std::min(first, pos[static_cast<size_t>(m)]); });
    startAt[static_cast<size_t>(first)].push_back(c);
    if (layouts) cs[ci].nodes.forEach([&](NodeId m) { coveringAt[static_cast<size_t>(m)].push_back(c); });
    Cost kernel = layouts ? layouts->kernelNs(c, p.costs[ci]) : p.costs[ci];
    if (p.epsilon) kernel += p.epsilon(cs[ci].backend);
    const Cost each = kernel / cs[ci].nodes.count();
    cs[ci].nodes.forEach([&](NodeId m) { share[static_cast<size_t>(m)] = std::min(share[static_cast<size_t>(m)], each); });
  }
  Cost leftAtStart = 0;
  for (int32_t i = 0; i < n; ++i) {
    const NodeId m = order.order[static_cast<size_t>(i)];
    if (placed.contains(m)) continue;
    if (!isKnown(share[static_cast<size_t>(m)])) noCover(p, m);
    leftAtStart += share[static_cast<size_t>(m)];
  }
  auto firstUncovered = [&](const NodeSet& set, int32_t from) {
    while (from < n && set.contains(order.order[static_cast<size_t>(from)])) ++from;
    return from;
  };

  // A complete plan before the search, by the DP's own arithmetic: the
  // cheapest step at each frontier. Its cost bounds the optimum from above.
  std::vector<int32_t> greedyChosen;
  Cost greedyTotal = 0;
  {
    StateKey here{placed, {}, {}}, next, best;
    for (int32_t q = firstUncovered(here.set, 0); q < n; q = firstUncovered(here.set, q)) {
      int32_t pick = -1;
      Cost pickCost = kInvalidCost;
      for (int32_t c : startAt[static_cast<size_t>(q)]) {
        if (cs[c].nodes.intersects(here.set)) continue;
        const Cost step = stepCost(p, layouts, copies, here, c, &next);
        if (isKnown(step) && step < pickCost) {
          pick = c;
          pickCost = step;
          std::swap(best, next);
        }
      }
      if (pick < 0) {
        greedyTotal = kInvalidCost;
        break;
      }
      greedyChosen.push_back(pick);
      greedyTotal += pickCost;
      std::swap(here, best);
    }
  }
  // Dropping states above the greedy plan is safe where every charge is a
  // time (never negative): the lower bound then holds.
  const bool prune = isKnown(greedyTotal) && !copies.active() &&
                     (!layouts || (layouts->model().fixedNs >= 0 && layouts->model().perByteNs >= 0));
  const Cost ceiling = greedyTotal + 1e-9 * std::max(1.0, greedyTotal);  // rounding of the sums

  const size_t budget = p.memoryBudgetBytes ? p.memoryBudgetBytes : kDefaultOpLevelMemoryBudget;
  std::vector<Frontier> frontiers(static_cast<size_t>(n) + 1);
  std::vector<TrailStep> trail;
  size_t liveStates = 0, liveBytes = 0;
  Cost droppedBound = kInvalidCost;  // the least cost + left of a state dropped for memory
  int32_t boundedAt = -1;

  auto push = [&](StateKey key, const Entry& e, int32_t q) {
    if (prune && e.cost + e.left > ceiling) return;
    const size_t bytes = stateBytes(key);
    auto [it, inserted] = frontiers[static_cast<size_t>(q)].try_emplace(std::move(key), e);
    if (inserted) {
      ++liveStates;
      liveBytes += bytes;
      r.peakStates = std::max<int64_t>(r.peakStates, static_cast<int64_t>(liveStates));
      r.peakBytes = std::max(r.peakBytes, liveBytes + trail.capacity() * sizeof(TrailStep));
    } else if (e.cost < it->second.cost) {
      it->second = e;
    } else {
      return;
    }
    ++r.statesPushed;
  };
  // Over the budget: every frontier ahead keeps its states with the lowest
  // cost + left, half the budget's worth in all.
  auto shrink = [&](int32_t from, int32_t current) {
    const size_t trailBytes = trail.capacity() * sizeof(TrailStep);
    const size_t room = budget > trailBytes ? (budget - trailBytes) / 2 : 0;
    const size_t each = std::max<size_t>(1, liveBytes / std::max<size_t>(1, liveStates));
    const size_t keep = std::max<size_t>(1, room / each);
    if (liveStates <= keep) return;
    std::vector<Cost> f;
    f.reserve(liveStates);
    for (size_t q = static_cast<size_t>(from); q <= static_cast<size_t>(n); ++q)
      for (const auto& [key, e] : frontiers[q]) f.push_back(e.cost + e.left);
    if (f.size() <= keep) return;
    std::nth_element(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(keep - 1), f.end());
    const Cost limit = f[keep - 1];
    size_t kept = 0;
    for (size_t q = static_cast<size_t>(from); q <= static_cast<size_t>(n); ++q) {
      Frontier& front = frontiers[q];
      for (auto it = front.begin(); it != front.end();) {
        const Cost fe = it->second.cost + it->second.left;
        if (fe < limit || (fe == limit && kept < keep)) {
          ++kept;
          ++it;
          continue;
        }
        droppedBound = std::min(droppedBound, fe);
        liveBytes -= std::min(liveBytes, stateBytes(it->first));
        --liveStates;
        it = front.erase(it);
      }
      if (front.empty()) Frontier().swap(front);  // give its buckets back
    }
    r.bounded = true;
    if (boundedAt < 0) boundedAt = current;
  };
  auto unwind = [&](const Entry& e) {
    std::vector<int32_t> chosen;
    if (e.candidate >= 0) chosen.push_back(e.candidate);
    for (int32_t t = e.parent; t >= 0 && trail[static_cast<size_t>(t)].candidate >= 0;
         t = trail[static_cast<size_t>(t)].parent)
      chosen.push_back(trail[static_cast<size_t>(t)].candidate);
    return std::vector<int32_t>(chosen.rbegin(), chosen.rend());
  };

  const int32_t first = firstUncovered(placed, 0);
  push(StateKey{placed, {}, {}}, Entry{0.0, leftAtStart, -1, -1}, first);
  const int64_t stepPeriod = std::clamp<int64_t>(n / 64, 1, 2048);
  int steps = 0;
  Cost bestSample = kInvalidCost;  // cheapest greedy completion seen, for the events
  int32_t deepest = first;         // the last frontier with states
  StateKey next;
  for (int32_t q = first; q < n; ++q) {
    Frontier here;
    here.swap(frontiers[static_cast<size_t>(q)]);
    if (here.empty()) continue;
    deepest = q;
    if (cancel && cancel->cancelled()) {
      // The most promising state here, completed greedily.
      const auto best = std::min_element(here.begin(), here.end(), [](const auto& a, const auto& b) {
        return a.second.cost + a.second.left < b.second.cost + b.second.left;
      });
      r.cancelled = true;
      r.chosen = unwind(best->second);
      r.total = best->second.cost;
      completeGreedily(p, best->first.set, r);
      break;
    }
    if (layouts && here.size() > 1) {
      // Per covered set (and open values), the cheapest state; any other
      // that costs more by at least what the pending values can make a
      // difference (LayoutCharges::pendingSpread) cannot do better.
      std::unordered_map<StateKey, Frontier::iterator, StateKeyHash> cheapest;
      for (auto it = here.begin(); it != here.end(); ++it) {
        auto [at, inserted] = cheapest.try_emplace(StateKey{it->first.set, it->first.open, {}}, it);
        if (!inserted && it->second.cost < at->second->second.cost) at->second = it;
      }
      if (cheapest.size() < here.size()) {
        for (auto it = here.begin(); it != here.end();) {
          const Frontier::iterator ref = cheapest.at(StateKey{it->first.set, it->first.open, {}});
          if (ref != it && ref->second.cost + layouts->pendingSpread(it->first.set, ref->first.pending,
                                                                     it->first.pending) <= it->second.cost) {
            liveBytes -= std::min(liveBytes, stateBytes(it->first));
            --liveStates;
            ++r.statesDominated;
            it = here.erase(it);
          } else {
            ++it;
          }
        }
      }
    }
    if (layouts && here.size() > 1) {
      const int64_t dropped = dropUndecidedJoins(cs, coveringAt, *layouts, here, liveStates, liveBytes);
      r.statesDominated += dropped;
      r.statesJoined += dropped;
    }
    // Cheapest first, so that of two paths to one state at the same cost
    // the one cheaper earlier is kept, as a Dijkstra search would.
    std::vector<const Frontier::value_type*> ranked;
    ranked.reserve(here.size());
    for (const auto& state : here) ranked.push_back(&state);
    std::sort(ranked.begin(), ranked.end(), [](const auto* a, const auto* b) {
      return std::tie(a->second.cost, a->second.parent, a->second.candidate) <
             std::tie(b->second.cost, b->second.parent, b->second.candidate);
    });
    for (const auto* state : ranked) {
      const StateKey& key = state->first;
      const Entry& e = state->second;
      trail.push_back(TrailStep{e.parent, e.candidate});
      const auto t = static_cast<int32_t>(trail.size() - 1);
      ++r.statesExpanded;
      // About 64 events over a search (states expanded are of the order of
      // the node count): enough for a chart, cheap next to the search itself.
      if (observer && r.statesExpanded % stepPeriod == 0) {
        Cost sample = greedyCompletionCost(p, key.set, e.cost);
        if (sample < bestSample) bestSample = sample;
        observer->onSearchStep(SearchStepEvent{
            "op-level", ++steps, static_cast<int>(r.statesExpanded),
            isKnown(bestSample) ? bestSample : e.cost, isKnown(sample) ? sample : e.cost,
            std::chrono::duration<double>(Clock::now() - start).count()});
      }
      for (int32_t c : startAt[static_cast<size_t>(q)]) {
        const NodeSet& nodes = cs[c].nodes;
        if (nodes.intersects(key.set)) continue;
        const Cost step = stepCost(p, layouts, copies, key, c, &next);
        if (!isKnown(step)) continue;  // an unmeasured copy is not free: never taken
        Cost left = e.left;
        nodes.forEach([&](NodeId m) { left -= share[static_cast<size_t>(m)]; });
        const int32_t to = firstUncovered(next.set, q + 1);
        push(std::move(next), Entry{e.cost + step, std::max<Cost>(0.0, left), t, c}, to);
        next = StateKey{};
      }
      if (liveBytes + trail.capacity() * sizeof(TrailStep) > budget) shrink(q + 1, q);
    }
    liveStates -= here.size();
    for (const auto& [key, e] : here) liveBytes -= std::min(liveBytes, stateBytes(key));
  }
  if (!r.cancelled) {
    const Frontier& goals = frontiers[static_cast<size_t>(n)];
    const auto best = std::min_element(goals.begin(), goals.end(), [](const auto& a, const auto& b) {
      return a.second.cost < b.second.cost;
    });
    if (best != goals.end()) {
      r.chosen = unwind(best->second);
      r.total = best->second.cost;
    }
    // Dropped for memory: the greedy plan may still be the better one.
    if ((r.bounded || best == goals.end()) && isKnown(greedyTotal) && greedyTotal < r.total) {
      r.chosen = greedyChosen;
      r.total = greedyTotal;
    }
    if (!isKnown(r.total)) {
      // Every path died: name the node where the last of them stopped.
      noCover(p, order.order[static_cast<size_t>(deepest)]);
    }
    if (r.bounded) {
      r.lowerBound = std::min(r.total, droppedBound);
      char line[400];
      std::snprintf(line, sizeof line,
                    "op-level search bounded: its states outgrew the memory budget (%zu MiB) at node '%s' "
                    "(%d of %d in the walk order, width %d); the plan is the best found, %.3f ms "
                    "predicted, and no plan costs less than %.3f ms",
                    budget >> 20, p.graph->node(order.order[static_cast<size_t>(boundedAt)]).name.c_str(),
                    boundedAt + 1, n, order.width.max, r.total / 1e6, r.lowerBound / 1e6);
      r.note = line;
    } else {
      r.lowerBound = r.total;
    }
  } else {
    // The greedy part ignores devices and layouts: charge the cover as a whole.
    if (copies.active() || layouts) {
      r.total = copies.active() ? copies.coverCost(r.chosen) : 0.0;
      if (layouts) r.total += layouts->coverCost(r.chosen);
      for (int32_t c : r.chosen)
        r.total += (layouts ? layouts->kernelNs(c, p.costs[c]) : p.costs[c]) +
                   (p.epsilon ? p.epsilon(cs[c].backend) : 0.0);
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.cpuSeconds = threadCpuSeconds() - cpuStart;
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
