#include "core/onnx/topological_order.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/ir/error.h"

namespace collage {
namespace {

// Every value name a node reads: its inputs, and what the bodies inside it
// read (names a body defines itself are read too, harmlessly: ONNX names are
// assigned once, so no node of the enclosing graph produces them).
void collectReads(const onnx::NodeProto& node, std::set<std::string>& reads) {
  for (const auto& in : node.input())
    if (!in.empty()) reads.insert(in);
  for (const auto& a : node.attribute()) {
    if (a.has_g())
      for (const auto& n : a.g().node()) collectReads(n, reads);
    for (const auto& g : a.graphs())
      for (const auto& n : g.node()) collectReads(n, reads);
  }
}

std::string describe(const onnx::NodeProto& node, int index) {
  return "node '" + (node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name()) +
         "' (" + node.op_type() + ")";
}

}  // namespace

void sortNodesTopologically(onnx::GraphProto& graph) {
  for (auto& node : *graph.mutable_node())
    for (auto& a : *node.mutable_attribute()) {
      if (a.has_g()) sortNodesTopologically(*a.mutable_g());
      for (auto& g : *a.mutable_graphs()) sortNodesTopologically(g);
    }

  const int n = graph.node_size();
  std::map<std::string, int> producer;
  for (int i = 0; i < n; ++i)
    for (const auto& o : graph.node(i).output())
      if (!o.empty()) producer.emplace(o, i);
  std::vector<std::vector<int>> successors(static_cast<size_t>(n)), predecessors(static_cast<size_t>(n));
  std::vector<int> waitingFor(static_cast<size_t>(n), 0);
  bool inOrder = true;
  for (int i = 0; i < n; ++i) {
    std::set<std::string> reads;
    collectReads(graph.node(i), reads);
    std::set<int> from;
    for (const auto& name : reads)
      if (auto it = producer.find(name); it != producer.end() && it->second != i) from.insert(it->second);
    for (int p : from) {
      successors[static_cast<size_t>(p)].push_back(i);
      predecessors[static_cast<size_t>(i)].push_back(p);
      inOrder = inOrder && p < i;
    }
    waitingFor[static_cast<size_t>(i)] = static_cast<int>(from.size());
  }
  if (inOrder) return;

  // Kahn's algorithm, always taking the earliest ready node (stable).
  std::set<int> ready;
  for (int i = 0; i < n; ++i)
    if (waitingFor[static_cast<size_t>(i)] == 0) ready.insert(i);
  std::vector<int> order;
  order.reserve(static_cast<size_t>(n));
  while (!ready.empty()) {
    const int u = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(u);
    for (int s : successors[static_cast<size_t>(u)])
      if (--waitingFor[static_cast<size_t>(s)] == 0) ready.insert(s);
  }
  if (static_cast<int>(order.size()) != n) {
    // The nodes left over are on a cycle or after one: walk back through
    // unfinished predecessors until a node repeats, which is on the cycle.
    int at = 0;
    while (waitingFor[static_cast<size_t>(at)] == 0) ++at;
    std::set<int> seen;
    while (seen.insert(at).second)
      for (int p : predecessors[static_cast<size_t>(at)])
        if (waitingFor[static_cast<size_t>(p)] > 0) {
          at = p;
          break;
        }
    throw Error("graph '" + graph.name() + "' has a cycle through " + describe(graph.node(at), at) +
                ": its inputs depend on its own outputs");
  }

  google::protobuf::RepeatedPtrField<onnx::NodeProto> sorted;
  sorted.Reserve(n);
  for (int i : order) sorted.Add()->Swap(graph.mutable_node(i));
  graph.mutable_node()->Swap(&sorted);
}

}  // namespace collage
