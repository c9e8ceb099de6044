#include "core/plan/plan_export.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/ir/error.h"
#include "core/ir/hashing.h"

namespace collage {

using json = nlohmann::ordered_json;

namespace {

void writeText(const std::string& path, const std::string& text, const std::string& what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path + ": cannot write the " + what + " (cannot open the file)");
  out << text;
  out.close();
  if (!out) throw Error(path + ": cannot write the " + what);
}

std::string formatUs(double ns) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", ns / 1e3);
  return buf;
}

// The names the importer gives the model's nodes (core/onnx/onnx_import.cc,
// nameNodes): explicit names kept (the first of duplicates), others become
// op + "_" + index or name + "_" + index, made unique with "_1", "_2", ...
std::vector<std::string> importerNodeNames(const onnx::GraphProto& g) {
  std::vector<std::string> names(static_cast<size_t>(g.node_size()));
  std::set<std::string> taken;
  for (int i = 0; i < g.node_size(); ++i)
    if (!g.node(i).name().empty() && taken.insert(g.node(i).name()).second)
      names[static_cast<size_t>(i)] = g.node(i).name();
  for (int i = 0; i < g.node_size(); ++i) {
    if (!names[static_cast<size_t>(i)].empty()) continue;
    const auto& n = g.node(i);
    const std::string base = n.name().empty() ? n.op_type() + "_" + std::to_string(i)
                                              : n.name() + "_" + std::to_string(i);
    std::string name = base;
    for (int k = 1; taken.count(name); ++k) name = base + "_" + std::to_string(k);
    taken.insert(name);
    names[static_cast<size_t>(i)] = name;
  }
  return names;
}

bool isCollageKey(const std::string& key) { return key.rfind("collage.", 0) == 0; }

// NodeProto.metadata_props (field 9, ONNX >= 1.16) through protobuf's unknown
// fields: libonnx 1.12 does not know the field, the wire format is the same.
constexpr int kNodeMetadataPropsField = 9;

void setNodeMetadata(onnx::NodeProto& node, const std::vector<std::pair<std::string, std::string>>& props) {
  auto* unknown = node.mutable_unknown_fields();
  for (int i = unknown->field_count() - 1; i >= 0; --i) {
    const auto& f = unknown->field(i);
    if (f.number() != kNodeMetadataPropsField ||
        f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto entry;
    if (entry.ParseFromString(f.length_delimited()) && isCollageKey(entry.key()))
      unknown->DeleteSubrange(i, 1);
  }
  for (const auto& [key, value] : props) {
    onnx::StringStringEntryProto entry;
    entry.set_key(key);
    entry.set_value(value);
    unknown->AddLengthDelimited(kNodeMetadataPropsField, entry.SerializeAsString());
  }
}

void setDocLine(onnx::NodeProto& node, const std::string& line) {
  std::istringstream in(node.doc_string());
  std::string kept, l;
  while (std::getline(in, l))
    if (l.rfind("collage: ", 0) != 0) kept += l + "\n";
  node.set_doc_string(kept + line);
}

void setModelMetadata(onnx::ModelProto& model, const std::vector<std::pair<std::string, std::string>>& props) {
  auto* meta = model.mutable_metadata_props();
  for (int i = meta->size() - 1; i >= 0; --i)
    if (isCollageKey(meta->Get(i).key())) meta->DeleteSubrange(i, 1);
  for (const auto& [key, value] : props) {
    auto* e = model.add_metadata_props();
    e->set_key(key);
    e->set_value(value);
  }
}

bool hasExternalData(const onnx::GraphProto& g) {
  for (const auto& t : g.initializer())
    if (t.data_location() == onnx::TensorProto::EXTERNAL) return true;
  for (const auto& n : g.node())
    for (const auto& a : n.attribute()) {
      if (a.has_t() && a.t().data_location() == onnx::TensorProto::EXTERNAL) return true;
      if (a.has_g() && hasExternalData(a.g())) return true;
      for (const auto& sub : a.graphs())
        if (hasExternalData(sub)) return true;
    }
  return false;
}

std::string groupEventName(const PlanGroup& g) {
  if (g.nodes.empty()) return g.backend;
  return g.nodes.size() == 1 ? g.nodes[0] : g.nodes[0] + " +" + std::to_string(g.nodes.size() - 1);
}

json costUs(double ns) {
  if (!std::isfinite(ns)) return nullptr;
  return ns / 1e3;
}

}  // namespace

