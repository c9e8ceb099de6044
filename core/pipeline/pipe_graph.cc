#include "core/pipeline/pipe_graph.h"

#include <algorithm>
#include <cmath>
#include <queue>

#include "core/ir/error.h"
#include "core/ir/graph.h"

namespace collage {

int PipeGraph::addNode(std::string name) {
  names_.push_back(std::move(name));
  preds_.emplace_back();
  succs_.emplace_back();
  return size() - 1;
}

void PipeGraph::addEdge(int from, int to, double bytesPerSample) {
  if (from < 0 || from >= size() || to < 0 || to >= size())
    throw Error("pipeline graph: edge " + std::to_string(from) + " -> " + std::to_string(to) +
                " names a node the graph does not have (" + std::to_string(size()) + " nodes)");
  if (from == to) throw Error("pipeline graph: node " + name(from) + " feeds itself");
  if (!(bytesPerSample >= 0) || !std::isfinite(bytesPerSample))
    throw Error("pipeline graph: edge " + name(from) + " -> " + name(to) + " carries " +
                std::to_string(bytesPerSample) + " bytes per sample; it must be >= 0");
  edges_.push_back({from, to, bytesPerSample});
  if (std::find(succs_[from].begin(), succs_[from].end(), to) == succs_[from].end()) {
    succs_[from].push_back(to);
    preds_[to].push_back(from);
  }
}

std::vector<int> PipeGraph::topologicalOrder() const {
  std::vector<int> indegree(size());
  for (int n = 0; n < size(); ++n) indegree[n] = static_cast<int>(preds_[n].size());
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int n = 0; n < size(); ++n)
    if (indegree[n] == 0) ready.push(n);
  std::vector<int> order;
  while (!ready.empty()) {
    const int n = ready.top();
    ready.pop();
    order.push_back(n);
    for (int s : succs_[n])
      if (--indegree[s] == 0) ready.push(s);
  }
  if (static_cast<int>(order.size()) != size()) {
    for (int n = 0; n < size(); ++n)
      if (indegree[n] > 0)
        throw Error("pipeline graph: node " + name(n) +
                    " is on a cycle; a pipeline needs an acyclic graph");
  }
  return order;
}

std::string PipeGraph::names(const std::vector<int>& nodes) const {
  std::string out;
  for (size_t i = 0; i < nodes.size(); ++i) out += (i ? ", " : "") + name(nodes[i]);
  return out;
}

PipeGraph pipeGraphOf(const Graph& graph, int64_t batch) {
  if (batch < 1) throw Error("pipeline: the batch of " + graph.name + " must be at least 1");
  PipeGraph out;
  for (const Node& n : graph.nodes()) out.addNode(n.name);
  for (const Value& v : graph.values()) {
    if (v.producer == kNoNode || v.isConstant()) continue;
    const double bytes = static_cast<double>(v.type.byteSize()) / static_cast<double>(batch);
    for (NodeId c : v.consumers) out.addEdge(v.producer, c, bytes);
  }
  return out;
}

}  // namespace collage
