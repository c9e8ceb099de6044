#include "core/plan/plan.h"
#include "core/rewrite/equivalence_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>
#include <sstream>

#include "core/ir/error.h"
#include "core/ir/hashing.h"
#include "core/ir/json_text.h"
#include "core/ir/sub_graph.h"
#include "core/rewrite/substitution_spec_file.h"

namespace collage {

using json = nlohmann::ordered_json;

namespace {

constexpr const char* kFormatName = "collage-plan";

bool sameCost(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

std::string jsonTypeName(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

// Reads fields of a parsed plan; every error names the file and the field
// by its JSON path ("groups[3].backend").
class FieldReader {
 public:
  explicit FieldReader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(path_ + ": field '" + field + "' " + what);
  }

  const json* find(const json& obj, const std::string& key) const {
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }
  const json& require(const json& obj, const std::string& where, const std::string& key) const {
    const json* j = find(obj, key);
    if (!j) fail(join(where, key), "is missing");
    return *j;
  }
  const json& object(const json& j, const std::string& field) const {
    if (!j.is_object()) fail(field, "must be an object, got " + jsonTypeName(j));
    return j;
  }
  const json& array(const json& j, const std::string& field) const {
    if (!j.is_array()) fail(field, "must be an array, got " + jsonTypeName(j));
    return j;
  }
  std::string string(const json& j, const std::string& field) const {
    if (!j.is_string()) fail(field, "must be a string, got " + jsonTypeName(j));
    return j.get<std::string>();
  }
  int64_t integer(const json& j, const std::string& field) const {
    if (j.is_number_integer()) return j.get<int64_t>();
    if (j.is_number_float()) {
      double d = j.get<double>();
      if (std::floor(d) == d && std::abs(d) < 9e15) return static_cast<int64_t>(d);
    }
    fail(field, "must be an integer, got " + (j.is_number() ? j.dump() : jsonTypeName(j)));
  }
  double number(const json& j, const std::string& field) const {
    if (!j.is_number()) fail(field, "must be a number, got " + jsonTypeName(j));
    return j.get<double>();
  }
  // A cost: a number, null (unknown) or "invalid".
  double cost(const json& j, const std::string& field) const {
    if (j.is_null()) return kUnknownCost;
    if (j.is_string() && j.get<std::string>() == "invalid") return kInvalidCost;
    if (!j.is_number())
      fail(field, "must be a number of nanoseconds, null (unknown) or \"invalid\", got " +
                      jsonTypeName(j));
    double d = j.get<double>();
    if (d < 0) fail(field, "must not be negative, got " + j.dump());
    return d;
  }
  std::string optString(const json& obj, const std::string& where, const std::string& key,
                        std::string fallback = "") const {
    const json* j = find(obj, key);
    return j ? string(*j, join(where, key)) : fallback;
  }

  static std::string join(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }
  static std::string index(const std::string& where, size_t i) {
    return where + "[" + std::to_string(i) + "]";
  }

 private:
  std::string path_;
};

// JSON on one line with a space after ':' and ',' (nlohmann's compact dump has none).
std::string compact(const json& j) {
  std::string s;
  if (j.is_object()) {
    s = "{";
    bool first = true;
    for (const auto& [key, value] : j.items()) {
      s += (first ? "" : ", ") + json(key).dump() + ": " + compact(value);
      first = false;
    }
    return s + "}";
  }
  if (j.is_array()) {
    s = "[";
    for (size_t i = 0; i < j.size(); ++i) s += (i ? ", " : "") + compact(j[i]);
    return s + "]";
  }
  return j.dump();
}

// An object with one member per line (each member compact), indented.
std::string expanded(const json& obj, const std::string& indent) {
  std::string s = "{\n";
  size_t i = 0;
  for (const auto& [key, value] : obj.items())
    s += indent + "  " + json(key).dump() + ": " + compact(value) + (++i < obj.size() ? ",\n" : "\n");
  return s + indent + "}";
}

json costToJson(double c) {
  if (isUnknown(c)) return nullptr;
  if (isInvalid(c)) return "invalid";
  return c;
}

std::string shortList(const std::vector<std::string>& names, size_t limit = 5) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > limit) s += ", ... (" + std::to_string(names.size()) + " nodes)";
  return s;
}

}  // namespace

