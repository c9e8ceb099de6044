// The public C++ API's decode loop (include/collage/generator.h), linked
// against libcollage.so as a user's program is: the same greedy ids as
// numpy's uncached recompute, seeded sampling reproducible, and the errors
// as api::Error naming the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "collage/collage.h"

namespace {

const std::string kDir = std::string(COLLAGE_SOURCE_DIR) + "/tests/models/decoder/";

TEST(ApiGenerator, GreedyIdsMatchTheUncachedRecompute) {
  collage::api::Generator generator(kDir + "tiny_decoder.onnx", 16);
  EXPECT_EQ(generator.maxLength(), 16);
  EXPECT_EQ(generator.vocabulary(), 32);
  collage::api::GenerateOptions options;
  options.maxNewTokens = 10;
  const collage::api::Generation g = generator.generate({1, 2, 3}, options);
  // tiny_decoder.greedy.txt, written by make_generate_model.py.
  EXPECT_EQ(g.tokens, (std::vector<int64_t>{4, 30, 4, 0, 26, 27, 31, 27, 31, 16}));
  EXPECT_EQ(g.stop, "max-new-tokens");
  EXPECT_EQ(g.stepMs.size(), 9u);
  options.eos = 0;
  EXPECT_EQ(generator.generate({1, 2, 3}, options).tokens, (std::vector<int64_t>{4, 30, 4, 0}));
}

TEST(ApiGenerator, SeededSamplingIsReproducible) {
  collage::api::Generator generator(kDir + "tiny_decoder.onnx", 20);
  collage::api::GenerateOptions options;
  options.maxNewTokens = 12;
  options.temperature = 1.5;
  options.seed = 5;
  const auto a = generator.generate({1, 2, 3}, options).tokens;
  EXPECT_EQ(generator.generate({1, 2, 3}, options).tokens, a);
}

TEST(ApiGenerator, EncodesAndDecodesWithTheModelsTokenizer) {
  const std::string tokenizers = std::string(COLLAGE_SOURCE_DIR) + "/tests/models/tokenizer/";
  collage::api::Generator generator(kDir + "llama_style_tiny.onnx", 32);
  // None beside the model: an error saying where it looked.
  EXPECT_EQ(generator.tokenizerPath(), "");
  try {
    generator.encode("Hello");
    ADD_FAILURE() << "no error";
  } catch (const collage::api::Error& e) {
    EXPECT_NE(std::string(e.what()).find("looked for " + kDir + "tokenizer.json, " + kDir +
                                         "tokenizer.model"),
              std::string::npos)
        << e.what();
  }
  generator.setTokenizer(tokenizers + "tiny_sp.model");
  EXPECT_EQ(generator.tokenizerPath(), tokenizers + "tiny_sp.model");
  // spm_encode's ids (expected_ids.tsv); generated ids decode.
  const std::vector<int64_t> ids = generator.encode("Hello world, the cache grows.");
  EXPECT_EQ(ids, (std::vector<int64_t>{458, 397, 326, 388, 479, 262, 336, 351, 365, 463, 475}));
  EXPECT_EQ(generator.decode(ids), "Hello world, the cache grows.");
  collage::api::GenerateOptions options;
  options.maxNewTokens = 4;
  EXPECT_NO_THROW(generator.decode(generator.generate(ids, options).tokens));
  EXPECT_THROW(generator.decode({512}), collage::api::Error);
  EXPECT_THROW(generator.setTokenizer(kDir + "tiny_decoder.greedy.txt"), collage::api::Error);
}

TEST(ApiGenerator, ErrorsNameTheTensor) {
  try {
    collage::api::Generator generator(kDir + "mha_where_two_layers.onnx", 8);
    ADD_FAILURE() << "no error";
  } catch (const collage::api::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'hidden_states'"), std::string::npos) << e.what();
  }
  collage::api::Generator generator(kDir + "tiny_decoder.onnx", 4);
  EXPECT_THROW(generator.generate({1, 2, 3, 4, 5}), collage::api::Error);
}

// "input_ids=1x3" bindings as a Model takes them.
std::map<std::string, std::vector<int64_t>> shapesOf(const std::vector<std::string>& bindings) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const std::string& b : bindings) {
    const size_t eq = b.find('=');
    std::vector<int64_t>& dims = shapes[b.substr(0, eq)];
    for (size_t at = eq + 1; at <= b.size();) {
      const size_t x = std::min(b.find('x', at), b.size());
      dims.push_back(std::stoll(b.substr(at, x - at)));
      at = x + 1;
    }
  }
  return shapes;
}

