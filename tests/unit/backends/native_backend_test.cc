// The native backend against the reference executor: single ops of every
// family (odd sizes, batches, broadcasting, non-trailing axes), fused
// elementwise chains and trees, injective ops folded into a pass, decomposed
// LayerNorm and Softmax recognised as one pass, anchors with fused tails,
// refusals, and every group the pattern generator makes from the backend's
// rules on a BERT-like layer and on the sample BERT model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "backends/backend_list.h"
#include "backends/native/native_backend.h"
#include "core/patterns/backend_spec.h"
#include "core/measure/kernel_check.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/op_registry.h"
#include "core/patterns/pattern_generator.h"
#include "core/ops/reference_executor.h"
#include "core/ir/threading.h"

#include "tests/unit/backends/written_out_idioms.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

constexpr ElementType F32 = ElementType::Float32;

// Builds graphs by hand: outputs typed by the registry's shape inference,
// attributes completed with the registry's defaults (as the importer does),
// constants seeded random values.
class Builder {
 public:
  ValueId input(Shape shape, ElementType type = F32) {
    return g_.addInput("x" + std::to_string(count_++), {type, std::move(shape)});
  }
  ValueId constant(Shape shape, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(1000 + count_);
    std::uniform_real_distribution<float> u(lo, hi);
    Tensor t(F32, std::move(shape));
    for (int64_t i = 0; i < t.numElements(); ++i) t.data<float>()[i] = u(rng);
    return g_.addConstant("c" + std::to_string(count_++), std::move(t));
  }
  ValueId ints(Shape shape, std::vector<int64_t> values) {
    return g_.addConstant("i" + std::to_string(count_++), Tensor::fromInts(std::move(shape), values));
  }
  ValueId scalar(float v) { return g_.addConstant("s" + std::to_string(count_++), Tensor::scalarFloat(v)); }
  std::vector<ValueId> ops(const std::string& opName, std::vector<ValueId> ins, AttributeMap a,
                           int outputs) {
    const OpSchema& schema = OpRegistry::instance().get(opName);
    for (const AttributeSpec& spec : schema.attributes)
      if (!a.has(spec.name) && spec.defaultValue) a.set(spec.name, *spec.defaultValue);
    Node node;
    node.name = opName + std::to_string(count_++);
    node.op = opName;
    node.attrs = std::move(a);
    node.inputs = std::move(ins);
    node.outputs.assign(static_cast<size_t>(outputs), 0);  // "wanted" for shape inference
    std::vector<TensorType> types;
    for (ValueId v : node.inputs) types.push_back(v == kNoValue ? TensorType{} : g_.value(v).type);
    const std::vector<TensorType> out = inferNode(node, types);
    std::vector<ValueId> ys;
    for (int i = 0; i < outputs; ++i) {
      ys.push_back(g_.addValue(node.name + "_out" + std::to_string(i), out.at(static_cast<size_t>(i))));
      node.outputs[static_cast<size_t>(i)] = ys.back();
    }
    g_.addNode(std::move(node));
    return ys;
  }
  ValueId op(const std::string& opName, std::vector<ValueId> ins, AttributeMap a = {}) {
    return ops(opName, std::move(ins), std::move(a), 1)[0];
  }
  Graph& finish(std::vector<ValueId> outputs) {
    for (ValueId v : outputs) g_.markOutput(v);
    g_.finalize();
    return g_;
  }
  Graph& finish(ValueId output) { return finish(std::vector<ValueId>{output}); }

 private:
  Graph g_;
  int count_ = 0;
};

using test_support::ThreadCountGuard;

std::unique_ptr<Backend> native() {
  std::unique_ptr<Backend> b = createBackend("native");
  EXPECT_NE(b, nullptr);
  return b;
}

NodeSet allNodes(const Graph& g) { return NodeSet::all(g.numNodes()); }