void exportAnnotatedOnnx(const std::string& modelPath, const Plan& plan, const std::string& outPath) {
  std::ifstream in(modelPath, std::ios::binary);
  if (!in) throw Error(modelPath + ": cannot open (no such file or not readable)");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  onnx::ModelProto model;
  if (bytes.empty() || !model.ParseFromString(bytes) || !model.has_graph())
    throw Error(modelPath + ": not a valid ONNX model (truncated or corrupt protobuf)");

  if (hasExternalData(model.graph())) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path from = fs::weakly_canonical(fs::absolute(modelPath).parent_path(), ec);
    fs::path to = fs::weakly_canonical(fs::absolute(outPath).parent_path(), ec);
    if (from != to)
      throw Error(outPath + ": " + modelPath +
                  " keeps tensors in external data files, which are found relative to the model; "
                  "write the annotated model into the same directory (" + from.string() + ")");
  }

  // Node name -> group index.
  std::map<std::string, size_t> groupOf;
  for (size_t g = 0; g < plan.groups.size(); ++g)
    for (const std::string& n : plan.groups[g].nodes) groupOf[n] = g;

  onnx::GraphProto* graph = model.mutable_graph();
  const std::vector<std::string> names = importerNodeNames(*graph);
  for (int i = 0; i < graph->node_size(); ++i) {
    onnx::NodeProto* node = graph->mutable_node(i);
    const std::string& name = names[static_cast<size_t>(i)];
    auto it = groupOf.find(name);
    if (it == groupOf.end()) continue;  // folded away (Constant, shape arithmetic)
    if (node->name() != name) node->set_name(name);
    const size_t gi = it->second;
    const PlanGroup& g = plan.groups[gi];
    std::string nodesList;
    for (const auto& n : g.nodes) nodesList += (nodesList.empty() ? "" : ",") + n;
    std::vector<std::pair<std::string, std::string>> props = {
        {"collage.backend", g.backend},
        {"collage.group", std::to_string(gi)},
        {"collage.pattern", g.pattern},
        {"collage.origin", std::string(planOriginName(g.origin))},
    };
    if (std::isfinite(g.costNs)) props.push_back({"collage.cost_us", formatUs(g.costNs)});
    props.push_back({"collage.group_nodes", nodesList});
    setNodeMetadata(*node, props);
    std::string line = "collage: backend " + g.backend + ", group " + std::to_string(gi);
    if (!g.pattern.empty()) line += ", pattern " + g.pattern;
    line += ", cost " + costToString(g.costNs);
    setDocLine(*node, line);
  }

  std::vector<std::pair<std::string, std::string>> modelProps = {
      {"collage.plan_format", std::to_string(plan.version)},
      {"collage.model_sha256", plan.modelSha256},
  };
  if (std::isfinite(plan.predictedNs)) modelProps.push_back({"collage.predicted_us", formatUs(plan.predictedNs)});
  if (!plan.fingerprint.cpuModel.empty()) modelProps.push_back({"collage.fingerprint", plan.fingerprint.toString()});
  setModelMetadata(model, modelProps);

  std::string out;
  if (!model.SerializeToString(&out))
    throw Error(outPath + ": cannot serialise the annotated model (over protobuf's 2 GB limit?)");
  writeText(outPath, out, "annotated model");
}

