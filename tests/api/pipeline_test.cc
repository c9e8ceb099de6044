// The public C++ API's graph pipeline (include/collage/pipeline.h), linked
// against libcollage.so as a user's program is: planned on two one-core
// devices, saved and loaded unchanged, run with every output matching the
// whole model's Session, and the command line's refusals as api::Error.
// No timing is checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "collage/collage.h"

namespace {

namespace api = collage::api;
const std::string kDir = std::string(COLLAGE_SOURCE_DIR) + "/tests/models/pipeline/";
const std::string kModel = kDir + "two_tower_small.onnx";

std::string tempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("collage_api_pipeline_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string errorOf(const std::function<void()>& body) {
  try {
    body();
  } catch (const api::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Pins on both towers force two stages on cpu:2, so the run crosses a link.
api::PipelineOptions twoStages() {
  api::PipelineOptions options;
  options.devices = "cpu:2";
  options.batch = 4;
  options.microBatches = {1, 2};
  options.runs = 1;
  options.pins = {{"img/c1/Conv_2", 0}, {"txt/fc/Gemm_44", 1}};
  return options;
}

TEST(ApiPipeline, PlansSavesLoadsAndRunsMatchingTheWholeModel) {
  const api::Pipeline pipeline = api::planPipeline(kModel, twoStages());
  const std::vector<api::PipelineStage> stages = pipeline.stages();
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].devices, (std::vector<std::string>{"cpu0"}));
  EXPECT_EQ(stages[1].devices, (std::vector<std::string>{"cpu1"}));
  auto holds = [](const api::PipelineStage& s, const std::string& node) {
    return std::find(s.nodes.begin(), s.nodes.end(), node) != s.nodes.end();
  };
  EXPECT_TRUE(holds(stages[0], "img/c1/Conv_2"));
  EXPECT_TRUE(holds(stages[1], "txt/fc/Gemm_44"));
  EXPECT_EQ(stages[0].nodes.size() + stages[1].nodes.size(), 34u);
  EXPECT_EQ(pipeline.batch(), 4);
  EXPECT_GT(pipeline.predictedSamplesPerSecond(), 0);
  EXPECT_EQ(pipeline.pins().at("txt/fc/Gemm_44"), 1);

  const std::string path = tempPath("p.json");
  pipeline.save(path);
  const api::Pipeline loaded = api::Pipeline::load(path);
  EXPECT_EQ(loaded.toJson(), pipeline.toJson());
  EXPECT_EQ(loaded.summary(), pipeline.summary());

  api::PipelineRunOptions run;
  run.batch = 8;
  const api::PipelineRun r = api::runPipeline(kModel, loaded, run);
  EXPECT_EQ(r.microBatches, 8 / loaded.microBatch());
  EXPECT_GT(r.samplesPerSecond, 0);
  EXPECT_GT(r.medianLatencyMs, 0);
  ASSERT_EQ(r.stages.size(), 2u);
  for (const auto& s : r.stages) {
    EXPECT_GE(s.busyShare, 0);
    EXPECT_LE(s.busyShare, 1.0 + 1e-9);
    EXPECT_EQ(s.microBatches, r.microBatches);
  }
  ASSERT_EQ(r.memory.size(), 2u);
  EXPECT_EQ(r.memory[0].device, "cpu0");
  EXPECT_GT(r.memory[0].weightBytes + r.memory[1].weightBytes, 0);
  EXPECT_TRUE(r.verified);
  EXPECT_TRUE(r.outputsMatch) << (r.mismatches.empty() ? "" : r.mismatches.front());
  EXPECT_TRUE(r.mismatches.empty());
  std::remove(path.c_str());
}

TEST(ApiPipeline, RefusesWhatTheCommandLineRefuses) {
  const std::string path = tempPath("refused.json");
  api::PipelineOptions options = twoStages();
  options.pins.clear();
  api::planPipeline(kModel, options).save(path);
  const api::Pipeline pipeline = api::Pipeline::load(path);
  // Made for another model: refused, naming the pipeline file.
  const std::string other = errorOf([&] { api::runPipeline(kDir + "dlrm_small.onnx", pipeline); });
  EXPECT_NE(other.find(path), std::string::npos) << other;
  EXPECT_NE(other.find("made for"), std::string::npos) << other;
  api::PipelineRunOptions odd;
  odd.batch = pipeline.microBatch() * 2 + 1;
  if (pipeline.microBatch() > 1) {
    EXPECT_NE(errorOf([&] { api::runPipeline(kModel, pipeline, odd); }).find("is not a multiple"),
              std::string::npos);
  }
  options.devices = "gpu:2";
  EXPECT_NE(errorOf([&] { api::planPipeline(kModel, options); }).find("expected cpu:N"),
            std::string::npos);
  options.devices = "cpu:2";
  options.pins = {{"no_such_node", 0}};
  EXPECT_NE(errorOf([&] { api::planPipeline(kModel, options); })
                .find("the model has no node named 'no_such_node'"),
            std::string::npos);
  options.pins = {{"img/c1/Conv_2", 5}};
  EXPECT_NE(errorOf([&] { api::planPipeline(kModel, options); }).find("stage 5 cannot be"),
            std::string::npos);
  EXPECT_NE(errorOf([] { api::Pipeline::load("/nonexistent/pipeline.json"); })
                .find("/nonexistent/pipeline.json"),
            std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
