// Spec files: the built-in ones load; broken ones are rejected with file,
// line and reason while the others still load; user patterns merge.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/patterns/backend_spec.h"
#include "core/patterns/candidate.h"
#include "core/onnx/onnx_import.h"
#include "core/patterns/pattern.h"

namespace collage {
namespace {

namespace fs = std::filesystem;

fs::path tempDir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("collage_spec_test_" + std::to_string(getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

std::string errorOf(const std::string& text) {
  try {
    parseBackendSpec(text, "broken.toml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(BackendSpec, BuiltInSpecsLoad) {
  SpecLoadResult r = loadBackendSpecs(std::string(COLLAGE_SOURCE_DIR) + "/resources/backends");
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  std::vector<std::string> names;
  for (const auto& s : r.specs) names.push_back(s.name);
  // The CUDA backends' specs load on every machine; their backends only where built.
  EXPECT_EQ(names, (std::vector<std::string>{"cublas", "cublas_tf32", "cuda_fusion", "cudnn", "native",
                                             "onednn", "onednn_bf16", "openblas"}));
  for (const auto& s : r.specs) EXPECT_TRUE(!s.patterns.empty() || s.rule) << s.name;
}

TEST(BackendSpec, ErrorsNameFileLineAndReason) {
  const std::string head = "name = \"b\"\ndevice = \"cpu\"\nkind = \"op_library\"\n";
  // A pattern that does not parse: the column points into the pattern text.
  std::string e = errorOf(head + "[patterns]\nbad = \"Relu(Conv(*, *)\"\n");
  EXPECT_NE(e.find("broken.toml:5:"), std::string::npos) << e;
  EXPECT_NE(e.find("pattern 'bad'"), std::string::npos) << e;
  // Unknown op in a pattern and in a rule.
  e = errorOf(head + "[patterns]\nx = \"Convv(*, const)\"\n");
  EXPECT_NE(e.find("broken.toml:5:"), std::string::npos) << e;
  EXPECT_NE(e.find("Convv"), std::string::npos) << e;
  e = errorOf(head + "[rule]\nops = [\"Relu\", \"Frobnicate\"]\n");
  EXPECT_NE(e.find("broken.toml:5:"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown op 'Frobnicate'"), std::string::npos) << e;
  // Unknown OpKind, fusion style, attribute, key.
  e = errorOf(head + "[rule]\nkinds = [\"Elementwise\"]\n");
  EXPECT_NE(e.find("unknown OpKind 'Elementwise'"), std::string::npos) << e;
  e = errorOf(head + "[rule]\nfusion = [\"everything\"]\n");
  EXPECT_NE(e.find("unknown fusion style 'everything'"), std::string::npos) << e;
  e = errorOf(head + "[rule]\nattributes = [{op = \"Conv\", attribute = \"kernal_shape\", allowed = [\"1\"]}]\n");
  EXPECT_NE(e.find("no attribute 'kernal_shape'"), std::string::npos) << e;
  e = errorOf(head + "color = \"blue\"\n[patterns]\nr = \"Relu(*)\"\n");
  EXPECT_NE(e.find("broken.toml:4:9: color must be \"#rrggbb\""), std::string::npos) << e;
  e = errorOf(head + "paterns = 3\n");
  EXPECT_NE(e.find("broken.toml:4:1: unknown key 'paterns'"), std::string::npos) << e;
  // A duplicate pattern name is a TOML redefinition, at the second one's line.
  e = errorOf(head + "[patterns]\nr = \"Relu(*)\"\nr = \"Tanh(*)\"\n");
  EXPECT_NE(e.find("broken.toml:6:"), std::string::npos) << e;
  // Not TOML at all.
  e = errorOf("name = \n");
  EXPECT_NE(e.find("broken.toml:1:"), std::string::npos) << e;
  // Neither patterns nor a rule.
  e = errorOf(head);
  EXPECT_NE(e.find("neither [patterns] nor a [rule]"), std::string::npos) << e;
}

TEST(BackendSpec, ABrokenFileDoesNotStopTheOthers) {
  fs::path dir = tempDir("mixed");
  write(dir / "good.toml", "name = \"good\"\n[patterns]\nrelu = \"Relu(*)\"\n");
  write(dir / "bad.toml", "name = \"bad\"\n[patterns]\nrelu = \"Relu(\"\n");
  write(dir / "dup.toml", "name = \"good\"\n[patterns]\ntanh = \"Tanh(*)\"\n");
  SpecLoadResult r = loadBackendSpecs(dir.string());
  ASSERT_EQ(r.specs.size(), 1u);
  EXPECT_EQ(r.specs[0].name, "good");
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_NE(r.errors[0].find("bad.toml:3:"), std::string::npos) << r.errors[0];
  EXPECT_NE(r.errors[1].find("already defined"), std::string::npos) << r.errors[1];
}

TEST(UserPatternStore, AddDisableRemoveRoundTripThroughTheFile) {
  fs::path dir = tempDir("user");
  std::string path = (dir / "sub" / "user_patterns.toml").string();
  {
    UserPatternStore store(path);
    store.load();  // missing file: empty
    store.add("b", "conv_sigmoid", "Sigmoid(Conv(*, const, ?const))");
    store.setEnabled("b", "relu", false);
    EXPECT_THROW(store.add("b", "bad", "Sigmoid(Conv(*, const"), PatternError);
    EXPECT_THROW(store.add("b", "bad name!", "Relu(*)"), Error);
    store.save();
  }
  UserPatternStore store(path);
  store.load();
  ASSERT_EQ(store.patterns("b").size(), 1u);
  EXPECT_EQ(store.patterns("b")[0].text, "Sigmoid(Conv(*, const, ?const))");
  EXPECT_TRUE(store.isDisabled("b", "relu"));

  BackendSpec spec = parseBackendSpec("name = \"b\"\n[patterns]\nrelu = \"Relu(*)\"\n", "b.toml");
  store.applyTo(spec);
  ASSERT_EQ(spec.patterns.size(), 2u);
  EXPECT_FALSE(spec.findPattern("relu")->enabled);
  EXPECT_TRUE(spec.findPattern("conv_sigmoid")->userDefined);

  EXPECT_TRUE(store.remove("b", "conv_sigmoid"));
  EXPECT_FALSE(store.remove("b", "conv_sigmoid"));
  store.add("b", "relu", "Relu(Relu(*))");  // clashes with the built-in name
  BackendSpec again = parseBackendSpec("name = \"b\"\n[patterns]\nrelu = \"Relu(*)\"\n", "b.toml");
  EXPECT_THROW(store.applyTo(again), SpecError);
}

TEST(CandidateEnumeration, EveryZooModelIsCoveredAndIndexedByFirstNode) {
  SpecLoadResult r = loadBackendSpecs(std::string(COLLAGE_SOURCE_DIR) + "/resources/backends");
  std::vector<BackendCapabilities> caps;
  for (const auto& s : r.specs) caps.push_back(BackendCapabilities{&s, nullptr});
  for (const char* model : {"resnet50_small", "bert_small", "bert_small_opset13", "inception_v3_small",
                            "mobilenet_v2_small", "r3d_18_small", "dcgan_small"}) {
    Graph g = importOnnx(std::string(COLLAGE_SOURCE_DIR) + "/resources/models/" + model + ".onnx");
    CandidateSet set = enumerateCandidates(g, caps);
    EXPECT_TRUE(set.uncovered().empty()) << model;
    for (NodeId n = 0; n < g.numNodes(); ++n)
      for (int32_t i : set.startingAt(n)) EXPECT_EQ(set[i].firstNode(), n);
    // No duplicates: the same nodes on the same backend appear once.
    for (size_t i = 0; i < set.size(); ++i)
      for (size_t j = i + 1; j < set.size(); ++j)
        ASSERT_FALSE(set[i].backend == set[j].backend && set[i].nodes == set[j].nodes) << model;
  }
}

TEST(CandidateEnumeration, AnUncoveredNodeIsNamed) {
  BackendSpec spec = parseBackendSpec("name = \"relu_only\"\n[patterns]\nrelu = \"Relu(*)\"\n", "r.toml");
  Graph g;
  ValueId x = g.addInput("x", {ElementType::Float32, {4}});
  ValueId y = g.addValue("y", {ElementType::Float32, {4}});
  ValueId z = g.addValue("z", {ElementType::Float32, {4}});
  g.addNode(Node{"the_relu", "Relu", {}, {x}, {y}});
  g.addNode(Node{"the_tanh", "Tanh", {}, {y}, {z}});
  g.markOutput(z);
  g.finalize();
  try {
    enumerateCandidates(g, {BackendCapabilities{&spec, nullptr}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'the_tanh' (Tanh)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collage