// Compiles the whole graph (or `nodes`) at 1 and 3 threads and compares
// with the reference executor; returns the kernel's description.
std::string expectMatches(const Graph& g, std::vector<NodeId> nodes = {}) {
  ThreadCountGuard guard;
  auto backend = native();
  const NodeSet set = nodes.empty() ? allNodes(g) : NodeSet::of(g.numNodes(), nodes);
  std::string description;
  for (int threads : {1, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    setThreadCount(threads);
    KernelCheckResult r = checkKernelAgainstReference(*backend, g, set, 11);
    EXPECT_TRUE(r.compiled) << r.refusal;
    if (!r.compiled) return {};
    EXPECT_TRUE(r.ok) << r.message;
    CompileResult c = backend->compile(KernelRequest::of(g, set, "test"));
    description = describeNativeKernel(*c.kernel);
  }
  return description;
}

// The group compiled to exactly one fused pass with no scratch buffers.
void expectOnePass(const std::string& description) {
  EXPECT_EQ(description.rfind("1 step(s), 0 scratch buffer(s)\n  pass", 0), 0u) << description;
}

void expectRefusal(const Graph& g, const std::string& fragment, std::vector<NodeId> nodes = {}) {
  auto backend = native();
  const NodeSet set = nodes.empty() ? allNodes(g) : NodeSet::of(g.numNodes(), nodes);
  CompileResult c = backend->compile(KernelRequest::of(g, set, "test"));
  ASSERT_FALSE(c) << "expected a refusal";
  EXPECT_NE(c.refusal.find(fragment), std::string::npos) << c.refusal;
}

// ---------------------------------------------------------------- identity and spec

TEST(NativeBackend, NameVersionAndKind) {
  auto b = native();
  EXPECT_EQ(b->name(), "native");
  EXPECT_EQ(b->version().rfind("native 0.11 (OpenMP ", 0), 0u) << b->version();
  EXPECT_EQ(b->kind(), BackendKind::GraphLibrary);
  EXPECT_EQ(b->device().toString(), "cpu");
  EXPECT_NE(b->codeRule(), nullptr);
}

TEST(NativeBackend, SpecLoads) {
  const BackendSpec spec = loadBackendSpec(std::string(COLLAGE_SOURCE_DIR) + "/resources/backends/native.toml");
  EXPECT_EQ(spec.name, "native");
  EXPECT_EQ(spec.kind, BackendKind::GraphLibrary);
  EXPECT_EQ(spec.device.toString(), "cpu");
  EXPECT_EQ(spec.limits.maxExits, 1);
  ASSERT_NE(spec.rule, nullptr);
  EXPECT_TRUE(spec.rule->opRuleSpec().ops.empty());
  EXPECT_TRUE(spec.rule->opRuleSpec().kinds.empty());
  const std::vector<std::string> styles = {"elemwise_only", "injective_chain", "elemwise_reduction"};
  EXPECT_EQ(spec.rule->fusionRuleSpec().styles, styles);
  EXPECT_EQ(spec.rule->fusionRuleSpec().maxNodes, 16);
}

// ---------------------------------------------------------------- single ops

TEST(NativeBackend, UnaryOps) {
  const std::vector<std::pair<std::string, AttributeMap>> ops = {
      {"Relu", {}}, {"Neg", {}}, {"Abs", {}}, {"Sign", {}}, {"Sigmoid", {}}, {"Tanh", {}},
      {"Exp", {}}, {"Log", {}}, {"Sqrt", {}}, {"Reciprocal", {}}, {"Erf", {}}, {"Floor", {}},
      {"Ceil", {}}, {"Sin", {}}, {"Cos", {}}, {"Softplus", {}}, {"Softsign", {}},
      {"HardSwish", {}}, {"Identity", {}}, {"LeakyRelu", attrs({{"alpha", 0.3f}})},
      {"Elu", attrs({{"alpha", 0.7f}})}, {"Selu", {}}, {"HardSigmoid", {}}, {"Gelu", {}},
      {"Gelu", attrs({{"approximate", std::string("tanh")}})},
      {"Clip", attrs({{"min", -0.25f}, {"max", 0.5f}})}, {"Clip", attrs({{"max", 0.1f}})},
      {"Dropout", {}}};
  for (const auto& [op, a] : ops)
    for (const Shape& shape : {Shape{7}, Shape{2, 3, 5}, Shape{3, 17, 33}, Shape{}}) {
      SCOPED_TRACE(op + " " + shapeToString(shape));
      Builder b;
      expectOnePass(expectMatches(b.finish(b.op(op, {b.input(shape)}, a))));
    }
}

TEST(NativeBackend, UnaryOpsOverWideRanges) {
  // Large and tiny magnitudes exercise the vectorised exp/log/tanh/erf paths.
  for (const char* op : {"Exp", "Log", "Tanh", "Erf", "Sigmoid", "Softplus", "Gelu", "Elu"}) {
    SCOPED_TRACE(op);
    Builder b;
    ValueId x = b.op("Mul", {b.input({4, 1000}), b.constant({1000}, -30.0f, 30.0f)});
    ValueId y = b.op(op, {op == std::string("Log") ? b.op("Abs", {x}) : x});
    expectMatches(b.finish(y));
  }
}

// Sigmoid is the reference's (ONNX Runtime's, core/ops/logistic.h) bit for
// bit, vectorised or not, past the clamp at +-18 too: a SiLU fused before
// a DynamicQuantizeLinear must round as the reference does.
TEST(NativeBackend, SigmoidIsTheReferencesBitForBit) {
  ThreadCountGuard guard;
  auto backend = native();
  for (const Shape& shape : {Shape{4, 1000}, Shape{7}}) {
    SCOPED_TRACE(shapeToString(shape));
    Builder b;
    const ValueId x = b.op("Mul", {b.input(shape), b.constant({shape.back()}, -30.0f, 30.0f)});
    const Graph g = b.finish(b.op("Sigmoid", {x}));
    const KernelCheckResult r = checkKernelAgainstReference(*backend, g, allNodes(g), 11, Tolerance{0.0, 0.0});
    ASSERT_TRUE(r.compiled) << r.refusal;
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(NativeBackend, BinaryOpsWithBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 4, 5}, {5}}, {{2, 1, 4, 1}, {3, 1, 5}}, {{1}, {6, 7}}, {{4, 5}, {4, 5}},
      {{3, 37, 129}, {37, 1}}, {{}, {3, 2}}, {{2, 1, 1, 16}, {2, 4, 16, 16}}};
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Mod", "Sum", "Mean"})
    for (const auto& [sa, sb] : shapes) {
      SCOPED_TRACE(std::string(op) + " " + shapeToString(sa) + " " + shapeToString(sb));
      Builder b;
      expectOnePass(expectMatches(b.finish(b.op(op, {b.input(sa), b.input(sb)}))));
    }
  {
    SCOPED_TRACE("Mod with fmod, PRelu with a per-channel slope, Pow by a constant 2");
    Builder b;
    ValueId x = b.input({2, 3, 5, 7});
    ValueId m = b.op("Mod", {x, b.constant({7}, 0.2f, 1.0f)}, attrs({{"fmod", int64_t{1}}}));
    ValueId p = b.op("PRelu", {m, b.constant({3, 1, 1})});
    expectOnePass(expectMatches(b.finish(b.op("Pow", {p, b.scalar(2.0f)}))));
  }
  {
    SCOPED_TRACE("variadic Sum/Max/Min/Mean of three broadcasting inputs");
    for (const char* op : {"Sum", "Max", "Min", "Mean"}) {
      Builder b;
      expectOnePass(expectMatches(
          b.finish(b.op(op, {b.input({2, 3, 4}), b.input({3, 1}), b.constant({4})}))));
    }
  }
}

TEST(NativeBackend, ComparisonLogicWhereAndCast) {
  for (const char* cmp : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    SCOPED_TRACE(cmp);
    Builder b;
    ValueId x = b.op("Floor", {b.op("Mul", {b.input({3, 9}), b.scalar(3.0f)})});
    expectMatches(b.finish(b.op(cmp, {x, b.op("Floor", {b.input({9})})})));
  }
  for (const char* logic : {"And", "Or", "Xor"}) {
    SCOPED_TRACE(logic);
    Builder b;
    ValueId p = b.op("Greater", {b.input({4, 6}), b.scalar(0.0f)});
    ValueId q = b.op("Less", {b.input({6}), b.scalar(0.2f)});
    ValueId r = b.op(logic, {p, q});
    expectOnePass(expectMatches(b.finish(b.op("Not", {r}))));
  }
  {
    SCOPED_TRACE("Where with broadcasting, Cast float->bool->float, int64 and bool inputs");
    Builder b;
    ValueId c = b.input({5, 1}, ElementType::Bool);
    ValueId w = b.op("Where", {c, b.input({5, 8}), b.constant({8})});
    ValueId asBool = b.op("Cast", {w}, attrs({{"to", int64_t{9}}}));
    ValueId back = b.op("Cast", {asBool}, attrs({{"to", int64_t{1}}}));
    ValueId ids = b.op("Cast", {b.input({5, 8}, ElementType::Int64)}, attrs({{"to", int64_t{1}}}));
    expectOnePass(expectMatches(b.finish(b.op("Add", {back, ids}))));
  }
}