Plan planFromAnnotatedOnnx(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open (no such file or not readable)");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  onnx::ModelProto model;
  if (bytes.empty() || !model.ParseFromString(bytes) || !model.has_graph())
    throw Error(path + ": not a valid ONNX model (truncated or corrupt protobuf)");

  // Group index -> the entries of its first node (every node of a group has the same).
  std::map<size_t, std::map<std::string, std::string>> groups;
  for (const auto& node : model.graph().node()) {
    std::map<std::string, std::string> props;
    const auto& unknown = node.unknown_fields();
    for (int i = 0; i < unknown.field_count(); ++i) {
      const auto& f = unknown.field(i);
      onnx::StringStringEntryProto entry;
      if (f.number() == kNodeMetadataPropsField &&
          f.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED &&
          entry.ParseFromString(f.length_delimited()) && isCollageKey(entry.key()))
        props[entry.key()] = entry.value();
    }
    if (!props.count("collage.group")) continue;
    size_t index = 0;
    try {
      index = std::stoul(props["collage.group"]);
    } catch (const std::exception&) {
      throw Error(path + ": node '" + node.name() + "' has collage.group '" +
                  props["collage.group"] + "', not a group index");
    }
    groups.try_emplace(index, std::move(props));
  }
  if (groups.empty())
    throw Error(path + ": no Collage placement in this model (write one with `collage run model.onnx "
                "--plan plan.json --annotated-onnx annotated.onnx`)");

  Plan plan;
  plan.modelPath = path;
  plan.modelSha256 = sha256File(path);
  plan.sourcePath = path;
  plan.createdBy = "annotated ONNX model";
  for (const auto& e : model.metadata_props())
    if (e.key() == "collage.predicted_us") plan.predictedNs = std::atof(e.value().c_str()) * 1e3;
  size_t expected = 0;
  for (auto& [index, props] : groups) {
    if (index != expected++)
      throw Error(path + ": group " + std::to_string(expected - 1) +
                  " is on no node (the annotations are incomplete)");
    PlanGroup g;
    g.backend = props["collage.backend"];
    g.pattern = props["collage.pattern"];
    g.origin = planOriginFromName(props.count("collage.origin") ? props["collage.origin"] : "user");
    if (props.count("collage.cost_us")) g.costNs = std::atof(props["collage.cost_us"].c_str()) * 1e3;
    std::istringstream names(props["collage.group_nodes"]);
    for (std::string n; std::getline(names, n, ',');) g.nodes.push_back(n);
    plan.groups.push_back(std::move(g));
    if (std::find_if(plan.backends.begin(), plan.backends.end(), [&](const BackendVersion& b) {
          return b.first == plan.groups.back().backend;
        }) == plan.backends.end())
      plan.backends.emplace_back(plan.groups.back().backend, "");
  }
  return plan;
}

void exportChromeTrace(const Plan& plan, const std::vector<KernelTiming>& timings,
                       const std::string& path) {
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1},
                    {"args", {{"name", "collage session"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1},
                    {"args", {{"name", "kernels"}}}});

  // One enclosing event per run, so Perfetto nests the kernels under it.
  std::map<int64_t, std::pair<double, double>> runs;  // run -> (start, end)
  for (const auto& t : timings) {
    auto [it, inserted] = runs.try_emplace(t.run, t.startUs, t.startUs + t.durUs);
    if (!inserted) {
      it->second.first = std::min(it->second.first, t.startUs);
      it->second.second = std::max(it->second.second, t.startUs + t.durUs);
    }
  }
  for (const auto& [run, span] : runs)
    events.push_back({{"name", "run " + std::to_string(run)}, {"cat", "session"}, {"ph", "X"},
                      {"ts", span.first}, {"dur", span.second - span.first}, {"pid", 1}, {"tid", 1},
                      {"args", {{"run", run}}}});

  for (const auto& t : timings) {
    if (t.group >= plan.groups.size())
      throw Error(path + ": a timing names group " + std::to_string(t.group) + ", but " +
                  plan.displayName() + " has " + std::to_string(plan.groups.size()) + " groups");
    const PlanGroup& g = plan.groups[t.group];
    json args = {{"group", t.group},      {"backend", g.backend},
                 {"pattern", g.pattern},  {"origin", planOriginName(g.origin)},
                 {"nodes", g.nodes},      {"predicted_us", costUs(g.costNs)},
                 {"run", t.run}};
    events.push_back({{"name", groupEventName(g)}, {"cat", g.backend}, {"ph", "X"},
                      {"ts", t.startUs}, {"dur", t.durUs}, {"pid", 1}, {"tid", 1},
                      {"args", args}});
  }
  json trace = {{"traceEvents", events},
                {"displayTimeUnit", "ms"},
                {"otherData",
                 {{"generator", "collage"},
                  {"plan", plan.sourcePath},
                  {"model_sha256", plan.modelSha256}}}};
  writeText(path, trace.dump(1) + "\n", "trace");
}

