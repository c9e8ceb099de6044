#include "core/rewrite/equivalence_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "core/ir/error.h"
#include "core/ir/hashing.h"
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

namespace {

// The float bounds a source region tests: its nodes' float attributes
// (Clip's min and max, LeakyRelu's alpha, ...) and the values of its small
// float constants (a Div's divisor), finite ones only, each once.
std::vector<double> regionBounds(const Graph& region) {
  std::set<double> bounds;
  auto add = [&](double v) {
    if (std::isfinite(v)) bounds.insert(v);
  };
  for (const Node& node : region.nodes()) {
    for (const auto& [name, value] : node.attrs) {
      if (const float* f = std::get_if<float>(&value)) add(*f);
      if (const auto* fs = std::get_if<std::vector<float>>(&value))
        for (size_t i = 0; i < fs->size() && i < 16; ++i) add((*fs)[i]);
    }
    for (ValueId v : node.inputs) {
      if (v == kNoValue || !region.value(v).isConstant()) continue;
      const Tensor& t = *region.value(v).constant;
      if (t.elementType() != ElementType::Float32 || t.numElements() > 16) continue;
      for (int64_t i = 0; i < t.numElements(); ++i) add(t.data<float>()[i]);
    }
  }
  return {bounds.begin(), bounds.end()};
}

// One set of inputs both regions run on, and how it was drawn (for the note).
struct Trial {
  std::string what;
  std::vector<Tensor> inputs;  // in the source region's input order
  bool scaled = false;         // the absolute floor scales with the output's largest value
};

// Fills every float32 input of `inputs` with draw(input index, rng).
template <typename Draw>
void fillFloats(std::vector<Tensor>& inputs, uint64_t seed, Draw draw) {
  std::mt19937_64 rng(seed);
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& t = inputs[k];
    if (t.elementType() != ElementType::Float32) continue;
    for (int64_t i = 0; i < t.numElements(); ++i) t.data<float>()[i] = draw(k, rng);
  }
}

