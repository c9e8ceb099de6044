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
