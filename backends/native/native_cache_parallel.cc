// The plan and the kernels cache parallelism splits (native_cache_parallel.h).
#include "backends/native/native_cache_parallel.h"

#include <algorithm>
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

std::shared_ptr<StoredCache> storedCacheViews(const DecodeAttentionKernel& k, int64_t headFirst,
                                              int64_t heads, int64_t rows) {
  auto stored = std::make_shared<StoredCache>();
  stored->kvHeadFirst = headFirst;
  auto rebase = [&](const StridedView& view, int64_t width, const char* which) {
    // The present [B, Hkv, L, width], row-major, read in place.
    const bool rowMajor = view.dims.size() == 4 && view.dims[1] == k.Hkv && view.dims[2] == k.L &&
                          view.dims[3] == width && view.strides[3] == 1 &&
                          view.strides[2] == width && view.strides[1] == k.L * width &&
                          (view.dims[0] == 1 || view.strides[0] == k.Hkv * k.L * width);
    if (!rowMajor)
      throw Error(std::string("the decode attention kernel reads ") + which + " through " +
                  view.toString() + ", not as the present's rows [batch, " +
                  std::to_string(k.Hkv) + " KV heads, " + std::to_string(k.L) + " keys, " +
                  std::to_string(width) + "]: its device cannot hold a share of the cache");
    StridedView out = view;
    out.dims = {view.dims[0], heads, rows, width};
    out.strides = {heads * rows * width, rows * width, width, 1};
    return out;
  };
  stored->k = rebase(k.k, k.D, "K");
  stored->v = rebase(k.v, k.Dv, "V");
  return stored;
}

std::function<void(int64_t row)> splitByCacheRows(
    const std::vector<DecodeAttentionKernel*>& kernels, int64_t first, int64_t end,
    int64_t capacity, bool held,
    const std::function<void(const AttentionPartials& mine, AttentionPartials& all)>& exchange) {
  std::vector<std::shared_ptr<DecodeAttentionShard>> shards;
  for (DecodeAttentionKernel* k : kernels) {
    auto shard = std::make_shared<DecodeAttentionShard>();
    shard->exchange = exchange;
    // The second range, the new row, is empty but on the step's owner.
    shard->keys = {{first, end}, {capacity, capacity}};
    if (held) {
      auto stored = storedCacheViews(*k, 0, k->Hkv, end - first + 1);
      stored->keyRows = {0, end - first};
      shard->stored = std::move(stored);
    }
    k->shard = shard;
    shards.push_back(std::move(shard));
  }
  return [shards, first, end, capacity](int64_t row) {
    const bool mine = row >= first && row < end;
    for (const auto& shard : shards)
      shard->keys = {{first, end}, {capacity, mine ? capacity + 1 : capacity}};
  };
}

void requireWindowedPresentsReadByDecodeAttention(const Session& session) {
  const std::vector<ValueId> windowed = session.windowedOutputs();
  if (windowed.empty()) return;
  const Graph& graph = session.graph();
  for (size_t g = 0; g < session.groupCount(); ++g) {
    const KernelRequest& request = session.request(g);
    for (size_t slot = 0; slot < request.inputs.size(); ++slot) {
      const ValueId v = request.inputs[slot];
      if (std::find(windowed.begin(), windowed.end(), v) == windowed.end()) continue;
      const auto* k = dynamic_cast<const DecodeAttentionKernel*>(&session.groupKernel(g));
      if (!k || (static_cast<int>(slot) != k->kSlot && static_cast<int>(slot) != k->vSlot))
        throw Error("'" + graph.value(v).name + "' is held in part on this device, but " +
                    session.plan().describeGroup(g) +
                    " reads it other than as a decode attention's K or V (it would read the "
                    "share as the whole): run its reader in a decode attention group");
    }
  }
}

}  // namespace collage::native
