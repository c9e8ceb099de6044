#include "core/pipeline/stage_wiring.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "core/ir/error.h"
#include "core/rewrite/equivalence_check.h"

namespace collage {

std::string stageDisplayName(size_t stage, const std::vector<std::string>& devices) {
  std::string names;
  for (const auto& d : devices) names += (names.empty() ? "" : ", ") + d;
  return "stage " + std::to_string(stage) + " [" + names + "]";
}

StageMemory stageMemoryOf(const WiredStage& stage, size_t sessionPeakBytes, int inFlight) {
  StageMemory m;
  const Graph& g = *stage.graph;
  for (ValueId v = 0; v < g.numValues(); ++v)
    if (g.value(v).isConstant()) m.weightBytes += static_cast<double>(g.value(v).type.byteSize());
  double inputs = 0;
  for (ValueId v : g.inputs())
    if (!g.value(v).isConstant()) inputs += static_cast<double>(g.value(v).type.byteSize());
  m.activationBytes = static_cast<double>(sessionPeakBytes) + std::max(1, inFlight) * inputs;
  return m;
}

Plan restrictPlan(const Plan& plan, const std::vector<std::string>& nodes) {
  const std::set<std::string> inside(nodes.begin(), nodes.end());
  Plan out;
  out.modelPath = plan.modelPath;
  out.modelSha256 = plan.modelSha256;
  out.backends = plan.backends;
  for (const PlanGroup& g : plan.groups) {
    std::vector<std::string> in;
    for (const std::string& n : g.nodes)
      if (inside.count(n)) in.push_back(n);
    if (in.empty()) continue;
    if (in.size() == g.nodes.size()) {
      out.groups.push_back(g);
      out.groups.back().candidate.reset();
      continue;
    }
    for (const std::string& n : in) {
      PlanGroup one;
      one.nodes = {n};
      one.backend = g.backend;
      one.pattern = "rule:op";
      one.origin = PlanOrigin::User;
      out.groups.push_back(std::move(one));
    }
  }
  return out;
}

std::vector<WiredStage> wireStages(const Graph& graph, const StageGraph& stageGraph,
                                   const Plan* plan, const std::string& backend) {
  if (stageGraph.stages.empty()) throw Error("pipeline: the stage graph has no stages");
  if (!plan && backend.empty()) throw Error("pipeline: give a plan or a backend for the stages");
  const size_t numNodes = static_cast<size_t>(graph.numNodes());
  // Which stage runs each node.
  std::vector<int> stageOf(numNodes, -1);
  for (size_t s = 0; s < stageGraph.stages.size(); ++s)
    for (int n : stageGraph.stages[s].nodes) {
      if (n < 0 || static_cast<size_t>(n) >= numNodes)
        throw Error("pipeline: stage " + std::to_string(s) + " names node " + std::to_string(n) +
                    ", but " + graph.name + " has " + std::to_string(numNodes) + " nodes");
      if (stageOf[static_cast<size_t>(n)] >= 0)
        throw Error("pipeline: node " + graph.node(n).name + " is in stage " +
                    std::to_string(stageOf[static_cast<size_t>(n)]) + " and in stage " +
                    std::to_string(s));
      stageOf[static_cast<size_t>(n)] = static_cast<int>(s);
    }
  for (size_t n = 0; n < numNodes; ++n)
    if (stageOf[n] < 0)
      throw Error("pipeline: node " + graph.node(static_cast<NodeId>(n)).name + " is in no stage");

  std::vector<WiredStage> stages(stageGraph.stages.size());
  for (size_t s = 0; s < stages.size(); ++s) {
    stages[s].index = s;
    stages[s].devices = stageGraph.stages[s].devices;
    if (stages[s].devices.empty())
      throw Error("pipeline: stage " + std::to_string(s) + " has no device");
  }
  auto nameOf = [&](size_t s) { return stageDisplayName(s, stages[s].devices); };

  // Each stage's sub-graph: its nodes, with the values other stages or the
  // caller read as outputs.
  std::vector<bool> isModelOutput(static_cast<size_t>(graph.numValues()), false);
  for (ValueId v : graph.outputs()) isModelOutput[static_cast<size_t>(v)] = true;
  for (ValueId v : graph.outputs())
    if (graph.value(v).producer == kNoNode)
      throw Error("pipeline: output '" + graph.value(v).name +
                  "' is a model input or constant; no stage makes it");
  std::vector<std::vector<std::string>> outputNames(stages.size());
  for (size_t s = 0; s < stages.size(); ++s) {
    std::vector<std::string> names;
    for (int n : stageGraph.stages[s].nodes) names.push_back(graph.node(n).name);
    std::vector<int> sorted = stageGraph.stages[s].nodes;
    std::sort(sorted.begin(), sorted.end());
    for (int n : sorted)
      for (ValueId v : graph.node(n).outputs) {
        if (v == kNoValue) continue;
        bool readOutside = isModelOutput[static_cast<size_t>(v)];
        for (NodeId c : graph.value(v).consumers)
          if (stageOf[static_cast<size_t>(c)] != static_cast<int>(s)) readOutside = true;
        if (readOutside) outputNames[s].push_back(graph.value(v).name);
      }
    WiredStage& stage = stages[s];
    try {
      stage.graph = std::make_unique<Graph>(extractRegion(graph, names, outputNames[s]));
    } catch (const Error& e) {
      throw Error("pipeline: " + nameOf(s) + ": its sub-graph: " + e.what());
    }
    stage.graph->name = graph.name + " (" + nameOf(s) + ")";
    stage.plan = plan ? restrictPlan(*plan, names) : singleNodePlan(*stage.graph, backend);
  }

  // Where each stage input comes from; one edge per (producer, consumer).
  for (size_t s = 0; s < stages.size(); ++s) {
    WiredStage& stage = stages[s];
    std::map<size_t, size_t> edgeOf;  // producer stage -> index into inEdges
    for (ValueId rv : stage.graph->inputs()) {
      const std::string& name = stage.graph->value(rv).name;
      const std::optional<ValueId> v = graph.findValue(name);
      if (!v)
        throw Error("pipeline: " + nameOf(s) + " reads '" + name + "', which " + graph.name +
                    " lacks");
      StageInputSource src;
      const NodeId producer = graph.value(*v).producer;
      if (producer == kNoNode) {
        const auto& ins = graph.inputs();
        auto at = std::find(ins.begin(), ins.end(), *v);
        if (at == ins.end())
          throw Error("pipeline: " + nameOf(s) + " reads '" + name +
                      "', which is neither made by a node nor an input");
        src.graphInput = static_cast<int>(at - ins.begin());
      } else {
        const size_t from = static_cast<size_t>(stageOf[static_cast<size_t>(producer)]);
        WiredStage& prod = stages[from];
        auto e = edgeOf.find(from);
        if (e == edgeOf.end()) {
          stage.inEdges.push_back(from);
          prod.outEdges.push_back({s, {}});
          e = edgeOf.emplace(from, stage.inEdges.size() - 1).first;
        }
        StageSend* out = nullptr;
        for (auto& oe : prod.outEdges)
          if (oe.consumer == s) out = &oe;
        const auto& pnames = outputNames[from];
        const size_t position =
            static_cast<size_t>(std::find(pnames.begin(), pnames.end(), name) - pnames.begin());
        src.edge = e->second;
        src.slot = out->outputs.size();
        out->outputs.push_back(position);
      }
      stage.inputs.push_back(src);
    }
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const ValueId v = graph.outputs()[i];
    const size_t s = static_cast<size_t>(stageOf[static_cast<size_t>(graph.value(v).producer)]);
    const auto& names = outputNames[s];
    const size_t position = static_cast<size_t>(
        std::find(names.begin(), names.end(), graph.value(v).name) - names.begin());
    stages[s].modelOutputs.push_back({position, i});
  }
  return stages;
}

}  // namespace collage
