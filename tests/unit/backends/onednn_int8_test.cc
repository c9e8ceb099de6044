// The oneDNN backend's int8 kernels (backends/onednn/onednn_int8*.h) against
// the reference executor: the dynamic quantization chain (quantizer, integer
// product, dequantizing scale, bias, activation) as one kernel, integer
// results exact, float ones within the usual tolerance; the refusals, naming
// the node; and the rule generating the whole chain as one candidate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <regex>

#include "backends/onednn/dynamic_quantize.h"
#include "backends/onednn/onednn_backend.h"
#include "backends/onednn/onednn_int8.h"
#include "backends/native/native_backend.h"
#include "core/measure/kernel_check.h"
#include "core/measure/plan_check.h"
#include "core/measure/quantization_ties.h"
#include "core/measure/measurer.h"
#include "core/ops/op_registry.h"
#include "core/patterns/pattern_generator.h"
#include "core/runtime/session.h"
#include "core/ops/reference_executor.h"
#include <dnnl.hpp>
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

// A constant of int8 or uint8 values drawn from [lo, hi].
ValueId intConstant(GraphBuilder& b, ElementType type, const Shape& s, int lo, int hi, uint64_t seed = 3) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> d(lo, hi);
  Tensor t(TensorType{type, s});
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (type == ElementType::Int8)
      t.data<int8_t>()[i] = static_cast<int8_t>(d(rng));
    else
      t.data<uint8_t>()[i] = static_cast<uint8_t>(d(rng));
  }
  static int counter = 0;
  return b.graph().addConstant("q" + std::to_string(counter++), std::move(t));
}

// A constant with the given integer values (one type of int8, uint8, int32).
ValueId intValues(GraphBuilder& b, ElementType type, const Shape& s, const std::vector<int64_t>& values) {
  Tensor t(TensorType{type, s});
  for (int64_t i = 0; i < t.numElements(); ++i) {
    const int64_t v = values[values.size() > 1 ? static_cast<size_t>(i) : 0];
    if (type == ElementType::Int8) t.data<int8_t>()[i] = static_cast<int8_t>(v);
    else if (type == ElementType::UInt8) t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
    else t.data<int32_t>()[i] = static_cast<int32_t>(v);
  }
  static int counter = 0;
  return b.graph().addConstant("iv" + std::to_string(counter++), std::move(t));
}

ValueId castToFloat(GraphBuilder& b, ValueId v) { return b.op("Cast", {v}, attrs({{"to", Attribute(int64_t{1})}})); }

struct Dql {
  ValueId q, scale, zp;
};
Dql dynamicQuantize(GraphBuilder& b, ValueId x) {
  b.op("DynamicQuantizeLinear", {x}, {}, 3);
  const Graph& g = b.graph();  // producers are linked at finalize(): the node just added
  const Node& node = g.node(g.numNodes() - 1);
  return {node.outputs[0], node.outputs[1], node.outputs[2]};
}

class OneDnnInt8 : public ::testing::Test {
 protected:
  void SetUp() override { backend_ = createOneDnnBackend(); }

  void expectMatches(GraphBuilder& b, ValueId out, const std::string& what) {
    const NodeSet nodes = b.finish(out);
    const KernelRequest request = KernelRequest::of(b.graph(), nodes);
    const onednn::Int8Analysis a = onednn::analyzeInt8(request);
    ASSERT_TRUE(a.ok()) << what << ": " << a.refusal;
    if (CompileResult c = backend_->compile(request))  // what oneDNN chose, for the test report
      RecordProperty(what, describeOneDnnKernel(*c.kernel));
    for (uint64_t seed : {1, 2, 3}) {
      const KernelCheckResult r = checkKernelAgainstReference(*backend_, b.graph(), nodes, seed);
      ASSERT_TRUE(r.compiled) << what << ": refused: " << r.refusal;
      EXPECT_TRUE(r.ok) << what << " [" << a.product.describe(b.graph()) << "]: " << r.message;
    }
  }
  void expectRefusal(GraphBuilder& b, ValueId out, const std::vector<std::string>& mentions) {
    const NodeSet nodes = b.finish(out);
    const CompileResult c = backend_->compile(KernelRequest::of(b.graph(), nodes));
    EXPECT_FALSE(c);
    for (const std::string& m : mentions) EXPECT_NE(c.refusal.find(m), std::string::npos) << c.refusal;
  }

  std::unique_ptr<Backend> backend_;
};

// The form onnxruntime's quantize_dynamic writes for a Conv: x -> DQL ->
// ConvInteger -> Cast -> Mul(Mul(x_scale, W_scale)) -> Add(bias [1,C,1,1]) -> Relu.
ValueId dynamicConvChain(GraphBuilder& b, const Shape& x, int64_t oc, const Ints& kernel, AttributeMap convAttrs,
                         ElementType wType, int wzp, bool perChannelScale) {
  const ValueId in = b.input(x);
  const Dql d = dynamicQuantize(b, in);
  const int64_t group = convAttrs.getInt("group", 1);
  Shape ws = {oc, x[1] / group};
  ws.insert(ws.end(), kernel.begin(), kernel.end());
  // Weights whose difference from the zero point fits int8 (as exporters make them).
  const ValueId w = wType == ElementType::Int8 ? intConstant(b, wType, ws, std::max(-128, wzp - 128), std::min(127, wzp + 127))
                                               : intConstant(b, wType, ws, std::max(0, wzp - 128), std::min(255, wzp + 127));
  Tensor z(TensorType{wType, {}});
  if (wType == ElementType::Int8) z.data<int8_t>()[0] = static_cast<int8_t>(wzp);
  else z.data<uint8_t>()[0] = static_cast<uint8_t>(wzp);
  const ValueId wz = b.graph().addConstant("wzp" + std::to_string(oc), std::move(z));
  const ValueId acc = b.op("ConvInteger", {d.q, w, d.zp, wz}, std::move(convAttrs));
  const ValueId f = castToFloat(b, acc);
  const ValueId wscale = perChannelScale ? b.constant({1, oc, 1, 1}, 0.001f, 0.01f) : b.scalar(0.004f);
  const ValueId s = b.op("Mul", {d.scale, wscale});
  const ValueId y = b.op("Mul", {f, s});
  const ValueId biased = b.op("Add", {y, b.constant({1, oc, 1, 1})});
  return b.op("Relu", {biased});
}

TEST_F(OneDnnInt8, DynamicConvChainIsOneKernel) {
  {
    GraphBuilder b;
    const ValueId out = dynamicConvChain(b, {1, 8, 12, 12}, 16, {3, 3}, attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}),
                                         ElementType::Int8, 0, false);
    expectMatches(b, out, "3x3 pad 1, s8 weights");
  }
  {
    GraphBuilder b;
    const ValueId out = dynamicConvChain(
        b, {2, 6, 11, 9}, 12, {3, 3},
        attrs({{"pads", Attribute(Ints{1, 0, 2, 1})}, {"strides", Attribute(Ints{2, 1})}, {"group", Attribute(int64_t{3})}}),
        ElementType::UInt8, 128, true);
    expectMatches(b, out, "grouped, strided, u8 weights with zero point 128, per-channel scale");
  }
  {
    GraphBuilder b;
    const ValueId out = dynamicConvChain(b, {1, 32, 7, 7}, 24, {1, 1}, {}, ElementType::Int8, 3, false);
    expectMatches(b, out, "pointwise, s8 weights with zero point 3");
  }
  {
    GraphBuilder b;
    const ValueId out = dynamicConvChain(
        b, {1, 16, 13, 13}, 16, {3, 3},
        attrs({{"pads", Attribute(Ints{2, 2, 2, 2})}, {"dilations", Attribute(Ints{2, 2})}}), ElementType::Int8, 0,
        true);
    expectMatches(b, out, "dilated 3x3");
  }
}

TEST_F(OneDnnInt8, DynamicMatMulChainIsOneKernel) {
  GraphBuilder b;
  const ValueId in = b.input({2, 5, 24});
  const Dql d = dynamicQuantize(b, in);
  const ValueId w = intConstant(b, ElementType::UInt8, {24, 10}, 0, 255);
  Tensor z(TensorType{ElementType::UInt8, {}});
  z.data<uint8_t>()[0] = 128;
  const ValueId wz = b.graph().addConstant("wz", std::move(z));
  const ValueId acc = b.op("MatMulInteger", {d.q, w, d.zp, wz});
  const ValueId s = b.op("Mul", {d.scale, b.scalar(0.02f)});
  const ValueId y = b.op("Mul", {castToFloat(b, acc), s});
  const ValueId out = b.op("Add", {y, b.constant({10})});
  expectMatches(b, out, "MatMulInteger u8 weights zero point 128, bias");
}

