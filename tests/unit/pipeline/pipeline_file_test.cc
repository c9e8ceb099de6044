// The pipeline file: written, read back equal; refused for another model or
// topology, and for malformed fields, with the file and field named.
#include "core/pipeline/pipeline_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/ir/error.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using test_support::expectError;
namespace fs = std::filesystem;

Topology devices(int n) {
  std::vector<PipeDevice> d;
  for (int i = 0; i < n; ++i) d.push_back({"cpu" + std::to_string(i), DeviceKind::Cpu, 1});
  const LinkCost link{2e10, 1e-5};
  return Topology(d, {}, &link, "test");
}

std::string writeFile(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("collage_pipeline_file_test_" + name);
  std::ofstream(p) << text;
  return p.string();
}

// in[2x8] -> relu -> {sigmoid, tanh} -> add
struct Model {
  GraphBuilder b;
  Model() {
    const ValueId r = b.op("Relu", {b.input({2, 8})});
    b.finish(b.op("Add", {b.op("Sigmoid", {r}), b.op("Tanh", {r})}));
  }
};

StageGraph threeStages() {
  StageGraph g;
  g.microBatch = 2;
  for (const auto& [nodes, device] : std::vector<std::pair<std::vector<int>, std::string>>{
           {{0, 1}, "cpu0"}, {{2}, "cpu1"}, {{3}, "cpu0"}}) {
    PipelineStage s;
    s.nodes = nodes;
    s.devices = {device};
    s.estimate.computeSeconds = 0.5;
    s.estimate.microBatch = 2;
    g.stages.push_back(s);
  }
  g.edges = {{0, 1}, {0, 2}, {1, 2}};
  g.bottleneckTimePerSample = 0.25;
  return g;
}

TEST(PipelineFile, RoundTripsAndGivesBackTheStageGraph) {
  Model m;
  const Graph& g = m.b.graph();
  const std::string model = writeFile("model.onnx", "a model");
  const PipelineFile f = pipelineFileOf(threeStages(), nullptr, g, devices(2), model, 8);
  EXPECT_EQ(f.stages[0].nodes, (std::vector<std::string>{g.node(0).name, g.node(1).name}));
  const std::string path = writeFile("p.json", "");
  savePipelineFile(f, path);
  const PipelineFile back = loadPipelineFile(path);
  EXPECT_EQ(back.modelSha256, f.modelSha256);
  EXPECT_EQ(back.topologySha256, f.topologySha256);
  EXPECT_EQ(back.topologySha256, topologySha256(devices(2)));
  EXPECT_EQ(back.batch, 8);
  EXPECT_EQ(back.microBatch, 2);
  EXPECT_EQ(back.inputShapes, f.inputShapes);
  ASSERT_EQ(back.stages.size(), 3u);
  EXPECT_EQ(back.stages[1].devices, std::vector<std::string>{"cpu1"});
  EXPECT_EQ(back.stages[2].inFlight, 2);
  EXPECT_EQ(back.edges, f.edges);
  const StageGraph sg = stageGraphOf(back, g);
  ASSERT_EQ(sg.stages.size(), 3u);
  EXPECT_EQ(sg.stages[0].nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(sg.stages[2].nodes, std::vector<int>{3});
  EXPECT_EQ(sg.microBatch, 2);
  checkPipelineModel(back, model);  // the same model: no error
  checkPipelineTopology(back, devices(2), "machine.json");
}

TEST(PipelineFile, RefusesAnotherModelOrTopology) {
  Model m;
  const PipelineFile f = pipelineFileOf(threeStages(), nullptr, m.b.graph(), devices(2),
                                        writeFile("model.onnx", "a model"), 8);
  const std::string text = pipelineToJson(f);
  const PipelineFile back = pipelineFromJson(text, "pipeline.json");
  expectError(
      [&] { checkPipelineModel(back, writeFile("other.onnx", "another model")); },
      {"pipeline.json was made for a model with sha256 " + f.modelSha256, "other.onnx has"});
  expectError([&] { checkPipelineTopology(back, devices(3), "big.json"); },
              {"pipeline.json was made for a topology with sha256", "big.json has"});
  // The model's graph with other input shapes (another micro-batch).
  GraphBuilder other;
  const ValueId r = other.op("Relu", {other.input({4, 8})});
  other.finish(other.op("Add", {other.op("Sigmoid", {r}), other.op("Tanh", {r})}));
  expectError([&] { stageGraphOf(back, other.graph()); },
              {"pipeline.json", "float32[4x8]", "float32[2x8]"});
}

TEST(PipelineFile, MalformedFilesNameTheField) {
  Model m;
  const Graph& g = m.b.graph();
  const std::string text = pipelineToJson(
      pipelineFileOf(threeStages(), nullptr, g, devices(2), writeFile("model.onnx", "a model"), 8));
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  expectError([&] { pipelineFromJson("{", "p.json"); }, {"p.json", "not valid JSON"});
  expectError([&] { pipelineFromJson("{\"format\": \"collage-plan\"}", "p.json"); },
              {"p.json", "not a Collage pipeline file"});
  expectError([&] { pipelineFromJson(edited("\"version\": 1,", "\"version\": 9,"), "p.json"); },
              {"p.json", "version 9 is newer"});
  expectError([&] { pipelineFromJson(edited("\"micro_batch\"", "\"micro_batches\""), "p.json"); },
              {"p.json", "missing field \"micro_batch\""});
  expectError([&] { pipelineFromJson(edited("\"in_flight\":2", "\"in_flight\":0"), "p.json"); },
              {"p.json", "stages[0].in_flight", "whole number >= 1"});
  expectError(
      [&] {
        pipelineFromJson(edited("\"devices\":[\"cpu1\"]", "\"devices\":[\"cpu7\"]"), "p.json");
      },
      {"p.json", "stages[1].devices", "\"cpu7\""});
  expectError([&] { pipelineFromJson(edited("20000000000.0", "30000000000.0"), "p.json"); },
              {"p.json: topology", "does not match its devices and links"});
  const PipelineFile renamed =
      pipelineFromJson(edited("\"" + g.node(2).name + "\"", "\"nosuch\""), "p.json");
  expectError([&] { stageGraphOf(renamed, g); },
              {"p.json: stages[1]: the node 'nosuch' is not in the model"});
}

// The pins a plan was asked to honour travel with it: written only when
// there are some, read back, and a pin on a stage the file lacks refused.
TEST(PipelineFile, RecordsThePins) {
  Model m;
  const Graph& g = m.b.graph();
  PipelineFile f =
      pipelineFileOf(threeStages(), nullptr, g, devices(2), writeFile("model.onnx", "a model"), 8);
  EXPECT_EQ(pipelineToJson(f).find("\"pins\""), std::string::npos);
  f.pins = {{g.node(2).name, 1}, {g.node(3).name, 2}};
  const std::string text = pipelineToJson(f);
  EXPECT_EQ(pipelineFromJson(text, "p.json").pins, f.pins);
  std::string bad = text;
  const std::string two = "\"" + g.node(3).name + "\":2";
  ASSERT_NE(bad.find(two), std::string::npos) << text;
  bad.replace(bad.find(two), two.size(), "\"" + g.node(3).name + "\":3");
  expectError([&] { pipelineFromJson(bad, "p.json"); },
              {"p.json", "pins." + g.node(3).name, "a stage index below 3"});
}

}  // namespace
}  // namespace collage