std::string_view nodeDataKindName(NodeDataKind kind) {
  switch (kind) {
    case NodeDataKind::Backend: return "backend";
    case NodeDataKind::Latency: return "latency";
    case NodeDataKind::GroupLatency: return "group-latency";
  }
  return "backend";
}

NodeDataKind nodeDataKindFromName(std::string_view name) {
  if (name == "backend") return NodeDataKind::Backend;
  if (name == "latency") return NodeDataKind::Latency;
  if (name == "group-latency") return NodeDataKind::GroupLatency;
  throw Error("unknown node data kind '" + std::string(name) +
              "' (expected backend, latency or group-latency)");
}

void exportModelExplorerNodeData(const Plan& plan, const std::string& path, NodeDataKind kind,
                                 const std::vector<KernelTiming>* timings) {
  // Per group: its cost in ns (measured now if timings are given, else the plan's).
  std::vector<double> costNs(plan.groups.size());
  for (size_t g = 0; g < plan.groups.size(); ++g) costNs[g] = plan.groups[g].costNs;
  const bool measured = timings && !timings->empty();
  if (measured) {
    std::vector<double> sum(plan.groups.size(), 0);
    std::vector<int> count(plan.groups.size(), 0);
    for (const auto& t : *timings) {
      if (t.group >= plan.groups.size())
        throw Error(path + ": a timing names group " + std::to_string(t.group) + ", but " +
                    plan.displayName() + " has " + std::to_string(plan.groups.size()) + " groups");
      sum[t.group] += t.durUs * 1e3;
      ++count[t.group];
    }
    for (size_t g = 0; g < plan.groups.size(); ++g)
      costNs[g] = count[g] ? sum[g] / count[g] : kUnknownCost;
  }

  json results = json::object();
  json data;
  if (kind == NodeDataKind::Backend) {
    data["name"] = "Collage backend";
    for (const PlanGroup& g : plan.groups)
      for (const auto& n : g.nodes)
        results[n] = {{"value", g.backend}, {"bgColor", backendColor(g.backend)}};
    data["results"] = results;
    data["showExpandedSummaryOnGroupNode"] = true;
    data["showLabelCountColumnsInChildrenStatsTable"] = true;
  } else {
    const bool perNode = kind == NodeDataKind::Latency;
    data["name"] = std::string(perNode ? "Collage latency per node (us)" : "Collage group latency (us)") +
                   (measured ? ", measured" : ", planned");
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      if (!std::isfinite(costNs[g])) continue;
      const auto& nodes = plan.groups[g].nodes;
      const double us = costNs[g] / 1e3 / (perNode ? static_cast<double>(nodes.size()) : 1.0);
      for (const auto& n : nodes) results[n] = {{"value", us}};
    }
    data["results"] = results;
    // Cheap nodes light green, through yellow, to red for the most expensive.
    data["gradient"] = json::array({{{"stop", 0}, {"bgColor", "#c8e6c9"}},
                                    {{"stop", 0.5}, {"bgColor", "#ffeb3b"}},
                                    {{"stop", 1}, {"bgColor", "#d32f2f"}}});
  }
  writeText(path, data.dump(2) + "\n", "Model Explorer node data");
}

}  // namespace collage
