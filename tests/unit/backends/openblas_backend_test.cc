// The OpenBLAS backend against the reference executor: every anchor (Gemm,
// MatMul, Conv) in its awkward forms, every epilogue op, every pattern of
// resources/backends/openblas.toml on graphs it matches, and the refusals.
// Each check runs at several thread counts, which switches between the
// threaded-sgemm, one-product-per-thread and parallel-epilogue paths.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/backend_list.h"
#include "core/patterns/backend_spec.h"
#include "core/measure/kernel_check.h"
#include "core/ops/op_registry.h"
#include "core/patterns/pattern_matcher.h"
#include "core/ops/reference_executor.h"
#include "core/ir/threading.h"

#include "core/patterns/pattern_generator.h"
#include "tests/unit/backends/every_group_runs.h"
#include "tests/unit/backends/written_out_idioms.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

constexpr ElementType F32 = ElementType::Float32;

// Builds small graphs by hand: node outputs typed by the registry's shape
// inference, attributes completed with the registry's defaults (as the
// importer does), constants filled with seeded random values.
class Builder {
 public:
  ValueId input(Shape shape) {
    return g_.addInput("x" + std::to_string(count_++), {F32, std::move(shape)});
  }
  ValueId constant(Shape shape, float scale = 1.0f) {
    std::mt19937 rng(1000 + count_);
    std::uniform_real_distribution<float> u(-scale, scale);
    Tensor t(F32, std::move(shape));
    for (int64_t i = 0; i < t.numElements(); ++i) t.data<float>()[i] = u(rng);
    return g_.addConstant("c" + std::to_string(count_++), std::move(t));
  }
  ValueId scalar(float v) {
    return g_.addConstant("s" + std::to_string(count_++), Tensor::scalarFloat(v));
  }
  ValueId op(const std::string& opName, std::vector<ValueId> ins, AttributeMap a = {},
             const std::string& name = "") {
    const OpSchema& schema = OpRegistry::instance().get(opName);
    for (const AttributeSpec& spec : schema.attributes)
      if (!a.has(spec.name) && spec.defaultValue) a.set(spec.name, *spec.defaultValue);
    Node node;
    node.name = name.empty() ? opName + std::to_string(count_++) : name;
    node.op = opName;
    node.attrs = std::move(a);
    node.inputs = std::move(ins);
    std::vector<TensorType> types;
    for (ValueId v : node.inputs) types.push_back(v == kNoValue ? TensorType{} : g_.value(v).type);
    const TensorType out = inferNode(node, types).at(0);
    const ValueId y = g_.addValue(node.name + "_out", out);
    node.outputs = {y};
    g_.addNode(std::move(node));
    return y;
  }
  // Adds a node whose output type is given (for cases shape inference rejects).
  ValueId rawOp(const std::string& opName, std::vector<ValueId> ins, TensorType out,
                AttributeMap a = {}) {
    const ValueId y = g_.addValue(opName + "_raw_out", std::move(out));
    g_.addNode(Node{opName + "_raw", opName, std::move(a), std::move(ins), {y}});
    return y;
  }
  Graph& finish(std::vector<ValueId> outputs) {
    for (ValueId v : outputs) g_.markOutput(v);
    g_.finalize();
    return g_;
  }
  Graph& finish(ValueId output) { return finish(std::vector<ValueId>{output}); }
  Graph& graph() { return g_; }

 private:
  Graph g_;
  int count_ = 0;
};

using test_support::ThreadCountGuard;

std::unique_ptr<Backend> openBlas() {
  std::unique_ptr<Backend> b = createBackend("openblas");
  EXPECT_NE(b, nullptr);
  return b;
}

const std::vector<int> kThreadCounts = {1, 2, 3, 4};