TEST(NativeBackend, SoftmaxAndLogSoftmax) {
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (const auto& [shape, axis] : std::vector<std::pair<Shape, int64_t>>{
             {{4, 128}, -1}, {{2, 3, 17}, -1}, {{2, 3, 17}, 1}, {{2, 5, 3, 7}, 1}, {{9}, 0}, {{3, 1}, 1}}) {
      SCOPED_TRACE(std::string(op) + " " + shapeToString(shape) + " axis " + std::to_string(axis));
      Builder b;
      expectOnePass(expectMatches(b.finish(b.op(op, {b.input(shape)}, attrs({{"axis", axis}})))));
    }
}

TEST(NativeBackend, Normalizations) {
  for (const auto& [shape, axis] :
       std::vector<std::pair<Shape, int64_t>>{{{2, 16, 64}, -1}, {{3, 5, 7}, 1}, {{1, 769}, -1}}) {
    SCOPED_TRACE("LayerNormalization " + shapeToString(shape) + " axis " + std::to_string(axis));
    Shape param(shape.begin() + (axis < 0 ? static_cast<int64_t>(shape.size()) + axis : axis), shape.end());
    Builder b;
    ValueId y = b.op("LayerNormalization", {b.input(shape), b.constant(param), b.constant(param)},
                     attrs({{"axis", axis}, {"epsilon", 1e-3f}}));
    expectOnePass(expectMatches(b.finish(y)));
  }
  {
    SCOPED_TRACE("LayerNormalization without B, with its Mean and InvStdDev outputs");
    Builder b;
    std::vector<ValueId> ys =
        b.ops("LayerNormalization", {b.input({3, 4, 10}), b.constant({10})}, {}, 3);
    expectMatches(b.finish(ys));
  }
  {
    SCOPED_TRACE("BatchNormalization");
    Builder b;
    ValueId y = b.op("BatchNormalization", {b.input({2, 3, 5, 7}), b.constant({3}), b.constant({3}),
                                            b.constant({3}), b.constant({3}, 0.1f, 2.0f)});
    expectOnePass(expectMatches(b.finish(y)));
  }
  {
    SCOPED_TRACE("InstanceNormalization");
    Builder b;
    ValueId y = b.op("InstanceNormalization", {b.input({2, 3, 6, 5}), b.constant({3}), b.constant({3})});
    expectOnePass(expectMatches(b.finish(y)));
  }
}

TEST(NativeBackend, Reductions) {
  const std::vector<std::string> ops = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                                        "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                                        "ReduceLogSumExp"};
  const std::vector<Ints> axesList = {{-1}, {1}, {0, 2}, {}};
  for (const std::string& op : ops)
    for (const Ints& axes : axesList)
      for (int64_t keep : {0, 1}) {
        SCOPED_TRACE(op + " axes " + std::to_string(axes.size()) + " keepdims " + std::to_string(keep));
        Builder b;
        AttributeMap a = attrs({{"keepdims", keep}});
        if (!axes.empty()) a.set("axes", axes);
        ValueId x = b.input({3, 5, 6});
        if (op == "ReduceProd") x = b.op("Add", {b.op("Mul", {x, b.scalar(0.2f)}), b.scalar(1.0f)});
        expectMatches(b.finish(b.op(op, {x}, a)));
      }
  {
    SCOPED_TRACE("a large reduction over a middle axis");
    Builder b;
    expectOnePass(expectMatches(b.finish(b.op("ReduceSum", {b.input({64, 512, 3})}, attrs({{"axes", Ints{1}}})))));
  }
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    SCOPED_TRACE(op);
    Builder b;
    expectOnePass(expectMatches(b.finish(b.op(op, {b.input({2, 3, 7, 9})}))));
  }
}

TEST(NativeBackend, ShapeOps) {
  {
    Builder b;
    expectOnePass(expectMatches(
        b.finish(b.op("Transpose", {b.input({2, 3, 4, 5})}, attrs({{"perm", Ints{0, 2, 3, 1}}})))));
  }
  {
    Builder b;
    expectOnePass(expectMatches(b.finish(b.op("Transpose", {b.input({33, 65})}))));
  }
  {
    SCOPED_TRACE("a transpose too large for the cache runs in tiles of rows");
    Builder b;
    ValueId t = b.op("Transpose", {b.input({1100, 1030})});
    const std::string d = expectMatches(b.finish(b.op("Add", {t, b.constant({1030, 1})})));
    expectOnePass(d);
    EXPECT_NE(d.find("tiles of 16 rows"), std::string::npos) << d;
  }
  {
    Builder b;
    expectOnePass(expectMatches(b.finish(b.op("Reshape", {b.input({2, 3, 4})}, attrs({{"shape", Ints{4, -1}}})))));
  }
  {
    Builder b;
    ValueId f = b.op("Flatten", {b.input({2, 3, 4, 5})}, attrs({{"axis", int64_t{2}}}));
    ValueId s = b.op("Unsqueeze", {f}, attrs({{"axes", Ints{0, 3}}}));
    expectOnePass(expectMatches(b.finish(b.op("Squeeze", {s}, attrs({{"axes", Ints{0}}})))));
  }
  {
    SCOPED_TRACE("Slice with a negative step");
    Builder b;
    ValueId y = b.op("Slice", {b.input({6, 10, 7})},
                     attrs({{"starts", Ints{1, -1}}, {"ends", Ints{5, 0}}, {"axes", Ints{0, 1}},
                            {"steps", Ints{2, -3}}}));
    expectOnePass(expectMatches(b.finish(y)));
  }
  {
    Builder b;
    expectOnePass(expectMatches(b.finish(b.op("Expand", {b.input({3, 1})}, attrs({{"shape", Ints{2, 3, 6}}})))));
  }
  {
    SCOPED_TRACE("Split");
    Builder b;
    std::vector<ValueId> ys = b.ops("Split", {b.input({4, 10})},
                                    attrs({{"axis", int64_t{1}}, {"split", Ints{3, 7}}}), 2);
    expectMatches(b.finish(ys));
  }
  {
    SCOPED_TRACE("Concat");
    Builder b;
    ValueId y = b.op("Concat", {b.input({2, 3, 4}), b.constant({2, 1, 4}), b.input({2, 5, 4})},
                     attrs({{"axis", int64_t{1}}}));
    expectMatches(b.finish(y));
  }
  {
    SCOPED_TRACE("Gather (an embedding lookup and a non-leading axis)");
    Builder b;
    ValueId ids = b.input({2, 16}, ElementType::Int64);
    ValueId e = b.op("Gather", {b.constant({30, 64}), ids});
    ValueId g2 = b.op("Gather", {b.input({3, 12, 5}), b.ints({2, 2}, {0, -1, 11, 3})},
                      attrs({{"axis", int64_t{1}}}));
    Graph& g = b.finish({e, g2});
    expectOnePass(expectMatches(g, {0}));
    expectOnePass(expectMatches(g, {1}));
  }
  {
    SCOPED_TRACE("ops on the reference kernel: Tile, Pad, ArgMax, int64 arithmetic");
    Builder b;
    ValueId x = b.input({3, 4});
    ValueId t = b.op("Tile", {x}, attrs({{"repeats", Ints{2, 3}}}));
    ValueId p = b.op("Pad", {x}, attrs({{"pads", Ints{1, 0, 0, 2}}}));
    ValueId a = b.op("ArgMax", {x}, attrs({{"axis", int64_t{1}}}));
    ValueId i = b.op("Add", {b.input({5}, ElementType::Int64), b.ints({5}, {1, 2, 3, 4, 5})});
    Graph& g = b.finish({t, p, a, i});
    for (NodeId n = 0; n < g.numNodes(); ++n) expectMatches(g, {n});
  }
}

