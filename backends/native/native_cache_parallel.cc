// The plan and the kernels cache parallelism splits (native_cache_parallel.h).
#include "backends/native/native_cache_parallel.h"

#include <string>

#include "backends/native/native_attention.h"
#include "core/ir/error.h"

namespace collage::native {

Plan decodeAttentionPlan(const Graph& graph) {
  // Each attention's widest group: attentionGroups lists the core, then
  // the core with its views when they differ.
  std::vector<NodeSet> chosen;
  for (auto& [nodes, label] : attentionGroups(graph)) {
    if (label == "decode_attention")
      chosen.push_back(nodes);
    else if (label == "decode_attention_views" && !chosen.empty())
      chosen.back() = nodes;
  }
  if (chosen.empty())
    throw Error("the model has no decode attention (MatMul, Softmax, MatMul over at most " +
                std::to_string(kDecodeMaxQueries) + " query rows) to split across devices");
  Plan plan = singleNodePlan(graph, "native");
  plan.createdBy = "collage (decode attention groups, one node per other group)";
  std::vector<int> owner(static_cast<size_t>(graph.numNodes()), -1);
  for (size_t a = 0; a < chosen.size(); ++a)
    for (NodeId n = 0; n < graph.numNodes(); ++n)
      if (chosen[a].contains(n)) owner[static_cast<size_t>(n)] = static_cast<int>(a);
  std::vector<PlanGroup> groups;
  std::vector<bool> emitted(chosen.size(), false);
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    const int a = owner[static_cast<size_t>(n)];
    if (a < 0) {
      groups.push_back(plan.groups[static_cast<size_t>(n)]);
      continue;
    }
    if (emitted[static_cast<size_t>(a)]) continue;
    emitted[static_cast<size_t>(a)] = true;
    PlanGroup g;
    g.nodes = nodeNames(graph, chosen[static_cast<size_t>(a)]);
    g.backend = "native";
    g.pattern = "rule:decode_attention";
    g.origin = PlanOrigin::User;
    groups.push_back(std::move(g));
  }
  plan.groups = std::move(groups);
  return plan;
}

std::vector<DecodeAttentionKernel*> decodeAttentionKernels(const Session& session) {
  std::vector<DecodeAttentionKernel*> out;
  for (size_t g = 0; g < session.groupCount(); ++g)
    if (auto* k = dynamic_cast<DecodeAttentionKernel*>(&session.groupKernel(g))) out.push_back(k);
  return out;
}

}  // namespace collage::native