// Compiles `nodes` (all of the graph when empty) at every thread count and
// compares with the reference executor at the default tolerance.
void expectMatchesReference(const Graph& g, std::vector<NodeId> nodes = {}) {
  ThreadCountGuard guard;
  auto backend = openBlas();
  NodeSet set = nodes.empty() ? NodeSet::all(g.numNodes()) : NodeSet::of(g.numNodes(), nodes);
  for (int threads : kThreadCounts) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    setThreadCount(threads);
    KernelCheckResult r = checkKernelAgainstReference(*backend, g, set, 7);
    ASSERT_TRUE(r.compiled) << r.refusal;
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// Expects a refusal whose reason contains `fragment`.
void expectRefusal(const Graph& g, const std::string& fragment, std::vector<NodeId> nodes = {}) {
  auto backend = openBlas();
  NodeSet set = nodes.empty() ? NodeSet::all(g.numNodes()) : NodeSet::of(g.numNodes(), nodes);
  CompileResult c = backend->compile(KernelRequest::of(g, set, "test"));
  ASSERT_FALSE(c) << "expected a refusal";
  EXPECT_NE(c.refusal.find(fragment), std::string::npos) << c.refusal;
}

// ---------------------------------------------------------------- identity

TEST(OpenBlasBackend, NameVersionAndKind) {
  auto b = openBlas();
  EXPECT_EQ(b->name(), "openblas");
  EXPECT_EQ(b->version().rfind("OpenBLAS ", 0), 0u) << b->version();
  EXPECT_EQ(b->kind(), BackendKind::OpLibrary);
  EXPECT_EQ(b->device().toString(), "cpu");
}

// ---------------------------------------------------------------- MatMul

struct MatMulCase {
  Shape a, b;
  bool constB;
};

TEST(OpenBlasBackend, MatMulShapes) {
  const std::vector<MatMulCase> cases = {
      {{7, 13}, {13, 5}, false},              // odd sizes
      {{7, 13}, {13, 5}, true},               // weight matrix
      {{3, 5, 7}, {3, 7, 4}, false},          // batched, 3 matrices
      {{4, 5, 7}, {4, 7, 6}, false},          // batched, 4 matrices
      {{2, 1, 5, 7}, {3, 7, 4}, false},       // broadcast batch dims -> [2,3,5,4]
      {{5, 7}, {3, 7, 4}, false},             // A without batch, B batched
      {{2, 3, 5, 7}, {1, 3, 7, 4}, false},    // B broadcast over the first batch dim
      {{2, 3, 16, 8}, {2, 3, 8, 16}, false},  // attention scores
      {{2, 9, 32}, {32, 24}, true},           // a Linear layer: folds into one sgemm
      {{2, 9, 32}, {1, 32, 24}, true},        // B with a unit batch dim: still folds
      {{7}, {7, 4}, false},                   // 1-D A
      {{3, 5, 7}, {7}, false},                // 1-D B
      {{7}, {7}, false},                      // dot product
      {{7}, {2, 7, 3}, false},                // 1-D A against batched B
      {{1, 1}, {1, 1}, false},
      {{6, 0}, {0, 3}, false},  // empty inner dimension: zeros
  };
  for (const MatMulCase& c : cases) {
    SCOPED_TRACE(shapeToString(c.a) + " x " + shapeToString(c.b) + (c.constB ? " (const B)" : ""));
    Builder b;
    ValueId x = b.input(c.a);
    ValueId w = c.constB ? b.constant(c.b) : b.input(c.b);
    expectMatchesReference(b.finish(b.op("MatMul", {x, w})));
  }
}

TEST(OpenBlasBackend, MatMulEpilogues) {
  // Bias first, as BERT exports it, then an activation.
  for (const char* act : {"Relu", "Gelu", "Tanh", "Sigmoid", "HardSwish"}) {
    SCOPED_TRACE(act);
    Builder b;
    ValueId x = b.input({2, 9, 32});
    ValueId mm = b.op("MatMul", {x, b.constant({32, 24})});
    ValueId add = b.op("Add", {b.constant({24}), mm});
    expectMatchesReference(b.finish(b.op(act, {add})));
  }
  {
    SCOPED_TRACE("exact GELU as BERT exports it");
    Builder b;
    ValueId x = b.input({2, 16, 32});
    ValueId h = b.op("Add", {b.constant({48}), b.op("MatMul", {x, b.constant({32, 48})})});
    ValueId e = b.op("Erf", {b.op("Div", {h, b.scalar(1.4142135f)})});
    ValueId m = b.op("Mul", {h, b.op("Add", {e, b.scalar(1.0f)})});
    expectMatchesReference(b.finish(b.op("Mul", {m, b.scalar(0.5f)})));
  }
  {
    SCOPED_TRACE("bias and residual (a run-time input)");
    Builder b;
    ValueId x = b.input({2, 16, 32});
    ValueId res = b.input({2, 16, 24});
    ValueId h = b.op("Add", {b.constant({24}), b.op("MatMul", {x, b.constant({32, 24})})});
    expectMatchesReference(b.finish(b.op("Add", {h, res})));
  }
  {
    SCOPED_TRACE("residual broadcast over the batch, Sub and Mul by a per-column constant");
    Builder b;
    ValueId x = b.input({3, 5, 8});
    ValueId h = b.op("MatMul", {x, b.constant({8, 6})});
    ValueId s = b.op("Sub", {b.input({5, 6}), h});
    expectMatchesReference(b.finish(b.op("Mul", {s, b.constant({1, 1, 6})})));
  }
  {
    SCOPED_TRACE("attention scores divided by sqrt(d)");
    Builder b;
    ValueId q = b.input({2, 4, 16, 8});
    ValueId k = b.input({2, 4, 8, 16});
    expectMatchesReference(b.finish(b.op("Div", {b.op("MatMul", {q, k}), b.scalar(2.828427f)})));
  }
  {
    SCOPED_TRACE("large output: the epilogue splits over threads mid-row");
    Builder b;
    ValueId x = b.input({2, 100, 64});
    ValueId h = b.op("Add", {b.op("MatMul", {x, b.constant({64, 203})}), b.constant({203})});
    expectMatchesReference(b.finish(b.op("LeakyRelu", {h}, attrs({{"alpha", 0.1f}}))));
  }
  {
    SCOPED_TRACE("batched MatMul with a per-matrix bias");
    Builder b;
    ValueId h = b.op("MatMul", {b.input({4, 6, 5}), b.input({4, 5, 7})});
    ValueId s = b.op("Add", {h, b.constant({4, 1, 7})});
    expectMatchesReference(b.finish(b.op("Clip", {s}, attrs({{"min", -0.5f}, {"max", 0.5f}}))));
  }
}

TEST(OpenBlasBackend, IntermediateResultUsedOutsideIsAlsoAnOutput) {
  // The MatMul's result leaves the group as well as feeding the Relu: the
  // kernel writes both.
  Builder b;
  ValueId mm = b.op("MatMul", {b.input({5, 9}), b.constant({9, 7})});
  ValueId add = b.op("Add", {mm, b.constant({7})});
  ValueId relu = b.op("Relu", {add});
  Graph& g = b.finish({relu, mm});
  expectMatchesReference(g);
  auto backend = openBlas();
  KernelRequest req = KernelRequest::of(g, NodeSet::all(g.numNodes()));
  EXPECT_EQ(req.outputs.size(), 2u);
}

// ---------------------------------------------------------------- Gemm

TEST(OpenBlasBackend, GemmTransposesAlphaBetaAndC) {
  struct Case {
    int transA, transB;
    float alpha, beta;
    Shape c;    // empty vector with cKind 0 = no C
    int cKind;  // 0 none, 1 constant, 2 input
  };
  const std::vector<Case> cases = {
      {0, 0, 1.0f, 1.0f, {}, 0},      {1, 0, 1.0f, 1.0f, {7}, 1},    {0, 1, 0.5f, 1.0f, {5, 7}, 1},
      {1, 1, 2.0f, 0.25f, {5, 1}, 1}, {0, 1, 1.0f, 2.0f, {}, 1},  // scalar C
      {0, 0, 1.5f, -1.0f, {1, 7}, 2},                             // C from a run-time input, scaled
      {1, 0, 1.0f, 1.0f, {5, 7}, 2},  {0, 0, 1.0f, 0.0f, {5, 7}, 1},  // beta 0: C ignored
  };
  const int64_t M = 5, N = 7, K = 11;
  for (const Case& c : cases) {
    SCOPED_TRACE("transA " + std::to_string(c.transA) + " transB " + std::to_string(c.transB) +
                 " alpha " + std::to_string(c.alpha) + " beta " + std::to_string(c.beta) + " C " +
                 (c.cKind ? shapeToString(c.c) : "none"));
    Builder b;
    ValueId a = b.input(c.transA ? Shape{K, M} : Shape{M, K});
    ValueId w = b.constant(c.transB ? Shape{N, K} : Shape{K, N});
    std::vector<ValueId> ins = {a, w};
    if (c.cKind == 1) ins.push_back(b.constant(c.c));
    if (c.cKind == 2) ins.push_back(b.input(c.c));
    expectMatchesReference(b.finish(b.op("Gemm", ins,
                                         attrs({{"transA", int64_t{c.transA}},
                                                {"transB", int64_t{c.transB}},
                                                {"alpha", c.alpha},
                                                {"beta", c.beta}}))));
  }
}

TEST(OpenBlasBackend, GemmWithActivation) {
  for (const char* act : {"Relu", "Sigmoid", "HardSigmoid", "Elu"}) {
    SCOPED_TRACE(act);
    Builder b;
    ValueId g = b.op("Gemm", {b.input({3, 40}), b.constant({100, 40}), b.constant({100})},
                     attrs({{"transB", int64_t{1}}}));
    expectMatchesReference(b.finish(b.op(act, {g})));
  }
}

// ---------------------------------------------------------------- Conv

struct ConvCase {
  std::string what;
  Shape x, w;
  AttributeMap a;
  bool bias = true;
};

std::vector<ConvCase> convCases() {
  return {
      {"3x3 pad 1", {1, 8, 10, 10}, {16, 8, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}})},
      {"odd sizes, no pad, no bias", {1, 3, 9, 11}, {5, 3, 3, 2}, {}, false},
      {"batch 3", {3, 4, 7, 7}, {6, 4, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}})},
      {"batch 4", {4, 4, 7, 7}, {6, 4, 3, 3}, {}},
      {"stride 2",
       {1, 6, 11, 11},
       {8, 6, 3, 3},
       attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"dilation 2",
       {1, 4, 12, 12},
       {4, 4, 3, 3},
       attrs({{"dilations", Ints{2, 2}}, {"pads", Ints{2, 2, 2, 2}}})},
      {"asymmetric pads", {1, 3, 8, 9}, {4, 3, 3, 3}, attrs({{"pads", Ints{0, 1, 2, 1}}})},
      {"SAME_UPPER stride 2",
       {1, 3, 9, 9},
       {4, 3, 3, 3},
       attrs({{"auto_pad", std::string("SAME_UPPER")}, {"strides", Ints{2, 2}}})},
      {"grouped 2",
       {1, 8, 9, 9},
       {6, 4, 3, 3},
       attrs({{"group", int64_t{2}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"grouped 4 batch 2", {2, 8, 6, 6}, {8, 2, 3, 3}, attrs({{"group", int64_t{4}}})},
      {"depthwise",
       {1, 16, 10, 10},
       {16, 1, 3, 3},
       attrs({{"group", int64_t{16}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"depthwise stride 2, multiplier 2",
       {2, 6, 9, 9},
       {12, 1, 3, 3},
       attrs({{"group", int64_t{6}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"1x1", {1, 32, 7, 7}, {16, 32, 1, 1}, {}},
      {"1x1 batch 3 grouped", {3, 8, 5, 5}, {6, 4, 1, 1}, attrs({{"group", int64_t{2}}})},
      {"1x1 stride 2", {1, 8, 9, 9}, {4, 8, 1, 1}, attrs({{"strides", Ints{2, 2}}})},
      {"1x1 padded", {1, 4, 5, 5}, {3, 4, 1, 1}, attrs({{"pads", Ints{1, 0, 0, 1}}})},
      {"1D", {2, 4, 17}, {6, 4, 5}, attrs({{"pads", Ints{2, 2}}, {"strides", Ints{2}}})},
      {"1D dilated grouped",
       {1, 6, 20},
       {6, 3, 3},
       attrs({{"dilations", Ints{3}}, {"group", int64_t{2}}})},
      {"3D", {1, 3, 5, 6, 7}, {4, 3, 3, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1, 1, 1}}})},
      {"3D strided batch 2",
       {2, 2, 6, 6, 6},
       {3, 2, 1, 3, 3},
       attrs({{"strides", Ints{2, 1, 2}}, {"pads", Ints{0, 1, 1, 0, 1, 1}}})},
      {"3D 1x1x1", {1, 8, 3, 4, 5}, {4, 8, 1, 1, 1}, {}},
      {"kernel as large as the input", {1, 2, 5, 5}, {3, 2, 5, 5}, {}},
      {"wide output: parallel epilogue",
       {1, 4, 48, 48},
       {16, 4, 3, 3},
       attrs({{"pads", Ints{1, 1, 1, 1}}})},
  };
}

TEST(OpenBlasBackend, ConvGeometries) {
  for (const ConvCase& c : convCases()) {
    SCOPED_TRACE(c.what);
    Builder b;
    std::vector<ValueId> ins = {b.input(c.x), b.constant(c.w)};
    if (c.bias) ins.push_back(b.constant({c.w[0]}));
    expectMatchesReference(b.finish(b.op("Conv", ins, c.a)));
  }
}

TEST(OpenBlasBackend, ConvWithRunTimeWeights) {
  Builder b;
  ValueId y = b.op("Conv", {b.input({1, 4, 6, 6}), b.input({5, 4, 3, 3}), b.input({5})});
  expectMatchesReference(b.finish(b.op("Relu", {y})));
}

TEST(OpenBlasBackend, ConvEpilogues) {
  const AttributeMap pad1 = attrs({{"pads", Ints{1, 1, 1, 1}}});
  auto conv = [&](Builder& b, ValueId x, int64_t cin, int64_t cout) {
    return b.op("Conv", {x, b.constant({cout, cin, 3, 3}), b.constant({cout})}, pad1);
  };
  struct Act {
    const char* op;
    AttributeMap a;
  };
  const std::vector<Act> acts = {
      {"Relu", {}},
      {"Clip", attrs({{"min", 0.0f}, {"max", 6.0f}})},
      {"Clip", attrs({{"max", 0.25f}})},
      {"LeakyRelu", attrs({{"alpha", 0.2f}})},
      {"Sigmoid", {}},
      {"Tanh", {}},
      {"HardSwish", {}},
      {"HardSigmoid", attrs({{"alpha", 0.3f}, {"beta", 0.4f}})},
      {"Gelu", attrs({{"approximate", std::string("tanh")}})},
  };
  for (const Act& act : acts) {
    SCOPED_TRACE(std::string(act.op) + " " + act.a.toString());
    Builder b;
    ValueId y = conv(b, b.input({2, 3, 8, 8}), 3, 5);
    expectMatchesReference(b.finish(b.op(act.op, {y}, act.a)));
  }
  {
    SCOPED_TRACE("residual add then Relu");
    Builder b;
    ValueId x = b.input({1, 6, 7, 7});
    ValueId y = conv(b, x, 6, 6);
    expectMatchesReference(b.finish(b.op("Relu", {b.op("Add", {x, y})})));
  }
  {
    SCOPED_TRACE("Swish: x * sigmoid(x) reads the conv twice");
    Builder b;
    ValueId y = conv(b, b.input({2, 4, 6, 6}), 4, 8);
    expectMatchesReference(b.finish(b.op("Mul", {y, b.op("Sigmoid", {y})})));
  }
  {
    SCOPED_TRACE("per-channel scale and shift (an unfolded BatchNorm)");
    Builder b;
    ValueId y = conv(b, b.input({2, 4, 6, 6}), 4, 8);
    ValueId s = b.op("Mul", {y, b.constant({8, 1, 1})});
    expectMatchesReference(b.finish(b.op("Add", {s, b.constant({8, 1, 1})})));
  }
  {
    SCOPED_TRACE("1x1 conv with bias, residual and Relu in a batch");
    Builder b;
    ValueId x = b.input({3, 16, 5, 5});
    ValueId y = b.op("Conv", {x, b.constant({16, 16, 1, 1}), b.constant({16})});
    expectMatchesReference(b.finish(b.op("Relu", {b.op("Add", {y, x})})));
  }
}

// ---------------------------------------------------------------- lifetime

TEST(OpenBlasBackend, KernelOwnsItsConstantsAndRunsRepeatedly) {
  ThreadCountGuard guard;
  setThreadCount(2);
  auto backend = openBlas();
  std::unique_ptr<Kernel> kernel;
  std::vector<Tensor> inputs, expected;
  {
    Builder b;
    ValueId x = b.input({2, 3, 6, 6});
    ValueId y = b.op("Conv", {x, b.constant({4, 3, 3, 3}), b.constant({4})});
    Graph& g = b.finish(b.op("Relu", {y}));
    KernelRequest req = KernelRequest::of(g, NodeSet::all(g.numNodes()));
    CompileResult c = backend->compile(req);
    ASSERT_TRUE(c) << c.refusal;
    kernel = std::move(c.kernel);
    inputs = randomInputs(g, 3);
    expected = ReferenceExecutor(g).run(inputs);
    // Overwrite the graph's weights: the kernel packed its own copy.
    for (ValueId v = 0; v < g.numValues(); ++v)
      if (g.value(v).isConstant()) {
        Tensor& t = *g.mutableValue(v).constant;
        std::fill(t.data<float>(), t.data<float>() + t.numElements(), 100.0f);
      }
  }  // the graph is gone
  for (int run = 0; run < 3; ++run) {
    Tensor out(F32, {2, 4, 4, 4});
    std::fill(out.data<float>(), out.data<float>() + out.numElements(), std::nanf(""));
    DLTensor in = inputs[0].toDLTensor(), o = out.toDLTensor();
    kernel->run({&in}, {&o});
    CompareResult r = compareTensors(out, expected[0], {1e-3, 1e-4});
    EXPECT_TRUE(r.ok) << "run " << run << ": " << r.message;
  }
}

// ---------------------------------------------------------------- refusals

TEST(OpenBlasBackend, RefusesAGroupNotStartingWithAProduct) {
  Builder b;
  ValueId r = b.op("Relu", {b.input({4, 4})}, {}, "lonely_relu");
  Graph& g = b.finish(b.op("MatMul", {r, b.constant({4, 4})}));
  expectRefusal(g, "node 'lonely_relu' (Relu)");
  expectRefusal(g, "Gemm, MatMul or Conv");
}

TEST(OpenBlasBackend, RefusesANonElementwiseFollower) {
  Builder b;
  ValueId mm = b.op("MatMul", {b.input({4, 8}), b.constant({8, 4})});
  Graph& g = b.finish(b.op("Softmax", {mm}, {}, "sm"));
  expectRefusal(g, "node 'sm' (Softmax)");
  expectRefusal(g, "not an elementwise op");
}

TEST(OpenBlasBackend, RefusesASecondProduct) {
  Builder b;
  ValueId mm = b.op("MatMul", {b.input({4, 8}), b.constant({8, 4})});
  Graph& g = b.finish(b.op("MatMul", {mm, b.constant({4, 4})}, {}, "second"));
  expectRefusal(g, "node 'second' (MatMul)");
}

TEST(OpenBlasBackend, RefusesAnEpilogueThatBroadcastsTheOutput) {
  // [5,4] + [3,5,4] grows the result beyond the product's output.
  Builder b;
  ValueId mm = b.op("MatMul", {b.input({5, 8}), b.constant({8, 4})});
  Graph& g = b.finish(b.op("Add", {mm, b.input({3, 5, 4})}, {}, "grow"));
  expectRefusal(g, "node 'grow' (Add)");
  expectRefusal(g, "elementwise over that output");
}

TEST(OpenBlasBackend, RefusesFourSpatialDimensions) {
  Builder b;
  ValueId x = b.input({1, 2, 3, 3, 3, 3});
  ValueId w = b.constant({2, 2, 1, 1, 1, 1});
  Graph& g =
      b.finish(b.rawOp("Conv", {x, w}, {F32, {1, 2, 3, 3, 3, 3}}, attrs({{"group", int64_t{1}}})));
  expectRefusal(g, "1 to 3 spatial dimensions");
}

TEST(OpenBlasBackend, RefusesNonFloatTensors) {
  Builder b;
  ValueId x = b.graph().addInput("ints", {ElementType::Int64, {4, 4}});
  Graph& g = b.finish(b.rawOp("MatMul", {x, b.constant({4, 4})}, {ElementType::Int64, {4, 4}}));
  expectRefusal(g, "float32 only");
}

TEST(OpenBlasBackend, RefusesUnknownGeluForm) {
  Builder b;
  ValueId mm = b.op("MatMul", {b.input({4, 8}), b.constant({8, 4})});
  Graph& g =
      b.finish(b.rawOp("Gelu", {mm}, {F32, {4, 4}}, attrs({{"approximate", std::string("fast")}})));
  expectRefusal(g, "approximate");
}

// ---------------------------------------------------------------- spec file

// Small graphs with the structures the spec's patterns are written for.
std::vector<std::unique_ptr<Builder>> patternZoo() {
  std::vector<std::unique_ptr<Builder>> zoo;
  {  // A BERT layer's products: Q/K/V, scores, GELU MLP, residuals.
    auto b = std::make_unique<Builder>();
    ValueId x = b->input({2, 16, 32});
    ValueId q = b->op("Add", {b->constant({32}), b->op("MatMul", {x, b->constant({32, 32})})});
    ValueId qh = b->op("Transpose", {b->op("Reshape", {q}, attrs({{"shape", Ints{2, 16, 4, 8}}}))},
                       attrs({{"perm", Ints{0, 2, 1, 3}}}));
    ValueId k = b->op("Add", {b->constant({32}), b->op("MatMul", {x, b->constant({32, 32})})});
    ValueId kh = b->op("Transpose", {b->op("Reshape", {k}, attrs({{"shape", Ints{2, 16, 4, 8}}}))},
                       attrs({{"perm", Ints{0, 2, 3, 1}}}));
    ValueId scores = b->op("Div", {b->op("MatMul", {qh, kh}), b->scalar(2.828427f)});
    ValueId ctx =
        b->op("Reshape",
              {b->op("Transpose", {b->op("Softmax", {scores}, attrs({{"axis", int64_t{-1}}}))},
                     attrs({{"perm", Ints{0, 2, 1, 3}}}))},
              attrs({{"shape", Ints{2, 16, 64}}}));
    ValueId o = b->op(
        "Add",
        {b->op("Add", {b->constant({32}), b->op("MatMul", {ctx, b->constant({64, 32})})}), x});
    ValueId h = b->op("Add", {b->constant({48}), b->op("MatMul", {o, b->constant({32, 48})})});
    ValueId e = b->op("Erf", {b->op("Div", {h, b->scalar(1.4142135f)})});
    ValueId gelu =
        b->op("Mul", {b->op("Mul", {h, b->op("Add", {e, b->scalar(1.0f)})}), b->scalar(0.5f)});
    ValueId relu =
        b->op("Relu",
              {b->op("Add", {b->op("MatMul", {gelu, b->constant({48, 32})}), b->constant({32})})});
    b->finish(relu);
    zoo.push_back(std::move(b));
  }
  {  // A small conv net: conv+act, residual blocks, Swish, a Gemm head.
    auto b = std::make_unique<Builder>();
    const AttributeMap pad1 = attrs({{"pads", Ints{1, 1, 1, 1}}});
    ValueId x = b->input({2, 3, 10, 10});
    ValueId c1 =
        b->op("Relu", {b->op("Conv", {x, b->constant({8, 3, 3, 3}), b->constant({8})}, pad1)});
    ValueId c2 = b->op("Conv", {c1, b->constant({8, 8, 3, 3}), b->constant({8})}, pad1);
    ValueId r1 = b->op("Relu", {b->op("Add", {c2, c1})});
    ValueId c3 = b->op("Conv", {r1, b->constant({8, 8, 1, 1})});
    ValueId r2 = b->op("Add", {c3, r1});
    ValueId c4 = b->op("Conv", {r2, b->constant({8, 1, 3, 3}), b->constant({8})},
                       attrs({{"group", int64_t{8}}, {"pads", Ints{1, 1, 1, 1}}}));
    ValueId sw = b->op("Mul", {c4, b->op("Sigmoid", {c4})});
    ValueId c5 = b->op("Clip", {b->op("Conv", {sw, b->constant({8, 8, 1, 1}), b->constant({8})})},
                       attrs({{"min", 0.0f}, {"max", 6.0f}}));
    ValueId pooled = b->op("Flatten", {b->op("GlobalAveragePool", {c5})});
    ValueId fc = b->op("Gemm", {pooled, b->constant({10, 8}), b->constant({10})},
                       attrs({{"transB", int64_t{1}}}));
    ValueId fc2 = b->op("Gemm", {b->op("Relu", {fc}), b->constant({10, 4})});
    b->finish(fc2);
    zoo.push_back(std::move(b));
  }
  return zoo;
}

// The functions exporters write out, after a MatMul with a bias: the rule
// generates the whole group wherever the epilogue has every op (it has no
// Pow, so the tanh GELU written with Pow(x, 3) stays apart), and the kernel
// matches the reference.
TEST(OpenBlasBackend, RuleFusesTheIdiomsExportersWrite) {
  auto backend = openBlas();
  std::shared_ptr<const PatternRule> rule = backend->codeRule();
  int generatedCount = 0;
  for (const Idiom& idiom : writtenOutIdioms()) {
    SCOPED_TRACE(idiom.name);
    GraphBuilder b;
    ValueId y = b.op("Add", {b.op("MatMul", {b.input({6, 16}), b.constant({16, 24})}), b.constant({24})});
    const NodeSet group = b.finish(idiom.write(b, y));
    const Graph& g = b.graph();
    bool generated = false;
    for (const GeneratedGroup& gg : PatternGenerator(g).generate(*rule, SubGraphLimits{}))
      generated = generated || gg.nodes == group;
    const bool needsPow = idiom.name.find("Pow") != std::string::npos;
    EXPECT_EQ(generated, !needsPow);
    if (!generated) continue;
    ++generatedCount;
    const KernelCheckResult r = checkKernelAgainstReference(*backend, g, group, 3);
    EXPECT_TRUE(r.ok) << r.refusal << r.message;
  }
  EXPECT_GE(generatedCount, 8);
}

// Every group the spec's patterns match and the pattern rule generates on a
// zoo of small graphs compiles and matches the reference.
TEST(OpenBlasBackend, EveryGroupOfTheSpecAndTheRuleRunsCorrectly) {
  BackendSpec spec =
      loadBackendSpec(std::string(COLLAGE_SOURCE_DIR) + "/resources/backends/openblas.toml");
  EXPECT_EQ(spec.name, "openblas");
  EXPECT_EQ(spec.kind, BackendKind::OpLibrary);
  EXPECT_EQ(spec.limits.maxExits, 1);
  auto zoo = patternZoo();
  auto backend = openBlas();
  std::shared_ptr<const PatternRule> rule = backend->codeRule();
  ASSERT_TRUE(rule);
  std::vector<const Graph*> graphs;
  for (auto& b : zoo) graphs.push_back(&b->graph());
  const int fused = expectEveryGroupRuns(*backend, spec, *rule, graphs).fused;
  EXPECT_GT(fused, 10);
}

}  // namespace
}  // namespace collage