std::string_view planOriginName(PlanOrigin origin) {
  switch (origin) {
    case PlanOrigin::OpLevel: return "op-level";
    case PlanOrigin::GraphLevel: return "graph-level";
    case PlanOrigin::User: return "user";
  }
  return "user";
}

PlanOrigin planOriginFromName(std::string_view name) {
  if (name == "op-level") return PlanOrigin::OpLevel;
  if (name == "graph-level") return PlanOrigin::GraphLevel;
  if (name == "user") return PlanOrigin::User;
  throw Error("unknown plan origin '" + std::string(name) +
              "' (expected op-level, graph-level or user)");
}

bool PlanGroup::operator==(const PlanGroup& o) const {
  return nodes == o.nodes && backend == o.backend && pattern == o.pattern &&
         sameCost(costNs, o.costNs) && sameCost(spread, o.spread) && samples == o.samples &&
         origin == o.origin;
}

bool Plan::operator==(const Plan& o) const {
  return version == o.version && modelPath == o.modelPath && modelSha256 == o.modelSha256 &&
         inputShapes == o.inputShapes && fingerprint == o.fingerprint && backends == o.backends &&
         groups == o.groups && sameCost(predictedNs, o.predictedNs) &&
         sameCost(kernelsAloneNs, o.kernelsAloneNs) && createdBy == o.createdBy &&
         createdAt == o.createdAt && graphLevel == o.graphLevel && substitutions == o.substitutions &&
         substitutionRules.size() == o.substitutionRules.size() &&
         std::equal(substitutionRules.begin(), substitutionRules.end(), o.substitutionRules.begin(),
                    [](const SubstitutionRuleText& a, const SubstitutionRuleText& b) { return a.sameRule(b); });
}

bool PlanSubstitution::operator==(const PlanSubstitution& o) const {
  return site == o.site && sameCost(savedNs, o.savedNs);
}

std::string Plan::displayName() const { return sourcePath.empty() ? "the plan" : sourcePath; }

std::string Plan::describeGroup(size_t group) const {
  const PlanGroup& g = groups.at(group);
  std::string s = "group " + std::to_string(group) + " (" + g.backend;
  if (!g.pattern.empty()) s += " " + g.pattern;
  return s + ": " + shortList(g.nodes) + ")";
}

Cost Plan::sumOfGroupCosts() const {
  Cost total = 0;
  for (const auto& g : groups) total += g.costNs;
  return total;
}

void Plan::predictByWholeRun(double ms) {
  if (!std::isfinite(ms) || ms <= 0) return;
  if (!std::isfinite(kernelsAloneNs))
    kernelsAloneNs = std::isfinite(predictedNs) ? predictedNs : sumOfGroupCosts();
  predictedNs = ms * 1e6;
}

// ---- JSON -----------------------------------------------------------------

