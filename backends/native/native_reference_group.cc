#include "backends/native/native_reference_group.h"

#include <cstring>
#include <map>

#include "core/ir/error.h"
#include "core/ops/reference_executor.h"

namespace collage::native {

bool touchesSequence(const Graph& graph, NodeId n) {
  const Node& node = graph.node(n);
  for (ValueId v : node.inputs)
    if (v != kNoValue && graph.value(v).type.isSequence()) return true;
  for (ValueId v : node.outputs)
    if (v != kNoValue && graph.value(v).type.isSequence()) return true;
  return false;
}

std::vector<NodeSet> sequenceGroups(const Graph& g) {
  const int32_t n = g.numNodes();
  // Union-find over nodes joined by a sequence value (producer and readers).
  std::vector<NodeId> parent(static_cast<size_t>(n));
  for (NodeId i = 0; i < n; ++i) parent[static_cast<size_t>(i)] = i;
  auto find = [&](NodeId x) {
    while (parent[static_cast<size_t>(x)] != x) x = parent[static_cast<size_t>(x)] = parent[static_cast<size_t>(parent[static_cast<size_t>(x)])];
    return x;
  };
  for (ValueId v = 0; v < g.numValues(); ++v) {
    const Value& val = g.value(v);
    if (!val.type.isSequence() || val.producer == kNoNode) continue;
    for (NodeId c : val.consumers) parent[static_cast<size_t>(find(c))] = find(val.producer);
  }
  std::map<NodeId, NodeSet> parts;
  for (NodeId i = 0; i < n; ++i) {
    if (!touchesSequence(g, i)) continue;
    auto it = parts.try_emplace(find(i), NodeSet(n)).first;
    it->second.insert(i);
  }
  std::vector<NodeSet> out;
  for (auto& [root, part] : parts) {
    // Convex closure: nodes reachable from a member that reach a member.
    NodeSet down(n), up(n);
    for (NodeId i = 0; i < n; ++i) {  // topological order
      bool from = part.contains(i);
      for (NodeId p : g.predecessors(i)) from = from || down.contains(p);
      if (from) down.insert(i);
    }
    for (NodeId i = n - 1; i >= 0; --i) {
      bool to = part.contains(i);
      for (NodeId s : g.successors(i)) to = to || up.contains(s);
      if (to) up.insert(i);
    }
    NodeSet closed = part;
    for (NodeId i = 0; i < n; ++i)
      if (down.contains(i) && up.contains(i)) closed.insert(i);
    out.push_back(std::move(closed));
  }
  return out;
}

std::string sequenceBoundaryRefusal(const KernelRequest& request) {
  const Graph& g = *request.graph;
  for (const auto* list : {&request.inputs, &request.outputs})
    for (ValueId v : *list)
      if (g.value(v).type.isSequence())
        return "sequence '" + g.value(v).name + "' (" + g.value(v).type.toString() +
               ") would cross the kernel boundary; a kernel exchanges tensors only";
  return {};
}

namespace {

class ReferenceGroupKernel : public Kernel {
 public:
  explicit ReferenceGroupKernel(const KernelRequest& request)
      : graph_(*request.graph), request_(request), members_(request.members()) {}

  void run(const std::vector<const DLTensor*>& inputs,
           const std::vector<DLTensor*>& outputs) override {
    // Values of this run by id: the inputs as views, the rest as computed.
    std::map<ValueId, Tensor> env;
    for (size_t i = 0; i < request_.inputs.size(); ++i) {
      const ValueId v = request_.inputs[i];
      env[v] = Tensor::view(graph_.value(v).type, inputs[i]->data);
    }
    for (NodeId n : members_) {
      const Node& node = graph_.node(n);
      std::vector<const Tensor*> in;
      for (ValueId v : node.inputs) {
        if (v == kNoValue) {
          in.push_back(nullptr);
        } else if (graph_.value(v).isConstant()) {
          in.push_back(&*graph_.value(v).constant);
        } else {
          in.push_back(&env.at(v));
        }
      }
      std::vector<Tensor> out = evaluateNode(node, in);
      for (size_t i = 0; i < node.outputs.size(); ++i)
        if (node.outputs[i] != kNoValue) env[node.outputs[i]] = std::move(out[i]);
    }
    for (size_t i = 0; i < request_.outputs.size(); ++i) {
      const Value& v = graph_.value(request_.outputs[i]);
      const Tensor& t = env.at(request_.outputs[i]);
      if (t.type() != v.type)
        throw Error("output '" + v.name + "' is " + t.type().toString() + " at run time, " +
                    v.type.toString() + " in the plan");
      if (t.byteSize()) std::memcpy(outputs[i]->data, t.raw(), t.byteSize());
    }
  }

 private:
  const Graph& graph_;
  KernelRequest request_;
  std::vector<NodeId> members_;
};

}  // namespace

CompileResult compileReferenceGroup(const KernelRequest& request) {
  if (std::string why = sequenceBoundaryRefusal(request); !why.empty())
    return CompileResult::refuse(why);
  return CompileResult::ok(std::make_unique<ReferenceGroupKernel>(request));
}

}  // namespace collage::native