// A quantizer shared by two products (one tensor feeding two convolutions):
// each product's chain runs as one kernel reading the quantized tensor, its
// zero point and its dequantizing scale (made elsewhere) as inputs; the
// generator offers those chains, and the quantizer alone.
TEST_F(OneDnnInt8, ChainsOfASharedQuantizerRunWithRunTimeScale) {
  GraphBuilder b;
  b.endGroup();
  const ValueId in = b.input({1, 8, 10, 10});
  const Dql d = dynamicQuantize(b, in);
  const ValueId w2 = intConstant(b, ElementType::Int8, {8, 8, 1, 1}, -128, 127, 9);
  const ValueId other = b.op("Mul", {castToFloat(b, b.op("ConvInteger", {d.q, w2, d.zp})),
                                     b.op("Mul", {d.scale, b.scalar(0.003f)})});
  const ValueId s = b.op("Mul", {d.scale, b.scalar(0.002f)});
  b.beginGroup();
  const ValueId w = intConstant(b, ElementType::Int8, {8, 8, 3, 3}, -128, 127);
  const ValueId acc = b.op("ConvInteger", {d.q, w, d.zp}, attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}));
  const ValueId y = b.op("Mul", {castToFloat(b, acc), s});
  const ValueId out = b.op("Relu", {b.op("Add", {y, b.constant({1, 8, 1, 1})})});
  b.endGroup();
  const ValueId sum = b.op("Add", {out, other});
  b.graph().markOutput(sum);
  expectMatches(b, out, "ConvInteger chain with the scale an input");
  const Graph& g = b.graph();
  bool quantizerAlone = false, chain = false;
  for (const GeneratedGroup& gg : PatternGenerator(g).generate(*backend_->codeRule(), SubGraphLimits{})) {
    const KernelRequest request = KernelRequest::of(g, gg.nodes);
    EXPECT_TRUE(backend_->compile(request)) << gg.toString(g);
    if (gg.nodes.count() == 1 && g.node(gg.nodes.members()[0]).op == "DynamicQuantizeLinear") quantizerAlone = true;
    if (gg.nodes.contains(g.value(acc).producer) && gg.nodes.contains(g.value(out).producer)) chain = true;
  }
  EXPECT_TRUE(quantizerAlone);
  EXPECT_TRUE(chain);
}

// Two dynamic chains in a row, each one kernel: where the convolution
// computes channels last (AVX-512), the first hands its float result to the
// second in that layout (no reorder to NCHW and back), and the second's
// quantizer reads it so; the result is still the reference's.
TEST_F(OneDnnInt8, ChainsHandOverTheirLayout) {
  GraphBuilder b;
  const AttributeMap pads = attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}});
  const ValueId first = dynamicConvChain(b, {1, 8, 12, 12}, 16, {3, 3}, pads, ElementType::Int8, 0, false);
  const int64_t perChain = b.graph().numNodes();
  // The second chain on the first's result.
  const Dql d = dynamicQuantize(b, first);
  const ValueId w = intConstant(b, ElementType::Int8, {16, 16, 3, 3}, -128, 127, 11);
  const ValueId acc = b.op("ConvInteger", {d.q, w, d.zp}, pads);
  const ValueId y = b.op("Mul", {castToFloat(b, acc), b.op("Mul", {d.scale, b.scalar(0.003f)})});
  const ValueId out = b.op("Relu", {b.op("Add", {y, b.constant({1, 16, 1, 1})})});
  b.finish(out);
  const Graph& g = b.graph();
  Plan plan;
  for (int64_t c = 0; c < 2; ++c) {
    PlanGroup group;
    group.backend = "onednn";
    for (int64_t n = c * perChain; n < (c + 1) * perChain; ++n) group.nodes.push_back(g.node(static_cast<NodeId>(n)).name);
    plan.groups.push_back(group);
  }
  ASSERT_EQ(g.numNodes(), 2 * perChain);
  Session session(g, plan, [&](const std::string&) { return backend_.get(); });
  if (dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core) {
    EXPECT_EQ(session.nativeLayoutValues(), 1);
  }
  for (uint64_t seed : {1, 2}) {
    const SessionVerification v = verifySession(session, randomInputs(g, seed), kPlanTolerance);
    EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
  }
}

// A float oneDNN kernel's result in its own layout handed to a kernel that
// quantizes it (QuantizeLinear -> QLinearConv) and reads it so. (A max pool
// is exact, so the quantized result can be compared exactly: after a float
// convolution, rounding differences could move a value across a
// quantization step.)
TEST_F(OneDnnInt8, QuantizingKernelTakesAFloatKernelsLayout) {
  GraphBuilder b;
  const ValueId x = b.input({1, 16, 12, 12});
  const ValueId f = b.op("MaxPool", {x}, attrs({{"kernel_shape", Attribute(Ints{3, 3})}, {"pads", Attribute(Ints{1, 1, 1, 1})}}));
  const ValueId xs = b.scalar(0.05f), xz = intValues(b, ElementType::UInt8, {}, {10});
  const ValueId xq = b.op("QuantizeLinear", {f, xs, xz});
  const ValueId w = intConstant(b, ElementType::Int8, {16, 16, 3, 3}, -128, 127);
  const ValueId out = b.op("QLinearConv", {xq, xs, xz, w, b.scalar(0.002f), intValues(b, ElementType::Int8, {}, {0}),
                                           b.scalar(0.1f), intValues(b, ElementType::UInt8, {}, {5})},
                           attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}));
  b.finish(out);
  const Graph& g = b.graph();
  Plan plan;
  for (const std::vector<NodeId>& nodes : {std::vector<NodeId>{0}, std::vector<NodeId>{1, 2}}) {
    PlanGroup group;
    group.backend = "onednn";
    for (NodeId n : nodes) group.nodes.push_back(g.node(n).name);
    plan.groups.push_back(group);
  }
  Session session(g, plan, [&](const std::string&) { return backend_.get(); });
  if (dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core) {
    EXPECT_EQ(session.nativeLayoutValues(), 1);
  }
  for (uint64_t seed : {1, 2}) {
    const SessionVerification v = verifySession(session, randomInputs(g, seed), kPlanTolerance);
    EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
  }
}

// The integer product alone (its quantizer elsewhere): the int32 accumulator, exactly.
TEST_F(OneDnnInt8, IntegerProductAloneIsExact) {
  GraphBuilder b;
  b.endGroup();
  const ValueId in = b.input({1, 4, 10, 10});
  const Dql d = dynamicQuantize(b, in);
  b.beginGroup();
  const ValueId w = intConstant(b, ElementType::Int8, {6, 2, 3, 3}, -128, 127);
  const ValueId acc = b.op("ConvInteger", {d.q, w, d.zp},
                           attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}, {"group", Attribute(int64_t{2})}}));
  expectMatches(b, acc, "ConvInteger alone, int32 out");
}

TEST_F(OneDnnInt8, QuantizerAloneIsExact) {
  GraphBuilder b;
  const ValueId in = b.input({3, 1000});
  const Dql d = dynamicQuantize(b, in);
  b.graph().markOutput(d.scale);
  b.graph().markOutput(d.zp);
  expectMatches(b, d.q, "DynamicQuantizeLinear alone");
}

// The vectorised quantizer agrees with the reference at halfway points and
// on all-zero and one-signed inputs.
TEST_F(OneDnnInt8, QuantizerMatchesReferenceBitForBit) {
  std::vector<std::vector<float>> cases = {
      {0, 0, 0, 0},
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 255},
      {-1, -0.5f, -0.25f, 0.125f, 0.5f, 2.5f, 3.5f, -2.5f},
  };
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> big(100003);
  for (float& v : big) v = d(rng);
  cases.push_back(big);
  for (const std::vector<float>& xs : cases) {
    const Shape shape = {static_cast<int64_t>(xs.size())};
    Tensor x = Tensor::fromFloats(shape, xs);
    Tensor y(TensorType{ElementType::UInt8, shape}), s(TensorType{ElementType::Float32, {}}),
        z(TensorType{ElementType::UInt8, {}});
    Node node{"dql", "DynamicQuantizeLinear", {}, {}, {}};
    OpRegistry::instance().get("DynamicQuantizeLinear").reference(node, {&x}, {&y, &s, &z});
    const onednn::DynamicQuantization q = onednn::dynamicQuantizationOf(xs.data(), static_cast<int64_t>(xs.size()));
    EXPECT_EQ(q.scale, s.data<float>()[0]);
    EXPECT_EQ(q.zeroPoint, z.data<uint8_t>()[0]);
    std::vector<uint8_t> mine(xs.size());
    onednn::quantizeU8(xs.data(), static_cast<int64_t>(xs.size()), q, mine.data());
    for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(mine[i], y.data<uint8_t>()[i]) << "x = " << xs[i];
  }
}