std::string formatNumber(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

std::vector<Trial> checkTrials(const Graph& source, const ValueRanges* ranges) {
  std::vector<Trial> trials;
  // Uniform [-1, 1], two seeds: where most rules' mistakes show.
  for (uint64_t t = 0; t < 2; ++t)
    trials.push_back({"uniform in [-1, 1]", randomInputs(source, 0x5eed + t), false});
  // Just beyond and around the bounds the pattern tests: Clip(min=-6,
  // max=6) -> its input holds on [-1, 1] and fails at 6.06.
  const std::vector<double> bounds = regionBounds(source);
  if (!bounds.empty()) {
    std::vector<float> around;
    for (double b : bounds) {
      const double d = 0.01 * std::max(1.0, std::fabs(b));
      for (double v : {b - d, b + d, b, 2 * b, 0.5 * b, -b}) around.push_back(static_cast<float>(v));
    }
    std::string list;
    for (size_t i = 0; i < bounds.size() && i < 6; ++i) list += (i ? ", " : "") + formatNumber(bounds[i]);
    if (bounds.size() > 6) list += ", ...";
    Trial trial{"around the pattern's bounds (" + list + ")", randomInputs(source, 0x5eef), true};
    fillFloats(trial.inputs, 0xb0d5, [&](size_t, std::mt19937_64& rng) {
      return around[static_cast<size_t>(rng() % around.size())];
    });
    trials.push_back(std::move(trial));
  }
  // The ranges the region's inputs really take in the model (widened by a
  // quarter of the span each side: other inputs may go further).
  if (ranges) {
    std::vector<std::optional<ValueRange>> of;
    bool any = false;
    for (ValueId v : source.inputs()) {
      auto it = ranges->find(source.value(v).name);
      of.push_back(it == ranges->end() ? std::nullopt : std::optional<ValueRange>(it->second));
      any |= of.back().has_value();
    }
    if (any) {
      Trial trial{"in the model's value ranges", randomInputs(source, 0x5ef0), true};
      fillFloats(trial.inputs, 0x7a9e, [&](size_t k, std::mt19937_64& rng) {
        double lo = -1, hi = 1;
        if (of[k]) {
          const double pad = 0.25 * std::max(of[k]->hi - of[k]->lo, 1e-3);
          lo = of[k]->lo - pad;
          hi = of[k]->hi + pad;
        }
        return static_cast<float>(std::uniform_real_distribution<double>(lo, hi)(rng));
      });
      trials.push_back(std::move(trial));
    }
  }
  // Large magnitudes: a rule that holds near zero only (Relu6 -> Relu).
  for (double m : {1e3, 1e4}) {
    Trial trial{"uniform in [-" + formatNumber(m) + ", " + formatNumber(m) + "]",
                randomInputs(source, 0x5ef1 + static_cast<uint64_t>(m)), true};
    fillFloats(trial.inputs, 0x1a49e + static_cast<uint64_t>(m), [&](size_t, std::mt19937_64& rng) {
      return static_cast<float>(std::uniform_real_distribution<double>(-m, m)(rng));
    });
    trials.push_back(std::move(trial));
  }
  return trials;
}

double largestMagnitude(const Tensor& t) {
  double most = 0;
  if (t.elementType() != ElementType::Float32) return most;
  for (int64_t i = 0; i < t.numElements(); ++i) {
    const double v = std::fabs(static_cast<double>(t.data<float>()[i]));
    if (std::isfinite(v)) most = std::max(most, v);
  }
  return most;
}

// The inputs where the outputs differ: each input's element at the output's
// bad element when the shapes agree (an elementwise region), else its first values.
std::string counterexample(const Graph& source, const std::vector<Tensor>& inputs, const Tensor& output,
                           int64_t bad) {
  std::string text;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    if (t.elementType() != ElementType::Float32) continue;
    text += text.empty() ? "" : ", ";
    const std::string& name = source.value(source.inputs()[k]).name;
    if (bad >= 0 && t.shape() == output.shape()) {
      text += "'" + name + "'[" + std::to_string(bad) + "] = " + formatNumber(t.data<float>()[bad]);
      continue;
    }
    text += "'" + name + "' = [";
    const int64_t n = std::min<int64_t>(t.numElements(), 6);
    for (int64_t i = 0; i < n; ++i) text += (i ? ", " : "") + formatNumber(t.data<float>()[i]);
    text += t.numElements() > n ? ", ... of " + std::to_string(t.numElements()) + "]" : "]";
  }
  return text.empty() ? "" : "; counterexample: " + text;
}

}  // namespace

ValueRanges observeValueRanges(const Graph& graph, const std::vector<Tensor>& inputs,
                               const std::vector<std::string>& values, std::vector<Tensor>* outputs) {
  std::vector<ValueId> wanted;
  std::set<ValueId> once;
  for (const std::string& name : values) {
    auto v = graph.findValue(name);
    if (!v || graph.value(*v).isConstant() || !once.insert(*v).second) continue;
    if (graph.value(*v).type.elementType != ElementType::Float32) continue;
    wanted.push_back(*v);
  }
  ValueRanges ranges;
  const size_t observed = wanted.size();
  if (outputs) wanted.insert(wanted.end(), graph.outputs().begin(), graph.outputs().end());
  if (wanted.empty()) return ranges;
  std::vector<Tensor> got = ReferenceExecutor(graph).valuesOf(inputs, wanted);
  if (outputs) outputs->assign(got.begin() + static_cast<std::ptrdiff_t>(observed), got.end());
  for (size_t i = 0; i < observed; ++i) {
    const Tensor& t = got[i];
    if (t.elementType() != ElementType::Float32) continue;
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t e = 0; e < t.numElements(); ++e) {
      const double v = t.data<float>()[e];
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (lo <= hi) ranges[graph.value(wanted[i]).name] = {lo, hi};
  }
  return ranges;
}