// A decode step's projection has one row: split by rows alone it ran on one
// thread. Its columns are split instead (blocks of 16, the last one odd),
// and the result is still the reference's.
TEST(NativeBackend, AOneRowMatMulSplitsItsColumnsOverTheThreads) {
  for (const auto& [a, w] : std::vector<std::pair<Shape, Shape>>{{{1, 1, 512}, {512, 333}}, {{1, 512}, {512, 333}}}) {
    SCOPED_TRACE("MatMul " + shapeToString(a) + " x " + shapeToString(w));
    Builder b;
    const std::string d = expectMatches(b.finish(b.op("MatMul", {b.input(a), b.constant(w)})));
    EXPECT_NE(d.find("(few-row gemv, 3 column blocks)"), std::string::npos) << d;  // one per thread
  }
}

TEST(NativeBackend, AFewRowMatMulRunsTheGemvWithTheReferencesValues) {
  // Up to kGemvMaxRows rows of A (over its batches) against one weight
  // matrix run the few-row gemv (native_gemv.h), columns split over the
  // threads; more rows, or a batched B, the blocked sgemm.
  struct Case {
    Shape a, w;
    std::string kernel;
  };
  for (const Case& c : std::vector<Case>{{{1, 3, 512}, {512, 333}, "few-row gemv"},
                                         {{2, 2, 100}, {100, 70}, "few-row gemv"},
                                         {{7}, {7, 1000}, "few-row gemv"},
                                         {{5, 64}, {64, 40}, "reference sgemm"},
                                         {{2, 1, 64}, {2, 64, 40}, "reference sgemm"}}) {
    SCOPED_TRACE("MatMul " + shapeToString(c.a) + " x " + shapeToString(c.w));
    Builder b;
    const std::string d = expectMatches(b.finish(b.op("MatMul", {b.input(c.a), b.constant(c.w)})));
    EXPECT_NE(d.find("(" + c.kernel + ", "), std::string::npos) << d;
  }
}

TEST(NativeBackend, AnchorsAndPools) {
  {
    SCOPED_TRACE("Conv: one image, a batch, depthwise, strided and padded");
    for (const auto& [x, w, group] : std::vector<std::tuple<Shape, Shape, int64_t>>{
             {{1, 16, 24, 24}, {32, 16, 3, 3}, 1}, {{4, 8, 16, 16}, {16, 8, 3, 3}, 1},
             {{1, 64, 48, 48}, {64, 1, 3, 3}, 64}, {{1, 3, 9, 9}, {5, 3, 3, 3}, 1}}) {
      Builder b;
      ValueId y = b.op("Conv", {b.input(x), b.constant(w), b.constant({w[0]})},
                       attrs({{"group", group}, {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 1}}}));
      expectMatches(b.finish(y));
    }
  }
  for (const auto& [a, w] : std::vector<std::pair<Shape, Shape>>{
           {{7, 13}, {13, 5}}, {{2, 9, 32}, {32, 24}}, {{2, 3, 16, 8}, {2, 3, 8, 16}}, {{5, 7}, {3, 7, 4}},
           {{7}, {7, 4}}, {{3, 5, 7}, {7}}, {{2, 64, 48}, {48, 40}}, {{4, 64, 32}, {4, 32, 32}},
           {{2, 1, 64, 32}, {3, 32, 40}}}) {
    SCOPED_TRACE("MatMul " + shapeToString(a) + " x " + shapeToString(w));
    Builder b;
    expectMatches(b.finish(b.op("MatMul", {b.input(a), b.input(w)})));
  }
  for (int64_t ta : {0, 1})
    for (int64_t tb : {0, 1}) {
      SCOPED_TRACE("Gemm transA " + std::to_string(ta) + " transB " + std::to_string(tb));
      Builder b;
      const Shape sa = ta ? Shape{64, 100} : Shape{100, 64};
      const Shape sb = tb ? Shape{40, 64} : Shape{64, 40};
      ValueId y = b.op("Gemm", {b.input(sa), b.constant(sb), b.constant({40})},
                       attrs({{"transA", ta}, {"transB", tb}, {"alpha", 0.5f}, {"beta", 2.0f}}));
      expectMatches(b.finish(y));
    }
  for (const char* pool : {"MaxPool", "AveragePool"}) {
    SCOPED_TRACE(pool);
    Builder b;
    ValueId y = b.op(pool, {b.input({2, 16, 41, 39})},
                     attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
    expectMatches(b.finish(y));
  }
  {
    Builder b;
    ValueId y = b.op("ConvTranspose", {b.input({4, 16, 16, 16}), b.constant({16, 4, 3, 3})},
                     attrs({{"strides", Ints{2, 2}}}));
    expectMatches(b.finish(y));
  }
}