// QOperator: QLinearConv with per-channel weight scales and an int32 bias,
// u8 in and out; its quantized output exact.
TEST_F(OneDnnInt8, QLinearConvIsExact) {
  for (bool strided : {false, true}) {
    GraphBuilder b;
    b.endGroup();
    const ValueId x = b.input({1, 8, 9, 9});
    const ValueId xs = b.scalar(0.01f), xz = intValues(b, ElementType::UInt8, {}, {128});
    const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
    b.beginGroup();
    const ValueId w = intConstant(b, ElementType::Int8, {16, 8, 3, 3}, -128, 127);
    const ValueId ws = b.constant({16}, 0.001f, 0.004f);
    const ValueId wz = intValues(b, ElementType::Int8, {16}, {0});
    std::vector<int64_t> bias;
    for (int i = 0; i < 16; ++i) bias.push_back((i - 8) * 37);
    const ValueId out = b.op(
        "QLinearConv",
        {xq, xs, xz, w, ws, wz, b.scalar(0.02f), intValues(b, ElementType::UInt8, {}, {100}),
         intValues(b, ElementType::Int32, {16}, bias)},
        attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}, {"strides", Attribute(strided ? Ints{2, 2} : Ints{1, 1})}}));
    expectMatches(b, out, strided ? "QLinearConv stride 2" : "QLinearConv");
  }
}

// The epilogue reads the convolution's channels-last accumulator directly,
// 16 pixels of a channel at a time: a batch of 2, 20 channels (a partial
// block of 16) and 7x7 = 49 pixels (a partial vector) must still match the
// reference exactly, with biases, s8 output and per-channel scales.
TEST_F(OneDnnInt8, QLinearConvChannelsLastEpilogueIsExact) {
  GraphBuilder b;
  b.endGroup();
  const ValueId x = b.input({2, 24, 7, 7});
  const ValueId xs = b.scalar(0.01f), xz = intValues(b, ElementType::UInt8, {}, {128});
  const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
  b.beginGroup();
  const ValueId w = intConstant(b, ElementType::Int8, {20, 24, 1, 1}, -128, 127);
  std::vector<int64_t> bias;
  for (int i = 0; i < 20; ++i) bias.push_back((i - 10) * 3001);
  const ValueId out = b.op("QLinearConv",
                           {xq, xs, xz, w, b.constant({20}, 0.001f, 0.004f), intValues(b, ElementType::Int8, {20}, {0}),
                            b.scalar(0.02f), intValues(b, ElementType::Int8, {}, {-3}),
                            intValues(b, ElementType::Int32, {20}, bias)});
  expectMatches(b, out, "QLinearConv 1x1, 20 channels, batch 2");
  const Graph& g = b.graph();
  const CompileResult c = backend_->compile(KernelRequest::of(g, b.finish(out)));
  ASSERT_TRUE(c) << c.refusal;
  // With AVX-512 oneDNN writes the int8 accumulator nhwc; elsewhere it may be plain.
  if (describeOneDnnKernel(*c.kernel).find("acdb") != std::string::npos ||
      describeOneDnnKernel(*c.kernel).find("avx512") != std::string::npos)
    EXPECT_NE(describeOneDnnKernel(*c.kernel).find("requantize (channels last)"), std::string::npos)
        << describeOneDnnKernel(*c.kernel);
}

// A chain of QOperator convolutions, each its own kernel: QuantizeLinear ->
// QLinearConv 3x3 (u8 out) -> QLinearConv 1x1 (s8 out) -> QLinearConv 1x1
// (u8 out), with 20 channels (a partial block of 16) and a batch of 2. The
// kernel after the quantizer may have another reader of its result in
// `tap` (a DequantizeLinear, on `tapBackend`).
struct QLinearChain {
  std::unique_ptr<GraphBuilder> b = std::make_unique<GraphBuilder>();
  ValueId out = kNoValue, tap = kNoValue;
  std::vector<std::vector<NodeId>> groups;
};
QLinearChain qlinearChain(bool tapped) {
  QLinearChain c;
  GraphBuilder& b = *c.b;
  const ValueId x = b.input({2, 24, 9, 9});
  const ValueId xs = b.scalar(0.01f), xz = intValues(b, ElementType::UInt8, {}, {128});
  ValueId q = b.op("QuantizeLinear", {x, xs, xz});
  ValueId scale = xs, zero = xz;
  const int64_t channels[] = {24, 20, 20, 20};
  const ElementType types[] = {ElementType::UInt8, ElementType::Int8, ElementType::UInt8};
  for (int i = 0; i < 3; ++i) {
    const int64_t k = i == 0 ? 3 : 1;
    const ValueId w = intConstant(b, ElementType::Int8, {channels[i + 1], channels[i], k, k}, -128, 127, 7 + i);
    std::vector<int64_t> bias;
    for (int64_t o = 0; o < channels[i + 1]; ++o) bias.push_back((o - 10) * 211 * (i + 1));
    const ValueId ys = b.scalar(0.03f + 0.01f * static_cast<float>(i));
    const ValueId yz = intValues(b, types[i], {}, {types[i] == ElementType::Int8 ? -5 : 17});
    AttributeMap a;
    if (k == 3) a = attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}});
    q = b.op("QLinearConv",
             {q, scale, zero, w, b.constant({channels[i + 1]}, 0.001f, 0.004f),
              intValues(b, ElementType::Int8, {channels[i + 1]}, {0}), ys, yz,
              intValues(b, ElementType::Int32, {channels[i + 1]}, bias)},
             std::move(a));
    scale = ys;
    zero = yz;
    if (i == 0 && tapped) c.tap = b.op("DequantizeLinear", {q, ys, yz});
  }
  c.out = q;
  return c;
}

Plan planOfEachNode(const Graph& g, const std::vector<std::string>& backends) {
  Plan plan;
  for (NodeId n = 0; n < g.numNodes(); ++n) {
    PlanGroup group;
    group.backend = backends[static_cast<size_t>(n)];
    group.nodes.push_back(g.node(n).name);
    plan.groups.push_back(group);
  }
  return plan;
}

void expectExactlyTheReference(const SessionVerification& v, const std::string& what) {
  ASSERT_EQ(v.outputs.size(), v.expected.size()) << what;
  for (size_t o = 0; o < v.outputs.size(); ++o) {
    ASSERT_EQ(v.outputs[o].type(), v.expected[o].type()) << what;
    if (v.outputs[o].elementType() == ElementType::Float32) continue;  // (a dequantized tap: checked by ok())
    EXPECT_EQ(std::memcmp(v.outputs[o].raw(), v.expected[o].raw(), v.outputs[o].byteSize()), 0)
        << what << ": output " << o << " differs from the reference";
  }
  EXPECT_TRUE(v.ok()) << what << ": " << (v.problems.empty() ? "" : v.problems[0]);
}

// Between QOperator convolutions the u8/s8 integers pass in the
// convolution's channels-last layout: the producer's epilogue writes nhwc,
// the consumer's convolution reads it with no reorder; named with the
// element type ("channels-last uint8 ...", the name every backend shares),
// so they meet only an offer of the same integers. Every output
// is the reference's, bit for bit.
TEST_F(OneDnnInt8, QLinearConvsHandOverTheirIntegersChannelsLast) {
  QLinearChain c = qlinearChain(false);
  const Graph& g = c.b->graph();
  c.b->finish(c.out);
  const bool channelsLast = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core;
  if (channelsLast) {
    const NodeSet second = NodeSet::of(g.numNodes(), {2});
    const CompileResult k = backend_->compile(KernelRequest::of(g, second));
    ASSERT_TRUE(k) << k.refusal;
    const std::optional<NativeLayout> in = k.kernel->nativeInputLayout(0), out = k.kernel->nativeOutputLayout(0);
    ASSERT_TRUE(in.has_value()) << describeOneDnnKernel(*k.kernel);
    ASSERT_TRUE(out.has_value()) << describeOneDnnKernel(*k.kernel);
    EXPECT_EQ(in->name, "channels-last uint8 2x20x9x9");
    EXPECT_EQ(out->name, "channels-last int8 2x20x9x9");
    EXPECT_EQ(out->bytes, size_t{2 * 20 * 9 * 9});
  }
  const Plan plan = planOfEachNode(g, std::vector<std::string>(static_cast<size_t>(g.numNodes()), "onednn"));
  Session session(g, plan, [&](const std::string&) { return backend_.get(); });
  // quantizer -> conv1, conv1 -> conv2 and conv2 -> conv3.
  if (channelsLast) {
    EXPECT_EQ(session.nativeLayoutValues(), 3);
  }
  for (uint64_t seed : {1, 2, 3}) expectExactlyTheReference(verifySession(session, randomInputs(g, seed)), "seed " + std::to_string(seed));
}

