// The importer with parameter inputs that are run-time tensors (Clip's min,
// Pad's pads, Slice's starts/ends, Resize's scales/sizes) and with dynamic
// input dims: what it keeps, what it requires, and what it says.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <variant>
#include <vector>

#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"
#include "core/onnx/tensor_proto.h"
#include "core/ops/reference_executor.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using Dim = std::variant<int64_t, std::string>;
constexpr int32_t kFloat = onnx::TensorProto::FLOAT;
constexpr int32_t kInt64 = onnx::TensorProto::INT64;

// A model written with the protobuf API (a few lines suffice here).
struct Model {
  onnx::ModelProto proto;
  explicit Model(int64_t opset = 13) {
    proto.set_ir_version(8);
    auto* op = proto.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    proto.mutable_graph()->set_name("runtime_inputs_test");
  }
  onnx::GraphProto& g() { return *proto.mutable_graph(); }
  static void type(onnx::ValueInfoProto* v, const std::string& name, int32_t elem,
                   const std::vector<Dim>& dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    auto* s = t->mutable_shape();
    for (const Dim& d : dims) {
      auto* dim = s->add_dim();
      if (std::holds_alternative<int64_t>(d))
        dim->set_dim_value(std::get<int64_t>(d));
      else
        dim->set_dim_param(std::get<std::string>(d));
    }
  }
  void input(const std::string& n, int32_t e, const std::vector<Dim>& d) { type(g().add_input(), n, e, d); }
  void output(const std::string& n, int32_t e, const std::vector<Dim>& d) { type(g().add_output(), n, e, d); }
  void valueInfo(const std::string& n, int32_t e, const std::vector<Dim>& d) {
    type(g().add_value_info(), n, e, d);
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& in,
                        const std::vector<std::string>& out, const std::string& name) {
    auto* n = g().add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return *n;
  }
  void initializer(const std::string& name, const Tensor& t) { tensorToProto(t, name, g().add_initializer()); }
  std::string write(const std::string& file) {
    const fs::path dir = fs::temp_directory_path() / ("collage_rtin_test_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path p = dir / file;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    EXPECT_TRUE(proto.SerializeToOstream(&out));
    return p.string();
  }
};

void setInt(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void setInts(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

template <class F>
std::string errorOf(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(RuntimeInputsImport, AClipMinComputedAtRunTimeImportsAndRuns) {
  // min = ReduceMin(x) * 0.5: computed from the data, never a constant.
  Model m;
  m.input("x", kFloat, {4});
  m.initializer("half", Tensor::scalarFloat(0.5f));
  m.initializer("hi", Tensor::scalarFloat(1.0f));
  setInt(m.node("ReduceMin", {"x"}, {"mn"}, "reduce"), "keepdims", 0);
  m.node("Mul", {"mn", "half"}, {"lo"}, "mul");
  m.node("Clip", {"x", "lo", "hi"}, {"y"}, "clip");
  m.output("y", kFloat, {4});
  Graph g = importOnnx(m.write("clip_runtime.onnx"));
  const NodeId clip = *g.findNode("clip");
  ASSERT_EQ(g.node(clip).inputs.size(), 2u);  // x and the run-time min; max became an attribute
  EXPECT_EQ(g.value(g.node(clip).inputs[1]).name, "lo");
  EXPECT_FLOAT_EQ(g.node(clip).attrs.getFloat("max"), 1.0f);
  EXPECT_FALSE(g.node(clip).attrs.has("min"));

  ReferenceExecutor exec(g);
  // min = -4 * 0.5 = -2.
  EXPECT_EQ(exec.run(std::vector<Tensor>{Tensor::fromFloats({4}, {-4, -1, 0.5f, 3})})[0].toFloats(),
            (std::vector<float>{-2, -1, 0.5f, 1}));
  // min = -1 * 0.5: the value follows the data.
  EXPECT_EQ(exec.run(std::vector<Tensor>{Tensor::fromFloats({4}, {-1, -0.75f, 0.5f, 3})})[0].toFloats(),
            (std::vector<float>{-0.5f, -0.5f, 0.5f, 1}));
}

TEST(RuntimeInputsImport, AConstantClipBoundIsStillAnAttribute) {
  // The optimisation stays: folded values become attributes, no input kept.
  Model m;
  m.input("x", kFloat, {3});
  m.initializer("two", Tensor::scalarFloat(2.0f));
  m.node("Neg", {"two"}, {"lo"}, "neg");  // folded at import
  m.node("Clip", {"x", "lo"}, {"y"}, "clip");
  m.output("y", kFloat, {3});
  Graph g = importOnnx(m.write("clip_folded.onnx"));
  const NodeId clip = *g.findNode("clip");
  EXPECT_EQ(g.node(clip).inputs.size(), 1u);
  EXPECT_FLOAT_EQ(g.node(clip).attrs.getFloat("min"), -2.0f);
}

// Pad(pads = input) -> Slice(starts, ends = inputs) -> Resize(scales = input),
// each output declared.
Model padSliceResize(bool declareAll) {
  Model m;
  m.input("x", kFloat, {1, 1, 2, 2});
  m.input("pads", kInt64, {8});
  m.input("starts", kInt64, {1});
  m.input("ends", kInt64, {1});
  m.input("scales", kFloat, {4});
  m.initializer("axes", Tensor::fromInts({1}, {3}));
  m.node("Pad", {"x", "pads"}, {"p"}, "pad");
  m.node("Slice", {"p", "starts", "ends", "axes"}, {"s"}, "slice");
  m.node("Resize", {"s", "", "scales"}, {"r"}, "resize");
  if (declareAll) m.valueInfo("p", kFloat, {1, 1, 3, 3});
  m.valueInfo("s", kFloat, {1, 1, 3, 2});
  m.output("r", kFloat, {1, 1, 6, 2});
  return m;
}

TEST(RuntimeInputsImport, ShapeDecidingInputsRunWithTheDeclaredShapes) {
  Model m = padSliceResize(true);
  Graph g = importOnnx(m.write("pad_slice_resize.onnx"));
  ASSERT_EQ(g.numNodes(), 3);
  EXPECT_EQ(g.node(*g.findNode("pad")).inputs.size(), 2u);
  ReferenceExecutor exec(g);
  std::map<std::string, Tensor> in;
  in["x"] = Tensor::fromFloats({1, 1, 2, 2}, {1, 2, 3, 4});
  in["pads"] = Tensor::fromInts({8}, {0, 0, 1, 1, 0, 0, 0, 0});  // 3x3: a row and a column before
  in["starts"] = Tensor::fromInts({1}, {1});
  in["ends"] = Tensor::fromInts({1}, {3});  // columns 1..2 of 3
  in["scales"] = Tensor::fromFloats({4}, {1, 1, 2, 1});
  std::vector<Tensor> out = exec.run(in);
  ASSERT_EQ(out[0].shape(), (Shape{1, 1, 6, 2}));
  // p = [[0,0,0],[0,1,2],[0,3,4]]; s = [[0,0],[1,2],[3,4]]; rows doubled.
  EXPECT_EQ(out[0].toFloats(), (std::vector<float>{0, 0, 0, 0, 1, 2, 1, 2, 3, 4, 3, 4}));

  // Values contradicting the declaration: a message naming node and tensors.
  in["pads"] = Tensor::fromInts({8}, {0, 0, 1, 0, 0, 0, 0, 0});  // 3x2, declared 3x3
  const std::string what = errorOf([&] { exec.run(in); });
  EXPECT_NE(what.find("node 'pad'"), std::string::npos) << what;
  EXPECT_NE(what.find("output 'p'"), std::string::npos) << what;
  EXPECT_NE(what.find("'pads'"), std::string::npos) << what;
  EXPECT_NE(what.find("1x1x3x3"), std::string::npos) << what;
}

TEST(RuntimeInputsImport, AnUndeclaredShapeDecidedAtRunTimeIsAClearError) {
  Model m = padSliceResize(false);
  const std::string what = errorOf([&] { importOnnx(m.write("pad_undeclared.onnx")); });
  EXPECT_NE(what.find("node 'pad'"), std::string::npos) << what;
  EXPECT_NE(what.find("output 'p'"), std::string::npos) << what;
  EXPECT_NE(what.find("input 'pads'"), std::string::npos) << what;
  EXPECT_NE(what.find("static shape"), std::string::npos) << what;
}

TEST(RuntimeInputsImport, ResizeSizesAtRunTime) {
  Model m;
  m.input("x", kFloat, {1, 1, 2, 2});
  m.input("sizes", kInt64, {4});
  m.node("Resize", {"x", "", "", "sizes"}, {"y"}, "resize");
  m.output("y", kFloat, {1, 1, 4, 2});
  Graph g = importOnnx(m.write("resize_sizes.onnx"));
  std::vector<Tensor> out = ReferenceExecutor(g).run(std::vector<Tensor>{
      Tensor::fromFloats({1, 1, 2, 2}, {1, 2, 3, 4}), Tensor::fromInts({4}, {1, 1, 4, 2})});
  EXPECT_EQ(out[0].toFloats(), (std::vector<float>{1, 2, 1, 2, 3, 4, 3, 4}));
}

TEST(RuntimeInputsImport, ReshapeAndTileWithRunTimeShapeAndRepeats) {
  // The generic slots: Reshape's shape and Tile's repeats from graph inputs.
  Model m;
  m.input("x", kFloat, {2, 3});
  m.input("shape", kInt64, {2});
  m.input("repeats", kInt64, {2});
  m.node("Reshape", {"x", "shape"}, {"r"}, "reshape");
  m.node("Tile", {"r", "repeats"}, {"t"}, "tile");
  m.valueInfo("r", kFloat, {3, 2});
  m.output("t", kFloat, {3, 4});
  Graph g = importOnnx(m.write("reshape_tile.onnx"));
  std::vector<Tensor> out = ReferenceExecutor(g).run(std::vector<Tensor>{
      Tensor::fromFloats({2, 3}, {1, 5, 2, 4, 3, 6}), Tensor::fromInts({2}, {3, 2}),
      Tensor::fromInts({2}, {1, 2})});
  EXPECT_EQ(out[0].toFloats(), (std::vector<float>{1, 5, 1, 5, 2, 4, 2, 4, 3, 6, 3, 6}));
}

// A 1-D convolution over a dynamic length T: at the default binding (1) the
// window does not fit.
Model dynamicConv() {
  Model m;
  m.input("x", kFloat, {1, 1, std::string("T")});
  std::vector<float> w(4, 0.25f);
  m.initializer("w", Tensor::fromFloats({1, 1, 4}, w));
  setInts(m.node("Conv", {"x", "w"}, {"y"}, "conv"), "strides", {2});
  m.output("y", kFloat, {1, 1, std::string("U")});
  return m;
}

TEST(DynamicInputMessages, EveryDynamicInputGetsANoteWithItsBinding) {
  Model m;
  m.input("x", kFloat, {std::string("N"), 3, std::string("T")});
  m.input("mask", kFloat, {std::string("N"), 3, std::string("T")});
  m.input("fixed", kFloat, {1, 3, 1});
  m.node("Add", {"x", "mask"}, {"s"}, "add");
  m.node("Add", {"s", "fixed"}, {"y"}, "add2");
  m.output("y", kFloat, {std::string("N"), 3, std::string("T")});
  const std::string path = m.write("dynamic_notes.onnx");

  std::vector<std::string> notes;
  ImportOptions plain;
  plain.notes = &notes;
  importOnnx(path, plain);
  ASSERT_EQ(notes.size(), 2u);  // not the static input
  EXPECT_EQ(notes[0],
            "input 'x' has dynamic dims [N, T]: bound to 1x1 by default; bind them with "
            "--input-shape x=Nx3xT");

  ImportOptions options;
  options.inputShapes["x"] = {2, 3, 5};
  options.inputShapes["mask"] = {2, 3, 5};
  notes.clear();
  options.notes = &notes;
  importOnnx(path, options);
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[1], "input 'mask' has dynamic dims [N, T]: bound to 2x5 by --input-shape");
}

TEST(DynamicInputMessages, AShapeErrorNamesTheDefaultBindingAsAPossibleCause) {
  Model m = dynamicConv();
  const std::string path = m.write("dynamic_conv.onnx");
  const std::string what = errorOf([&] { importOnnx(path); });
  EXPECT_NE(what.find("node 'conv'"), std::string::npos) << what;
  EXPECT_NE(what.find("(input 'x' had dynamic dims [T] bound by default to 1: bind them with "
                      "--input-shape x=1x1xT)"),
            std::string::npos)
      << what;

  // Bound by the user, the model imports and the hint has no reason to appear.
  ImportOptions options;
  options.inputShapes["x"] = {1, 1, 16};
  std::vector<std::string> notes;
  options.notes = &notes;
  Graph g = importOnnx(path, options);
  EXPECT_EQ(g.value(g.outputs()[0]).type.shape, (Shape{1, 1, 7}));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "input 'x' has dynamic dims [T]: bound to 16 by --input-shape");
}

TEST(DynamicInputMessages, TheBindingIsDescribedFromTheDeclaredInputs) {
  // The app's dialog describes inputs before importing: same facts.
  DeclaredInput in;
  in.name = "audio";
  in.dims = {-1, 1, -1};
  in.symbols = {"batch", "", ""};
  std::optional<DynamicInputBinding> b = dynamicInputBinding(in, ImportOptions{});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->symbols, (std::vector<std::string>{"batch", "?"}));
  EXPECT_EQ(b->sizes, (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(b->declared, "batchx1x?");
  EXPECT_TRUE(b->byDefault);
  in.dims = {2, 1, 8};
  EXPECT_FALSE(dynamicInputBinding(in, ImportOptions{}).has_value());
}

}  // namespace
}  // namespace collage
