#include "core/search/plan_override.h"

#include <algorithm>
#include <map>

#include "core/patterns/candidate_signature.h"
#include "core/ir/error.h"
#include "core/search/graph_level_search.h"
#include "core/search/layout_charges.h"
#include "core/search/op_level_optimizer.h"
#include "core/search/plan_from_cover.h"
#include "core/ir/sub_graph.h"

namespace collage {
namespace {

// Only what makes a set impossible for ANY backend: emptiness and convexity.
// Exits, depth and size are each backend's own limits.
const SubGraphLimits kAnyBackend{0, 0, 0, true};

int32_t exactCandidate(const OptimizationResult& result, const NodeSet& nodes,
                       const std::string& backend) {
  NodeId first = nodes.first();
  if (first == kNoNode || static_cast<size_t>(first) >= static_cast<size_t>(nodes.capacity()))
    return -1;
  for (int32_t c : result.candidates.startingAt(first)) {
    const Candidate& cand = result.candidates[static_cast<size_t>(c)];
    if (cand.backend == backend && cand.nodes == nodes) return c;
  }
  return -1;
}

bool isMeasured(const OptimizationResult& result, int32_t c) {
  const auto i = static_cast<size_t>(c);
  if (!result.measured.empty()) return result.measured[i];
  return i < result.measurements.size() && !isMissingMeasurement(result.measurements[i]);
}

std::vector<std::string> backendsOf(const OptimizationResult& result) {
  std::vector<std::string> out;
  for (const auto& [name, version] : result.versions) out.push_back(name);
  for (const auto& c : result.candidates.all())
    if (std::find(out.begin(), out.end(), c.backend) == out.end()) out.push_back(c.backend);
  return out;
}

std::string measurementProblem(const Measurement& m) {
  switch (m.status) {
    case MeasurementStatus::Invalid:
      return "refused to compile it: " + m.message;
    case MeasurementStatus::Skipped:
      return "it was not measured (faster candidates cover its nodes): " + m.message;
    case MeasurementStatus::TimedOut:
      return "its kernel timed out while being measured" +
             (m.message.empty() ? std::string() : ": " + m.message);
    default:
      return "its kernel failed to measure: " + (m.message.empty() ? m.toString() : m.message);
  }
}

}  // namespace

bool isMissingMeasurement(const Measurement& m) {
  return m.status == MeasurementStatus::Failed &&
         (m.message == "not measured" || m.message == "cancelled");
}

std::string describeNodes(const Graph& graph, const NodeSet& nodes) {
  std::string out = "{";
  int shown = 0;
  const int total = nodes.count();
  nodes.forEach([&](NodeId n) {
    if (shown == 6) return;
    out += (shown ? ", " : "") + graph.node(n).name + " (" + graph.node(n).op + ")";
    ++shown;
  });
  if (total > shown) out += ", ... " + std::to_string(total - shown) + " more";
  return out + "}";
}

Pin overridePin(const Graph& graph, const NodeSet& nodes, const std::string& backend) {
  if (nodes.empty()) throw Error("an override needs at least one node");
  Pin pin;
  pin.backend = backend;
  pin.group = true;  // exactly these nodes as one kernel, even for one node
  nodes.forEach([&](NodeId n) {
    pin.nodes.push_back(NodeSelector{NodeSelector::Kind::Name, graph.node(n).name});
  });
  return pin;
}

NodeSet pinNodes(const Graph& graph, const Pin& pin) {
  NodeSet out(graph.numNodes());
  for (const auto& s : pin.nodes) {
    auto selected = s.select(graph);
    if (selected.empty()) throw Error("'" + s.toString() + "' matches no node of the model");
    for (NodeId n : selected) out.insert(n);
  }
  return out;
}

std::string pinToString(const Pin& pin) {
  std::string out;
  for (size_t i = 0; i < pin.nodes.size(); ++i) out += (i ? "+" : "") + pin.nodes[i].toString();
  return out + "=" + pin.backend;
}

PlacementConstraints withoutOverride(const Graph& graph, const PlacementConstraints& constraints,
                                     const NodeSet& nodes) {
  PlacementConstraints out;
  out.forbids = constraints.forbids;
  for (const auto& pin : constraints.pins) {
    NodeSet selected(graph.numNodes());
    try {
      selected = pinNodes(graph, pin);
    } catch (const Error&) {
      // A pin naming nodes this model lacks cannot clash: keep it for the
      // next optimisation to report.
    }
    if (!selected.intersects(nodes)) out.pins.push_back(pin);
  }
  return out;
}

PlacementConstraints withOverride(const Graph& graph, const PlacementConstraints& constraints,
                                  const NodeSet& nodes, const std::string& backend) {
  PlacementConstraints out = withoutOverride(graph, constraints, nodes);
  out.pins.push_back(overridePin(graph, nodes, backend));
  return out;
}

std::vector<RunOnChoice> runOnChoices(const Graph& graph, const OptimizationResult& result,
                                      const NodeSet& nodes, const Plan* plan) {
  if (nodes.empty()) throw Error("select at least one node to choose a backend for it");
  COLLAGE_CHECK(nodes.capacity() == graph.numNodes(), "runOnChoices: NodeSet of another graph");
  const SubGraphValidity shape = checkSubGraph(graph, nodes, kAnyBackend);

  // The plan group with exactly these nodes, if any.
  const PlanGroup* currentGroup = nullptr;
  if (plan)
    for (const auto& g : plan->groups) {
      if (static_cast<int>(g.nodes.size()) != nodes.count()) continue;
      bool same = true;
      for (const auto& name : g.nodes) {
        auto n = graph.findNode(name);
        same = same && n && nodes.contains(*n);
      }
      if (same) currentGroup = &g;
    }

  std::vector<RunOnChoice> out;
  for (const std::string& backend : backendsOf(result)) {
    RunOnChoice choice;
    choice.backend = backend;
    choice.current = currentGroup && currentGroup->backend == backend;
    if (!shape.ok()) {
      choice.reason = "these nodes cannot run as one kernel on any backend: " + shape.reason;
      out.push_back(std::move(choice));
      continue;
    }
    choice.candidate = exactCandidate(result, nodes, backend);
    if (choice.candidate >= 0) {
      const Candidate& cand = result.candidates[static_cast<size_t>(choice.candidate)];
      choice.pattern = cand.origin;
      if (!isMeasured(result, choice.candidate)) {
        choice.runnable = true;  // measured when chosen
      } else {
        const Measurement& m = result.measurements.at(static_cast<size_t>(choice.candidate));
        if (m.status == MeasurementStatus::Ok) {
          choice.runnable = choice.measured = true;
          choice.medianNs = m.medianNs;
          choice.spread = m.spread;
          choice.samples = m.samples;
        } else {
          choice.reason = backend + " " + measurementProblem(m);
        }
      }
      out.push_back(std::move(choice));
      continue;
    }
    // No candidate: say which rule stands in the way, most specific first.
    auto limits = result.limits.find(backend);
    if (limits != result.limits.end()) {
      SubGraphValidity v = checkSubGraph(graph, nodes, limits->second);
      if (!v.ok()) {
        choice.reason = backend + " does not accept this group: " + v.reason;
        out.push_back(std::move(choice));
        continue;
      }
    }
    std::string cannot;
    nodes.forEach([&](NodeId n) {
      if (!cannot.empty()) return;
      bool any = false;
      for (int32_t c : result.candidates.covering(n))
        any = any || result.candidates[static_cast<size_t>(c)].backend == backend;
      if (!any)
        cannot = backend + " cannot run node '" + graph.node(n).name + "' (" + graph.node(n).op +
                 ") at all: no pattern or op rule of it accepts it";
    });
    if (!cannot.empty()) {
      choice.reason = cannot;
    } else if (nodes.count() == 1) {
      choice.reason = backend + " runs this node only fused with others: no pattern or op rule of "
                                "it accepts it alone";
    } else {
      choice.reason = "no pattern or fusion rule of " + backend + " forms exactly this group of " +
                      std::to_string(nodes.count()) + " nodes (it runs them only in other groupings)";
    }
    out.push_back(std::move(choice));
  }
  return out;
}

void checkOverride(const Graph& graph, const OptimizationResult& result, const NodeSet& nodes,
                   const std::string& backend) {
  const std::string what = describeNodes(graph, nodes);
  for (const RunOnChoice& choice : runOnChoices(graph, result, nodes)) {
    if (choice.backend != backend) continue;
    if (!choice.runnable)
      throw Error("override refused: cannot run " + what + " on " + backend + ": " + choice.reason);
    return;
  }
  throw Error("override refused: " + backend + " is not one of the backends of this optimisation");
}

void markPinnedGroups(Plan& plan, const Graph& graph, const PlacementConstraints& constraints) {
  if (constraints.pins.empty()) return;
  NodeSet pinned(graph.numNodes());
  for (const auto& pin : constraints.pins) {
    try {
      pinned |= pinNodes(graph, pin);
    } catch (const Error&) {
      // allowedCandidates already refused such a pin where it matters.
    }
  }
  for (auto& g : plan.groups)
    for (const auto& name : g.nodes) {
      auto n = graph.findNode(name);
      if (n && pinned.contains(*n)) {
        g.origin = PlanOrigin::User;
        break;
      }
    }
}

std::vector<PlanGroup> keptRegions(const Graph& graph, const OptimizationResult& result,
                                   const PlacementConstraints& constraints) {
  std::vector<PlanGroup> kept;
  for (size_t i = 0; i < result.plan.groups.size(); ++i) {
    const PlanGroup& g = result.plan.groups[i];
    if (groupCandidate(result, graph, g)) continue;  // the DP can make it again
    // The rule the graph-level search honoured when it made the region.
    const GraphLibrary asMade{g.backend, [](const NodeSet&) { return std::string(); }};
    const GraphLibrary honouring = honouringConstraints(graph, {asMade}, constraints).front();
    if (honouring.refusal(groupNodes(result.plan, i, graph)).empty()) kept.push_back(g);
  }
  return kept;
}

std::vector<bool> replanCandidates(const Graph& graph, const OptimizationResult& result,
                                   const PlacementConstraints& constraints,
                                   const std::vector<PlanGroup>& kept) {
  std::vector<bool> allowed = allowedCandidates(graph, result.candidates, constraints);
  if (kept.empty()) return allowed;
  NodeSet placed(graph.numNodes());
  for (const PlanGroup& g : kept)
    for (const std::string& name : g.nodes)
      if (auto n = graph.findNode(name)) placed.insert(*n);
  for (size_t i = 0; i < allowed.size(); ++i)
    if (allowed[i] && result.candidates[i].nodes.intersects(placed)) allowed[i] = false;
  return allowed;
}

ReplanResult replanWithPins(const Graph& graph, OptimizationResult& result,
                            const PlacementConstraints& constraints, const MeasureFn& measure) {
  const CandidateSet& candidates = result.candidates;
  COLLAGE_CHECK(result.measurements.size() == candidates.size(),
                "replanWithPins: one measurement per candidate");
  if (result.measured.size() != candidates.size()) {
    result.measured.clear();
    for (const auto& m : result.measurements) result.measured.push_back(!isMissingMeasurement(m));
  }
  auto refuse = [](const std::string& why) { return Error("override refused: " + why); };

  // Each pinned group on its own first: the clearest message for a bad one.
  std::vector<int32_t> pinnedCandidates;
  for (const auto& pin : constraints.pins) {
    NodeSet nodes(graph.numNodes());
    try {
      nodes = pinNodes(graph, pin);
    } catch (const Error& e) {
      throw refuse(std::string("pin '") + pinToString(pin) + "': " + e.what());
    }
    if (!pin.group) continue;
    SubGraphValidity v = checkSubGraph(graph, nodes, kAnyBackend);
    if (!v.ok())
      throw refuse(describeNodes(graph, nodes) + " cannot run as one kernel: " + v.reason);
    int32_t c = exactCandidate(result, nodes, pin.backend);
    if (c < 0) {
      std::string why;
      for (const RunOnChoice& choice : runOnChoices(graph, result, nodes))
        if (choice.backend == pin.backend) why = choice.reason;
      throw refuse("cannot run " + describeNodes(graph, nodes) + " on " + pin.backend + ": " +
                   (why.empty() ? pin.backend + " is not one of the backends of this optimisation"
                                : why));
    }
    pinnedCandidates.push_back(c);
  }

  std::vector<PlanGroup> kept;
  std::vector<bool> allowed;
  try {
    kept = keptRegions(graph, result, constraints);
    allowed = replanCandidates(graph, result, constraints, kept);
  } catch (const Error& e) {
    throw refuse(e.what());
  }
  NodeSet placed(graph.numNodes());
  for (const PlanGroup& g : kept)
    for (const std::string& name : g.nodes) placed.insert(*graph.findNode(name));

  // Measure what the search may now use but nobody measured yet.
  ReplanResult out;
  std::map<std::pair<std::string, std::string>, Measurement> fresh;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!allowed[i] || result.measured[i]) continue;
    const Candidate& cand = candidates[i];
    if (!measure) {
      if (std::find(pinnedCandidates.begin(), pinnedCandidates.end(), static_cast<int32_t>(i)) !=
          pinnedCandidates.end())
        throw refuse(cand.backend + " has never measured " + describeNodes(graph, cand.nodes) +
                     ", and nothing can measure it here");
      continue;
    }
    auto key = std::make_pair(cand.backend, candidateSignature(graph, cand.nodes).hash);
    auto it = fresh.find(key);
    if (it == fresh.end()) {
      it = fresh.emplace(key, measure(cand)).first;
      ++out.measuredNow;
    }
    result.measurements[i] = it->second;
    result.measured[i] = true;
  }
  for (int32_t c : pinnedCandidates) {
    const Measurement& m = result.measurements[static_cast<size_t>(c)];
    if (result.measured[static_cast<size_t>(c)] && m.status != MeasurementStatus::Ok)
      throw refuse("cannot run " + describeNodes(graph, candidates[static_cast<size_t>(c)].nodes) +
                   " on " + candidates[static_cast<size_t>(c)].backend + ": " +
                   measurementProblem(m));
  }

  std::vector<Cost> costs;
  costs.reserve(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i)
    costs.push_back(result.measured[i] ? result.measurements[i].cost() : kUnknownCost);
  const SwitchCostTable& switchCosts = result.switchCosts;
  OpLevelProblem problem{&graph, &candidates, costs,
                         [&](const std::string& b) { return switchCosts.epsilonInto(b); }, allowed};
  result.deviceCosts.applyTo(problem);
  problem.placed = placed;
  // Layouts charged as the job's DP charged them, so that an override moves
  // only what it must.
  const LayoutCharges layoutCharges(graph, candidates, result.layoutOffers, result.reorderModel);
  problem.layouts = &layoutCharges;
  OpLevelResult opLevel;
  try {
    opLevel = optimizeOpLevel(problem);
  } catch (const Error& e) {
    throw refuse(e.what());
  }

  std::vector<BackendVersion> versions = result.versions;
  if (versions.empty()) versions = result.plan.backends;
  out.plan = makePlanAround(graph, kept, candidates, opLevel.chosen, result.measurements,
                            PlanOrigin::OpLevel, result.plan.fingerprint, versions);
  chargeKernelsAsTheDp(layoutCharges, out.plan.groups);
  out.plan.modelPath = result.plan.modelPath;
  out.plan.modelSha256 = result.plan.modelSha256;
  // A kept region is one more kernel, at its own measured time: the same
  // terms the DP charges its candidates.
  out.plan.predictedNs = opLevel.total;
  for (const PlanGroup& g : kept) out.plan.predictedNs += g.costNs + switchCosts.epsilonInto(g.backend);
  out.regionsKept = static_cast<int>(kept.size());
  int overrides = static_cast<int>(constraints.pins.size());
  out.plan.createdBy =
      "collage-studio (op-level" +
      (kept.empty() ? std::string() : " + " + std::to_string(kept.size()) + " graph-level region(s) kept") +
      (overrides ? ", " + std::to_string(overrides) + " pinned by the user" : "") + ")";
  markPinnedGroups(out.plan, graph, constraints);

  // Each group is convex, but two groups may still need each other's results.
  try {
    std::vector<NodeSet> groups = resolvePlanGroups(out.plan, graph);
    planExecutionOrder(out.plan, graph, groups);
  } catch (const Error& e) {
    throw refuse(std::string("the groups would depend on each other in a cycle: ") + e.what());
  }
  return out;
}

}  // namespace collage