// The hand-over is refused where a reader of the integers cannot take the
// layout: conv1's result is also read by a DequantizeLinear on the native
// backend, so it is written plain (and conv2 reorders it as before); conv2
// -> conv3 and the quantizer's result still pass channels last. Measured
// with its boundaries native (what the DP charges), the kernel runs.
TEST_F(OneDnnInt8, IntegerHandOverIsRefusedWhereAReaderNeedsPlainLayout) {
  QLinearChain c = qlinearChain(true);
  const Graph& g = c.b->graph();
  c.b->graph().markOutput(c.tap);
  c.b->finish(c.out);
  std::vector<std::string> backends(static_cast<size_t>(g.numNodes()), "onednn");
  const NodeId tapNode = g.value(c.tap).producer;
  backends[static_cast<size_t>(tapNode)] = "native";
  const std::unique_ptr<Backend> native = createNativeBackend();
  Session session(g, planOfEachNode(g, backends),
                  [&](const std::string& name) { return name == "native" ? native.get() : backend_.get(); });
  if (dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core) {
    EXPECT_EQ(session.nativeLayoutValues(), 2);
  }
  for (uint64_t seed : {1, 2}) expectExactlyTheReference(verifySession(session, randomInputs(g, seed)), "tapped, seed " + std::to_string(seed));

  MeasurerOptions options;
  options.minSamples = 3;
  options.maxSeconds = 0.05;
  const NodeId conv1 = g.value(g.node(tapNode).inputs[0]).producer;
  const Measurement m = measureKernel(*backend_, KernelRequest::of(g, NodeSet::of(g.numNodes(), {conv1})), options, true);
  EXPECT_EQ(m.status, MeasurementStatus::Ok) << m.message;
}

// QuantizeLinear and DequantizeLinear alone are elementwise: they take and
// give the convolutions' channels-last layout on both sides, so max pool ->
// QuantizeLinear -> QLinearConv -> DequantizeLinear -> max pool passes every
// tensor so (4 values). With the pools on the native backend (plain), each
// quantizer kernel has one side handed over and reorders its integers to
// the other: 2 values. Every step is exact, so the result is the
// reference's bit for bit either way.
TEST_F(OneDnnInt8, QuantizersAloneTakeTheConvolutionsLayoutOnEitherSide) {
  GraphBuilder b;
  const AttributeMap pool = attrs({{"kernel_shape", Attribute(Ints{3, 3})}, {"pads", Attribute(Ints{1, 1, 1, 1})}});
  const ValueId x = b.input({2, 16, 10, 10});
  const ValueId f = b.op("MaxPool", {x}, pool);
  const ValueId xs = b.scalar(0.05f), xz = intValues(b, ElementType::UInt8, {}, {10});
  const ValueId xq = b.op("QuantizeLinear", {f, xs, xz});
  const ValueId ys = b.scalar(0.1f), yz = intValues(b, ElementType::Int8, {}, {-4});
  const ValueId yq = b.op("QLinearConv", {xq, xs, xz, intConstant(b, ElementType::Int8, {24, 16, 3, 3}, -128, 127, 17),
                                          b.scalar(0.002f), intValues(b, ElementType::Int8, {}, {0}), ys, yz},
                          attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}));
  const ValueId y = b.op("DequantizeLinear", {yq, ys, yz});
  const ValueId out = b.op("MaxPool", {y}, pool);
  b.finish(out);
  const Graph& g = b.graph();
  ASSERT_EQ(g.numNodes(), 5);
  const std::unique_ptr<Backend> native = createNativeBackend();
  for (bool poolsNative : {false, true}) {
    std::vector<std::string> backends(5, "onednn");
    if (poolsNative) backends[0] = backends[4] = "native";
    Session session(g, planOfEachNode(g, backends),
                    [&](const std::string& name) { return name == "native" ? native.get() : backend_.get(); });
    const std::string what = poolsNative ? "pools on native" : "all on oneDNN";
    if (dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core) {
      EXPECT_EQ(session.nativeLayoutValues(), poolsNative ? 2 : 4) << what;
    }
    for (uint64_t seed : {1, 2}) {
      const SessionVerification v = verifySession(session, randomInputs(g, seed));
      ASSERT_EQ(v.outputs.size(), 1u);
      EXPECT_EQ(std::memcmp(v.outputs[0].raw(), v.expected[0].raw(), v.outputs[0].byteSize()), 0) << what;
    }
  }
}

// QuantizeLinear -> QLinearConv -> DequantizeLinear as one kernel, grown by
// the rule from the QuantizeLinear; every step exact.
TEST_F(OneDnnInt8, QuantizeQLinearConvDequantizeIsOneKernel) {
  GraphBuilder b;
  const ValueId x = b.input({1, 8, 9, 9});
  const ValueId xs = b.scalar(0.01f), xz = intValues(b, ElementType::Int8, {}, {-7});
  const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
  const ValueId w = intConstant(b, ElementType::Int8, {16, 8, 3, 3}, -128, 127);
  const ValueId ys = b.scalar(0.02f), yz = intValues(b, ElementType::UInt8, {}, {90});
  const ValueId yq = b.op("QLinearConv", {xq, xs, xz, w, b.constant({16}, 0.001f, 0.004f),
                                          intValues(b, ElementType::Int8, {16}, {0}), ys, yz},
                          attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}));
  const ValueId out = b.op("DequantizeLinear", {yq, ys, yz});
  expectMatches(b, out, "QuantizeLinear + QLinearConv + DequantizeLinear");
  const Graph& g = b.graph();
  bool whole = false;
  for (const GeneratedGroup& gg : PatternGenerator(g).generate(*backend_->codeRule(), SubGraphLimits{})) {
    EXPECT_TRUE(backend_->compile(KernelRequest::of(g, gg.nodes))) << gg.toString(g);
    if (gg.nodes.count() == 3) whole = true;
  }
  EXPECT_TRUE(whole);
}

TEST_F(OneDnnInt8, QuantizeLinearAloneIsExact) {
  for (ElementType t : {ElementType::UInt8, ElementType::Int8}) {
    GraphBuilder b;
    const ValueId x = b.input({4, 333});
    expectMatches(b, b.op("QuantizeLinear", {x, b.scalar(0.0078125f), intValues(b, t, {}, {t == ElementType::Int8 ? -3 : 120})}),
                  "QuantizeLinear alone");
  }
}

TEST_F(OneDnnInt8, QLinearMatMulIsExact) {
  GraphBuilder b;
  b.endGroup();
  const ValueId a = b.input({2, 6, 20});
  const ValueId as = b.scalar(0.01f), az = intValues(b, ElementType::Int8, {}, {0});
  const ValueId aq = b.op("QuantizeLinear", {a, as, az});
  b.beginGroup();
  const ValueId w = intConstant(b, ElementType::Int8, {20, 12}, -128, 127);
  const ValueId out = b.op("QLinearMatMul", {aq, as, az, w, b.scalar(0.003f), intValues(b, ElementType::Int8, {}, {0}),
                                             b.scalar(0.01f), intValues(b, ElementType::Int8, {}, {-3})});
  expectMatches(b, out, "QLinearMatMul s8");
}

// Float weights as a QDQ model's import leaves them: int8 values k times a
// scale (per tensor, or per output channel along `axis`), the largest |k| 127.
ValueId quantizedFloatWeights(GraphBuilder& b, const Shape& s, size_t axis, bool perChannel, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> d(-127, 127);
  const int64_t n = numElements(s), channels = s[axis];
  int64_t inner = 1;
  for (size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  std::vector<float> scale(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) scale[static_cast<size_t>(c)] = perChannel ? 0.001f * static_cast<float>(c + 1) : 0.0037f;
  std::vector<float> v(static_cast<size_t>(n));
  std::vector<bool> seen(static_cast<size_t>(channels), false);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = (i / inner) % channels;
    // Each channel's first weight at the end of the range, as symmetric quantization makes it.
    const int k = seen[static_cast<size_t>(c)] ? d(rng) : (c % 2 ? -127 : 127);
    seen[static_cast<size_t>(c)] = true;
    v[static_cast<size_t>(i)] = static_cast<float>(k) * scale[static_cast<size_t>(c)];
  }
  return b.graph().addConstant("qw" + std::to_string(seed), Tensor::fromFloats(s, v));
}

// Static QDQ: x_q -> DequantizeLinear -> Conv (weights as import folded
// them) -> Relu, as one int8 kernel with a float result.
TEST_F(OneDnnInt8, QdqConvIsOneKernel) {
  for (bool perChannel : {false, true}) {
    GraphBuilder b;
    b.endGroup();
    const ValueId x = b.input({1, 8, 10, 10});
    const ValueId xs = b.scalar(0.02f), xz = intValues(b, ElementType::UInt8, {}, {128});
    const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
    b.beginGroup();
    const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
    const ValueId w = quantizedFloatWeights(b, {16, 8, 3, 3}, 0, perChannel, 21);
    const ValueId conv = b.op("Conv", {dq, w, b.constant({16})}, attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}));
    const ValueId out = b.op("Relu", {conv});
    expectMatches(b, out, perChannel ? "QDQ Conv, per-channel weights" : "QDQ Conv");
    if (perChannel) {  // the rule grows the whole group from the DequantizeLinear
      const Graph& g = b.graph();
      bool found = false;
      for (const GeneratedGroup& gg : PatternGenerator(g).generate(*backend_->codeRule(), SubGraphLimits{}))
        if (gg.nodes.contains(g.value(dq).producer) && gg.nodes.contains(g.value(out).producer)) {
          found = true;
          EXPECT_EQ(gg.label, "fusion:int8");
        }
      EXPECT_TRUE(found);
    }
  }
}