std::string planToJson(const Plan& plan) {
  json j;
  j["format"] = kFormatName;
  j["version"] = plan.version;
  j["created_by"] = plan.createdBy;
  j["created_at"] = plan.createdAt;

  json model;
  model["path"] = plan.modelPath;
  model["sha256"] = plan.modelSha256;
  json shapes = json::object();
  for (const auto& [name, shape] : plan.inputShapes) shapes[name] = shape;
  model["input_shapes"] = shapes;
  j["model"] = model;

  const HardwareFingerprint& f = plan.fingerprint;
  j["fingerprint"] = {{"id", f.id()},
                      {"cpu_vendor", f.cpuVendor},
                      {"cpu_model", f.cpuModel},
                      {"isa_flags", f.isaFlags},
                      {"cores", f.cores},
                      {"threads", f.threads},
                      {"library_versions", f.libraryVersions}};

  json backends = json::array();
  for (const auto& [name, version] : plan.backends)
    backends.push_back({{"name", name}, {"version", version}});
  j["backends"] = backends;
  j["predicted_ns"] = costToJson(plan.predictedNs);
  if (std::isfinite(plan.kernelsAloneNs)) j["kernels_alone_ns"] = costToJson(plan.kernelsAloneNs);
  if (plan.graphLevel.ran) {
    const GraphLevelSummary& s = plan.graphLevel;
    j["graph_level"] = {{"start_ms", s.startMs}, {"ms", s.ms},           {"gain", s.gain},
                        {"generations", s.generations}, {"plans_run", s.plansRun}, {"changes", s.changes}};
  }

  json substitutions = json::array();
  for (const PlanSubstitution& sub : plan.substitutions)
    substitutions.push_back(
        {{"rule", sub.site.rule}, {"nodes", sub.site.nodes}, {"saved_ns", std::isfinite(sub.savedNs) ? json(std::round(sub.savedNs)) : json(nullptr)}});

  json rules = json::array();
  for (const SubstitutionRuleText& t : plan.substitutionRules) {
    json rj = {{"name", t.name}, {"source", t.source}, {"target", t.target}};
    if (!t.conditions.empty()) rj["condition"] = t.conditions;
    rules.push_back(rj);
  }

  json groups = json::array();
  for (const PlanGroup& g : plan.groups) {
    json gj;
    gj["backend"] = g.backend;
    gj["pattern"] = g.pattern;
    gj["origin"] = planOriginName(g.origin);
    gj["cost_ns"] = costToJson(g.costNs);
    gj["spread"] = std::isfinite(g.spread) ? json(g.spread) : json(nullptr);
    gj["samples"] = g.samples;
    gj["nodes"] = g.nodes;
    groups.push_back(gj);
  }
  // Layout for people and diffs: one line per group, nested objects expanded
  // one level, everything else compact.
  std::string out = "{\n";
  for (const auto& [key, value] : j.items()) {
    out += "  " + json(key).dump() + ": ";
    if (key == "model" || key == "fingerprint" || key == "graph_level") out += expanded(value, "  ");
    else out += compact(value);
    out += ",\n";
  }
  if (!substitutions.empty()) {
    out += "  \"substitutions\": [";
    for (size_t i = 0; i < substitutions.size(); ++i)
      out += std::string(i ? "," : "") + "\n    " + compact(substitutions[i]);
    out += "\n  ],\n";
  }
  if (!rules.empty()) {
    out += "  \"substitution_rules\": [";
    for (size_t i = 0; i < rules.size(); ++i) out += std::string(i ? "," : "") + "\n    " + compact(rules[i]);
    out += "\n  ],\n";
  }
  out += "  \"groups\": [";
  for (size_t i = 0; i < groups.size(); ++i)
    out += std::string(i ? "," : "") + "\n    " + compact(groups[i]);
  out += groups.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

Plan planFromJson(const std::string& text, const std::string& displayPath) {
  const json j = parseJsonText(text, displayPath);
  if (!j.is_object())
    throw Error(displayPath + ": not a Collage plan (the top level is " + jsonTypeName(j) +
                ", expected an object)");
  FieldReader r(displayPath);

  const json* format = r.find(j, "format");
  if (!format || !format->is_string() || format->get<std::string>() != kFormatName)
    throw Error(displayPath + ": not a Collage plan (expected \"format\": \"" + kFormatName +
                "\"" + (format ? ", got " + format->dump() : std::string(", which is missing")) +
                ")");
  const int64_t version = r.integer(r.require(j, "", "version"), "version");
  if (version < 1)
    r.fail("version", "must be a positive integer, got " + std::to_string(version));
  if (version > Plan::kFormatVersion)
    throw Error(displayPath + ": plan format version " + std::to_string(version) +
                " is newer than this Collage reads (up to version " +
                std::to_string(Plan::kFormatVersion) + "); use a newer Collage or re-run optimize");

  Plan plan;
  plan.version = static_cast<int>(version);
  plan.sourcePath = displayPath;
  plan.createdBy = r.optString(j, "", "created_by");
  plan.createdAt = r.optString(j, "", "created_at");

  const json& model = r.object(r.require(j, "", "model"), "model");
  plan.modelPath = r.optString(model, "model", "path");
  plan.modelSha256 = r.string(r.require(model, "model", "sha256"), "model.sha256");
  if (const json* shapes = r.find(model, "input_shapes")) {
    r.object(*shapes, "model.input_shapes");
    for (const auto& [name, dims] : shapes->items()) {
      const std::string field = "model.input_shapes." + name;
      r.array(dims, field);
      Shape shape;
      for (size_t i = 0; i < dims.size(); ++i) {
        int64_t d = r.integer(dims[i], FieldReader::index(field, i));
        if (d < 0) r.fail(FieldReader::index(field, i), "must not be negative");
        shape.push_back(d);
      }
      plan.inputShapes[name] = shape;
    }
  }

  if (const json* fp = r.find(j, "fingerprint")) {
    r.object(*fp, "fingerprint");
    HardwareFingerprint& f = plan.fingerprint;
    f.cpuVendor = r.optString(*fp, "fingerprint", "cpu_vendor");
    f.cpuModel = r.optString(*fp, "fingerprint", "cpu_model");
    f.isaFlags = r.optString(*fp, "fingerprint", "isa_flags");
    f.libraryVersions = r.optString(*fp, "fingerprint", "library_versions");
    if (const json* c = r.find(*fp, "cores"))
      f.cores = static_cast<int>(r.integer(*c, "fingerprint.cores"));
    if (const json* t = r.find(*fp, "threads"))
      f.threads = static_cast<int>(r.integer(*t, "fingerprint.threads"));
  }

  if (const json* backends = r.find(j, "backends")) {
    r.array(*backends, "backends");
    for (size_t i = 0; i < backends->size(); ++i) {
      const std::string where = FieldReader::index("backends", i);
      const json& b = r.object((*backends)[i], where);
      plan.backends.push_back({r.string(r.require(b, where, "name"), where + ".name"),
                               r.optString(b, where, "version")});
    }
  }
  if (const json* p = r.find(j, "predicted_ns")) plan.predictedNs = r.cost(*p, "predicted_ns");
  if (const json* p = r.find(j, "kernels_alone_ns")) plan.kernelsAloneNs = r.cost(*p, "kernels_alone_ns");
  if (const json* gl = r.find(j, "graph_level")) {
    r.object(*gl, "graph_level");
    GraphLevelSummary& s = plan.graphLevel;
    s.ran = true;
    auto num = [&](const char* key, double& out) {
      if (const json* v = r.find(*gl, key)) out = r.number(*v, std::string("graph_level.") + key);
    };
    num("start_ms", s.startMs);
    num("ms", s.ms);
    num("gain", s.gain);
    double generations = 0, plansRun = 0;
    num("generations", generations);
    num("plans_run", plansRun);
    s.generations = static_cast<int>(generations);
    s.plansRun = static_cast<int>(plansRun);
    if (const json* c = r.find(*gl, "changes")) {
      r.array(*c, "graph_level.changes");
      for (size_t i = 0; i < c->size(); ++i)
        s.changes.push_back(r.string((*c)[i], FieldReader::index("graph_level.changes", i)));
    }
  }

  // The plan's own spec rules first, so that its substitutions find them.
  if (const json* rules = r.find(j, "substitution_rules")) {
    r.array(*rules, "substitution_rules");
    for (size_t i = 0; i < rules->size(); ++i) {
      const std::string where = FieldReader::index("substitution_rules", i);
      const json& rj = r.object((*rules)[i], where);
      SubstitutionRuleText t;
      t.name = r.string(r.require(rj, where, "name"), where + ".name");
      t.source = r.string(r.require(rj, where, "source"), where + ".source");
      t.target = r.string(r.require(rj, where, "target"), where + ".target");
      if (const json* c = r.find(rj, "condition")) {
        r.array(*c, where + ".condition");
        for (size_t k = 0; k < c->size(); ++k) {
          t.conditions.push_back(r.string((*c)[k], FieldReader::index(where + ".condition", k)));
          t.conditionPos.push_back({});
        }
      }
      t.file = displayPath + ": " + where;
      registerSubstitution(SpecSubstitution::parse(t));  // SpecError names the plan and the rule
      plan.substitutionRules.push_back(std::move(t));
    }
  }
  if (const json* subs = r.find(j, "substitutions")) {
    r.array(*subs, "substitutions");
    for (size_t i = 0; i < subs->size(); ++i) {
      const std::string where = FieldReader::index("substitutions", i);
      const json& sj = r.object((*subs)[i], where);
      PlanSubstitution sub;
      sub.site.rule = r.string(r.require(sj, where, "rule"), where + ".rule");
      if (!findSubstitution(sub.site.rule))
        r.fail(where + ".rule", "names no substitution rule this build knows ('" + sub.site.rule + "')");
      const json& nodes = r.array(r.require(sj, where, "nodes"), where + ".nodes");
      if (nodes.empty()) r.fail(where + ".nodes", "must name at least one node");
      for (size_t k = 0; k < nodes.size(); ++k)
        sub.site.nodes.push_back(r.string(nodes[k], FieldReader::index(where + ".nodes", k)));
      // Negative for a relaxed step; null when unknown.
      if (const json* c = r.find(sj, "saved_ns"); c && !c->is_null()) sub.savedNs = r.number(*c, where + ".saved_ns");
      plan.substitutions.push_back(std::move(sub));
    }
  }

  const json& groups = r.array(r.require(j, "", "groups"), "groups");
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string where = FieldReader::index("groups", i);
    const json& gj = r.object(groups[i], where);
    PlanGroup g;
    g.backend = r.string(r.require(gj, where, "backend"), where + ".backend");
    if (g.backend.empty()) r.fail(where + ".backend", "must not be empty");
    g.pattern = r.optString(gj, where, "pattern");
    const std::string origin = r.optString(gj, where, "origin", "user");
    try {
      g.origin = planOriginFromName(origin);
    } catch (const Error& e) {
      r.fail(where + ".origin", std::string("is invalid: ") + e.what());
    }
    if (const json* c = r.find(gj, "cost_ns")) g.costNs = r.cost(*c, where + ".cost_ns");
    if (const json* s = r.find(gj, "spread"))
      g.spread = s->is_null() ? 0.0 : r.number(*s, where + ".spread");
    if (const json* s = r.find(gj, "samples"))
      g.samples = static_cast<int>(r.integer(*s, where + ".samples"));
    const json& nodes = r.array(r.require(gj, where, "nodes"), where + ".nodes");
    if (nodes.empty()) r.fail(where + ".nodes", "must name at least one node");
    for (size_t k = 0; k < nodes.size(); ++k)
      g.nodes.push_back(r.string(nodes[k], FieldReader::index(where + ".nodes", k)));
    plan.groups.push_back(std::move(g));
  }
  return plan;
}

