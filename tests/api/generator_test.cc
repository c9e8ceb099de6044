// The public C++ API's decode loop (include/collage/generator.h), linked
// against libcollage.so as a user's program is: the same greedy ids as
// numpy's uncached recompute, seeded sampling reproducible, and the errors
// as api::Error naming the tensor.
#include <gtest/gtest.h>

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

}  // namespace