TEST_F(OneDnnInt8, QdqMatMulIsOneKernel) {
  GraphBuilder b;
  b.endGroup();
  const ValueId x = b.input({2, 5, 16});
  const ValueId xs = b.scalar(0.01f), xz = intValues(b, ElementType::Int8, {}, {3});
  const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
  b.beginGroup();
  const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
  const ValueId mm = b.op("MatMul", {dq, quantizedFloatWeights(b, {16, 8}, 1, true, 5)});
  expectMatches(b, b.op("Add", {mm, b.constant({8})}), "QDQ MatMul, per-column weights");
}

// QDQ with its QuantizeLinear in front: x -> QuantizeLinear ->
// DequantizeLinear -> Conv -> Relu as one kernel that quantizes its float
// input (exactly, as the reference) and runs the integer convolution; the
// rule grows it from the QuantizeLinear, and never emits the pair alone
// (which does not lower). After a float oneDNN kernel (a max pool, exact),
// the float tensor is handed over in the convolution's layout.
TEST_F(OneDnnInt8, QuantizeDequantizeConvIsOneKernel) {
  for (ElementType t : {ElementType::UInt8, ElementType::Int8}) {
    GraphBuilder b;
    b.endGroup();
    const ValueId x = b.input({1, 16, 12, 12});
    const ValueId f = b.op("MaxPool", {x}, attrs({{"kernel_shape", Attribute(Ints{3, 3})}, {"pads", Attribute(Ints{1, 1, 1, 1})}}));
    b.beginGroup();
    const ValueId xs = b.scalar(0.02f), xz = intValues(b, t, {}, {t == ElementType::Int8 ? -3 : 128});
    const ValueId xq = b.op("QuantizeLinear", {f, xs, xz});
    const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
    const ValueId w = quantizedFloatWeights(b, {24, 16, 3, 3}, 0, true, 31);
    const ValueId out = b.op("Relu", {b.op("Conv", {dq, w, b.constant({24})}, attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}))});
    const std::string what = t == ElementType::Int8 ? "QuantizeLinear s8 + DequantizeLinear + Conv + Relu"
                                                    : "QuantizeLinear u8 + DequantizeLinear + Conv + Relu";
    expectMatches(b, out, what);
    const Graph& g = b.graph();
    const NodeId q = g.value(xq).producer, d = g.value(dq).producer;
    bool whole = false;
    for (const GeneratedGroup& gg : PatternGenerator(g).generate(*backend_->codeRule(), SubGraphLimits{})) {
      EXPECT_TRUE(backend_->compile(KernelRequest::of(g, gg.nodes))) << gg.toString(g);
      EXPECT_FALSE(gg.nodes.count() == 2 && gg.nodes.contains(q) && gg.nodes.contains(d)) << gg.toString(g);
      if (gg.nodes.contains(q) && gg.nodes.contains(g.value(out).producer)) whole = true;
    }
    EXPECT_TRUE(whole) << what;
    const CompileResult pair = backend_->compile(KernelRequest::of(g, NodeSet::of(g.numNodes(), {q, d})));
    EXPECT_FALSE(pair);
    EXPECT_NE(pair.refusal.find("only with the Conv"), std::string::npos) << pair.refusal;

    Plan plan;
    for (const std::vector<NodeId>& nodes : {std::vector<NodeId>{0}, std::vector<NodeId>{1, 2, 3, 4}}) {
      PlanGroup group;
      group.backend = "onednn";
      for (NodeId n : nodes) group.nodes.push_back(g.node(n).name);
      plan.groups.push_back(group);
    }
    Session session(g, plan, [&](const std::string&) { return backend_.get(); });
    if (dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core) {
      EXPECT_EQ(session.nativeLayoutValues(), 1) << what;
    }
    for (uint64_t seed : {1, 2}) {
      const SessionVerification v = verifySession(session, randomInputs(g, seed), kPlanTolerance);
      EXPECT_TRUE(v.ok()) << what << ": " << (v.problems.empty() ? "" : v.problems[0]);
    }
  }
}

// The quantized tensor between the QuantizeLinear and the DequantizeLinear
// must stay in the kernel: read also outside the group, the group is
// refused, naming the QuantizeLinear.
TEST_F(OneDnnInt8, QuantizeDequantizeConvWithTheIntegersReadOutsideIsRefused) {
  GraphBuilder b;
  const ValueId x = b.input({1, 8, 6, 6});
  const ValueId xs = b.scalar(0.02f), xz = intValues(b, ElementType::UInt8, {}, {128});
  const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
  const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
  const ValueId conv = b.op("Conv", {dq, quantizedFloatWeights(b, {8, 8, 1, 1}, 0, false, 2)});
  b.endGroup();
  b.graph().markOutput(xq);
  expectRefusal(b, conv, {"QuantizeLinear", "read outside the group"});
}

// A quantized Linear layer as exporters write it: Gemm with transB and a bias.
TEST_F(OneDnnInt8, QdqGemmIsOneKernel) {
  GraphBuilder b;
  b.endGroup();
  const ValueId x = b.input({4, 24});
  const ValueId xs = b.scalar(0.01f), xz = intValues(b, ElementType::UInt8, {}, {128});
  const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
  b.beginGroup();
  const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
  const ValueId gemm = b.op("Gemm", {dq, quantizedFloatWeights(b, {10, 24}, 0, true, 8), b.constant({10})},
                            attrs({{"transB", Attribute(int64_t{1})}}));
  expectMatches(b, b.op("Relu", {gemm}), "QDQ Gemm transB, per-row weights, bias");
}

// QDQ with one DequantizeLinear shared by two convolutions: each group
// {Conv, Relu} reads its float result and runs as int8 (the integers
// quantized back exactly in the kernel); a Conv with float weights stays float.
TEST_F(OneDnnInt8, ConvAfterASharedDequantizerRunsInt8) {
  GraphBuilder b;
  b.endGroup();
  const ValueId x = b.input({1, 8, 10, 10});
  const ValueId xs = b.scalar(0.02f), xz = intValues(b, ElementType::UInt8, {}, {128});
  const ValueId dq = b.op("DequantizeLinear", {b.op("QuantizeLinear", {x, xs, xz}), xs, xz});
  const ValueId other = b.op("Conv", {dq, b.constant({8, 8, 1, 1})});
  b.beginGroup();
  const ValueId conv = b.op("Conv", {dq, quantizedFloatWeights(b, {16, 8, 3, 3}, 0, true, 4), b.constant({16})},
                            attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}));
  const ValueId out = b.op("Relu", {conv});
  b.graph().markOutput(other);
  const NodeSet nodes = b.finish(out);
  const KernelRequest request = KernelRequest::of(b.graph(), nodes);
  const onednn::Int8Analysis a = onednn::analyzeDequantizedInput(request);
  ASSERT_TRUE(a.ok()) << a.refusal;
  const CompileResult c = backend_->compile(request);
  ASSERT_TRUE(c) << c.refusal;
  // oneDNN's integer convolution, whichever ISA it was built for here:
  // jit_int8:avx512_core_vnni, jit:avx512_core_amx_int8, brgconv's vnni/amx.
  const std::string described = describeOneDnnKernel(*c.kernel);
  EXPECT_TRUE(std::regex_search(described,
                                std::regex(R"(convolution\([a-z_:0-9]*(int8|vnni|amx)[a-z_:0-9]*\))")))
      << described;
  for (uint64_t seed : {1, 2}) {
    const KernelCheckResult r = checkKernelAgainstReference(*backend_, b.graph(), nodes, seed);
    EXPECT_TRUE(r.compiled && r.ok) << r.refusal << r.message;
  }
  // The other Conv's weights are plain floats: the float lowering.
  const KernelRequest floatRequest = KernelRequest::of(b.graph(), NodeSet::of(b.graph().numNodes(), {b.graph().value(other).producer}));
  EXPECT_FALSE(onednn::analyzeDequantizedInput(floatRequest).ok());
  EXPECT_TRUE(backend_->compile(floatRequest));
}

