#include "core/pipeline/pipeline_file.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/ir/error.h"
#include "core/ir/hashing.h"
#include "core/plan/plan.h"

namespace collage {

using json = nlohmann::ordered_json;

namespace {

json topologyJson(const Topology& topology) {
  json devices = json::array();
  for (const PipeDevice& d : topology.devices()) {
    json j;
    j["id"] = d.id;
    j["kind"] = deviceKindName(d.kind);
    if (d.kind == DeviceKind::Cpu) j["cores"] = d.cores;
    if (std::isfinite(d.memoryLimitBytes)) j["memory_bytes"] = d.memoryLimitBytes;
    devices.push_back(j);
  }
  json links = json::array();
  const auto& ds = topology.devices();
  for (size_t a = 0; a < ds.size(); ++a)
    for (size_t b = a + 1; b < ds.size(); ++b) {
      const LinkCost c = topology.link(ds[a].id, ds[b].id);
      links.push_back({{"between", {ds[a].id, ds[b].id}},
                       {"bandwidth_bytes_per_s", c.bandwidthBytesPerS},
                       {"latency_s", c.latencyS}});
    }
  return {{"devices", devices}, {"links", links}};
}

// Reading with the field named in every error.
struct Reader {
  std::string file;
  const json& at(const json& j, const std::string& key, const std::string& where) const {
    if (!j.is_object() || !j.contains(key))
      throw Error(file + ": missing field \"" + (where.empty() ? key : where + "." + key) + "\"");
    return j.at(key);
  }
  std::string string(const json& j, const std::string& field) const {
    if (!j.is_string()) throw Error(file + ": \"" + field + "\" must be a string");
    return j.get<std::string>();
  }
  int positive(const json& j, const std::string& field) const {
    if (!j.is_number_integer() || j.get<int64_t>() < 1 || j.get<int64_t>() > (1 << 30))
      throw Error(file + ": \"" + field + "\" is " + j.dump() + "; it must be a whole number >= 1");
    return static_cast<int>(j.get<int64_t>());
  }
  double number(const json& j, const std::string& field) const {
    if (!j.is_number() || !std::isfinite(j.get<double>()) || j.get<double>() < 0)
      throw Error(file + ": \"" + field + "\" must be a number >= 0");
    return j.get<double>();
  }
  std::vector<std::string> strings(const json& j, const std::string& field) const {
    if (!j.is_array() || j.empty())
      throw Error(file + ": \"" + field + "\" must be a non-empty array of names");
    std::vector<std::string> out;
    for (size_t i = 0; i < j.size(); ++i)
      out.push_back(string(j[i], field + "[" + std::to_string(i) + "]"));
    return out;
  }
};

}  // namespace

std::string topologyToJson(const Topology& topology) { return topologyJson(topology).dump(2); }

std::string topologySha256(const Topology& topology) {
  return sha256Hex(topologyJson(topology).dump());
}

PipelineFile pipelineFileOf(const StageGraph& stages, const MicroBatchSchedule* schedule,
                            const Graph& graph, const Topology& topology,
                            const std::string& modelPath, int batch) {
  PipelineFile f;
  f.modelPath = modelPath;
  f.modelSha256 = sha256File(modelPath);
  f.inputShapes = graphInputShapes(graph);
  f.topology = topology;
  f.topologySha256 = topologySha256(topology);
  f.batch = batch;
  f.microBatch = stages.microBatch;
  for (size_t s = 0; s < stages.stages.size(); ++s) {
    const PipelineStage& st = stages.stages[s];
    PipelineFileStage out;
    std::vector<int> sorted = st.nodes;
    std::sort(sorted.begin(), sorted.end());
    for (int n : sorted) out.nodes.push_back(graph.node(n).name);
    out.devices = st.devices;
    out.inFlight =
        schedule && s < schedule->stages.size() ? schedule->stages[s].inFlight : stages.inFlight;
    out.secondsPerMicroBatch = st.estimate.secondsPerMicroBatch();
    f.stages.push_back(std::move(out));
  }
  f.edges = stages.edges;
  f.bottleneckSecondsPerSample = stages.bottleneckTimePerSample;
  f.createdBy = "collage pipeline";
  f.createdAt = isoTimeNow();
  return f;
}

std::string pipelineToJson(const PipelineFile& f) {
  json j;
  j["format"] = "collage-pipeline";
  j["version"] = f.version;
  json shapes = json::object();
  for (const auto& [name, shape] : f.inputShapes) shapes[name] = shape;
  j["model"] = {{"path", f.modelPath}, {"sha256", f.modelSha256}, {"input_shapes", shapes}};
  json topo = topologyJson(f.topology);
  j["topology"] = {
      {"sha256", f.topologySha256}, {"devices", topo["devices"]}, {"links", topo["links"]}};
  j["batch"] = f.batch;
  j["micro_batch"] = f.microBatch;
  json stages = json::array();
  for (const auto& s : f.stages)
    stages.push_back({{"nodes", s.nodes},
                      {"devices", s.devices},
                      {"in_flight", s.inFlight},
                      {"seconds_per_micro_batch", s.secondsPerMicroBatch}});
  j["stages"] = stages;
  json edges = json::array();
  for (const auto& [a, b] : f.edges) edges.push_back({a, b});
  j["edges"] = edges;
  j["bottleneck_seconds_per_sample"] = f.bottleneckSecondsPerSample;
  if (!f.pins.empty()) j["pins"] = f.pins;
  j["created_by"] = f.createdBy;
  j["created_at"] = f.createdAt;
  // For people and diffs: one line per field, per stage.
  std::string out = "{\n";
  size_t i = 0;
  for (const auto& [key, value] : j.items()) {
    out += "  " + json(key).dump() + ": ";
    if (key == "stages") {
      out += "[\n";
      for (size_t s = 0; s < value.size(); ++s)
        out += "    " + value[s].dump() + (s + 1 < value.size() ? ",\n" : "\n");
      out += "  ]";
    } else {
      out += value.dump();
    }
    out += ++i < j.size() ? ",\n" : "\n";
  }
  return out + "}\n";
}

PipelineFile pipelineFromJson(const std::string& text, const std::string& displayPath) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(displayPath + ": not valid JSON: " + e.what());
  }
  Reader r{displayPath};
  if (!j.is_object() || !j.contains("format") || j["format"] != "collage-pipeline")
    throw Error(displayPath +
                ": not a Collage pipeline file (\"format\" is not \"collage-pipeline\")");
  PipelineFile f;
  f.sourcePath = displayPath;
  f.version = r.positive(r.at(j, "version", ""), "version");
  if (f.version > PipelineFile::kFormatVersion)
    throw Error(displayPath + ": version " + std::to_string(f.version) +
                " is newer than this build reads (" + std::to_string(PipelineFile::kFormatVersion) +
                ")");
  const json& model = r.at(j, "model", "");
  f.modelPath = model.contains("path") ? r.string(model["path"], "model.path") : "";
  f.modelSha256 = r.string(r.at(model, "sha256", "model"), "model.sha256");
  const json& shapes = r.at(model, "input_shapes", "model");
  if (!shapes.is_object()) throw Error(displayPath + ": \"model.input_shapes\" must be an object");
  for (const auto& [name, dims] : shapes.items()) {
    if (!dims.is_array())
      throw Error(displayPath + ": \"model.input_shapes." + name + "\" must be an array");
    Shape shape;
    for (const auto& d : dims) {
      if (!d.is_number_integer())
        throw Error(displayPath + ": \"model.input_shapes." + name + "\" must hold integers");
      shape.push_back(d.get<int64_t>());
    }
    f.inputShapes[name] = shape;
  }
  const json& topo = r.at(j, "topology", "");
  f.topologySha256 = r.string(r.at(topo, "sha256", "topology"), "topology.sha256");
  json topoOnly = {{"devices", r.at(topo, "devices", "topology")},
                   {"links", r.at(topo, "links", "topology")}};
  f.topology = topologyFromJson(topoOnly.dump(), displayPath + ": topology");
  if (topologySha256(f.topology) != f.topologySha256)
    throw Error(displayPath + ": topology: its sha256 " + f.topologySha256 +
                " does not match its devices and links (edited by hand?)");
  f.batch = r.positive(r.at(j, "batch", ""), "batch");
  f.microBatch = r.positive(r.at(j, "micro_batch", ""), "micro_batch");
  const json& stages = r.at(j, "stages", "");
  if (!stages.is_array() || stages.empty())
    throw Error(displayPath + ": \"stages\" must be a non-empty array");
  for (size_t s = 0; s < stages.size(); ++s) {
    const std::string where = "stages[" + std::to_string(s) + "]";
    PipelineFileStage st;
    st.nodes = r.strings(r.at(stages[s], "nodes", where), where + ".nodes");
    st.devices = r.strings(r.at(stages[s], "devices", where), where + ".devices");
    for (const std::string& d : st.devices)
      if (!f.topology.find(d))
        throw Error(displayPath + ": " + where + ".devices: names the device \"" + d +
                    "\", which the file's topology does not list");
    st.inFlight = r.positive(r.at(stages[s], "in_flight", where), where + ".in_flight");
    if (stages[s].contains("seconds_per_micro_batch"))
      st.secondsPerMicroBatch =
          r.number(stages[s]["seconds_per_micro_batch"], where + ".seconds_per_micro_batch");
    f.stages.push_back(std::move(st));
  }
  if (j.contains("edges")) {
    const json& edges = j["edges"];
    if (!edges.is_array()) throw Error(displayPath + ": \"edges\" must be an array");
    for (size_t e = 0; e < edges.size(); ++e) {
      const json& p = edges[e];
      const std::string where = "edges[" + std::to_string(e) + "]";
      if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() ||
          !p[1].is_number_integer() || p[0].get<int64_t>() < 0 || p[1].get<int64_t>() < 0 ||
          p[0].get<int64_t>() >= static_cast<int64_t>(f.stages.size()) ||
          p[1].get<int64_t>() >= static_cast<int64_t>(f.stages.size()))
        throw Error(displayPath + ": \"" + where + "\" must be two stage indices");
      f.edges.emplace_back(p[0].get<int>(), p[1].get<int>());
    }
  }
  if (j.contains("bottleneck_seconds_per_sample"))
    f.bottleneckSecondsPerSample =
        r.number(j["bottleneck_seconds_per_sample"], "bottleneck_seconds_per_sample");
  if (j.contains("pins")) {
    const json& pins = j["pins"];
    if (!pins.is_object()) throw Error(displayPath + ": \"pins\" must be an object");
    for (const auto& [name, stage] : pins.items()) {
      if (!stage.is_number_integer() || stage.get<int64_t>() < 0 ||
          stage.get<int64_t>() >= static_cast<int64_t>(f.stages.size()))
        throw Error(displayPath + ": \"pins." + name + "\" must be a stage index below " +
                    std::to_string(f.stages.size()));
      f.pins[name] = stage.get<int>();
    }
  }
  if (j.contains("created_by")) f.createdBy = r.string(j["created_by"], "created_by");
  if (j.contains("created_at")) f.createdAt = r.string(j["created_at"], "created_at");
  return f;
}

