// Tests of the ONNX importer on small models built with the onnx protobuf API.
#include <gtest/gtest.h>

#include <set>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <variant>
#include <vector>

#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/half_float.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"
#include "core/onnx/tensor_proto.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using Dim = std::variant<int64_t, std::string>;

// A model under construction, written to a fresh temporary directory.
class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 13) {
    model_.set_ir_version(8);
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    model_.mutable_graph()->set_name("test_graph");
  }

  onnx::GraphProto& graph() { return *model_.mutable_graph(); }
  onnx::ModelProto& model() { return model_; }

  void input(const std::string& name, int32_t elemType, const std::vector<Dim>& dims) {
    setType(graph().add_input(), name, elemType, dims);
  }
  void output(const std::string& name, int32_t elemType, const std::vector<Dim>& dims) {
    setType(graph().add_output(), name, elemType, dims);
  }
  void valueInfo(const std::string& name, int32_t elemType, const std::vector<Dim>& dims) {
    setType(graph().add_value_info(), name, elemType, dims);
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    auto* n = graph().add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return *n;
  }
  void initializer(const std::string& name, const Tensor& t) {
    tensorToProto(t, name, graph().add_initializer());
  }

  std::string write(const std::string& file = "model.onnx") {
    fs::path p = dir() / file;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    EXPECT_TRUE(model_.SerializeToOstream(&out));
    return p.string();
  }

  static fs::path dir() {
    static const fs::path d = [] {
      fs::path p = fs::temp_directory_path() / ("collage_onnx_import_test_" + std::to_string(getpid()));
      fs::create_directories(p);
      return p;
    }();
    return d;
  }

 private:
  static void setType(onnx::ValueInfoProto* vi, const std::string& name, int32_t elemType,
                      const std::vector<Dim>& dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elemType);
    auto* shape = tt->mutable_shape();
    for (const auto& d : dims) {
      auto* dim = shape->add_dim();
      if (std::holds_alternative<int64_t>(d))
        dim->set_dim_value(std::get<int64_t>(d));
      else
        dim->set_dim_param(std::get<std::string>(d));
    }
  }

  onnx::ModelProto model_;
};