// The prompt's pass on its own plan, as `collage generate --prefill-plan`:
// a plan made for the prefill graph's bindings runs it (the same ids), and
// a plan for other shapes (the step graph's) is refused naming its file.
TEST(ApiGenerator, RunsThePromptsPassOnAPrefillPlan) {
  const std::string model = kDir + "tiny_decoder.onnx";
  collage::api::Generator generator(model, 16);
  const std::string prefillPlan = testing::TempDir() + "api_generator_prefill_plan.json";
  const std::string stepPlan = testing::TempDir() + "api_generator_step_plan.json";
  const std::vector<std::string> bindings = generator.prefillBindings(3);
  EXPECT_NE(std::find(bindings.begin(), bindings.end(), "input_ids=1x3"), bindings.end());
  collage::api::Plan::singleBackend(collage::api::Model::load(model, shapesOf(bindings)), "native")
      .save(prefillPlan);
  collage::api::Plan::singleBackend(
      collage::api::Model::load(model, shapesOf(generator.stepBindings())), "native")
      .save(stepPlan);
  collage::api::GenerateOptions options;
  options.maxNewTokens = 10;
  EXPECT_EQ(generator.generate({1, 2, 3}, options).prefill, "one pass");
  generator.setPrefillPlan(prefillPlan);
  const collage::api::Generation g = generator.generate({1, 2, 3}, options);
  EXPECT_EQ(g.tokens, (std::vector<int64_t>{4, 30, 4, 0, 26, 27, 31, 27, 31, 16}));
  EXPECT_EQ(g.prefill.rfind("one pass, plan " + prefillPlan + ": ", 0), 0u) << g.prefill;
  // Again: the prompt's Session is kept, and still named.
  EXPECT_EQ(generator.generate({1, 2, 3}, options).prefill, g.prefill);
  generator.setPrefillPlan(stepPlan);
  try {
    generator.generate({1, 2, 3}, options);
    ADD_FAILURE() << "a step plan ran the prompt's pass";
  } catch (const collage::api::Error& e) {
    EXPECT_NE(std::string(e.what()).find(stepPlan), std::string::npos) << e.what();
  }
  generator.setPrefillPlan("");
  EXPECT_EQ(generator.generate({1, 2, 3}, options).prefill, "one pass");
  std::remove(prefillPlan.c_str());
  std::remove(stepPlan.c_str());
}

// A merged decoder (an If on use_cache_branch): plans made for stepModel()
// and prefillModel(n), its branches inlined, give ONNX Runtime's ids; a plan
// made for the model with the If kept is refused, naming the flag.
TEST(ApiGenerator, RunsAMergedDecoderOnPlansForItsBranches) {
  const std::string merged = kDir + "gpt2_style_tiny_merged.onnx";
  // gpt2_style_tiny.ort_greedy.txt: prompt 1..8, ONNX Runtime's first ids.
  const std::vector<int64_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  std::FILE* f = std::fopen((kDir + "gpt2_style_tiny.ort_greedy.txt").c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::vector<int64_t> want;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    const std::string text = line;
    if (text.rfind("generated: ", 0) != 0) continue;
    size_t at = 11;
    while (want.size() < 12 && at < text.size()) {
      size_t used = 0;
      want.push_back(std::stoll(text.substr(at), &used));
      at += used;
    }
  }
  std::fclose(f);
  ASSERT_EQ(want.size(), 12u);
  collage::api::Generator generator(merged, 20);
  const std::string stepPlan = testing::TempDir() + "api_generator_merged_step.json";
  const std::string prefillPlan = testing::TempDir() + "api_generator_merged_prefill.json";
  const std::string keptPlan = testing::TempDir() + "api_generator_merged_if.json";
  collage::api::Plan::singleBackend(generator.stepModel(), "native").save(stepPlan);
  collage::api::Plan::singleBackend(generator.prefillModel(8), "native").save(prefillPlan);
  collage::api::Generator planned(merged, 0, stepPlan);
  EXPECT_EQ(planned.maxLength(), 20);
  planned.setPrefillPlan(prefillPlan);
  collage::api::GenerateOptions options;
  options.maxNewTokens = 12;
  const collage::api::Generation g = planned.generate(prompt, options);
  EXPECT_EQ(g.tokens, want);
  EXPECT_EQ(g.prefill.rfind("one pass, plan " + prefillPlan + ": ", 0), 0u) << g.prefill;
  collage::api::Plan::singleBackend(
      collage::api::Model::load(merged, shapesOf(generator.stepBindings())), "native")
      .save(keptPlan);
  try {
    collage::api::Generator wrong(merged, 0, keptPlan);
    ADD_FAILURE() << "a plan with the If kept was taken";
  } catch (const collage::api::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'use_cache_branch' unbound"), std::string::npos)
        << e.what();
  }
  std::remove(stepPlan.c_str());
  std::remove(prefillPlan.c_str());
  std::remove(keptPlan.c_str());
}

}  // namespace
