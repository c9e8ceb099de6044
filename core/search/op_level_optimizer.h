// The op-level optimizer: the cheapest cover of the graph by disjoint valid
// candidates, where a cover costs the sum of its kernels' measured costs plus
// a switching cost epsilon for every kernel (measured per backend, see
// core/switch_cost.h), plus the measured cost of every copy between devices
// the cover makes (core/search/device_copy_charges.h: a plan edge between a
// backend on the host and one on a GPU), plus the reorders of the layout
// changes it makes at kernel boundaries (core/search/layout_charges.h: a
// kernel in its library's layout next to one that needs plain memory).
//
// It is Dijkstra over covered NodeSets (as the TVM Collage RFC does; the
// paper's Algorithm 1 is the same idea): from a state, only candidates whose
// lowest node is the state's lowest uncovered node are tried. Every cover is
// reached this way exactly once (its kernels sorted by lowest node), so the
// search is exact over the candidate set, and states stay few because covered
// sets are nearly prefixes of the topological order. Groups with one exit that
// every member reaches (pattern matches, generated groups) cannot form a cycle
// between them, so such a cover can always be scheduled; a Session checks
// the order anyway (planExecutionOrder).
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
};

struct OpLevelResult {
  std::vector<int32_t> chosen;  // candidate indices, by lowest node
  Cost total = kInvalidCost;
  int64_t statesExpanded = 0;
  int64_t statesPushed = 0;
  bool cancelled = false;  // stopped early: `chosen` was completed greedily
  int steps = 0;           // SearchStepEvents sent (the last one's step number)
  double seconds = 0;
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