// Pools run on the direct NCHW kernel (native_pool.cc): edge columns,
// strides 1-3, dilations, ceil_mode windows past the pads, both AveragePool
// divisors, 1D pools and ResNet's stem pool.
TEST(NativeBackend, DirectPools) {
  struct Case {
    Shape x;
    AttributeMap a;
  };
  const std::vector<Case> cases = {
      {{1, 64, 112, 112}, attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})},
      {{2, 5, 17, 23}, attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{1, 1}}, {"pads", Ints{1, 1, 1, 1}}})},
      {{1, 3, 20, 31}, attrs({{"kernel_shape", Ints{2, 4}}, {"strides", Ints{3, 3}}, {"pads", Ints{0, 2, 1, 1}}})},
      {{1, 4, 19, 19}, attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}})},
      {{1, 4, 18, 18},
       attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}},
              {"ceil_mode", int64_t{1}}, {"count_include_pad", int64_t{1}}})},
      {{1, 2, 15, 16}, attrs({{"kernel_shape", Ints{2, 3}}, {"dilations", Ints{2, 2}}, {"pads", Ints{1, 2, 1, 2}}})},
      {{2, 6, 33}, attrs({{"kernel_shape", Ints{5}}, {"strides", Ints{2}}, {"pads", Ints{2, 2}}})},
      {{1, 8, 7, 7}, attrs({{"kernel_shape", Ints{7, 7}}})},
      {{1, 3, 4, 4}, attrs({{"kernel_shape", Ints{5, 5}}, {"pads", Ints{2, 2, 2, 2}}})},
  };
  for (const char* pool : {"MaxPool", "AveragePool"})
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(std::string(pool) + " case " + std::to_string(i));
      AttributeMap a = cases[i].a;
      if (std::string(pool) == "MaxPool" && a.has("count_include_pad")) continue;
      if (std::string(pool) == "AveragePool" && a.has("dilations")) continue;
      Builder b;
      ValueId y = b.op(pool, {b.input(cases[i].x)}, a);
      const std::string d = expectMatches(b.finish(y));
      EXPECT_NE(d.find("direct NCHW pooling"), std::string::npos) << d;
    }
  {
    SCOPED_TRACE("MaxPool with Indices stays on the reference kernel");
    Builder b;
    std::vector<ValueId> ys = b.ops("MaxPool", {b.input({1, 4, 9, 9})},
                                    attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}}), 2);
    const std::string d = expectMatches(b.finish(ys));
    EXPECT_EQ(d.find("direct NCHW pooling"), std::string::npos) << d;
  }
}

// ---------------------------------------------------------------- fusion

TEST(NativeBackend, ElementwiseChainsAndTrees) {
  {
    SCOPED_TRACE("Add(Mul(x, c), Relu(y)) with broadcasting");
    Builder b;
    ValueId x = b.input({2, 3, 8, 9});
    ValueId y = b.input({3, 1, 9});
    ValueId out = b.op("Add", {b.op("Mul", {x, b.constant({8, 1})}), b.op("Relu", {y})});
    expectOnePass(expectMatches(b.finish(out)));
  }
  {
    SCOPED_TRACE("large enough to run on several threads: rows, and one long row in chunks");
    Builder b;
    ValueId x = b.input({4, 3, 64, 129});
    ValueId out = b.op("Add", {b.op("Mul", {x, b.constant({3, 1, 129})}), b.op("Sigmoid", {x})});
    expectOnePass(expectMatches(b.finish(out)));
    Builder c;
    ValueId y = c.input({300001});
    expectOnePass(expectMatches(c.finish(c.op("Tanh", {c.op("Sub", {y, c.input({1})})}))));
  }
  {
    SCOPED_TRACE("an output larger than the caches is written with non-temporal stores");
    Builder b;
    ValueId x = b.input({2048, 2049});
    const std::string d = expectMatches(b.finish(b.op("Relu", {b.op("Add", {x, b.input({2049})})})));
    expectOnePass(d);
    EXPECT_NE(d.find("streaming stores"), std::string::npos) << d;
  }
  {
    SCOPED_TRACE("a deeper tree sharing a subexpression");
    Builder b;
    ValueId x = b.input({5, 257});
    ValueId t = b.op("Tanh", {x});
    ValueId s = b.op("Sigmoid", {b.op("Sub", {t, b.constant({257})})});
    ValueId m = b.op("Mul", {t, s});
    ValueId out = b.op("Div", {b.op("Add", {m, b.op("Exp", {t})}), b.op("Add", {b.op("Abs", {x}), b.scalar(1.0f)})});
    expectOnePass(expectMatches(b.finish(out)));
  }
  {
    SCOPED_TRACE("BERT's exact GELU");
    Builder b;
    ValueId h = b.op("Add", {b.input({2, 16, 48}), b.constant({48})});
    ValueId e = b.op("Erf", {b.op("Div", {h, b.scalar(1.4142135f)})});
    ValueId m = b.op("Mul", {h, b.op("Add", {e, b.scalar(1.0f)})});
    expectOnePass(expectMatches(b.finish(b.op("Mul", {m, b.scalar(0.5f)}))));
  }
}