void savePlan(const Plan& plan, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path + ": cannot write the plan (cannot open the file)");
  out << planToJson(plan);
  out.close();
  if (!out) throw Error(path + ": cannot write the plan");
}

Plan loadPlan(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the plan (no such file or not readable)");
  std::stringstream ss;
  ss << in.rdbuf();
  return planFromJson(ss.str(), path);
}

// ---- Building -------------------------------------------------------------

std::string isoTimeNow() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::map<std::string, Shape> graphInputShapes(const Graph& graph) {
  std::map<std::string, Shape> shapes;
  for (ValueId v : graph.inputs()) shapes[graph.value(v).name] = graph.value(v).type.shape;
  return shapes;
}

std::vector<std::string> nodeNames(const Graph& graph, const NodeSet& nodes) {
  std::vector<std::string> names;
  nodes.forEach([&](NodeId n) { names.push_back(graph.node(n).name); });
  return names;
}

Plan singleNodePlan(const Graph& graph, const std::string& backend) {
  Plan plan;
  plan.inputShapes = graphInputShapes(graph);
  plan.createdAt = isoTimeNow();
  plan.createdBy = "collage (one node per group)";
  plan.backends.push_back({backend, ""});
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    PlanGroup g;
    g.nodes = {graph.node(n).name};
    g.backend = backend;
    g.origin = PlanOrigin::User;
    plan.groups.push_back(std::move(g));
  }
  return plan;
}