// The group's u8/s8 output against (1) the float kernel of the same group
// without its QuantizeLinear, then the spec's QuantizeLinear (the
// reference's division) of that float: bit for bit, what the two kernels
// gave before; (2) the reference's own float convolution quantized: exact, or
// one step where the reference's x / scale lies at a rounding tie (the plan
// check's rule, core/measure/quantization_ties.h; ONNX leaves the summation
// order open). Returns the steps taken at ties.
int64_t expectQuantizedOutput(Backend& backend, const Graph& g, const NodeSet& nodes, NodeId quantizer,
                              const std::string& what) {
  const KernelRequest request = KernelRequest::of(g, nodes);
  NodeSet floatNodes = nodes;
  floatNodes.erase(quantizer);
  const KernelRequest floatRequest = KernelRequest::of(g, floatNodes);
  const CompileResult c = backend.compile(request), f = backend.compile(floatRequest);
  EXPECT_TRUE(c) << what << ": " << c.refusal;
  EXPECT_TRUE(f) << what << ": " << f.refusal;
  if (!c || !f) return 0;
  const Node& q = g.node(quantizer);
  int64_t steps = 0;
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<Tensor> env = referenceValues(g, randomInputs(g, seed));
    auto inputsOf = [&](const KernelRequest& r) {
      std::vector<Tensor> in;
      for (ValueId v : r.inputs) in.push_back(env[v].clone());
      return in;
    };
    std::vector<Tensor> in = inputsOf(request), fin = inputsOf(floatRequest);
    const Tensor y = runKernel(*c.kernel, request, in)[0];
    const Tensor floats = runKernel(*f.kernel, floatRequest, fin)[0];
    const Tensor composed = evaluateNode(q, {&floats, &env[q.inputs[1]], &env[q.inputs[2]]})[0];
    const std::vector<int64_t> a = y.toInts(), b = composed.toInts(), ref = env[q.outputs[0]].toInts();
    int64_t firstOff = -1, firstWrong = -1;
    std::vector<const Tensor*> values;
    for (const Tensor& t : env) values.push_back(&t);
    const std::vector<bool> ties = nearRoundingTies(g, quantizer, values, kFloat32Bound);
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] != b[i] && firstOff < 0) firstOff = static_cast<int64_t>(i);
      if (a[i] == ref[i]) continue;
      if (std::llabs(a[i] - ref[i]) == 1 && ties[i])
        ++steps;
      else if (firstWrong < 0)
        firstWrong = static_cast<int64_t>(i);
    }
    EXPECT_EQ(firstOff, -1) << what << ", seed " << seed << ": element " << firstOff << " is "
                            << (firstOff < 0 ? 0 : a[static_cast<size_t>(firstOff)]) << ", the float kernel then "
                            << "QuantizeLinear give " << (firstOff < 0 ? 0 : b[static_cast<size_t>(firstOff)]);
    EXPECT_EQ(firstWrong, -1) << what << ", seed " << seed << ": element " << firstWrong << " is "
                              << (firstWrong < 0 ? 0 : a[static_cast<size_t>(firstWrong)]) << ", the reference "
                              << (firstWrong < 0 ? 0 : ref[static_cast<size_t>(firstWrong)]) << ", not at a tie";
    // Not a constant output: many values of the type.
    std::vector<int64_t> distinct = a;
    std::sort(distinct.begin(), distinct.end());
    EXPECT_GT(std::unique(distinct.begin(), distinct.end()) - distinct.begin(), 20) << what;
  }
  return steps;
}

// QDQ's QuantizeLinear at the end of the group: DequantizeLinear -> Conv
// (+ bias) [-> Relu] -> QuantizeLinear is one int8 kernel whose output is
// the u8/s8 tensor (expectQuantizedOutput: the float kernel's bytes
// quantized by the spec, and the reference's up to ties), with output
// scales that have an exact reciprocal and scales that do not, zero points 0
// and not, per-tensor and per-channel weights. The rule grows the whole
// group, QuantizeLinear included.
TEST_F(OneDnnInt8, QdqConvEndingInQuantizeLinearWritesItsIntegers) {
  struct Case {
    ElementType t;
    float scale;
    int zero;
    bool relu, perChannel;
  };
  const ElementType u8 = ElementType::UInt8, s8 = ElementType::Int8;
  for (const Case& k : {Case{u8, 0.05f, 0, true, true}, Case{u8, 0.0625f, 3, true, false},
                        Case{s8, 0.0123f, -5, false, true}, Case{s8, 0.125f, 0, false, false},
                        Case{u8, 1.0f / 255.0f, 128, false, true}}) {
    const std::string what = std::string(elementTypeName(k.t)) + " scale " + std::to_string(k.scale) + " zero point " +
                             std::to_string(k.zero) + (k.relu ? " Relu" : "") + (k.perChannel ? " per-channel" : "");
    GraphBuilder b;
    b.endGroup();
    const ValueId x = b.input({2, 16, 9, 11});
    const ValueId xs = b.scalar(0.02f), xz = intValues(b, u8, {}, {128});
    const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
    b.beginGroup();
    const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
    const ValueId conv = b.op("Conv", {dq, quantizedFloatWeights(b, {24, 16, 3, 3}, 0, k.perChannel, 7), b.constant({24})},
                              attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}));
    const ValueId f = k.relu ? b.op("Relu", {conv}) : conv;
    const ValueId out = b.op("QuantizeLinear", {f, b.scalar(k.scale), intValues(b, k.t, {}, {k.zero})});
    const NodeSet nodes = b.finish(out);
    const Graph& g = b.graph();
    const onednn::Int8Analysis a = onednn::analyzeInt8(KernelRequest::of(g, nodes));
    ASSERT_TRUE(a.ok()) << what << ": " << a.refusal;
    EXPECT_NE(a.product.describe(g).find(k.t == u8 ? "QuantizeLinear -> u8" : "QuantizeLinear -> s8"), std::string::npos)
        << a.product.describe(g);
    const int64_t steps = expectQuantizedOutput(*backend_, g, nodes, g.value(out).producer, what);
    RecordProperty(what + " tie steps", static_cast<int>(steps));
    bool found = false;
    for (const GeneratedGroup& gg : PatternGenerator(g).generate(*backend_->codeRule(), SubGraphLimits{}))
      if (gg.nodes.contains(g.value(dq).producer) && gg.nodes.contains(g.value(out).producer)) {
        found = true;
        EXPECT_EQ(gg.label, "fusion:int8");
      }
    EXPECT_TRUE(found) << what;
  }
}

// The same group at odd channel counts and sizes: 3 -> 7 channels at 3x3,
// 17 -> 5 at 1x1 with stride 2, batch 2, and a depthwise convolution of 17
// channels (group 17) with asymmetric pads, each ending in its
// QuantizeLinear (u8 and s8) and writing the integers the spec's division
// gives.
TEST_F(OneDnnInt8, QdqConvEndingInQuantizeLinearAtOddChannels) {
  struct Case {
    Shape x, w;
    int64_t group;
    Ints strides, pads;
    ElementType t;
  };
  const ElementType u8 = ElementType::UInt8, s8 = ElementType::Int8;
  for (const Case& k : {Case{{1, 3, 13, 9}, {7, 3, 3, 3}, 1, {1, 1}, {1, 1, 1, 1}, u8},
                        Case{{2, 17, 11, 7}, {5, 17, 1, 1}, 1, {2, 2}, {0, 0, 0, 0}, s8},
                        Case{{1, 17, 10, 9}, {17, 1, 3, 3}, 17, {2, 2}, {0, 0, 1, 1}, u8}}) {
    const std::string what = shapeToString(k.x) + " * " + shapeToString(k.w) + " group " + std::to_string(k.group);
    SCOPED_TRACE(what);
    GraphBuilder b;
    b.endGroup();
    const ValueId x = b.input(k.x);
    const ValueId xs = b.scalar(0.02f), xz = intValues(b, u8, {}, {128});
    const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
    b.beginGroup();
    const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
    const ValueId conv = b.op("Conv", {dq, quantizedFloatWeights(b, k.w, 0, true, 11), b.constant({k.w[0]})},
                              attrs({{"pads", Attribute(k.pads)}, {"strides", Attribute(k.strides)},
                                     {"group", Attribute(k.group)}}));
    const ValueId out = b.op("QuantizeLinear", {b.op("Relu", {conv}), b.scalar(0.0371f),
                                                intValues(b, k.t, {}, {k.t == u8 ? 3 : -9})});
    const NodeSet nodes = b.finish(out);
    const Graph& g = b.graph();
    const onednn::Int8Analysis a = onednn::analyzeInt8(KernelRequest::of(g, nodes));
    ASSERT_TRUE(a.ok()) << a.refusal;
    EXPECT_NE(a.product.describe(g).find(k.t == u8 ? "QuantizeLinear -> u8" : "QuantizeLinear -> s8"), std::string::npos)
        << a.product.describe(g);
    expectQuantizedOutput(*backend_, g, nodes, g.value(out).producer, what);
  }
}