std::vector<std::string> siteInputValues(const Graph& graph, const std::vector<SubstitutionSite>& sites) {
  std::set<std::string> names;
  for (const SubstitutionSite& site : sites)
    for (const std::string& node : site.nodes)
      if (auto id = graph.findNode(node))
        for (ValueId v : graph.node(*id).inputs)
          if (v != kNoValue && !graph.value(v).isConstant()) names.insert(graph.value(v).name);
  return {names.begin(), names.end()};
}

std::string checkRewrite(const Graph& before, const Graph& after, const SubstitutionSite& site,
                         const RewriteEffect& effect, const ValueRanges* ranges) {
  std::vector<std::string> outsBefore, outsAfter;
  for (const auto& [b, a] : effect.outputs) {
    outsBefore.push_back(b);
    outsAfter.push_back(a);
  }
  try {
    const Graph source = extractRegion(before, site.nodes, outsBefore);
    const Graph target = extractRegion(after, effect.target, outsAfter);
    const ReferenceExecutor runSource(source), runTarget(target);
    for (const Trial& trial : checkTrials(source, ranges)) {
      const std::vector<Tensor>& inputs = trial.inputs;
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
        // Far from [-1, 1], rounding grows with the values: the absolute
        // floor is relative to the output's largest value there.
        const double floor = trial.scaled ? 1e-5 * std::max(1.0, largestMagnitude(expected[i])) : 1e-5;
        const CompareResult r = compareTensors(actual[i], expected[i], Tolerance{1e-3, floor});
        if (!r.ok)
          return "output '" + outsBefore[i] + "' differs, inputs " + trial.what + ": " + r.message +
                 counterexample(source, inputs, expected[i], r.firstBadIndex);
      }
    }
  } catch (const Error& e) {
    return std::string("the check could not run: ") + e.what();
  }
  return "";
}

std::string rewriteCheckKey(const Graph& g, const SubstitutionSite& site) {
  std::string text = site.rule;
  for (const std::string& name : site.nodes) {
    auto id = g.findNode(name);
    if (!id) return text + "\n(no node '" + name + "')";
    const Node& node = g.node(*id);
    text += "\n" + node.op + " '" + node.name + "' (";
    for (ValueId v : node.inputs) {
      if (v == kNoValue) {
        text += "-,";
        continue;
      }
      const Value& value = g.value(v);
      text += value.name;
      if (value.isConstant()) {
        const Tensor& t = *value.constant;
        text += "=const " + value.type.toString() + " " +
                stableHashHex(std::string_view(static_cast<const char*>(t.raw()), t.byteSize()));
      }
      text += ",";
    }
    text += ") -> (";
    for (ValueId v : node.outputs)
      text += v == kNoValue ? std::string("-,") : g.value(v).name + ":" + g.value(v).type.toString() + ",";
    text += ") " + node.attrs.toString();
  }
  return text;
}

std::string ruleOrigin(const Substitution& rule) {
  const std::string where = rule.origin();
  return where.empty() ? "" : where + ": ";
}

std::optional<Graph> applyChecked(const Graph& graph, const SubstitutionSite& site, std::string* note,
                                  RewriteEffect* effect, const ValueRanges* ranges) {
  const Substitution* rule = findSubstitution(site.rule);
  auto fail = [&](const std::string& why) -> std::optional<Graph> {
    if (note) *note = (rule ? ruleOrigin(*rule) : std::string()) + site.toString() + ": " + why;
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
  const std::string why = checkRewrite(graph, after, site, done, ranges);
  if (!why.empty()) return fail("dropped, not equivalent: " + why);
  if (effect) *effect = std::move(done);
  return after;
}

Graph replaySubstitutions(const Graph& graph, const std::vector<SubstitutionSite>& sites,
                          std::vector<RewriteEffect>* effects, const ValueRanges* ranges) {
  Graph current = graph;
  if (effects) effects->clear();
  for (size_t i = 0; i < sites.size(); ++i) {
    std::string note;
    RewriteEffect effect;
    std::optional<Graph> next = applyChecked(current, sites[i], &note, &effect, ranges);
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