// The functions exporters write out with several ops: the native rule
// generates each whole (from the op the function starts at) and runs it as
// one pass that matches the reference.
TEST(NativeBackend, RuleFusesTheIdiomsExportersWrite) {
  std::vector<std::string> errors;
  std::shared_ptr<const DeclarativePatternRule> rule;
  SubGraphLimits limits;
  for (const BackendSpec& spec : loadAllSpecs(&errors))
    if (spec.name == "native") rule = spec.rule, limits = spec.limits;
  ASSERT_TRUE(rule);
  std::unique_ptr<Backend> native = createBackend("native");
  for (const Idiom& idiom : writtenOutIdioms()) {
    SCOPED_TRACE(idiom.name);
    GraphBuilder b;
    const NodeSet group = b.finish(idiom.write(b, b.op("Relu", {b.input({2, 8, 5, 5})})) );
    NodeSet fused = group;
    fused.erase(0);  // the Relu before the function starts the chain elsewhere
    const Graph& g = b.graph();
    bool generated = false;
    for (const GeneratedGroup& gg : PatternGenerator(g).generate(*rule, limits))
      generated = generated || gg.nodes == group || gg.nodes == fused;
    EXPECT_TRUE(generated);
    const KernelCheckResult r = checkKernelAgainstReference(*native, g, group, 3);
    EXPECT_TRUE(r.compiled) << r.refusal;
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST(NativeBackend, InjectiveOpsFoldIntoThePass) {
  {
    SCOPED_TRACE("Transpose -> Add");
    Builder b;
    ValueId t = b.op("Transpose", {b.input({4, 6, 5})}, attrs({{"perm", Ints{2, 0, 1}}}));
    expectOnePass(expectMatches(b.finish(b.op("Add", {t, b.input({5, 4, 6})}))));
  }
  {
    SCOPED_TRACE("bias, split into heads, transpose (attention's Q/K/V)");
    Builder b;
    ValueId h = b.op("Add", {b.constant({32}), b.input({2, 16, 32})});
    ValueId r = b.op("Reshape", {h}, attrs({{"shape", Ints{2, 16, 4, 8}}}));
    expectOnePass(expectMatches(b.finish(b.op("Transpose", {r}, attrs({{"perm", Ints{0, 2, 1, 3}}})))));
  }
  {
    SCOPED_TRACE("merge heads: Relu -> Transpose -> Reshape -> Add");
    Builder b;
    ValueId t = b.op("Transpose", {b.op("Relu", {b.input({2, 4, 16, 8})})}, attrs({{"perm", Ints{0, 2, 1, 3}}}));
    ValueId r = b.op("Reshape", {t}, attrs({{"shape", Ints{2, 16, 32}}}));
    expectOnePass(expectMatches(b.finish(b.op("Add", {r, b.constant({32})}))));
  }
  {
    SCOPED_TRACE("Slice, Unsqueeze and Expand of a computed value");
    Builder b;
    ValueId x = b.op("Exp", {b.input({6, 10})});
    ValueId s = b.op("Slice", {x}, attrs({{"starts", Ints{1}}, {"ends", Ints{9}}, {"axes", Ints{1}}}));
    ValueId u = b.op("Unsqueeze", {s}, attrs({{"axes", Ints{0}}}));
    ValueId e = b.op("Expand", {u}, attrs({{"shape", Ints{3, 6, 8}}}));
    expectOnePass(expectMatches(b.finish(b.op("Mul", {e, b.input({3, 1, 8})}))));
  }
  {
    SCOPED_TRACE("embedding: Gather + position + token type, then LayerNormalization");
    Builder b;
    ValueId ids = b.input({2, 16}, ElementType::Int64);
    ValueId w = b.op("Gather", {b.constant({20, 32}), ids});
    ValueId p = b.op("Add", {w, b.constant({16, 32})});
    ValueId y = b.op("LayerNormalization", {p, b.constant({32}), b.constant({32})});
    expectOnePass(expectMatches(b.finish(y)));
  }
  {
    // The spatial dims are contiguous on both sides of the shuffle: the pass
    // streams rows of H*W = 15 elements, not of W = 5, which is what makes a
    // shuffle with a short last dim run at memory speed.
    SCOPED_TRACE("channel shuffle: Reshape -> Transpose -> Reshape");
    Builder b;
    ValueId r = b.op("Reshape", {b.input({1, 6, 3, 5})}, attrs({{"shape", Ints{1, 2, 3, 3, 5}}}));
    ValueId t = b.op("Transpose", {r}, attrs({{"perm", Ints{0, 2, 1, 3, 4}}}));
    const std::string d =
        expectMatches(b.finish(b.op("Reshape", {t}, attrs({{"shape", Ints{1, 6, 3, 5}}}))));
    expectOnePass(d);
    EXPECT_NE(d.find("inner [15]"), std::string::npos) << d;
  }
  {
    SCOPED_TRACE("the producers of a Concat write straight into its slices");
    Builder b;
    ValueId c = b.op("Concat", {b.op("Relu", {b.input({2, 3, 5})}), b.op("Sigmoid", {b.input({2, 4, 5})})},
                     attrs({{"axis", int64_t{1}}}));
    const std::string d = expectMatches(b.finish(c));
    EXPECT_EQ(d.rfind("2 step(s), 0 scratch buffer(s)", 0), 0u) << d;
  }
}

// x -> LayerNorm written as its ONNX ops (as torch exports it before opset 17).
ValueId decomposedLayerNorm(Builder& b, ValueId x, int64_t hidden) {
  ValueId mean = b.op("ReduceMean", {x}, attrs({{"axes", Ints{-1}}}));
  ValueId d = b.op("Sub", {x, mean});
  ValueId var = b.op("ReduceMean", {b.op("Pow", {d, b.scalar(2.0f)})}, attrs({{"axes", Ints{-1}}}));
  ValueId den = b.op("Sqrt", {b.op("Add", {var, b.scalar(1e-5f)})});
  ValueId n = b.op("Div", {d, den});
  return b.op("Add", {b.op("Mul", {n, b.constant({hidden})}), b.constant({hidden})});
}

ValueId decomposedSoftmax(Builder& b, ValueId x) {
  ValueId m = b.op("ReduceMax", {x}, attrs({{"axes", Ints{-1}}}));
  ValueId e = b.op("Exp", {b.op("Sub", {x, m})});
  ValueId s = b.op("ReduceSum", {e}, attrs({{"axes", Ints{-1}}}));
  return b.op("Div", {e, s});
}

TEST(NativeBackend, DecomposedLayerNormIsOnePass) {
  for (const Shape& shape : {Shape{2, 16, 64}, Shape{3, 7, 129}, Shape{1, 1, 5}, Shape{8, 128, 64}}) {
    SCOPED_TRACE(shapeToString(shape));
    Builder b;
    ValueId x = b.op("Add", {b.input(shape), b.input(shape)});  // the residual connection
    ValueId y = decomposedLayerNorm(b, x, shape.back());
    const std::string d = expectMatches(b.finish(y));
    expectOnePass(d);
    // Two reduction sweeps and the output sweep; the residual sum and x - mean
    // are computed once per row and kept.
    if (shape.back() > 1) {
      EXPECT_NE(d.find("2 reduction level(s)"), std::string::npos) << d;
      EXPECT_NE(d.find("2 row-cached value(s)"), std::string::npos) << d;
    }
  }
}

TEST(NativeBackend, DecomposedSoftmaxIsOnePass) {
  for (const Shape& shape : {Shape{2, 4, 16, 16}, Shape{3, 130}, Shape{5, 1}, Shape{2, 4, 64, 64}}) {
    SCOPED_TRACE(shapeToString(shape));
    Builder b;
    // Scaled scores with an additive mask, as attention computes them.
    ValueId s = b.op("Add", {b.op("Div", {b.input(shape), b.scalar(2.828f)}), b.constant({shape.back()})});
    expectOnePass(expectMatches(b.finish(decomposedSoftmax(b, s))));
  }
}

TEST(NativeBackend, ReductionOutputsAndMixedAxes) {
  {
    SCOPED_TRACE("a reduction as the result: sum of squares");
    Builder b;
    ValueId y = b.op("ReduceSum", {b.op("Mul", {b.input({4, 9, 11}), b.input({4, 9, 11})})},
                     attrs({{"axes", Ints{1, 2}}, {"keepdims", int64_t{0}}}));
    expectOnePass(expectMatches(b.finish(y)));
  }
  {
    SCOPED_TRACE("reductions over different axes: one is materialised first");
    Builder b;
    ValueId x = b.input({4, 6, 8});
    ValueId r1 = b.op("ReduceMean", {x}, attrs({{"axes", Ints{2}}}));
    ValueId r2 = b.op("ReduceMax", {x}, attrs({{"axes", Ints{1}}}));
    const std::string d = expectMatches(b.finish(b.op("Sub", {b.op("Add", {x, r1}), r2})));
    EXPECT_EQ(d.rfind("2 step(s), 1 scratch buffer(s)", 0), 0u) << d;
  }
  {
    SCOPED_TRACE("Softmax after a Reshape, then Transpose");
    Builder b;
    ValueId r = b.op("Reshape", {b.op("Mul", {b.input({2, 64}), b.scalar(3.0f)})}, attrs({{"shape", Ints{2, 4, 16}}}));
    ValueId s = b.op("Softmax", {r});
    expectOnePass(expectMatches(b.finish(b.op("Transpose", {s}, attrs({{"perm", Ints{0, 2, 1}}})))));
  }
}

TEST(NativeBackend, AnchorGroups) {
  {
    SCOPED_TRACE("MatMul -> Add -> Relu");
    Builder b;
    ValueId mm = b.op("MatMul", {b.input({2, 9, 32}), b.constant({32, 24})});
    const std::string d = expectMatches(b.finish(b.op("Relu", {b.op("Add", {mm, b.constant({24})})})));
    EXPECT_EQ(d.rfind("2 step(s), 1 scratch buffer(s)", 0), 0u) << d;
  }
  {
    SCOPED_TRACE("Conv -> Add(residual) -> Relu");
    Builder b;
    ValueId x = b.input({1, 8, 10, 10});
    ValueId c = b.op("Conv", {x, b.constant({8, 8, 3, 3}), b.constant({8})}, attrs({{"pads", Ints{1, 1, 1, 1}}}));
    expectMatches(b.finish(b.op("Relu", {b.op("Add", {c, x})})));
  }
}

TEST(NativeBackend, Refusals) {
  {
    Builder b;
    ValueId p = b.op("Pad", {b.input({3, 4})},
                     attrs({{"pads", Ints{1, 0, 0, 2}}, {"mode", std::string("reflect")}}));
    Graph& g = b.finish(b.op("Relu", {p}));
    expectRefusal(g, "node 'Pad");
    expectRefusal(g, "not zero padding");
  }
  {
    Builder b;
    ValueId a = b.op("Add", {b.input({5}, ElementType::Int64), b.ints({5}, {1, 2, 3, 4, 5})});
    Graph& g = b.finish(b.op("Mul", {a, a}));
    expectRefusal(g, "int64");
  }
}

// ---------------------------------------------------------------- generated groups

// Compiles every group and compares it with reference values computed once
// for the whole graph; returns {compiled, refused}.
std::pair<int, int> checkGroups(const Graph& g, const std::vector<GeneratedGroup>& groups,
                                const std::vector<Tensor>& graphInputs) {
  const std::vector<Tensor> env = referenceValues(g, graphInputs);
  auto backend = native();
  int compiled = 0, refused = 0;
  for (const GeneratedGroup& group : groups) {
    SCOPED_TRACE(group.toString(g));
    KernelRequest request = KernelRequest::of(g, group.nodes, group.label);
    CompileResult c = backend->compile(request);
    if (!c) {
      ++refused;
      EXPECT_FALSE(c.refusal.empty());
      continue;
    }
    ++compiled;
    std::vector<Tensor> inputs;
    for (ValueId v : request.inputs) inputs.push_back(env[v].clone());
    std::vector<Tensor> outputs = runKernel(*c.kernel, request, inputs);
    for (size_t i = 0; i < outputs.size(); ++i) {
      CompareResult r = compareTensors(outputs[i], env[request.outputs[i]], {1e-3, 1e-4});
      EXPECT_TRUE(r.ok) << g.value(request.outputs[i]).name << ": " << r.message;
    }
  }
  return {compiled, refused};
}

std::vector<GeneratedGroup> nativeGroups(const Graph& g) {
  const BackendSpec spec = loadBackendSpec(std::string(COLLAGE_SOURCE_DIR) + "/resources/backends/native.toml");
  std::vector<GeneratedGroup> groups = generateGroups(g, *spec.rule, spec.limits);
  for (GeneratedGroup& extra : generateGroups(g, *native()->codeRule(), spec.limits)) {
    bool seen = false;
    for (const GeneratedGroup& have : groups) seen = seen || have.nodes == extra.nodes;
    if (!seen) groups.push_back(std::move(extra));
  }
  return groups;
}

TEST(NativeBackend, GeneratedGroupsOfABertLayer) {
  const int64_t B = 2, S = 16, H = 32, NH = 4, D = 8, I = 64;
  Builder b;
  ValueId x = b.input({B, S, H});
  ValueId mask = b.input({B, 1, 1, S});
  auto linear = [&](ValueId in, int64_t k, int64_t n) {
    return b.op("Add", {b.constant({n}), b.op("MatMul", {in, b.constant({k, n})})});
  };
  auto heads = [&](ValueId in, Ints perm) {
    ValueId r = b.op("Reshape", {in}, attrs({{"shape", Ints{B, S, NH, D}}}));
    return b.op("Transpose", {r}, attrs({{"perm", perm}}));
  };
  ValueId q = heads(linear(x, H, H), {0, 2, 1, 3});
  ValueId k = heads(linear(x, H, H), {0, 2, 3, 1});
  ValueId v = heads(linear(x, H, H), {0, 2, 1, 3});
  ValueId scores = b.op("Add", {b.op("Div", {b.op("MatMul", {q, k}), b.scalar(2.828f)}), mask});
  ValueId probs = b.op("Softmax", {scores}, attrs({{"axis", int64_t{-1}}}));
  ValueId ctx = b.op("Transpose", {b.op("MatMul", {probs, v})}, attrs({{"perm", Ints{0, 2, 1, 3}}}));
  ValueId merged = b.op("Reshape", {ctx}, attrs({{"shape", Ints{B, S, H}}}));
  ValueId ln1 = decomposedLayerNorm(b, b.op("Add", {linear(merged, H, H), x}), H);
  ValueId h = linear(ln1, H, I);
  ValueId e = b.op("Erf", {b.op("Div", {h, b.scalar(1.4142135f)})});
  ValueId gelu = b.op("Mul", {b.op("Mul", {h, b.op("Add", {e, b.scalar(1.0f)})}), b.scalar(0.5f)});
  ValueId ln2 = decomposedLayerNorm(b, b.op("Add", {linear(gelu, I, H), ln1}), H);
  ValueId sm = decomposedSoftmax(b, b.op("Mul", {ln2, b.scalar(0.5f)}));
  Graph& g = b.finish(sm);

  const std::vector<GeneratedGroup> groups = nativeGroups(g);
  auto [compiled, refused] = checkGroups(g, groups, randomInputs(g, 5));
  std::printf("BERT layer: %zu groups, %d compiled, %d refused\n", groups.size(), compiled, refused);
  EXPECT_EQ(compiled + refused, static_cast<int>(groups.size()));
  EXPECT_EQ(refused, 0);
  EXPECT_GT(compiled, 100);

  // The whole decomposed LayerNorm with its residual Add is among them, as one pass.
  auto backend = native();
  int wholeLayerNorms = 0;
  for (const GeneratedGroup& group : groups) {
    int reduceMeans = 0;
    group.nodes.forEach([&](NodeId n) { reduceMeans += g.node(n).op == "ReduceMean"; });
    if (reduceMeans != 2 || group.nodes.count() < 10) continue;
    CompileResult c = backend->compile(KernelRequest::of(g, group.nodes));
    ASSERT_TRUE(c) << c.refusal;
    expectOnePass(describeNativeKernel(*c.kernel));
    ++wholeLayerNorms;
  }
  EXPECT_GE(wholeLayerNorms, 2);
}

TEST(NativeBackend, CodeRuleAddsMixedGroups) {
  // GlobalAveragePool is an Anchor by kind (no declarative style fuses it)
  // and a reduction to the native backend; Reshape -> Softmax mixes an
  // injective op with a reduction, which no single style accepts either.
  Builder b;
  ValueId c = b.op("Conv", {b.input({1, 8, 9, 9}), b.constant({16, 8, 3, 3})});
  ValueId f = b.op("Flatten", {b.op("GlobalAveragePool", {b.op("Relu", {c})})});
  ValueId r = b.op("Reshape", {b.op("Gemm", {f, b.constant({16, 32})})}, attrs({{"shape", Ints{1, 4, 8}}}));
  ValueId s = b.op("Softmax", {r});
  Graph& g = b.finish(b.op("Transpose", {s}, attrs({{"perm", Ints{0, 2, 1}}})));
  const BackendSpec spec = loadBackendSpec(std::string(COLLAGE_SOURCE_DIR) + "/resources/backends/native.toml");
  const std::vector<GeneratedGroup> declarative = generateGroups(g, *spec.rule, spec.limits);
  const std::vector<GeneratedGroup> all = nativeGroups(g);
  auto has = [&](const std::vector<GeneratedGroup>& groups, std::vector<std::string> ops) {
    for (const GeneratedGroup& group : groups) {
      std::vector<std::string> got;
      group.nodes.forEach([&](NodeId n) { got.push_back(g.node(n).op); });
      if (got == ops) return true;
    }
    return false;
  };
  EXPECT_FALSE(has(declarative, {"GlobalAveragePool", "Flatten"}));
  EXPECT_TRUE(has(all, {"GlobalAveragePool", "Flatten"}));
  EXPECT_TRUE(has(all, {"Reshape", "Softmax", "Transpose"}));
  auto [compiled, refused] = checkGroups(g, all, randomInputs(g, 2));
  EXPECT_EQ(refused, 0);
  EXPECT_EQ(compiled, static_cast<int>(all.size()));
}

TEST(NativeBackend, GeneratedGroupsOfTheSampleModels) {
  for (const char* model : {"bert_small_opset13", "bert_small", "mobilenet_v2_small", "resnet50_small",
                            "inception_v3_small", "dcgan_small", "resnext50_32x4d_small", "r3d_18_small"}) {
    SCOPED_TRACE(model);
    const std::string path = std::string(COLLAGE_SOURCE_DIR) + "/resources/models/" + model + ".onnx";
    Graph g;
    try {
      g = importOnnx(path);
    } catch (const Error& e) {
      ADD_FAILURE() << "import failed: " << e.what();
      continue;
    }
    const std::vector<GeneratedGroup> groups = nativeGroups(g);
    auto [compiled, refused] = checkGroups(g, groups, randomInputs(g, 3));
    std::printf("%s: %d nodes, %zu groups, %d compiled, %d refused\n", model, g.numNodes(), groups.size(),
                compiled, refused);
    EXPECT_EQ(refused, 0);
    // Every node of the model compiles on its own.
    auto backend = native();
    for (NodeId n = 0; n < g.numNodes(); ++n) {
      CompileResult c = backend->compile(KernelRequest::of(g, NodeSet::of(g.numNodes(), {n})));
      EXPECT_TRUE(c) << g.node(n).name << ": " << c.refusal;
    }
  }
}

}  // namespace
}  // namespace collage
