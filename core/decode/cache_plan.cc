#include "core/decode/cache_plan.h"

#include <algorithm>
#include <set>

#include "core/ir/error.h"
#include "core/ir/node_set.h"

namespace collage {

Plan planForPrompt(const Plan& plan, const Graph& prompt, const std::string& backend) {
  Plan out = plan;
  std::set<std::string> named;
  for (const PlanGroup& g : plan.groups) named.insert(g.nodes.begin(), g.nodes.end());
  for (const Node& n : prompt.nodes())
    if (!named.count(n.name)) {
      PlanGroup alone;
      alone.nodes = {n.name};
      alone.backend = backend;
      alone.pattern = "rule:op";
      out.groups.push_back(std::move(alone));
    }
  return out;
}

Plan planWithCacheConcatsAlone(const Plan& plan, const Graph& graph,
                               const DecoderSignature& signature, std::vector<std::string>* split) {
  const std::vector<NodeSet> sets = resolvePlanGroups(plan, graph);
  std::vector<NodeId> concats;
  for (const KvCachePair& pair : signature.cache) {
    const std::optional<ValueId> present = graph.findValue(pair.present);
    if (!present || graph.value(*present).producer == kNoNode)
      throw Error("the step graph has no Concat making the present '" + pair.present + "'");
    concats.push_back(graph.value(*present).producer);
  }
  Plan out = plan;
  out.groups.clear();
  for (size_t g = 0; g < sets.size(); ++g) {
    const PlanGroup& group = plan.groups[g];
    std::vector<NodeId> inside;
    for (NodeId c : concats)
      if (sets[g].contains(c)) inside.push_back(c);
    if (inside.empty() || sets[g].count() == 1) {
      out.groups.push_back(group);
      continue;
    }
    // Per node of the group: does it reach one of the Concats (within the
    // group, which a convex group's paths never leave)? Node ids are in
    // topological order, so a descending walk sees successors first.
    NodeSet feeds(graph.numNodes());
    const std::vector<NodeId> members = sets[g].members();
    for (auto it = members.rbegin(); it != members.rend(); ++it) {
      if (std::find(inside.begin(), inside.end(), *it) != inside.end()) continue;
      for (NodeId s : graph.successors(*it))
        if (sets[g].contains(s) &&
            (feeds.contains(s) || std::find(inside.begin(), inside.end(), s) != inside.end())) {
          feeds.insert(*it);
          break;
        }
    }
    NodeSet rest = sets[g];
    for (NodeId n : feeds.members()) rest.erase(n);
    for (NodeId c : inside) rest.erase(c);
    auto part = [&](const NodeSet& nodes) {
      PlanGroup p = group;
      p.nodes = nodeNames(graph, nodes);
      p.costNs = kUnknownCost;
      p.spread = 0;
      p.samples = 0;
      p.candidate.reset();
      out.groups.push_back(std::move(p));
    };
    // Before the Concats what they read, after them what reads them: the
    // plan's order stays a topological one.
    if (!feeds.empty()) part(feeds);
    for (NodeId c : inside) {
      NodeSet one(graph.numNodes());
      one.insert(c);
      part(one);
    }
    if (!rest.empty()) part(rest);
    if (split)
      for (NodeId c : inside)
        split->push_back(plan.describeGroup(g) + ": Concat '" + graph.node(c).name + "' taken out");
  }
  return out;
}

PlannedDecoder plannedDecoder(const DecodeModel& model, const Plan& plan, BackendLookup backends,
                              const CacheShare& share, const std::string& promptBackend) {
  PlannedDecoder out;
  const bool part =
      share.rowFirst != 0 || share.rowEnd >= 0 || share.headFirst != 0 || share.headEnd >= 0;
  try {
    const Plan alone = planWithCacheConcatsAlone(plan, model.graph, model.signature, &out.split);
    out.session = std::make_unique<Session>(model.graph, alone, backends);
    out.decoder = std::make_unique<Decoder>(model, *out.session, share);
  } catch (const Error& e) {
    if (part)
      throw Error(std::string("this device holds a share of the cache, which it appends in place; ") +
                  plan.displayName() + " cannot: " + e.what());
    out.fallback = e.what();
    out.decoder.reset();
    out.session = std::make_unique<Session>(model.graph, plan, backends);
    Session* session = out.session.get();
    out.decoder = std::make_unique<Decoder>(
        model, [session](const std::vector<Tensor>& in) { return session->run(in); });
  }
  // A merged decoder's prompt runs its other branch, a graph of its own
  // whose nodes the step plan does not name: one token a step, unless the
  // caller gives the prompt's graph a plan of its own.
  if (!model.signature.useCacheFlag.empty()) {
    out.decoder->setPrefillRunner([](const Graph&, std::string& why) -> Decoder::Step {
      why =
          "a merged decoder's prompt runs its no-cache branch, which the step plan does not "
          "name (give it a plan of its own: --prefill-plan)";
      return {};
    });
    return out;
  }
  // The prompt in one pass on the same plan: its groups name the same nodes
  // in the model imported for the prompt's length (its presents are fresh
  // tensors, copied from once). Where the plan does not compile for it (a
  // node folded away, a kernel refusing the longer sequence), one token a
  // step on the step graph's Session.
  out.decoder->setPrefillRunner(
      [plan, backends, promptBackend](const Graph& prefill, std::string& why) -> Decoder::Step {
        try {
          auto session = std::make_shared<Session>(
              prefill, promptBackend.empty() ? plan : planForPrompt(plan, prefill, promptBackend),
              backends);
          return [session](const std::vector<Tensor>& in) { return session->run(in); };
        } catch (const Error& e) {
          why = std::string("the plan does not compile for the prompt's length: ") + e.what();
          return {};
        }
      });
  return out;
}

void checkMergedDecoderPlan(const Plan& plan, const DecoderSignature& signature,
                            const std::string& model, bool prompt) {
  const std::string& flag = signature.useCacheFlag;
  if (flag.empty() || !plan.inputShapes.count(flag)) return;
  throw Error(plan.displayName() + " was made for " + model + " with its input '" + flag +
              "' unbound: the If on it kept, both branches in the plan's graph. generate runs a "
              "merged decoder's " +
              (prompt ? "prompt with the no-cache branch" : "steps with the branch with the past") +
              " inlined: optimize it with --input-value " + useCacheBinding(signature, !prompt) +
              " and the --input-shape bindings that `collage generate " +
              (prompt ? "--print-prefill-bindings" : "--print-bindings") + "` prints");
}

}  // namespace collage
