// Run-time parameter inputs (core/ops/runtime_inputs.h): the reference
// kernels read them, shape inference takes them where they only change
// values, and backends that need them constant refuse with the reason while
// the native backend runs the node on its reference kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backends/backend_list.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"
#include "core/ops/runtime_inputs.h"
#include "core/runtime/backend.h"

namespace collage {
namespace {

constexpr ElementType F32 = ElementType::Float32;
constexpr ElementType I64 = ElementType::Int64;

Node node(const std::string& op, std::vector<ValueId> inputs, AttributeMap attrs = {}) {
  Node n;
  n.name = "n_" + op;
  n.op = op;
  n.attrs = std::move(attrs);
  n.inputs = std::move(inputs);
  n.outputs = {100};
  return n;
}

TEST(RuntimeInputs, ClipReadsARunTimeMinAndInfersFromTypesAlone) {
  // Clip(x, min = run-time, max = attribute): inputs [x, min].
  AttributeMap a;
  a.set("max", 2.0f);
  const Node clip = node("Clip", {0, 1}, a);
  ASSERT_EQ(runtimeInputsOf(clip).size(), 1u);
  EXPECT_EQ(runtimeInputsOf(clip)[0]->attribute, "min");
  EXPECT_EQ(shapeDecidingRuntimeInput(clip), nullptr);  // min never changes the shape

  const Tensor x = Tensor::fromFloats({5}, {-3, -0.5f, 0.25f, 1.5f, 4});
  const Tensor lo = Tensor::scalarFloat(-1.0f);
  EXPECT_EQ(inferNode(clip, {x.type(), lo.type()}), std::vector<TensorType>{x.type()});
  std::vector<Tensor> out = evaluateNode(clip, {&x, &lo});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].toFloats(), (std::vector<float>{-1, -0.5f, 0.25f, 1.5f, 2}));

  // Another value, another result: the value is read, not frozen.
  const Tensor lo2 = Tensor::scalarFloat(0.5f);
  EXPECT_EQ(evaluateNode(clip, {&x, &lo2})[0].toFloats(),
            (std::vector<float>{0.5f, 0.5f, 0.5f, 1.5f, 2}));
}

TEST(RuntimeInputs, ClipWithOnlyARunTimeMaxKeepsTheMinSlotEmpty) {
  // Clip(x, min = constant (an attribute now), max = run-time): [x, -, max].
  AttributeMap a;
  a.set("min", 0.0f);
  const Node clip = node("Clip", {0, kNoValue, 2}, a);
  const Tensor x = Tensor::fromFloats({3}, {-1, 0.5f, 3});
  const Tensor hi = Tensor::scalarFloat(1.0f);
  EXPECT_EQ(evaluateNode(clip, {&x, nullptr, &hi})[0].toFloats(), (std::vector<float>{0, 0.5f, 1}));
}

TEST(RuntimeInputs, AShapeDecidingSlotIsNotInferredFromTypes) {
  const Node pad = node("Pad", {0, 1});
  ASSERT_NE(shapeDecidingRuntimeInput(pad), nullptr);
  EXPECT_EQ(shapeDecidingRuntimeInput(pad)->attribute, "pads");
  try {
    inferNode(pad, {TensorType{F32, {2, 2}}, TensorType{I64, {4}}});
    FAIL() << "the output shape of a Pad with run-time pads was inferred from types";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'pads'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("n_Pad"), std::string::npos) << e.what();
  }
}

