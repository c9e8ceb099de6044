#include "core/rewrite/equivalence_check.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "core/ir/error.h"
#include "core/ir/tensor_compare.h"
#include "core/ops/reference_executor.h"

namespace collage {

Graph extractRegion(const Graph& graph, const std::vector<std::string>& nodes,
                    const std::vector<std::string>& outputs) {
  Graph region;
  region.name = graph.name + " (region)";
  region.opsetImports = graph.opsetImports;
  std::map<ValueId, ValueId> mapped;
  std::vector<NodeId> ids;
  for (const std::string& name : nodes) {
    auto id = graph.findNode(name);
    if (!id) throw Error("no node '" + name + "' in the graph");
    ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  std::vector<bool> inside(static_cast<size_t>(graph.numNodes()), false);
  for (NodeId n : ids) inside[static_cast<size_t>(n)] = true;
  auto outer = [&](ValueId v) {
    auto it = mapped.find(v);
    if (it != mapped.end()) return it->second;
    const Value& val = graph.value(v);
    const ValueId r = val.isConstant() ? region.addConstant(val.name, *val.constant)
                                       : region.addInput(val.name, val.type);
    mapped[v] = r;
    return r;
  };
  for (NodeId n : ids)
    for (ValueId v : graph.node(n).outputs)
      if (v != kNoValue) mapped[v] = region.addValue(graph.value(v).name, graph.value(v).type);
  for (NodeId n : ids) {
    Node copy = graph.node(n);
    for (ValueId& v : copy.inputs)
      if (v != kNoValue) {
        const NodeId p = graph.value(v).producer;
        v = p != kNoNode && inside[static_cast<size_t>(p)] ? mapped.at(v) : outer(v);
      }
    for (ValueId& v : copy.outputs)
      if (v != kNoValue) v = mapped.at(v);
    region.addNode(std::move(copy));
  }
  for (const std::string& name : outputs) {
    auto v = graph.findValue(name);
    if (!v) throw Error("no value '" + name + "' in the graph");
    auto it = mapped.find(*v);
    region.markOutput(it != mapped.end() ? it->second : outer(*v));
  }
  region.finalize();
  return region;
}

std::string checkRewrite(const Graph& before, const Graph& after, const SubstitutionSite& site,
                         const RewriteEffect& effect, int trials) {
  std::vector<std::string> outsBefore, outsAfter;
  for (const auto& [b, a] : effect.outputs) {
    outsBefore.push_back(b);
    outsAfter.push_back(a);
  }
  try {
    const Graph source = extractRegion(before, site.nodes, outsBefore);
    const Graph target = extractRegion(after, effect.target, outsAfter);
    const ReferenceExecutor runSource(source), runTarget(target);
    for (int t = 0; t < trials; ++t) {
      const std::vector<Tensor> inputs = randomInputs(source, 0x5eed + static_cast<uint64_t>(t));
      std::map<std::string, Tensor> byName;
      for (size_t i = 0; i < inputs.size(); ++i) byName[source.value(source.inputs()[i]).name] = inputs[i];
      std::vector<Tensor> targetInputs;
      for (ValueId v : target.inputs()) {
        auto it = byName.find(target.value(v).name);
        if (it == byName.end())
          return "the target reads '" + target.value(v).name + "', which the source does not";
        targetInputs.push_back(it->second);
      }
      const std::vector<Tensor> expected = runSource.run(inputs);
      const std::vector<Tensor> actual = runTarget.run(targetInputs);
      for (size_t i = 0; i < expected.size(); ++i) {
        const CompareResult r = compareTensors(actual[i], expected[i], Tolerance{1e-3, 1e-5});
        if (!r.ok) return "output '" + outsBefore[i] + "' differs: " + r.message;
      }
    }
  } catch (const Error& e) {
    return std::string("the check could not run: ") + e.what();
  }
  return "";
}

std::optional<Graph> applyChecked(const Graph& graph, const SubstitutionSite& site, std::string* note,
                                  RewriteEffect* effect) {
  const Substitution* rule = findSubstitution(site.rule);
  auto fail = [&](const std::string& why) -> std::optional<Graph> {
    if (note) *note = site.toString() + ": " + why;
    return std::nullopt;
  };
  if (!rule) return fail("no such substitution rule");
  const std::vector<SubstitutionSite> sites = rule->find(graph);
  if (std::find(sites.begin(), sites.end(), site) == sites.end()) return fail("the rule does not apply there");
  Graph after = graph;
  RewriteEffect done;
  try {
    done = rule->apply(after, site);
  } catch (const Error& e) {
    return fail(e.what());
  }
  const std::string why = checkRewrite(graph, after, site, done);
  if (!why.empty()) return fail("dropped, not equivalent: " + why);
  if (effect) *effect = std::move(done);
  return after;
}

Graph replaySubstitutions(const Graph& graph, const std::vector<SubstitutionSite>& sites,
                          std::vector<RewriteEffect>* effects) {
  Graph current = graph;
  if (effects) effects->clear();
  for (size_t i = 0; i < sites.size(); ++i) {
    std::string note;
    RewriteEffect effect;
    std::optional<Graph> next = applyChecked(current, sites[i], &note, &effect);
    if (!next)
      throw Error("substitution " + std::to_string(i + 1) + " of " + std::to_string(sites.size()) +
                  " does not hold on this model: " + note);
    current = std::move(*next);
    if (effects) effects->push_back(std::move(effect));
  }
  return current;
}

std::map<std::string, size_t> rewrittenNodeSites(const Graph& rewritten,
                                                 const std::vector<RewriteEffect>& effects) {
  std::map<std::string, size_t> siteOf;
  // In order, so a node a later site rewrote again names that later site.
  for (size_t i = 0; i < effects.size(); ++i)
    for (const std::string& name : effects[i].target)
      if (rewritten.findNode(name)) siteOf[name] = i;
  return siteOf;
}

std::string sitesToJson(const std::vector<SubstitutionSite>& sites) {
  nlohmann::json j = nlohmann::json::array();
  for (const SubstitutionSite& s : sites) j.push_back({{"rule", s.rule}, {"nodes", s.nodes}});
  return j.dump();
}

std::vector<SubstitutionSite> sitesFromJson(const std::string& text, const std::string& displayPath) {
  std::vector<SubstitutionSite> sites;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& s : j) sites.push_back({s.at("rule").get<std::string>(), s.at("nodes").get<std::vector<std::string>>()});
  } catch (const nlohmann::json::exception& e) {
    throw Error(displayPath + ": not a list of substitutions: " + e.what());
  }
  return sites;
}

}  // namespace collage