void savePipelineFile(const PipelineFile& file, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw Error(path + ": cannot write the pipeline file");
  out << pipelineToJson(file);
  if (!out) throw Error(path + ": cannot write the pipeline file");
}

PipelineFile loadPipelineFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the pipeline file");
  std::stringstream ss;
  ss << in.rdbuf();
  return pipelineFromJson(ss.str(), path);
}

void checkPipelineModel(const PipelineFile& file, const std::string& modelPath) {
  const std::string sha = sha256File(modelPath);
  if (sha != file.modelSha256)
    throw Error(file.displayName() + " was made for a model with sha256 " + file.modelSha256 +
                ", " + modelPath + " has " + sha +
                ": make a pipeline for this model (collage pipeline)");
}

void checkPipelineTopology(const PipelineFile& file, const Topology& topology,
                           const std::string& topologyPath) {
  const std::string sha = topologySha256(topology);
  if (sha != file.topologySha256)
    throw Error(file.displayName() + " was made for a topology with sha256 " + file.topologySha256 +
                ", " + topologyPath + " has " + sha + " (its devices:\n" +
                file.topology.toString() +
                "); make a pipeline for this topology (collage pipeline --topology)");
}

StageGraph stageGraphOf(const PipelineFile& file, const Graph& graph) {
  for (ValueId v : graph.inputs()) {
    const Value& value = graph.value(v);
    auto it = file.inputShapes.find(value.name);
    if (it == file.inputShapes.end())
      throw Error(file.displayName() + ": the model's input '" + value.name +
                  "' is not in model.input_shapes");
    if (it->second != value.type.shape)
      throw Error(file.displayName() + ": the model's input '" + value.name + "' has shape " +
                  value.type.toString() + ", the pipeline was made for " +
                  TensorType{value.type.elementType, it->second}.toString());
  }
  StageGraph g;
  g.microBatch = file.microBatch;
  std::vector<int> stageOf(static_cast<size_t>(graph.numNodes()), -1);
  for (size_t s = 0; s < file.stages.size(); ++s) {
    PipelineStage st;
    for (const std::string& name : file.stages[s].nodes) {
      const std::optional<NodeId> n = graph.findNode(name);
      if (!n)
        throw Error(file.displayName() + ": stages[" + std::to_string(s) + "]: the node '" + name +
                    "' is not in the model");
      if (stageOf[static_cast<size_t>(*n)] >= 0)
        throw Error(file.displayName() + ": the node '" + name + "' is in stages[" +
                    std::to_string(stageOf[static_cast<size_t>(*n)]) + "] and stages[" +
                    std::to_string(s) + "]");
      stageOf[static_cast<size_t>(*n)] = static_cast<int>(s);
      st.nodes.push_back(*n);
    }
    std::sort(st.nodes.begin(), st.nodes.end());
    st.devices = file.stages[s].devices;
    st.kind = file.topology.find(st.devices.front())->kind;
    st.estimate.microBatch = file.microBatch;
    st.estimate.computeSeconds = file.stages[s].secondsPerMicroBatch;
    g.stages.push_back(std::move(st));
  }
  for (size_t n = 0; n < stageOf.size(); ++n)
    if (stageOf[n] < 0)
      throw Error(file.displayName() + ": the model's node '" +
                  graph.node(static_cast<NodeId>(n)).name + "' is in no stage");
  g.edges = file.edges;
  g.bottleneckTimePerSample = file.bottleneckSecondsPerSample;
  return g;
}

}  // namespace collage