TEST(RuntimeInputs, EvaluatingBindsShapeDecidingValues) {
  // Pad with run-time pads and constant_value; Slice with run-time starts/ends.
  const Tensor x = Tensor::fromFloats({2, 2}, {1, 2, 3, 4});
  const Tensor pads = Tensor::fromInts({4}, {0, 1, 1, 0});
  const Tensor value = Tensor::scalarFloat(9);
  std::vector<Tensor> padded = evaluateNode(node("Pad", {0, 1, 2}), {&x, &pads, &value});
  ASSERT_EQ(padded[0].shape(), (Shape{3, 3}));
  EXPECT_EQ(padded[0].toFloats(), (std::vector<float>{9, 1, 2, 9, 3, 4, 9, 9, 9}));

  AttributeMap axes;
  axes.set("axes", std::vector<int64_t>{1});
  const Tensor starts = Tensor::fromInts({1}, {1});
  const Tensor ends = Tensor::fromInts({1}, {3});
  std::vector<Tensor> sliced =
      evaluateNode(node("Slice", {0, 1, 2}, axes), {&padded[0], &starts, &ends});
  ASSERT_EQ(sliced[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(sliced[0].toFloats(), (std::vector<float>{1, 2, 3, 4, 9, 9}));
}

TEST(RuntimeInputs, TheKernelRefusesValuesThatContradictThePlannedShape) {
  // A caller (the native backend, a Session) allocated the output with the
  // declared type; values giving another shape must not be written into it.
  const OpSchema& schema = OpRegistry::instance().get("Pad");
  Node pad = node("Pad", {0, 1});
  pad.attrs.set("mode", std::string("constant"));
  pad.attrs.set("constant_value", 0.0f);
  const Tensor x = Tensor::fromFloats({2, 2}, {1, 2, 3, 4});
  const Tensor good = Tensor::fromInts({4}, {1, 0, 0, 0});
  const Tensor bad = Tensor::fromInts({4}, {2, 0, 0, 0});
  Tensor out(TensorType{F32, {3, 2}});
  schema.reference(pad, {&x, &good}, {&out});
  EXPECT_EQ(out.toFloats(), (std::vector<float>{0, 0, 1, 2, 3, 4}));
  try {
    schema.reference(pad, {&x, &bad}, {&out});
    FAIL() << "pads giving 4x2 were written into a 3x2 output";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("n_Pad"), std::string::npos) << what;
    EXPECT_NE(what.find("'pads'"), std::string::npos) << what;
    EXPECT_NE(what.find("4x2"), std::string::npos) << what;
  }
}

TEST(RuntimeInputs, AWrongKindOfValueNamesTheNodeAndSlot) {
  const Node clip = node("Clip", {0, 1});
  const Tensor x = Tensor::fromFloats({2}, {1, 2});
  const Tensor two = Tensor::fromFloats({2}, {0, 1});  // min must hold one value
  try {
    evaluateNode(clip, {&x, &two});
    FAIL() << "a two-element min was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 'min'"), std::string::npos) << e.what();
  }
}

// Conv -> Clip(min from a graph input): the graph the backends are asked about.
struct ConvClip {
  Graph g;
  NodeId conv = 0, clip = 0;
  ConvClip() {
    const ValueId x = g.addInput("x", {F32, {1, 2, 4, 4}});
    const ValueId lo = g.addInput("lo", {F32, {}});
    std::vector<float> w(4 * 2 * 9, 0.1f);
    const ValueId wv = g.addConstant("w", Tensor::fromFloats({4, 2, 3, 3}, w));
    const ValueId y = g.addValue("y", {F32, {1, 4, 2, 2}});
    const ValueId z = g.addValue("z", {F32, {1, 4, 2, 2}});
    AttributeMap ca;
    for (const AttributeSpec& s : OpRegistry::instance().get("Conv").attributes)
      if (s.defaultValue) ca.set(s.name, *s.defaultValue);
    g.addNode(Node{"conv", "Conv", ca, {x, wv}, {y}});
    AttributeMap cl;
    cl.set("max", 6.0f);
    g.addNode(Node{"clip", "Clip", cl, {y, lo}, {z}});
    g.markOutput(z);
    g.finalize();
    conv = *g.findNode("conv");
    clip = *g.findNode("clip");
  }
  KernelRequest request(std::vector<NodeId> members) const {
    NodeSet s(g.numNodes());
    for (NodeId n : members) s.insert(n);
    return KernelRequest::of(g, s, "test");
  }
};