// The residual join in the convolution's epilogue: DequantizeLinear(a) ->
// Conv -> Add(DequantizeLinear(b), made outside) -> Relu -> QuantizeLinear
// is one kernel writing u8, the Add a post-op reading the float residual.
TEST_F(OneDnnInt8, QdqConvWithTheResidualJoinEndsInQuantizeLinear) {
  GraphBuilder b;
  b.endGroup();
  const ValueId x = b.input({1, 16, 8, 8}), r = b.input({1, 24, 8, 8});
  const ValueId xs = b.scalar(0.02f), xz = intValues(b, ElementType::UInt8, {}, {128});
  const ValueId rs = b.scalar(0.03f), rz = intValues(b, ElementType::UInt8, {}, {120});
  const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
  const ValueId residual = b.op("DequantizeLinear", {b.op("QuantizeLinear", {r, rs, rz}), rs, rz});
  b.beginGroup();
  const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
  const ValueId conv = b.op("Conv", {dq, quantizedFloatWeights(b, {24, 16, 1, 1}, 0, true, 11), b.constant({24})});
  const ValueId joined = b.op("Relu", {b.op("Add", {conv, residual})});
  const ValueId out = b.op("QuantizeLinear", {joined, b.scalar(0.04f), intValues(b, ElementType::UInt8, {}, {0})});
  const NodeSet nodes = b.finish(out);
  const onednn::Int8Analysis a = onednn::analyzeInt8(KernelRequest::of(b.graph(), nodes));
  ASSERT_TRUE(a.ok()) << a.refusal;
  ASSERT_EQ(a.product.postOps.size(), 3u) << a.product.describe(b.graph());  // bias, the residual, Relu
  expectQuantizedOutput(*backend_, b.graph(), nodes, b.graph().value(out).producer, "Conv + residual Add + Relu + QuantizeLinear");
}

// The division at ties: a convolution whose result is exactly its bias
// (the source at its zero point), the biases the floats f whose f / scale is
// a tie k + 1/2 in float32 where f times the rounded reciprocal of the scale
// is not, so that a kernel multiplying by 1 / scale rounds them to the other
// integer. The kernel must give the reference's bytes exactly: the tie
// rounded to even, plus the zero point.
TEST_F(OneDnnInt8, QuantizeLinearEndingAGroupDividesAtTies) {
  const float scale = 0.0123f;
  std::vector<float> biases;
  for (int k = -100; k < 100 && biases.size() < 40; ++k) {
    const float f = (static_cast<float>(k) + 0.5f) * scale;
    if (f / scale == static_cast<float>(k) + 0.5f && std::nearbyint(f * (1.0f / scale)) != std::nearbyint(f / scale))
      biases.push_back(f);
  }
  ASSERT_GE(biases.size(), 8u);
  const int64_t C = static_cast<int64_t>(biases.size());
  for (ElementType t : {ElementType::UInt8, ElementType::Int8}) {
    const int zero = t == ElementType::UInt8 ? 110 : -3;
    GraphBuilder b;
    b.endGroup();
    const ValueId x = b.input({1, 4, 5, 5});
    const ValueId xs = b.scalar(0.02f), xz = intValues(b, ElementType::UInt8, {}, {128});
    const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
    b.beginGroup();
    const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
    const ValueId bias = b.graph().addConstant("ties", Tensor::fromFloats({C}, biases));
    const ValueId conv = b.op("Conv", {dq, quantizedFloatWeights(b, {C, 4, 1, 1}, 0, false, 3), bias});
    const ValueId out = b.op("QuantizeLinear", {conv, b.scalar(scale), intValues(b, t, {}, {zero})});
    const NodeSet nodes = b.finish(out);
    const Graph& g = b.graph();
    const KernelRequest request = KernelRequest::of(g, nodes);
    const CompileResult c = backend_->compile(request);
    ASSERT_TRUE(c) << c.refusal;
    const std::vector<Tensor> env = referenceValues(g, {Tensor::fromFloats({1, 4, 5, 5}, std::vector<float>(100, 0.0f))});
    std::vector<Tensor> in;
    for (ValueId v : request.inputs) in.push_back(env[v].clone());
    const std::vector<int64_t> y = runKernel(*c.kernel, request, in)[0].toInts(), ref = env[out].toInts();
    for (int64_t ch = 0; ch < C; ++ch) {
      const float tie = biases[static_cast<size_t>(ch)] / scale;
      EXPECT_EQ(ref[static_cast<size_t>(ch * 25)], static_cast<int64_t>(std::nearbyint(tie)) + zero);
      for (int64_t i = 0; i < 25; ++i)
        ASSERT_EQ(y[static_cast<size_t>(ch * 25 + i)], ref[static_cast<size_t>(ch * 25 + i)])
            << elementTypeName(t) << " channel " << ch << ": x / scale = " << tie;
    }
  }
}

// The same with the DequantizeLinear outside the group (shared by two
// readers): Conv -> Relu -> QuantizeLinear quantizes its float input back
// in the kernel and writes the u8 output.
TEST_F(OneDnnInt8, ConvAfterASharedDequantizerEndsInQuantizeLinear) {
  GraphBuilder b;
  b.endGroup();
  const ValueId x = b.input({1, 8, 10, 10});
  const ValueId xs = b.scalar(0.02f), xz = intValues(b, ElementType::UInt8, {}, {128});
  const ValueId dq = b.op("DequantizeLinear", {b.op("QuantizeLinear", {x, xs, xz}), xs, xz});
  const ValueId other = b.op("Relu", {dq});
  b.beginGroup();
  const ValueId conv = b.op("Conv", {dq, quantizedFloatWeights(b, {16, 8, 3, 3}, 0, true, 4), b.constant({16})},
                            attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}));
  const ValueId out = b.op("QuantizeLinear", {b.op("Relu", {conv}), b.scalar(0.03f), intValues(b, ElementType::UInt8, {}, {0})});
  b.graph().markOutput(other);
  const NodeSet nodes = b.finish(out);
  const onednn::Int8Analysis a = onednn::analyzeInt8(KernelRequest::of(b.graph(), nodes));
  ASSERT_TRUE(a.ok()) << a.refusal;
  EXPECT_TRUE(a.product.requantizedSource);
  expectQuantizedOutput(*backend_, b.graph(), nodes, b.graph().value(out).producer, "Conv + Relu + QuantizeLinear");
}

// A plan with the quantized group in it passes the plan check (every kernel
// rerun alone, ties accounted for): QuantizeLinear, then DequantizeLinear ->
// Conv -> Relu -> QuantizeLinear -> u8, then a DequantizeLinear to the
// float output, each a oneDNN kernel.
TEST_F(OneDnnInt8, PlanWithAQuantizedConvGroupPassesThePlanCheck) {
  GraphBuilder b;
  const ValueId x = b.input({1, 16, 12, 12});
  const ValueId xs = b.scalar(0.02f), xz = intValues(b, ElementType::UInt8, {}, {128});
  const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
  const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
  const ValueId conv = b.op("Conv", {dq, quantizedFloatWeights(b, {16, 16, 3, 3}, 0, true, 9), b.constant({16})},
                            attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}));
  const ValueId ys = b.scalar(0.04f), yz = intValues(b, ElementType::UInt8, {}, {0});
  const ValueId y = b.op("QuantizeLinear", {b.op("Relu", {conv}), ys, yz});
  const ValueId out = b.op("DequantizeLinear", {y, ys, yz});
  b.finish(out);
  const Graph& g = b.graph();
  ASSERT_EQ(g.numNodes(), 6);
  Plan plan;
  for (const std::vector<NodeId>& nodes : {std::vector<NodeId>{0}, std::vector<NodeId>{1, 2, 3, 4}, std::vector<NodeId>{5}}) {
    PlanGroup group;
    group.backend = "onednn";
    for (NodeId n : nodes) group.nodes.push_back(g.node(n).name);
    plan.groups.push_back(group);
  }
  Session session(g, plan, [&](const std::string&) { return backend_.get(); });
  for (uint64_t seed : {1, 2}) {
    PlanCheckOptions options;
    options.eachKernel = true;
    const PlanCheck check = checkPlan(session, randomInputs(g, seed), options);
    EXPECT_TRUE(check.ok) << (check.problems.empty() ? "" : check.problems[0]);
    for (const GroupError& e : check.groups) EXPECT_TRUE(e.wrong.empty()) << e.what << ": " << e.wrong;
  }
}

