// The op-level optimizer: the cheapest cover of the graph by disjoint valid
// candidates, where a cover costs the sum of its kernels' measured costs plus
// a switching cost epsilon for every kernel (measured per backend, see
// core/switch_cost.h), plus the measured cost of every copy between devices
// the cover makes (core/search/device_copy_charges.h: a plan edge between a
// backend on the host and one on a GPU), plus the reorders of the layout
// changes it makes at kernel boundaries (core/search/layout_charges.h: a
// kernel in its library's layout next to one that needs plain memory).
//
// It is a DP over covered NodeSets (as the TVM Collage RFC's Dijkstra, and the
// paper's Algorithm 1, which walks frontiers): from a state, only candidates
// whose first node in the walk order is the state's first uncovered node are
// tried. Every cover is reached this way exactly once (its kernels sorted by
// first node), so the search is exact over the candidate set, in any order of
// the nodes. Each step moves the frontier (the first uncovered node) forward,
// so the states are taken frontier by frontier, and a frontier's states are
// freed once taken: only a trail of (parent, candidate) stays for the plan.
//
// The walk order (core/search/dp_order.h) is the graph's or a depth-first
// one, whichever keeps fewer nodes and pending values open at the frontier:
// with the branches of a wide stage interleaved, the states at a frontier
// multiply with the number of branches; walked branch by branch they do not.
//
// Three rules drop states and keep the result exact:
//  - a state whose cost plus a lower bound of what is left (each uncovered
//    node's cheapest share of a candidate's cost) exceeds a complete plan
//    found before the search (greedy) cannot lead to the optimum;
//  - of states with one covered set that differ only in pending layout
//    hand-overs, one that costs more than the cheapest by at least what
//    those hand-overs can still save (LayoutCharges::pendingSpread) cannot
//    do better than it;
//  - values waiting at a join (a pending value whose one participant left
//    is a node J, as the kept outputs of a cross-stage partial block wait at
//    its Concat) are decided by the candidate that covers J and by nothing
//    else. Of states that differ only in such values, one that is not the
//    cheapest, charges included, for any way of covering the joins cannot
//    do better. Without it, k values waiting at one Concat multiplied the
//    states by up to 3^k (a dynamic int8 detector's search passed 1.4 GB).
// Nothing else is dropped unless the live states would exceed the memory
// budget. Then the frontiers keep their most promising states (cost plus
// the lower bound), the result says `bounded`, and its note names the cost
// of the plan found and a lower bound of the optimum.
//
// Groups with one exit that every member reaches (pattern matches, generated
// groups) cannot form a cycle between them, so such a cover can always be
// scheduled; a Session checks the order anyway (planExecutionOrder).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/patterns/candidate.h"
#include "core/ir/cost.h"
#include "core/ir/node_set.h"
#include "core/ir/search_events.h"
#include "core/search/device_copy_charges.h"
#include "core/search/layout_charges.h"

namespace collage {

struct OpLevelProblem {
  const Graph* graph = nullptr;
  const CandidateSet* candidates = nullptr;
  std::vector<Cost> costs;                             // per candidate; +inf = cannot run
  std::function<Cost(const std::string& backend)> epsilon;  // per kernel; null = 0
  std::vector<bool> allowed;                           // per candidate; empty = all
  // Where each backend runs; null = every backend on the host (no copies).
  BackendDeviceFn device = nullptr;
  // The measured copy model of each device off the host; null or NaN fields =
  // unmeasured, and then a cover that copies is never chosen (see
  // device_copy_charges.h).
  CopyCostFn copyCost = nullptr;
  // Nodes placed already, outside the candidates (the regions an override
  // keeps, core/search/plan_override.h): the cover starts from them, so it
  // covers only the other nodes, and no candidate touching them is used. Empty
  // (capacity 0) = none. Copies to and from them are not charged.
  NodeSet placed{};
  // Layout hand-over between kernels (core/search/layout_charges.h): null =
  // every kernel at its measured cost, plain at its boundary.
  const LayoutCharges* layouts = nullptr;
  // The order the DP walks the nodes in (a permutation of the graph's
  // nodes); empty = chooseDpOrder's. The optimum is the same in any order.
  std::vector<NodeId> order{};
  // Memory for the search's states, bytes; 0 = kDefaultOpLevelMemoryBudget.
  size_t memoryBudgetBytes = 0;
};

inline constexpr size_t kDefaultOpLevelMemoryBudget = size_t{1} << 30;

struct OpLevelResult {
  std::vector<int32_t> chosen;  // candidate indices, by lowest node
  Cost total = kInvalidCost;
  int64_t statesExpanded = 0;
  int64_t statesPushed = 0;
  bool cancelled = false;  // stopped early: `chosen` was completed greedily
  int steps = 0;           // SearchStepEvents sent (the last one's step number)
  double seconds = 0;
  int64_t peakStates = 0;  // the most states held at once
  // The most memory its states and trail took at once, as the budget counts
  // it (keys, map nodes and buckets, the trail), bytes; and the search's CPU
  // time (its thread's), which a loaded machine does not inflate as it does
  // `seconds`.
  size_t peakBytes = 0;
  double cpuSeconds = 0;
  int64_t statesDominated = 0;  // dropped as no better than a cheaper one (see above)
  int64_t statesJoined = 0;     // of those, dropped by the rule for values waiting at a join
  int32_t orderWidth = 0;  // the walk order's width (dp_order.h)
  std::string order;       // which order was walked: "graph", "depth-first", "given"
  // States were dropped to stay within the memory budget: `chosen` is the
  // best plan the search found, which may not be the optimum. `note` says so,
  // with its cost and a lower bound of the optimum.
  bool bounded = false;
  Cost lowerBound = 0;  // of any cover's cost (meaningful when bounded)
  std::string note;
};

// Throws Error when no cover exists (some node has no allowed candidate with
// a finite cost), naming the node.
OpLevelResult optimizeOpLevel(const OpLevelProblem& problem, SearchObserver* observer = nullptr,
                              const CancellationToken* cancel = nullptr);

// Baselines through the same machinery, for like-for-like comparisons:
// everything on one backend, with `fallback` covering, node by node, what it
// cannot run (the cheapest such cover, by the same DP; "" = no fallback).
OpLevelResult singleBackendPlacement(const OpLevelProblem& problem, const std::string& backend,
                                     const std::string& fallback);
// The first backend in `order` that can run every node of the graph on its
// own (a usable single-node candidate for each): the fallback of the
// single-backend baselines. "" when none can.
std::string completeBackend(const OpLevelProblem& problem, const std::vector<std::string>& order);
// The first backend in `order` that can run a node takes the largest group
// it can starting there, as ONNX Runtime's execution providers and TVM's BYOC
// do; costs only score the result.
OpLevelResult priorityPlacement(const OpLevelProblem& problem, const std::vector<std::string>& order);

}  // namespace collage