// ---- Checking -------------------------------------------------------------

std::vector<NodeSet> resolvePlanGroups(const Plan& plan, const Graph& graph) {
  const std::string name = plan.displayName();
  std::vector<NodeSet> sets;
  std::vector<int64_t> owner(static_cast<size_t>(graph.numNodes()), -1);
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const PlanGroup& group = plan.groups[g];
    if (group.nodes.empty()) throw Error(name + ": group " + std::to_string(g) + " has no nodes");
    NodeSet set(graph.numNodes());
    for (const std::string& nodeName : group.nodes) {
      auto n = graph.findNode(nodeName);
      if (!n)
        throw Error(name + ": " + plan.describeGroup(g) + " names node '" + nodeName +
                    "', which the model does not have (was the plan made for another model?)");
      int64_t& o = owner[static_cast<size_t>(*n)];
      if (o == static_cast<int64_t>(g))
        throw Error(name + ": node '" + nodeName + "' is listed twice in " + plan.describeGroup(g));
      if (o >= 0)
        throw Error(name + ": node '" + nodeName + "' is in two groups: " +
                    plan.describeGroup(static_cast<size_t>(o)) + " and " + plan.describeGroup(g));
      o = static_cast<int64_t>(g);
      set.insert(*n);
    }
    sets.push_back(std::move(set));
  }
  std::vector<std::string> missing;
  for (NodeId n = 0; n < graph.numNodes(); ++n)
    if (owner[static_cast<size_t>(n)] < 0)
      missing.push_back("'" + graph.node(n).name + "' (" + graph.node(n).op + ")");
  if (!missing.empty())
    throw Error(name + ": " + std::to_string(missing.size()) + " node" +
                (missing.size() == 1 ? " is" : "s are") + " in no group: " + shortList(missing, 8));
  return sets;
}