void setInts(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void setInt(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void setFloat(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void setString(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}

constexpr int32_t kFloat = onnx::TensorProto::FLOAT;
constexpr int32_t kInt64 = onnx::TensorProto::INT64;

// Runs `f` and returns the Error's message; fails the test if nothing is thrown.
template <class F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    if (std::getenv("COLLAGE_TEST_VERBOSE")) std::cout << "  message: " << e.what() << "\n";
    return e.what();
  }
  ADD_FAILURE() << "expected an Error";
  return "";
}

bool registered(std::initializer_list<const char*> ops) {
  for (const char* op : ops)
    if (!OpRegistry::instance().find(op)) return false;
  return true;
}

#define REQUIRE_OPS(...)                                                   \
  do {                                                                     \
    if (!registered({__VA_ARGS__})) GTEST_SKIP() << "ops not registered yet"; \
  } while (0)

TEST(OnnxImport, ShapeSubgraphFoldsIntoReshapeAttribute) {
  REQUIRE_OPS("Gather", "Unsqueeze", "Concat", "Reshape");
  // PyTorch's flatten: Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])).
  ModelBuilder m(13);
  m.input("x", kFloat, {std::string("batch"), 3, 4});
  m.initializer("zero", Tensor::fromInts({}, {0}));
  m.initializer("axes0", Tensor::fromInts({1}, {0}));
  m.initializer("minus1", Tensor::fromInts({1}, {-1}));
  m.node("Shape", {"x"}, {"s"});
  setInt(m.node("Gather", {"s", "zero"}, {"b"}), "axis", 0);
  m.node("Unsqueeze", {"b", "axes0"}, {"b1"});
  setInt(m.node("Concat", {"b1", "minus1"}, {"shape"}), "axis", 0);
  m.node("Reshape", {"x", "shape"}, {"y"}, "flatten");
  m.output("y", kFloat, {std::string("batch"), 12});
  ImportOptions opts;
  opts.inputShapes["x"] = {2, 3, 4};
  Graph g = importOnnx(m.write(), opts);
  ASSERT_EQ(g.numNodes(), 1) << g.toString();
  const Node& n = g.node(0);
  EXPECT_EQ(n.op, "Reshape");
  EXPECT_EQ(n.name, "flatten");
  ASSERT_EQ(n.inputs.size(), 1u);  // the shape input became an attribute
  EXPECT_EQ(n.attrs.getInts("shape"), (std::vector<int64_t>{2, -1}));
  EXPECT_EQ(g.value(g.outputs()[0]).type, (TensorType{ElementType::Float32, {2, 12}}));
  EXPECT_EQ(g.name, "test_graph");
  EXPECT_EQ(g.opsetImports.at(""), 13);
}

TEST(OnnxImport, DynamicBatchIsBoundOrDefaultsToOne) {
  REQUIRE_OPS("Relu");
  ModelBuilder m;
  m.input("x", kFloat, {std::string("batch"), 3});
  m.node("Relu", {"x"}, {"y"});
  m.output("y", kFloat, {std::string("batch"), 3});
  const std::string path = m.write();

  Graph byDefault = importOnnx(path);
  EXPECT_EQ(byDefault.value(byDefault.inputs()[0]).type.shape, (Shape{1, 3}));
  EXPECT_EQ(byDefault.value(byDefault.outputs()[0]).type.shape, (Shape{1, 3}));

  ImportOptions opts;
  opts.inputShapes["x"] = {8, 3};
  Graph bound = importOnnx(path, opts);
  EXPECT_EQ(bound.value(bound.inputs()[0]).type.shape, (Shape{8, 3}));
  EXPECT_EQ(bound.value(bound.outputs()[0]).type.shape, (Shape{8, 3}));

  ImportOptions seven;
  seven.defaultDim = 7;
  Graph g7 = importOnnx(path, seven);
  EXPECT_EQ(g7.value(g7.inputs()[0]).type.shape, (Shape{7, 3}));
}

TEST(OnnxImport, DeclaredInputsAreReadWithoutTheWeights) {
  ModelBuilder m;
  m.input("x", kFloat, {std::string("batch"), 3});
  m.input("w", kFloat, {2, 3});  // an initializer listed as an input: not a real input
  m.input("z", kFloat, {Dim(int64_t{4}), std::string()});
  m.initializer("w", Tensor::fromFloats({2, 3}, {1, 2, 3, 4, 5, 6}));
  m.node("Add", {"x", "w"}, {"y"});
  m.output("y", kFloat, {std::string("batch"), 3});
  const std::string path = m.write();
  std::vector<DeclaredInput> inputs = readDeclaredInputs(path);
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(inputs[0].name, "x");
  EXPECT_EQ(inputs[0].dims, (std::vector<int64_t>{-1, 3}));
  EXPECT_EQ(inputs[0].symbols[0], "batch");
  EXPECT_TRUE(inputs[0].isDynamic());
  EXPECT_EQ(inputs[1].name, "z");
  EXPECT_EQ(inputs[1].dims, (std::vector<int64_t>{4, -1}));
  EXPECT_TRUE(inputs[1].isDynamic());

  // Cut inside the graph: the reader must say so, not return what it read so far.
  fs::resize_file(path, fs::file_size(path) / 2);
  std::string msg = errorOf([&] { readDeclaredInputs(path); });
  EXPECT_NE(msg.find("not a valid ONNX model"), std::string::npos) << msg;
  msg = errorOf([&] { readDeclaredInputs(path + ".missing"); });
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

TEST(OnnxImport, BindingThatContradictsAStaticDimIsAnError) {
  REQUIRE_OPS("Relu");
  ModelBuilder m;
  m.input("x", kFloat, {std::string("batch"), 3});
  m.node("Relu", {"x"}, {"y"});
  m.output("y", kFloat, {std::string("batch"), 3});
  ImportOptions opts;
  opts.inputShapes["x"] = {4, 5};
  std::string msg = errorOf([&] { importOnnx(m.write(), opts); });
  EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4x5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("batchx3"), std::string::npos) << msg;

  ImportOptions rank;
  rank.inputShapes["x"] = {4, 3, 1};
  msg = errorOf([&] { importOnnx(m.write(), rank); });
  EXPECT_NE(msg.find("4x3x1"), std::string::npos) << msg;
}

TEST(OnnxImport, BindingAnUnknownInputListsTheInputs) {
  REQUIRE_OPS("Add");
  ModelBuilder m;
  m.input("a", kFloat, {2});
  m.input("b", kFloat, {2});
  m.node("Add", {"a", "b"}, {"y"});
  m.output("y", kFloat, {2});
  ImportOptions opts;
  opts.inputShapes["input_ids"] = {1, 128};
  std::string msg = errorOf([&] { importOnnx(m.write(), opts); });
  EXPECT_NE(msg.find("'input_ids'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a, b"), std::string::npos) << msg;
}

TEST(OnnxImport, MissingAndTruncatedFilesAreErrors) {
  std::string missing = (ModelBuilder::dir() / "no_such_model.onnx").string();
  std::string msg = errorOf([&] { importOnnx(missing); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;

  ModelBuilder m;
  m.input("x", kFloat, {2, 3});
  m.initializer("w", Tensor::fromFloats({2, 3}, {1, 2, 3, 4, 5, 6}));
  m.node("Add", {"x", "w"}, {"y"});
  m.output("y", kFloat, {2, 3});
  const std::string path = m.write("truncated.onnx");
  const auto size = fs::file_size(path);
  fs::resize_file(path, size / 2);
  msg = errorOf([&] { importOnnx(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a valid ONNX model"), std::string::npos) << msg;
}

TEST(OnnxImport, UnsupportedOpsAreAllListedInOneError) {
  ModelBuilder m;
  auto* ms = m.model().add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  m.input("x", kFloat, {2, 2});
  m.node("StringNormalizer", {"x"}, {"d1"}, "a");
  m.node("StringNormalizer", {"x"}, {"d2"}, "b");
  m.node("GlobalLpPool", {"x"}, {"r"}, "c");
  m.node("FusedGemm", {"x", "x"}, {"f"}, "d").set_domain("com.microsoft");
  m.output("d1", kFloat, {});
  m.output("d2", kFloat, {});
  m.output("r", kFloat, {2, 2});
  m.output("f", kFloat, {2, 2});
  const std::string path = m.write();
  try {
    importOnnx(path);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path + ": unsupported ops: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("StringNormalizer (nodes 'a', 'b')"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GlobalLpPool (node 'c')"), std::string::npos) << msg;
    EXPECT_NE(msg.find("com.microsoft.FusedGemm (node 'd')"), std::string::npos) << msg;
  }
}

// ONNX Runtime's QOperator form: a residual QLinearAdd and a
// QLinearGlobalAveragePool of the com.microsoft domain import under their
// qualified names and run; a contrib op the registry lacks is still refused.
TEST(OnnxImport, ComMicrosoftQLinearOpsImportAndRun) {
  ModelBuilder m;
  auto* ms = m.model().add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  constexpr int32_t kUInt8 = onnx::TensorProto::UINT8;
  m.input("x", kUInt8, {1, 2, 1, 2});
  m.initializer("s", Tensor::fromFloats({}, {0.5f}));
  Tensor zp(ElementType::UInt8, {});
  zp.data<uint8_t>()[0] = 1;
  m.initializer("zp", zp);
  m.node("QLinearAdd", {"x", "s", "zp", "x", "s", "zp", "s", "zp"}, {"sum"}, "residual")
      .set_domain("com.microsoft");
  m.node("QLinearGlobalAveragePool", {"sum", "s", "zp", "s", ""}, {"y"}, "gap").set_domain("com.microsoft");
  m.output("y", kUInt8, {1, 2, 1, 1});
  const Graph g = importOnnx(m.write("qoperator.onnx"));
  ASSERT_EQ(g.numNodes(), 2);
  EXPECT_EQ(g.node(0).op, "com.microsoft.QLinearAdd");
  EXPECT_EQ(g.node(1).op, "com.microsoft.QLinearGlobalAveragePool");
  Tensor x(ElementType::UInt8, {1, 2, 1, 2});
  for (int i = 0; i < 4; ++i) x.data<uint8_t>()[i] = static_cast<uint8_t>(3 + 2 * i);  // 3 5 7 9
  // sum = 2x - 1 (every scale 0.5, zero point 1): 5 9 | 13 17; the pool's
  // acc = sum - 1 * 2 times 0.5 / (0.5 * 2): 12 * 0.5 = 6, 28 * 0.5 = 14.
  const Tensor y = ReferenceExecutor(g).run(std::vector<Tensor>{x})[0];
  ASSERT_EQ(y.shape(), (Shape{1, 2, 1, 1}));
  EXPECT_EQ(y.data<uint8_t>()[0], 6);
  EXPECT_EQ(y.data<uint8_t>()[1], 14);
}

TEST(OnnxImport, UnknownComMicrosoftOpIsRefusedByNameAndDomain) {
  ModelBuilder m;
  auto* ms = m.model().add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  m.input("x", onnx::TensorProto::UINT8, {1, 4});
  m.initializer("s", Tensor::fromFloats({}, {0.5f}));
  m.node("QLinearSoftmax", {"x", "s", "", "s", ""}, {"y"}, "soft").set_domain("com.microsoft");
  m.output("y", onnx::TensorProto::UINT8, {1, 4});
  const std::string path = m.write("qsoftmax.onnx");
  try {
    importOnnx(path);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported ops: com.microsoft.QLinearSoftmax (node 'soft')"),
              std::string::npos)
        << e.what();
  }
}

TEST(OnnxImport, OpsetOutOfRangeIsAnError) {
  for (int64_t opset : {5, 19}) {
    ModelBuilder m(opset);
    m.input("x", kFloat, {2});
    m.node("Relu", {"x"}, {"y"});
    m.output("y", kFloat, {2});
    const std::string path = m.write("opset.onnx");
    std::string msg = errorOf([&] { importOnnx(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("opset " + std::to_string(opset)), std::string::npos) << msg;
  }
}

TEST(OnnxImport, InitializerSizeMismatchNamesTheTensor) {
  ModelBuilder m;
  m.input("x", kFloat, {2, 3});
  auto* w = m.graph().add_initializer();
  w->set_name("weights");
  w->set_data_type(kFloat);
  w->add_dims(2);
  w->add_dims(3);
  for (int i = 0; i < 5; ++i) w->add_float_data(1.0f);
  m.node("Add", {"x", "weights"}, {"y"});
  m.output("y", kFloat, {2, 3});
  std::string msg = errorOf([&] { importOnnx(m.write()); });
  EXPECT_NE(msg.find("'weights'"), std::string::npos) << msg;

  // raw_data of the wrong length too.
  w->clear_float_data();
  w->set_raw_data(std::string(20, '\0'));
  msg = errorOf([&] { importOnnx(m.write()); });
  EXPECT_NE(msg.find("'weights'"), std::string::npos) << msg;
}

TEST(OnnxImport, ExternalDataIsReadFromBesideTheModel) {
  REQUIRE_OPS("Add");
  fs::path sub = ModelBuilder::dir() / "external";
  fs::create_directories(sub);
  // 8 bytes of padding, then 6 floats.
  std::vector<float> values = {1.5f, -2, 3, 4, 5, 6.25f};
  {
    std::ofstream bin(sub / "weights.bin", std::ios::binary);
    const char pad[8] = {};
    bin.write(pad, 8);
    bin.write(reinterpret_cast<const char*>(values.data()), 24);
  }
  ModelBuilder m;
  m.input("x", kFloat, {2, 3});
  auto* w = m.graph().add_initializer();
  w->set_name("w");
  w->set_data_type(kFloat);
  w->add_dims(2);
  w->add_dims(3);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const char* v) {
    auto* e = w->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", "weights.bin");
  add("offset", "8");
  add("length", "24");
  m.node("Add", {"x", "w"}, {"y"});
  m.output("y", kFloat, {2, 3});
  const std::string path = (sub / "model.onnx").string();
  {
    std::ofstream out(path, std::ios::binary);
    ASSERT_TRUE(m.model().SerializeToOstream(&out));
  }
  Graph g = importOnnx(path);
  auto wv = g.findValue("w");
  ASSERT_TRUE(wv.has_value());
  ASSERT_TRUE(g.value(*wv).isConstant());
  EXPECT_EQ(g.value(*wv).constant->toFloats(), values);

  // A length that reads past the end of the file names the tensor.
  w->mutable_external_data(2)->set_value("64");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    ASSERT_TRUE(m.model().SerializeToOstream(&out));
  }
  std::string msg = errorOf([&] { importOnnx(path); });
  EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
}

TEST(OnnxImport, OldClipAttributesAndNewClipInputsGiveTheSameNode) {
  REQUIRE_OPS("Clip");
  if (!OpRegistry::instance().get("Clip").findConstInput(1))
    GTEST_SKIP() << "the Clip schema does not declare min/max as constant inputs yet";
  ModelBuilder old(10);
  old.input("x", kFloat, {4});
  auto& n = old.node("Clip", {"x"}, {"y"}, "clip");
  setFloat(n, "min", -1.0f);
  setFloat(n, "max", 2.0f);
  old.output("y", kFloat, {4});
  Graph a = importOnnx(old.write("clip10.onnx"));

  ModelBuilder now(13);
  now.input("x", kFloat, {4});
  now.initializer("lo", Tensor::scalarFloat(-1.0f));
  now.initializer("hi", Tensor::scalarFloat(2.0f));
  now.node("Clip", {"x", "lo", "hi"}, {"y"}, "clip");
  now.output("y", kFloat, {4});
  Graph b = importOnnx(now.write("clip13.onnx"));

  ASSERT_EQ(a.numNodes(), 1);
  ASSERT_EQ(b.numNodes(), 1);
  EXPECT_EQ(a.node(0).inputs.size(), 1u);
  EXPECT_EQ(b.node(0).inputs.size(), 1u);
  EXPECT_EQ(a.node(0).attrs.toString(), b.node(0).attrs.toString());
  EXPECT_FLOAT_EQ(b.node(0).attrs.getFloat("min"), -1.0f);
  EXPECT_FLOAT_EQ(b.node(0).attrs.getFloat("max"), 2.0f);
}

TEST(OnnxImport, OldSqueezeAttributeAndNewSqueezeInputGiveTheSameNode) {
  REQUIRE_OPS("Squeeze");
  ModelBuilder old(11);
  old.input("x", kFloat, {1, 3, 1});
  setInts(old.node("Squeeze", {"x"}, {"y"}, "sq"), "axes", {0, 2});
  old.output("y", kFloat, {3});
  Graph a = importOnnx(old.write("sq11.onnx"));

  ModelBuilder now(13);
  now.input("x", kFloat, {1, 3, 1});
  now.initializer("axes", Tensor::fromInts({2}, {0, 2}));
  now.node("Squeeze", {"x", "axes"}, {"y"}, "sq");
  now.output("y", kFloat, {3});
  Graph b = importOnnx(now.write("sq13.onnx"));

  ASSERT_EQ(a.numNodes(), 1);
  ASSERT_EQ(b.numNodes(), 1);
  EXPECT_EQ(b.node(0).inputs.size(), 1u);
  EXPECT_EQ(a.node(0).attrs.toString(), b.node(0).attrs.toString());
  EXPECT_EQ(b.node(0).attrs.getInts("axes"), (std::vector<int64_t>{0, 2}));
}

TEST(OnnxImport, OldPadValueBecomesConstantValue) {
  REQUIRE_OPS("Pad");
  ModelBuilder old(10);
  old.input("x", kFloat, {2});
  auto& n = old.node("Pad", {"x"}, {"y"}, "pad");
  setInts(n, "pads", {1, 1});
  setFloat(n, "value", 3.0f);
  old.output("y", kFloat, {4});
  Graph a = importOnnx(old.write("pad10.onnx"));

  ModelBuilder now(13);
  now.input("x", kFloat, {2});
  now.initializer("pads", Tensor::fromInts({2}, {1, 1}));
  now.initializer("v", Tensor::scalarFloat(3.0f));
  now.node("Pad", {"x", "pads", "v"}, {"y"}, "pad");
  now.output("y", kFloat, {4});
  Graph b = importOnnx(now.write("pad13.onnx"));

  ASSERT_EQ(a.numNodes(), 1);
  EXPECT_FALSE(a.node(0).attrs.has("value"));
  EXPECT_EQ(a.node(0).attrs.toString(), b.node(0).attrs.toString());
  std::vector<Tensor> out = ReferenceExecutor(a).run({Tensor::fromFloats({2}, {1, 2})});
  EXPECT_EQ(out[0].toFloats(), (std::vector<float>{3, 1, 2, 3}));
}

TEST(OnnxImport, NonConstantShapeInputNeedsADeclaredOutputShape) {
  REQUIRE_OPS("Reshape");
  // A run-time shape decides the output's: without a static declaration
  // the import cannot plan it, and says which node, input and output.
  ModelBuilder undeclared;
  undeclared.input("x", kFloat, {2, 3});
  undeclared.input("shape", kInt64, {2});
  undeclared.node("Reshape", {"x", "shape"}, {"y"}, "r");
  undeclared.output("y", kFloat, {std::string("a"), std::string("b")});
  std::string msg = errorOf([&] { importOnnx(undeclared.write("reshape_undeclared.onnx")); });
  EXPECT_NE(msg.find("node 'r' (Reshape): the shape of output 'y'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("input 'shape'"), std::string::npos) << msg;

  // Declared, the shape stays a run-time input of the node.
  ModelBuilder m;
  m.input("x", kFloat, {2, 3});
  m.input("shape", kInt64, {2});
  m.node("Reshape", {"x", "shape"}, {"y"}, "r");
  m.output("y", kFloat, {3, 2});
  const std::string path = m.write();
  Graph runtime = importOnnx(path);
  ASSERT_EQ(runtime.numNodes(), 1);
  EXPECT_EQ(runtime.node(0).inputs.size(), 2u);
  EXPECT_FALSE(runtime.node(0).attrs.has("shape"));

  // Bound to a value, the input becomes a constant and then an attribute.
  ImportOptions opts;
  opts.constantInputs["shape"] = Tensor::fromInts({2}, {3, 2});
  Graph g = importOnnx(path, opts);
  ASSERT_EQ(g.inputs().size(), 1u);
  ASSERT_EQ(g.numNodes(), 1);
  EXPECT_EQ(g.node(0).attrs.getInts("shape"), (std::vector<int64_t>{3, 2}));
}

TEST(OnnxImport, DeclaredTypeThatContradictsInferenceNamesTheTensor) {
  REQUIRE_OPS("Relu");
  ModelBuilder m;
  m.input("x", kFloat, {2, 3});
  m.node("Relu", {"x"}, {"h"});
  m.node("Relu", {"h"}, {"y"});
  m.valueInfo("h", kFloat, {2, 4});
  m.output("y", kFloat, {2, 3});
  std::string msg = errorOf([&] { importOnnx(m.write()); });
  EXPECT_NE(msg.find("tensor 'h'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2x4"), std::string::npos) << msg;
}

// A declared shape without one dim value is the exporter's own inference:
// its rank is a hint (PyTorch declares `unbind`'s pieces with the axis that
// ONNX Runtime, and Collage, drop).
TEST(OnnxImport, DeclaredRankWithoutDimValuesIsAHint) {
  REQUIRE_OPS("Relu");
  ModelBuilder m;
  m.input("x", kFloat, {2, 3});
  m.node("Relu", {"x"}, {"h"});
  m.node("Relu", {"h"}, {"y"});
  m.valueInfo("h", kFloat, {std::string("a"), std::string("b"), std::string("c")});
  m.output("y", kFloat, {std::string("d0")});
  Graph g = importOnnx(m.write());
  EXPECT_EQ(g.value(g.outputs()[0]).type.toString(), "float32[2x3]");
}

// ONNX Runtime sorts a graph whose node list is out of order (a float16
// conversion tool appends the Casts it inserts), and so does the importer,
// bodies too: an If whose branch reads a value produced after it in the
// list comes after that value's producer.
TEST(OnnxImport, NodesOutOfOrderAreSortedBodiesToo) {
  REQUIRE_OPS("Relu", "Neg", "Cast", "If", "Greater");
  ModelBuilder m;
  m.input("x_half", kFloat, {2, 3});
  m.input("flag", kFloat, {});
  onnx::GraphProto thenBranch, elseBranch;
  thenBranch.set_name("then");
  elseBranch.set_name("else");
  for (auto* branch : {&thenBranch, &elseBranch}) {
    auto* out = branch->add_output();
    out->set_name(branch == &thenBranch ? "t_out" : "e_out");
    out->mutable_type()->mutable_tensor_type()->set_elem_type(kFloat);
    // In the branch, its two nodes out of order as well.
    auto* second = branch->add_node();
    second->set_op_type("Relu");
    second->add_input(branch == &thenBranch ? "t_mid" : "e_mid");
    second->add_output(out->name());
    auto* first = branch->add_node();
    first->set_op_type("Neg");
    first->add_input("x");  // the outer Cast's result
    first->add_output(branch == &thenBranch ? "t_mid" : "e_mid");
  }
  m.node("Relu", {"picked"}, {"y"}, "relu_last");
  auto& iff = m.node("If", {"cond"}, {"picked"}, "if");
  auto* a = iff.add_attribute();
  a->set_name("then_branch");
  a->set_type(onnx::AttributeProto::GRAPH);
  *a->mutable_g() = thenBranch;
  auto* b = iff.add_attribute();
  b->set_name("else_branch");
  b->set_type(onnx::AttributeProto::GRAPH);
  *b->mutable_g() = elseBranch;
  m.node("Greater", {"flag", "zero"}, {"cond"}, "positive");
  m.initializer("zero", Tensor::scalarFloat(0.0f));
  setInt(m.node("Cast", {"x_half"}, {"x"}, "appended_cast"), "to", kFloat);
  m.output("y", kFloat, {2, 3});
  Graph g = importOnnx(m.write());
  std::vector<std::string> ops;
  for (NodeId n = 0; n < g.numNodes(); ++n) ops.push_back(g.node(n).op);
  EXPECT_EQ(ops, (std::vector<std::string>{"Greater", "Cast", "If", "Relu"}));  // stable
  EXPECT_EQ(g.node(3).name, "relu_last");
}

TEST(OnnxImport, ACycleIsRefusedNamingANodeOnIt) {
  REQUIRE_OPS("Relu", "Add");
  ModelBuilder m;
  m.input("x", kFloat, {2});
  m.node("Relu", {"x"}, {"before"}, "before_the_cycle");
  m.node("Add", {"before", "b"}, {"a"}, "on_the_cycle_a");
  m.node("Relu", {"a"}, {"b"}, "on_the_cycle_b");
  m.node("Relu", {"b"}, {"y"}, "after_the_cycle");
  m.output("y", kFloat, {2});
  const std::string msg = errorOf([&] { importOnnx(m.write()); });
  EXPECT_NE(msg.find("cycle through node 'on_the_cycle_"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.onnx"), std::string::npos) << msg;
}

TEST(OnnxImport, DeadNodesAreRemovedAndEmptyNamesInvented) {
  REQUIRE_OPS("Relu", "Neg");
  ModelBuilder m;
  m.input("x", kFloat, {2});
  m.node("Neg", {"x"}, {"unused"});  // reaches no output
  m.node("Relu", {"x"}, {"y"});
  m.output("y", kFloat, {2});
  Graph g = importOnnx(m.write());
  ASSERT_EQ(g.numNodes(), 1);
  EXPECT_EQ(g.node(0).op, "Relu");
  EXPECT_EQ(g.node(0).name, "Relu_1");
  EXPECT_FALSE(g.findValue("unused").has_value());
}

TEST(OnnxImport, ConstantNodesAndFoldingOfConstantArithmetic) {
  REQUIRE_OPS("Add", "Mul");
  ModelBuilder m;
  m.input("x", kFloat, {3});
  auto& c1 = m.node("Constant", {}, {"c1"});
  auto* a = c1.add_attribute();
  a->set_name("value_floats");
  a->set_type(onnx::AttributeProto::FLOATS);
  for (float v : {1.0f, 2.0f, 3.0f}) a->add_floats(v);
  auto& c2 = m.node("Constant", {}, {"c2"});
  setFloat(c2, "value_float", 10.0f);
  m.node("Mul", {"c1", "c2"}, {"scaled"});  // folded: both inputs constant
  m.node("Add", {"x", "scaled"}, {"y"});    // kept: reads a graph input
  m.output("y", kFloat, {3});
  Graph g = importOnnx(m.write());
  ASSERT_EQ(g.numNodes(), 1) << g.toString();
  EXPECT_EQ(g.node(0).op, "Add");
  const Value& scaled = g.value(g.node(0).inputs[1]);
  ASSERT_TRUE(scaled.isConstant());
  EXPECT_EQ(scaled.constant->toFloats(), (std::vector<float>{10, 20, 30}));

  ImportOptions noFold;
  noFold.foldConstants = false;
  Graph unfolded = importOnnx(m.write(), noFold);
  EXPECT_EQ(unfolded.numNodes(), 2);
}

// Exporters write float16 (and bfloat16) weights as an initializer followed
// by Cast(to=float): the Cast is folded away at import and the weight is the
// float32 constant, widened exactly. A Cast of a computed float16 tensor stays.
TEST(OnnxImport, HalfAndBfloat16WeightsCastToFloatBecomeFloat32Constants) {
  REQUIRE_OPS("Cast", "Mul");
  // Values that float16 and bfloat16 hold exactly but that a rounding slip
  // would change: a subnormal half, a large half, a negative fraction.
  const std::vector<uint16_t> halfBits{floatToHalf(1.5f), floatToHalf(-0.333251953125f),
                                       0x0001 /* 2^-24, the smallest subnormal */, floatToHalf(65504.0f)};
  // bfloat16 bits are the top half of float32's: 1.0, -2.5, 3.0e38-ish, 2^-130.
  const std::vector<uint16_t> bf16Bits{0x3F80, 0xC020, 0x7F61, 0x0010};
  auto expected = [](ElementType t, const std::vector<uint16_t>& bits) {
    std::vector<float> out;
    for (uint16_t b : bits) out.push_back(t == ElementType::Float16 ? halfToFloat(b) : bfloat16ToFloat(b));
    return out;
  };
  for (ElementType t : {ElementType::Float16, ElementType::BFloat16}) {
    SCOPED_TRACE(std::string(elementTypeName(t)));
    const std::vector<uint16_t>& bits = t == ElementType::Float16 ? halfBits : bf16Bits;
    Tensor w(t, {4});
    std::copy(bits.begin(), bits.end(), w.data<uint16_t>());
    ModelBuilder m;
    m.input("x", kFloat, {4});
    m.initializer("w_half", w);
    setInt(m.node("Cast", {"w_half"}, {"w"}, "cast_w"), "to", kFloat);
    m.node("Mul", {"x", "w"}, {"y"}, "mul");
    m.output("y", kFloat, {4});
    Graph g = importOnnx(m.write());
    ASSERT_EQ(g.numNodes(), 1) << g.toString();  // the Cast is gone
    EXPECT_EQ(g.node(0).op, "Mul");
    const Value& weight = g.value(g.node(0).inputs[1]);
    ASSERT_TRUE(weight.isConstant());
    EXPECT_EQ(weight.constant->elementType(), ElementType::Float32);
    const std::vector<float> want = expected(t, bits);
    const std::vector<float> got = weight.constant->toFloats();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << "element " << i << ": " << got[i];
    // The graph's output is what it was: x * the widened weight.
    ASSERT_EQ(g.outputs().size(), 1u);
    EXPECT_EQ(g.value(g.outputs()[0]).name, "y");
    EXPECT_EQ(g.value(g.outputs()[0]).type.elementType, ElementType::Float32);
    Tensor x = Tensor::fromFloats({4}, {2.0f, -1.0f, 4.0f, 0.5f});
    const std::vector<float> y = ReferenceExecutor(g).run(std::vector<Tensor>{x})[0].toFloats();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(y[i], x.toFloats()[i] * want[i]) << "element " << i;
  }

  // A Cast of a computed float16 tensor is an op of the model: kept.
  ModelBuilder m;
  m.input("x", onnx::TensorProto::FLOAT16, {4});
  setInt(m.node("Cast", {"x"}, {"y"}, "cast_x"), "to", kFloat);
  m.output("y", kFloat, {4});
  Graph g = importOnnx(m.write());
  ASSERT_EQ(g.numNodes(), 1) << g.toString();
  EXPECT_EQ(g.node(0).op, "Cast");
  EXPECT_EQ(g.node(0).name, "cast_x");
}

// A QDQ model dequantizes a computed tensor once for all its readers (a
// block's output feeds the next convolution and the residual Add). Each
// reader gets its own copy, so each can be grouped with its dequantizer; a
// dequantized weight (a constant) is folded, and a DequantizeLinear with one
// reader stays as it is.
TEST(OnnxImport, ADequantizedTensorReadBySeveralNodesGetsACopyPerReader) {
  REQUIRE_OPS("QuantizeLinear", "DequantizeLinear", "Relu", "Neg", "Add");
  ModelBuilder m;
  m.input("x", kFloat, {4});
  m.initializer("s", Tensor::scalarFloat(0.25f));
  Tensor zp(ElementType::UInt8, {});
  zp.data<uint8_t>()[0] = 128;
  m.initializer("zp", zp);
  m.node("QuantizeLinear", {"x", "s", "zp"}, {"q"}, "quant");
  m.node("DequantizeLinear", {"q", "s", "zp"}, {"d"}, "dequant");
  m.node("Relu", {"d"}, {"r"}, "relu");
  m.node("Neg", {"d"}, {"n"}, "neg");
  m.node("Add", {"d", "d"}, {"twice"}, "twice");  // one reader, twice
  m.node("Add", {"r", "n"}, {"rn"}, "rn");
  m.node("Add", {"rn", "twice"}, {"y"}, "sum");
  m.output("y", kFloat, {4});
  const std::string path = m.write("qdq_readers.onnx");
  Graph g = importOnnx(path);
  int dequantizers = 0;
  std::set<ValueId> dequantized;
  for (NodeId n = 0; n < g.numNodes(); ++n)
    if (g.node(n).op == "DequantizeLinear") {
      ++dequantizers;
      EXPECT_EQ(g.value(g.node(n).outputs[0]).consumers.size(), 1u) << g.node(n).name;
      dequantized.insert(g.node(n).outputs[0]);
    }
  EXPECT_EQ(dequantizers, 3);
  ASSERT_TRUE(g.findNode("dequant").has_value());  // the first reader's copy keeps the name
  const Node& twice = g.node(*g.findNode("twice"));
  EXPECT_EQ(twice.inputs[0], twice.inputs[1]);
  EXPECT_TRUE(dequantized.count(twice.inputs[0]));
  // Same numbers as before.
  const Tensor x = Tensor::fromFloats({4}, {0.3f, -1.1f, 2.0f, 0.125f});
  const std::vector<float> y = ReferenceExecutor(g).run(std::vector<Tensor>{x})[0].toFloats();
  for (size_t i = 0; i < y.size(); ++i) {
    const float d = std::nearbyint(x.toFloats()[i] / 0.25f) * 0.25f;
    EXPECT_EQ(y[i], (std::max(d, 0.0f) + -d) + (d + d)) << i;
  }
}

// Found by onnx_import_fuzzer: an Expand to a shape whose byte size
// overflows int64 was folded, and the allocation's size computation was
// undefined behaviour. A result too large to fold stays a node.
TEST(OnnxImport, ShapesNoMachineHoldsAreErrorsAndHugeResultsAreNotFolded) {
  REQUIRE_OPS("Expand", "ConstantOfShape");
  {
    ModelBuilder m;
    m.initializer("x", Tensor::fromFloats({1, 1, 64}, std::vector<float>(64, 1.0f)));
    m.initializer("shape", Tensor::fromInts({3}, {1, 8358680916989575167, 64}));
    m.node("Expand", {"x", "shape"}, {"y"}, "expand");
    m.output("y", kFloat, {});
    const std::string message = errorOf([&] { importOnnx(m.write()); });
    EXPECT_NE(message.find("node 'expand' (Expand)"), std::string::npos) << message;
    EXPECT_NE(message.find("output 'y' would be float32[1x8358680916989575167x64]"),
              std::string::npos)
        << message;
  }
  {
    // 2 GiB of ones: the import keeps the node instead of allocating them.
    ModelBuilder m;
    m.initializer("one", Tensor::fromFloats({1}, {1.0f}));
    m.initializer("shape", Tensor::fromInts({2}, {1 << 15, 1 << 14}));
    m.node("Expand", {"one", "shape"}, {"ones"}, "ones");
    m.output("ones", kFloat, {1 << 15, 1 << 14});
    Graph g = importOnnx(m.write());
    ASSERT_EQ(g.numNodes(), 1);
    EXPECT_EQ(g.node(0).op, "Expand");
    EXPECT_FALSE(g.value(g.outputs()[0]).isConstant());
  }
  {
    // ConstantOfShape has no shape until computed: too large is an error.
    ModelBuilder m;
    m.initializer("shape", Tensor::fromInts({2}, {1 << 15, 1 << 14}));
    m.node("ConstantOfShape", {"shape"}, {"zeros"}, "zeros");
    m.output("zeros", kFloat, {1 << 15, 1 << 14});
    const std::string message = errorOf([&] { importOnnx(m.write()); });
    EXPECT_NE(message.find("node 'zeros' (ConstantOfShape): its result is too large to compute at "
                           "import (a tensor of float32[32768x16384] (2048 MiB)"),
              std::string::npos)
        << message;
  }
}

TEST(OnnxImport, Opset18ReduceWithAxesInputImportsDespiteTheChecker) {
  REQUIRE_OPS("ReduceMean");
  ModelBuilder m(18);
  m.input("x", kFloat, {2, 3});
  m.initializer("axes", Tensor::fromInts({1}, {1}));
  setInt(m.node("ReduceMean", {"x", "axes"}, {"y"}, "mean"), "keepdims", 0);
  m.output("y", kFloat, {2});
  Graph g = importOnnx(m.write());
  ASSERT_EQ(g.numNodes(), 1);
  EXPECT_EQ(g.node(0).inputs.size(), 1u);
  EXPECT_EQ(g.node(0).attrs.getInts("axes"), (std::vector<int64_t>{1}));
  EXPECT_EQ(g.value(g.outputs()[0]).type.shape, (Shape{2}));
}

TEST(OnnxImport, CoercedSoftmaxBeforeOpset13BecomesReshapeSoftmaxReshape) {
  REQUIRE_OPS("Softmax", "Reshape");
  ModelBuilder m(11);
  m.input("x", kFloat, {2, 3, 4});
  setInt(m.node("Softmax", {"x"}, {"y"}, "sm"), "axis", 1);
  m.output("y", kFloat, {2, 3, 4});
  Graph g = importOnnx(m.write());
  ASSERT_EQ(g.numNodes(), 3) << g.toString();
  EXPECT_EQ(g.node(0).op, "Reshape");
  EXPECT_EQ(g.node(0).attrs.getInts("shape"), (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(g.node(1).op, "Softmax");
  EXPECT_EQ(g.node(1).attrs.getInt("axis"), -1);
  EXPECT_EQ(g.node(2).op, "Reshape");
  EXPECT_EQ(g.value(g.outputs()[0]).name, "y");
  // Each row of 12 sums to 1.
  std::vector<float> in(24);
  for (int i = 0; i < 24; ++i) in[i] = static_cast<float>(i % 5) * 0.3f;
  auto out = ReferenceExecutor(g).run({Tensor::fromFloats({2, 3, 4}, in)})[0].toFloats();
  for (int r = 0; r < 2; ++r) {
    float sum = 0;
    for (int i = 0; i < 12; ++i) sum += out[r * 12 + i];
    EXPECT_NEAR(sum, 1.0f, 1e-5f);
  }

  // Over the last axis it stays one node.
  ModelBuilder last(11);
  last.input("x", kFloat, {2, 3});
  setInt(last.node("Softmax", {"x"}, {"y"}, "sm"), "axis", 1);
  last.output("y", kFloat, {2, 3});
  Graph g2 = importOnnx(last.write());
  ASSERT_EQ(g2.numNodes(), 1);
  EXPECT_EQ(g2.node(0).attrs.getInt("axis"), -1);
}

TEST(OnnxImport, UpsampleBecomesAsymmetricFloorResize) {
  REQUIRE_OPS("Resize");
  ModelBuilder m(9);
  m.input("x", kFloat, {1, 1, 2, 2});
  m.initializer("scales", Tensor::fromFloats({4}, {1, 1, 2, 2}));
  setString(m.node("Upsample", {"x", "scales"}, {"y"}, "up"), "mode", "nearest");
  m.output("y", kFloat, {1, 1, 4, 4});
  Graph g = importOnnx(m.write());
  ASSERT_EQ(g.numNodes(), 1);
  const Node& n = g.node(0);
  EXPECT_EQ(n.op, "Resize");
  EXPECT_EQ(n.inputs.size(), 1u);
  EXPECT_EQ(n.attrs.getString("coordinate_transformation_mode"), "asymmetric");
  EXPECT_EQ(n.attrs.getString("nearest_mode"), "floor");
  EXPECT_EQ(n.attrs.getFloats("scales"), (std::vector<float>{1, 1, 2, 2}));
  EXPECT_EQ(g.value(g.outputs()[0]).type.shape, (Shape{1, 1, 4, 4}));
}

TEST(OnnxImport, Resize10ScalesInputBecomesTheScalesAttribute) {
  REQUIRE_OPS("Resize");
  ModelBuilder m(10);
  m.input("x", kFloat, {1, 1, 2, 2});
  m.initializer("scales", Tensor::fromFloats({4}, {1, 1, 2, 3}));
  m.node("Resize", {"x", "scales"}, {"y"}, "rs");
  m.output("y", kFloat, {1, 1, 4, 6});
  Graph g = importOnnx(m.write());
  ASSERT_EQ(g.numNodes(), 1);
  const Node& n = g.node(0);
  EXPECT_EQ(n.inputs.size(), 1u);
  EXPECT_EQ(n.attrs.getFloats("scales"), (std::vector<float>{1, 1, 2, 3}));
  EXPECT_FALSE(n.attrs.has("roi"));
  EXPECT_EQ(n.attrs.getString("coordinate_transformation_mode"), "asymmetric");
  EXPECT_EQ(g.value(g.outputs()[0]).type.shape, (Shape{1, 1, 4, 6}));
}

TEST(OnnxImport, LegacyOpset6BroadcastIsCanonicalisedUnlessTurnedOff) {
  REQUIRE_OPS("Add");
  ModelBuilder m(6);
  m.input("x", kFloat, {2, 3, 2});
  m.initializer("bias", Tensor::fromFloats({3}, {10, 20, 30}));
  auto& add = m.node("Add", {"x", "bias"}, {"y"}, "add");
  setInt(add, "broadcast", 1);
  setInt(add, "axis", 1);
  m.output("y", kFloat, {2, 3, 2});
  const std::string path = m.write();
  ImportOptions strict;
  strict.allowLegacyOpsets = false;
  std::string msg = errorOf([&] { importOnnx(path, strict); });
  EXPECT_NE(msg.find("opset 6"), std::string::npos) << msg;

  Graph g = importOnnx(path);
  ASSERT_EQ(g.numNodes(), 1);
  EXPECT_FALSE(g.node(0).attrs.has("broadcast"));
  EXPECT_FALSE(g.node(0).attrs.has("axis"));
  EXPECT_EQ(g.value(g.node(0).inputs[1]).type.shape, (Shape{3, 1}));
  std::vector<float> x(12, 1.0f);
  auto y = ReferenceExecutor(g).run({Tensor::fromFloats({2, 3, 2}, x)})[0].toFloats();
  EXPECT_EQ(y, (std::vector<float>{11, 11, 21, 21, 31, 31, 11, 11, 21, 21, 31, 31}));
}

TEST(OnnxImport, SchemaDefaultsAreFilledIn) {
  REQUIRE_OPS("BatchNormalization");
  ModelBuilder m(9);
  m.input("x", kFloat, {1, 2, 2, 2});
  for (const char* p : {"scale", "bias", "mean", "var"})
    m.initializer(p, Tensor::fromFloats({2}, {1, 1}));
  m.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"}, "bn");
  m.output("y", kFloat, {1, 2, 2, 2});
  Graph g = importOnnx(m.write());
  ASSERT_EQ(g.numNodes(), 1);
  const OpSchema& schema = OpRegistry::instance().get("BatchNormalization");
  for (const auto& spec : schema.attributes) {
    if (spec.defaultValue) {
      EXPECT_TRUE(g.node(0).attrs.has(spec.name)) << spec.name;
    }
  }
  EXPECT_FLOAT_EQ(g.node(0).attrs.getFloat("epsilon"), 1e-5f);
}

TEST(OnnxImport, ParseInputShapeBinding) {
  auto [name, shape] = parseInputShapeBinding("input_ids=1x128");
  EXPECT_EQ(name, "input_ids");
  EXPECT_EQ(shape, (Shape{1, 128}));
  EXPECT_EQ(parseInputShapeBinding("x=2,3,4").second, (Shape{2, 3, 4}));
  EXPECT_THROW(parseInputShapeBinding("input_ids"), Error);
  EXPECT_THROW(parseInputShapeBinding("=1x2"), Error);
  EXPECT_THROW(parseInputShapeBinding("x="), Error);
  EXPECT_THROW(parseInputShapeBinding("x=1xz"), Error);
}

TEST(OnnxImport, TensorProtoFilesRoundTrip) {
  const std::string path = (ModelBuilder::dir() / "t.pb").string();
  Tensor t = Tensor::fromFloats({2, 2}, {1, -2, 3.5f, 4});
  writeTensorProtoFile(path, t, "weights");
  std::string name;
  Tensor back = readTensorProtoFile(path, &name);
  EXPECT_EQ(name, "weights");
  EXPECT_EQ(back.type(), t.type());
  EXPECT_EQ(back.toFloats(), t.toFloats());

  // float16 carried in int32_data, as ONNX writes it.
  onnx::TensorProto half;
  half.set_data_type(onnx::TensorProto::FLOAT16);
  half.add_dims(2);
  half.add_int32_data(floatToHalf(1.5f));
  half.add_int32_data(floatToHalf(-0.25f));
  Tensor h = tensorFromProto(half);
  EXPECT_EQ(h.elementType(), ElementType::Float16);
  EXPECT_EQ(tensorToDoubles(h), (std::vector<double>{1.5, -0.25}));

  onnx::TensorProto str;
  str.set_name("s");
  str.set_data_type(onnx::TensorProto::STRING);
  str.add_string_data("hello");
  str.add_dims(1);
  EXPECT_THROW(tensorFromProto(str), Unsupported);

  EXPECT_THROW(readTensorProtoFile((ModelBuilder::dir() / "missing.pb").string()), Error);
}

TEST(OnnxImport, ConformanceCaseFromOnnxTestData) {
  REQUIRE_OPS("Relu");
  const fs::path dir = "/usr/share/libonnx-testdata/data/node/test_relu";
  if (!fs::exists(dir / "model.onnx")) GTEST_SKIP() << "libonnx-testdata is not installed";
  Graph g = importOnnx((dir / "model.onnx").string());
  Tensor x = readTensorProtoFile((dir / "test_data_set_0/input_0.pb").string());
  Tensor want = readTensorProtoFile((dir / "test_data_set_0/output_0.pb").string());
  std::vector<Tensor> got = ReferenceExecutor(g).run({x});
  EXPECT_EQ(got[0].toFloats(), want.toFloats());
}

// The sample models of resources/models import, and the reference executor
// reproduces PyTorch's output for the stored input.
TEST(OnnxImport, SampleModelsImportAndMatchPyTorch) {
  const fs::path dir = fs::path(COLLAGE_SOURCE_DIR) / "resources/models";
  if (!fs::is_directory(dir)) GTEST_SKIP() << "no sample models";
  int checked = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".onnx") continue;
    const std::string stem = e.path().stem().string();
    const fs::path in = dir / (stem + ".input_0.pb"), out = dir / (stem + ".output_0.pb");
    if (!fs::exists(in) || !fs::exists(out)) continue;
    SCOPED_TRACE(stem);
    Graph g;
    try {
      g = importOnnx(e.path().string());
    } catch (const Unsupported& u) {
      std::cout << "  " << stem << ": skipped: " << u.what() << "\n";
      continue;
    }
    // Shape subgraphs are folded: no Shape node survives.
    for (const Node& n : g.nodes()) EXPECT_NE(n.op, "Shape") << n.name;
    std::string inName;
    Tensor x = readTensorProtoFile(in.string(), &inName);
    Tensor want = readTensorProtoFile(out.string());
    ASSERT_EQ(g.inputs().size(), 1u);
    std::vector<Tensor> got;
    try {
      got = ReferenceExecutor(g).run({x});
    } catch (const Unsupported& u) {
      std::cout << "  " << stem << ": skipped: " << u.what() << "\n";
      continue;
    }
    ASSERT_EQ(got[0].type(), want.type());
    std::vector<float> a = got[0].toFloats(), b = want.toFloats();
    int bad = 0;
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::fabs(a[i] - b[i]) <= 1e-4f + 1e-3f * std::fabs(b[i]))) ++bad;
    EXPECT_EQ(bad, 0) << "values differ from PyTorch's";
    ++checked;
  }
  std::cout << "  checked " << checked << " sample models\n";
}

}  // namespace
}  // namespace collage