// What the QuantizeLinear at the end may not be, refused naming it: a scale
// per channel, a float result that is read outside the group too.
TEST_F(OneDnnInt8, QuantizeLinearEndingAGroupIsRefusedWithTheReason) {
  {
    GraphBuilder b;
    b.endGroup();
    const ValueId x = b.input({1, 8, 6, 6});
    const ValueId xs = b.scalar(0.02f), xz = intValues(b, ElementType::UInt8, {}, {128});
    const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
    b.beginGroup();
    const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
    const ValueId conv = b.op("Conv", {dq, quantizedFloatWeights(b, {8, 8, 1, 1}, 0, false, 2)});
    expectRefusal(b, b.op("QuantizeLinear", {conv, b.constant({8}, 0.01f, 0.1f), intValues(b, ElementType::UInt8, {8}, {0})}),
                  {"QuantizeLinear", "per-tensor output scale"});
  }
  {
    GraphBuilder b;
    b.endGroup();
    const ValueId x = b.input({1, 8, 6, 6});
    const ValueId xs = b.scalar(0.02f), xz = intValues(b, ElementType::UInt8, {}, {128});
    const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
    b.beginGroup();
    const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
    const ValueId relu = b.op("Relu", {b.op("Conv", {dq, quantizedFloatWeights(b, {8, 8, 1, 1}, 0, false, 2)})});
    b.graph().markOutput(relu);
    expectRefusal(b, b.op("QuantizeLinear", {relu, b.scalar(0.05f), intValues(b, ElementType::UInt8, {}, {0})}),
                  {"2 outputs"});
  }
}

// More of what the QuantizeLinear ending a group may not be, refused naming
// it with the reason: a zero scale, a zero point computed at run time, and a
// QuantizeLinear that does not alone read the end of the float chain.
TEST_F(OneDnnInt8, QuantizeLinearEndingAGroupRefusesZeroScaleAndRunTimeZeroPoint) {
  auto group = [](GraphBuilder& b) {
    b.endGroup();
    const ValueId x = b.input({1, 7, 5, 5});
    const ValueId xs = b.scalar(0.02f), xz = intValues(b, ElementType::UInt8, {}, {128});
    const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
    b.beginGroup();
    const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
    return b.op("Relu", {b.op("Conv", {dq, quantizedFloatWeights(b, {7, 7, 1, 1}, 0, false, 3)})});
  };
  {
    SCOPED_TRACE("zero scale");
    GraphBuilder b;
    const ValueId f = group(b);
    expectRefusal(b, b.op("QuantizeLinear", {f, b.scalar(0.0f), intValues(b, ElementType::UInt8, {}, {0})}),
                  {"QuantizeLinear", "is zero or not finite"});
  }
  {
    SCOPED_TRACE("zero point computed at run time");
    GraphBuilder b;
    const ValueId f = group(b);
    b.endGroup();
    const ValueId zp = b.op("QuantizeLinear", {b.input({}), b.scalar(1.0f), intValues(b, ElementType::UInt8, {}, {0})});
    b.beginGroup();
    expectRefusal(b, b.op("QuantizeLinear", {f, b.scalar(0.05f), zp}),
                  {"QuantizeLinear", "constant per-tensor output zero point"});
  }
}

TEST_F(OneDnnInt8, DequantizerAloneIsExact) {
  GraphBuilder b;
  b.endGroup();
  const ValueId x = b.input({3, 70});
  const ValueId xs = b.scalar(0.013f), xz = intValues(b, ElementType::Int8, {}, {-5});
  const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
  b.beginGroup();
  expectMatches(b, b.op("DequantizeLinear", {xq, xs, xz}), "DequantizeLinear alone");
}

// A float Conv after a DequantizeLinear whose weights are not int8 values
// times a scale: no integer form; the refusal names the Conv.
TEST_F(OneDnnInt8, QdqWithFloatWeightsIsRefused) {
  GraphBuilder b;
  b.endGroup();
  const ValueId x = b.input({1, 4, 6, 6});
  const ValueId xs = b.scalar(0.02f), xz = intValues(b, ElementType::UInt8, {}, {128});
  const ValueId xq = b.op("QuantizeLinear", {x, xs, xz});
  b.beginGroup();
  const ValueId dq = b.op("DequantizeLinear", {xq, xs, xz});
  expectRefusal(b, b.op("Conv", {dq, b.constant({4, 4, 3, 3})}), {"Conv", "not int8 values times a scale"});
}

// u8 weights whose difference from their zero point does not fit int8 (an
// asymmetric quantization): shifted by 128 and compensated, still exact.
TEST_F(OneDnnInt8, WeightsBeyondInt8AreCompensatedExactly) {
  for (int zp : {0, 37}) {
    GraphBuilder b;
    b.endGroup();
    const ValueId in = b.input({1, 6, 9, 9});
    const Dql d = dynamicQuantize(b, in);
    b.beginGroup();
    const ValueId w = intConstant(b, ElementType::UInt8, {8, 6, 3, 3}, 0, 255);
    const ValueId acc = b.op("ConvInteger", {d.q, w, d.zp, intValues(b, ElementType::UInt8, {}, {zp})},
                             attrs({{"pads", Attribute(Ints{1, 0, 1, 2})}}));
    expectMatches(b, acc, "ConvInteger int32, u8 weights, zero point " + std::to_string(zp));
  }
  {
    GraphBuilder b;
    const ValueId in = b.input({1, 6, 9, 9});
    const Dql d = dynamicQuantize(b, in);
    const ValueId w = intConstant(b, ElementType::UInt8, {8, 6, 3, 3}, 0, 255);
    const ValueId acc = b.op("ConvInteger", {d.q, w, d.zp, intValues(b, ElementType::UInt8, {}, {100})},
                             attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}));
    const ValueId y = b.op("Mul", {castToFloat(b, acc), b.op("Mul", {d.scale, b.scalar(0.002f)})});
    expectMatches(b, b.op("Relu", {b.op("Add", {y, b.constant({1, 8, 1, 1})})}), "dynamic chain, compensated");
  }
  {
    GraphBuilder b;
    const ValueId in = b.input({3, 40});
    const Dql d = dynamicQuantize(b, in);
    const ValueId w = intConstant(b, ElementType::UInt8, {40, 12}, 0, 255);
    const ValueId acc = b.op("MatMulInteger", {d.q, w, d.zp, intValues(b, ElementType::UInt8, {12}, {3, 250, 17, 90, 0, 255, 128, 1, 60, 200, 7, 99})});
    const ValueId y = b.op("Mul", {castToFloat(b, acc), b.op("Mul", {d.scale, b.scalar(0.01f)})});
    expectMatches(b, b.op("Add", {y, b.constant({12})}), "MatMulInteger, compensated, per-column zero points");
  }
}

// The compensation is built for convolutions of one group: a grouped one
// with weights beyond int8 is refused, naming the node.
TEST_F(OneDnnInt8, GroupedWeightsBeyondInt8AreRefusedNamingTheNode) {
  GraphBuilder b;
  const ValueId in = b.input({1, 4, 6, 6});
  const Dql d = dynamicQuantize(b, in);
  const ValueId w = intConstant(b, ElementType::UInt8, {4, 2, 1, 1}, 200, 255);  // zero point 0
  const ValueId acc = b.op("ConvInteger", {d.q, w, d.zp}, attrs({{"group", Attribute(int64_t{2})}}));
  expectRefusal(b, acc, {"ConvInteger", "do not fit int8"});
}

TEST_F(OneDnnInt8, RunTimeWeightsAreRefused) {
  GraphBuilder b;
  b.endGroup();
  const ValueId in = b.input({1, 4, 6, 6});
  const Dql d = dynamicQuantize(b, in);
  const Dql dw = dynamicQuantize(b, b.input({4, 4, 1, 1}));
  b.beginGroup();
  const ValueId acc = b.op("ConvInteger", {d.q, dw.q, d.zp});
  expectRefusal(b, acc, {"ConvInteger", "constant weights"});
}

TEST_F(OneDnnInt8, AnIntegerResultFollowedByFloatOpsWithoutCastIsRefused) {
  GraphBuilder b;
  const ValueId in = b.input({1, 4, 6, 6});
  const Dql d = dynamicQuantize(b, in);
  const ValueId w = intConstant(b, ElementType::Int8, {4, 4, 1, 1}, -5, 5);
  const ValueId acc = b.op("ConvInteger", {d.q, w, d.zp});
  const ValueId c = b.op("Cast", {acc}, attrs({{"to", Attribute(int64_t{6})}}));  // to int32: not float
  expectRefusal(b, c, {"Cast", "float32"});
}

// The rule grows the whole chain from the quantizer: one candidate holding
// every node, which compiles.
TEST_F(OneDnnInt8, RuleGeneratesTheWholeChainAsOneCandidate) {
  GraphBuilder b;
  const ValueId out = dynamicConvChain(b, {1, 8, 10, 10}, 8, {3, 3}, attrs({{"pads", Attribute(Ints{1, 1, 1, 1})}}),
                                       ElementType::Int8, 0, false);
  const NodeSet all = b.finish(out);
  const Graph& g = b.graph();
  bool found = false;
  for (const GeneratedGroup& gg : PatternGenerator(g).generate(*backend_->codeRule(), SubGraphLimits{})) {
    const KernelRequest request = KernelRequest::of(g, gg.nodes);
    EXPECT_TRUE(backend_->compile(request)) << gg.toString(g);  // every candidate lowers
    if (gg.nodes == all) {
      found = true;
      EXPECT_EQ(gg.label, "fusion:int8");
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace collage