NodeSet groupNodes(const Plan& plan, size_t group, const Graph& graph) {
  const PlanGroup& g = plan.groups.at(group);
  NodeSet set(graph.numNodes());
  for (const std::string& nodeName : g.nodes) {
    auto n = graph.findNode(nodeName);
    if (!n)
      throw Error(plan.displayName() + ": " + plan.describeGroup(group) + " names node '" +
                  nodeName + "', which the model does not have");
    set.insert(*n);
  }
  return set;
}

std::vector<size_t> planExecutionOrder(const Plan& plan, const Graph& graph,
                                       const std::vector<NodeSet>& groups) {
  const size_t numGroups = groups.size();
  std::vector<size_t> groupOf(static_cast<size_t>(graph.numNodes()), SIZE_MAX);
  for (size_t g = 0; g < numGroups; ++g)
    groups[g].forEach([&](NodeId n) { groupOf[static_cast<size_t>(n)] = g; });

  // Edges between groups, each once.
  std::vector<std::set<size_t>> succ(numGroups);
  std::vector<size_t> indegree(numGroups, 0);
  for (NodeId n = 0; n < graph.numNodes(); ++n) {
    const size_t from = groupOf[static_cast<size_t>(n)];
    for (NodeId s : graph.successors(n)) {
      const size_t to = groupOf[static_cast<size_t>(s)];
      if (from != to && from != SIZE_MAX && to != SIZE_MAX && succ[from].insert(to).second)
        ++indegree[to];
    }
  }
  // Kahn's algorithm, lowest first node first.
  using Item = std::pair<NodeId, size_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (size_t g = 0; g < numGroups; ++g)
    if (indegree[g] == 0) ready.push({groups[g].first(), g});
  std::vector<size_t> order;
  order.reserve(numGroups);
  while (!ready.empty()) {
    size_t g = ready.top().second;
    ready.pop();
    order.push_back(g);
    for (size_t s : succ[g])
      if (--indegree[s] == 0) ready.push({groups[s].first(), s});
  }
  if (order.size() != numGroups) {
    // Name two groups that wait on each other: walk back along unfinished
    // predecessors until a group repeats.
    std::vector<bool> done(numGroups, false);
    for (size_t g : order) done[g] = true;
    std::vector<std::vector<size_t>> pred(numGroups);
    for (size_t g = 0; g < numGroups; ++g)
      for (size_t s : succ[g]) pred[s].push_back(g);
    size_t cur = 0;
    while (done[cur]) ++cur;
    std::vector<int> seenAt(numGroups, -1);
    std::vector<size_t> path;
    while (seenAt[cur] < 0) {
      seenAt[cur] = static_cast<int>(path.size());
      path.push_back(cur);
      for (size_t p : pred[cur])
        if (!done[p]) {
          cur = p;
          break;
        }
    }
    // path.back() reads a result of `cur`, and `cur` (via the path) one of path.back().
    const size_t a = cur;
    const size_t b = path.back();
    throw Error(plan.displayName() +
                ": groups depend on each other in a cycle, so no order can run them: " +
                plan.describeGroup(b) + " needs a result of " + plan.describeGroup(a) +
                ", which (directly or through other groups) needs a result of it");
  }
  return order;
}

std::vector<SubstitutionSite> planSites(const Plan& plan) {
  std::vector<SubstitutionSite> sites;
  for (const PlanSubstitution& s : plan.substitutions) sites.push_back(s.site);
  return sites;
}

Graph planGraph(const Plan& plan, const Graph& model, std::vector<RewriteEffect>* effects,
                const ValueRanges* ranges) {
  if (effects) effects->clear();
  if (plan.substitutions.empty()) return model;
  try {
    return replaySubstitutions(model, planSites(plan), effects, ranges);
  } catch (const Error& e) {
    throw Error(plan.displayName() + ": " + e.what());
  }
}