TEST(RuntimeInputs, BackendsThatNeedConstantsRefuseWithTheReason) {
  ConvClip m;
  for (const std::string name : {"onednn", "openblas", "native"}) {
    std::unique_ptr<Backend> backend = createBackend(name);
    ASSERT_NE(backend, nullptr) << name;
    // Conv with Clip as its epilogue / fused pass: the bound is not a constant.
    CompileResult fused = backend->compile(m.request({m.conv, m.clip}));
    EXPECT_FALSE(fused) << name << " compiled a Clip whose min is a run-time tensor";
    EXPECT_NE(fused.refusal.find("'lo'"), std::string::npos) << name << ": " << fused.refusal;
    EXPECT_NE(fused.refusal.find("run-time"), std::string::npos) << name << ": " << fused.refusal;
  }
  // oneDNN refuses the Clip alone too (an eltwise primitive takes its bounds at creation)...
  CompileResult alone = createBackend("onednn")->compile(m.request({m.clip}));
  EXPECT_FALSE(alone);
  EXPECT_NE(alone.refusal.find("clip"), std::string::npos) << alone.refusal;
  // ...and so does a region that contains it.
  EXPECT_NE(createBackend("onednn")->regionRefusal(m.request({m.conv, m.clip})).find("'lo'"),
            std::string::npos);
}

TEST(RuntimeInputs, TheNativeBackendRunsTheNodeOnItsReferenceKernel) {
  ConvClip m;
  std::unique_ptr<Backend> native = createBackend("native");
  KernelRequest request = m.request({m.clip});
  CompileResult compiled = native->compile(request);
  ASSERT_TRUE(compiled) << compiled.refusal;
  ASSERT_EQ(request.inputs.size(), 2u);  // y and lo
  Tensor y = Tensor::fromFloats({1, 4, 2, 2}, std::vector<float>{-3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8,
                                                                  9, 10, -4, -5});
  Tensor lo = Tensor::scalarFloat(-1.5f);
  Tensor z(TensorType{F32, {1, 4, 2, 2}});
  DLTensor dy = y.toDLTensor(), dlo = lo.toDLTensor(), dz = z.toDLTensor();
  const bool yFirst = m.g.value(request.inputs[0]).name == "y";
  compiled.kernel->run({yFirst ? &dy : &dlo, yFirst ? &dlo : &dy}, {&dz});
  EXPECT_EQ(z.toFloats(), (std::vector<float>{-1.5f, -1.5f, -1, 0, 1, 2, 3, 4, 5, 6, 6, 6, 6, 6,
                                               -1.5f, -1.5f}));
}

TEST(RuntimeInputs, TheReferenceExecutorChecksRunTimeShapesAgainstTheGraph) {
  // Pad's output declared 3x2; pads given at run time.
  Graph g;
  const ValueId x = g.addInput("x", {F32, {2, 2}});
  const ValueId pads = g.addInput("pads", {I64, {4}});
  const ValueId y = g.addValue("y", {F32, {3, 2}});
  AttributeMap a;
  a.set("mode", std::string("constant"));
  a.set("constant_value", 0.0f);
  g.addNode(Node{"pad", "Pad", a, {x, pads}, {y}});
  g.markOutput(y);
  g.finalize();
  ReferenceExecutor exec(g);
  const Tensor xv = Tensor::fromFloats({2, 2}, {1, 2, 3, 4});
  std::vector<Tensor> out = exec.run(std::vector<Tensor>{xv, Tensor::fromInts({4}, {0, 0, 1, 0})});
  EXPECT_EQ(out[0].toFloats(), (std::vector<float>{1, 2, 3, 4, 0, 0}));
  try {
    exec.run(std::vector<Tensor>{xv, Tensor::fromInts({4}, {0, 1, 0, 0})});  // 2x3, not 3x2
    FAIL() << "a run-time shape contradicting the declared one was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("node 'pad'"), std::string::npos) << what;
    EXPECT_NE(what.find("output 'y'"), std::string::npos) << what;
    EXPECT_NE(what.find("'pads'"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace collage