void checkPlanModelFile(const Plan& plan, const std::string& modelPath) {
  if (modelPath.empty()) return;
  const std::string sha = sha256File(modelPath);
  if (sha != plan.modelSha256)
    throw Error(plan.displayName() + " was made for a model with sha256 " + plan.modelSha256 + ", " +
                modelPath + " has " + sha +
                (plan.modelPath.empty() ? "" : " (the plan names model '" + plan.modelPath + "')"));
}

std::vector<std::string> checkPlanAgainst(const Plan& plan, const Graph& graph,
                                          const std::string& modelPath,
                                          const std::vector<BackendVersion>& available,
                                          const HardwareFingerprint* machine) {
  const std::string name = plan.displayName();
  std::vector<std::string> warnings;
  checkPlanModelFile(plan, modelPath);

  // Input shapes: the plan's costs hold for these shapes only.
  if (!plan.inputShapes.empty()) {
    for (ValueId v : graph.inputs()) {
      const Value& value = graph.value(v);
      auto it = plan.inputShapes.find(value.name);
      if (it == plan.inputShapes.end())
        throw Error(name + ": the model has input '" + value.name + "', which the plan does not list");
      if (it->second != value.type.shape)
        throw Error(name + " was made for input '" + value.name + "' of shape " +
                    shapeToString(it->second) + ", the model's is " +
                    shapeToString(value.type.shape) + " (bind it with --input-shape " + value.name +
                    "=" + shapeToString(it->second) + ")");
    }
    for (const auto& [input, shape] : plan.inputShapes) {
      auto v = graph.findValue(input);
      if (!v || !graph.value(*v).isGraphInput)
        throw Error(name + " lists input '" + input + "', which is not an input of the model");
    }
  }

  const std::vector<NodeSet> sets = resolvePlanGroups(plan, graph);
  const SubGraphLimits noLimits{0, 0, 0, true};
  for (size_t g = 0; g < sets.size(); ++g) {
    SubGraphValidity validity = checkSubGraph(graph, sets[g], noLimits);
    if (!validity.ok())
      throw Error(name + ": " + plan.describeGroup(g) + " cannot be one kernel: " + validity.reason);
  }
  planExecutionOrder(plan, graph, sets);

  std::string availableNames;
  for (const auto& [b, version] : available) availableNames += (availableNames.empty() ? "" : ", ") + b;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const std::string& backend = plan.groups[g].backend;
    auto it = std::find_if(available.begin(), available.end(),
                           [&](const BackendVersion& b) { return b.first == backend; });
    if (it == available.end())
      throw Error(name + ": " + plan.describeGroup(g) + " runs on backend '" + backend +
                  "', which is not available (available: " +
                  (availableNames.empty() ? std::string("none") : availableNames) + ")");
  }
  for (const auto& recorded : plan.backends) {
    // (Named, not a structured binding: clang 14 cannot capture one in a lambda.)
    const std::string& b = recorded.first;
    const std::string& version = recorded.second;
    auto it = std::find_if(available.begin(), available.end(),
                           [&](const BackendVersion& a) { return a.first == b; });
    if (it != available.end() && !version.empty() && !it->second.empty() && version != it->second)
      warnings.push_back(name + " was measured with " + b + " " + version + ", this build has " +
                         b + " " + it->second + ": its costs may be out of date");
  }
  // The hardware only: library versions were compared per backend above.
  auto sameHardware = [](const HardwareFingerprint& a, const HardwareFingerprint& b) {
    return a.cpuVendor == b.cpuVendor && a.cpuModel == b.cpuModel && a.isaFlags == b.isaFlags &&
           a.cores == b.cores && a.threads == b.threads;
  };
  if (machine && !plan.fingerprint.cpuModel.empty() && !sameHardware(plan.fingerprint, *machine))
    warnings.push_back(name + " was measured on another machine (" + plan.fingerprint.toString() +
                       "); this one is " + machine->toString() + ": its costs may not hold here");
  return warnings;
}

std::string placementKey(const Plan& plan) {
  std::vector<std::string> groups;
  for (const PlanGroup& g : plan.groups) {
    std::string s = g.backend + ":";
    for (const std::string& n : g.nodes) s += n + ",";
    groups.push_back(std::move(s));
  }
  std::sort(groups.begin(), groups.end());
  std::string all;
  for (const std::string& g : groups) all += g + "\n";
  return stableHashHex(all);
}

}  // namespace collage
