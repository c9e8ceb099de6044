// The native backend's int8 kernels (native_int8_products.h,
// native_quantize.h) against the reference executor, byte for byte:
// ConvInteger and QLinearConv over odd channel counts, groups, strides,
// pads, dilations, 1-D and 3-D, batches; MatMulInteger and QLinearMatMul
// with per-row / per-column zero points and scales and broadcast batches;
// requantisation that saturates at both ends and rounds ties to even;
// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear per tensor and
// per axis. Each runs at 1 and 3 threads, and the kernel's description must
// name the int8 kernel, so that a silent fall back to the reference is a
// failure.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>

#include "backends/backend_list.h"
#include "backends/native/native_backend.h"
#include "backends/native/native_byte_table.h"
#include "backends/onednn/dynamic_quantize.h"
#include "core/measure/kernel_check.h"
#include "core/patterns/backend_spec.h"
#include "core/patterns/candidate.h"
#include "core/patterns/pattern_generator.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/op_registry.h"
#include "core/ops/requantize.h"
#include "core/ir/threading.h"

#include "tests/unit/test_support.h"

namespace collage {
namespace {

constexpr ElementType U8 = ElementType::UInt8;
constexpr ElementType S8 = ElementType::Int8;
constexpr ElementType F32 = ElementType::Float32;
constexpr ElementType I32 = ElementType::Int32;

// One node under test; its data inputs are graph inputs (values given),
// its parameters constants.
class Case {
 public:
  explicit Case(uint64_t seed = 5) : rng_(seed) {}

  Tensor bytes(ElementType t, Shape s, int lo, int hi) {
    Tensor x(t, std::move(s));
    std::uniform_int_distribution<int> d(lo, hi);
    for (int64_t i = 0; i < x.numElements(); ++i) {
      if (t == U8)
        x.data<uint8_t>()[i] = static_cast<uint8_t>(d(rng_));
      else
        x.data<int8_t>()[i] = static_cast<int8_t>(d(rng_));
    }
    return x;
  }
  // Random over the type's whole range.
  Tensor bytes(ElementType t, Shape s) { return t == U8 ? bytes(t, std::move(s), 0, 255) : bytes(t, std::move(s), -128, 127); }
  static Tensor ints(ElementType t, Shape s, const std::vector<int64_t>& v) {
    Tensor x(t, std::move(s));
    for (size_t i = 0; i < v.size(); ++i) {
      if (t == U8) x.data<uint8_t>()[i] = static_cast<uint8_t>(v[i]);
      if (t == S8) x.data<int8_t>()[i] = static_cast<int8_t>(v[i]);
      if (t == I32) x.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
    }
    return x;
  }
  static Tensor floats(Shape s, const std::vector<float>& v) { return Tensor::fromFloats(std::move(s), v); }

  ValueId input(Tensor t) {
    inputs_.push_back(t.clone());
    return g_.addInput("x" + std::to_string(count_++), t.type());
  }
  ValueId constant(Tensor t) { return g_.addConstant("c" + std::to_string(count_++), std::move(t)); }

  // Adds a node; its outputs become the graph's unless `internal`.
  std::vector<ValueId> node(const std::string& op, std::vector<ValueId> ins, AttributeMap a = {},
                            int outputs = 1, bool internal = false) {
    const OpSchema& schema = OpRegistry::instance().get(op);
    for (const AttributeSpec& spec : schema.attributes)
      if (!a.has(spec.name) && spec.defaultValue) a.set(spec.name, *spec.defaultValue);
    Node n;
    n.name = op + std::to_string(count_++);
    n.op = op;
    n.attrs = std::move(a);
    n.inputs = std::move(ins);
    n.outputs.assign(static_cast<size_t>(outputs), 0);
    std::vector<TensorType> types;
    for (ValueId v : n.inputs) types.push_back(v == kNoValue ? TensorType{} : g_.value(v).type);
    const std::vector<TensorType> out = inferNode(n, types);
    for (int i = 0; i < outputs; ++i) {
      n.outputs[static_cast<size_t>(i)] = g_.addValue(n.name + "_y" + std::to_string(i), out.at(static_cast<size_t>(i)));
      if (!internal) g_.markOutput(n.outputs[static_cast<size_t>(i)]);
    }
    std::vector<ValueId> ys = n.outputs;
    g_.addNode(std::move(n));
    return ys;
  }

  const Graph& graph() {
    if (!finalized_) g_.finalize();
    finalized_ = true;
    return g_;
  }

  // Runs the node on native at 1 and 3 threads; every output must equal the
  // reference's bytes, and the kernel's description must contain `kernel`.
  // Returns the outputs (of the last run).
  std::vector<Tensor> expectExact(const std::string& kernel) {
    test_support::ThreadCountGuard guard;
    std::unique_ptr<Backend> backend = createBackend("native");
    const std::vector<Tensor> ref = referenceValues(graph(), inputs_);
    std::vector<Tensor> outputs;
    for (int threads : {1, 3}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      setThreadCount(threads);
      const KernelRequest request = KernelRequest::of(g_, NodeSet::all(g_.numNodes()), "test");
      CompileResult c = backend->compile(request);
      EXPECT_TRUE(c) << c.refusal;
      if (!c) return {};
      const std::string description = describeNativeKernel(*c.kernel);
      EXPECT_NE(description.find(kernel), std::string::npos) << description;
      description_ = description;
      std::vector<Tensor> in;
      for (ValueId v : request.inputs) in.push_back(inputs_[inputIndex(v)].clone());
      outputs = runKernel(*c.kernel, request, in);
      for (size_t i = 0; i < outputs.size(); ++i) {
        const Tensor& want = ref[request.outputs[i]];
        EXPECT_EQ(outputs[i].type(), want.type());
        if (outputs[i].type() != want.type()) continue;
        const int64_t at = firstDifference(outputs[i], want);
        EXPECT_EQ(at, -1) << g_.value(request.outputs[i]).name << " element " << at << ": native "
                          << valueAt(outputs[i], at) << ", reference " << valueAt(want, at);
      }
    }
    return outputs;
  }
  // The kernel's description in the last expectExact.
  const std::string& description() const { return description_; }

 private:
  size_t inputIndex(ValueId v) const {
    for (size_t i = 0; i < g_.inputs().size(); ++i)
      if (g_.inputs()[i] == v) return i;
    ADD_FAILURE() << "not an input";
    return 0;
  }

 public:
  static std::string valueAt(const Tensor& t, int64_t i) {
    if (i < 0) return "";
    if (t.elementType() == F32) return std::to_string(t.toFloats()[static_cast<size_t>(i)]);
    return std::to_string(t.toInts()[static_cast<size_t>(i)]);
  }
  // The first element whose bytes differ, or -1.
  static int64_t firstDifference(const Tensor& a, const Tensor& b) {
    const size_t es = elementSize(a.elementType());
    for (int64_t i = 0; i < a.numElements(); ++i)
      if (std::memcmp(static_cast<const char*>(a.raw()) + i * es, static_cast<const char*>(b.raw()) + i * es, es) != 0)
        return i;
    return -1;
  }

 private:
  Graph g_;
  std::vector<Tensor> inputs_;
  std::mt19937 rng_;
  int count_ = 0;
  bool finalized_ = false;
  std::string description_;
};

AttributeMap convAttrs(std::vector<int64_t> strides, std::vector<int64_t> pads, std::vector<int64_t> dilations,
                       int64_t group) {
  AttributeMap a;
  a.set("strides", Attribute(strides));
  a.set("pads", Attribute(pads));
  a.set("dilations", Attribute(dilations));
  a.set("group", Attribute(group));
  return a;
}

// ---------------------------------------------------------------- ConvInteger

struct ConvCase {
  ElementType x, w;
  Shape xs, ws;
  std::vector<int64_t> strides, pads, dilations;
  int64_t group;
  bool perChannelZp;
};

std::vector<ConvCase> convCases() {
  return {
      // 2-D, 3x3 pad 1, more pixels than one column block, channels not a multiple of 16.
      {U8, U8, {1, 3, 13, 11}, {5, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true},
      // Strides, uneven pads, dilation, groups; int8 both.
      {S8, S8, {2, 6, 10, 9}, {9, 2, 3, 2}, {2, 1}, {1, 0, 2, 1}, {2, 1}, 3, false},
      // 1x1 over 17 channels into 70 (several row blocks), mixed signedness.
      {U8, S8, {1, 17, 9, 9}, {70, 17, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, true},
      {S8, U8, {1, 17, 9, 7}, {13, 17, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, true},
      // Depthwise.
      {U8, S8, {1, 8, 12, 12}, {8, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 8, true},
      // 1-D with stride 3, dilation 2, groups.
      {S8, U8, {2, 4, 37}, {6, 2, 5}, {3}, {2, 1}, {2}, 2, true},
      // 3-D.
      {U8, U8, {1, 2, 5, 6, 7}, {3, 2, 2, 3, 2}, {1, 2, 1}, {1, 0, 1, 0, 1, 1}, {1, 1, 2}, 1, true},
      // Padding wider than the kernel reach at the edges (whole padded rows).
      {U8, S8, {1, 3, 4, 5}, {4, 3, 2, 2}, {1, 1}, {2, 3, 2, 3}, {1, 1}, 1, false},
      // Depthwise with a channel multiplier of 2, stride 2, dilation, uneven pads.
      {S8, S8, {2, 6, 11, 13}, {12, 1, 3, 3}, {2, 2}, {0, 1, 2, 1}, {2, 1}, 6, true},
      {U8, U8, {1, 5, 40}, {5, 1, 7}, {1}, {3, 3}, {1}, 5, false},
  };
}

TEST(NativeInt8, ConvIntegerMatchesTheReference) {
  int index = 0;
  for (const ConvCase& cc : convCases()) {
    SCOPED_TRACE("case " + std::to_string(index++));
    Case c(11 + index);
    const int64_t M = cc.ws[0];
    const ValueId x = c.input(c.bytes(cc.x, cc.xs));
    const ValueId w = c.constant(c.bytes(cc.w, cc.ws));
    const ValueId xzp = c.constant(Case::ints(cc.x, {}, {cc.x == U8 ? 131 : -7}));
    std::vector<int64_t> wz;
    for (int64_t m = 0; m < (cc.perChannelZp ? M : 1); ++m) wz.push_back(cc.w == U8 ? 100 + 13 * m : -60 + 11 * m);
    const ValueId wzp = c.constant(Case::ints(cc.w, cc.perChannelZp ? Shape{M} : Shape{}, wz));
    c.node("ConvInteger", {x, w, xzp, wzp}, convAttrs(cc.strides, cc.pads, cc.dilations, cc.group));
    c.expectExact(cc.ws[1] == 1 ? "int8 direct depthwise" : "int8 im2col GEMM");
  }
}

TEST(NativeInt8, ConvIntegerWithoutZeroPointsAndAtTheExtremes) {
  // Every product at its largest: 255 * 255 (u8, zero points 0) and
  // (-128 - 127) * (127 - (-128)) with int8 operands.
  {
    Case c;
    Tensor xt(U8, {1, 40, 7, 7}), wt(U8, {3, 40, 3, 3});
    std::memset(xt.raw(), 255, xt.byteSize());
    std::memset(wt.raw(), 255, wt.byteSize());
    c.node("ConvInteger", {c.input(xt), c.constant(wt)}, convAttrs({1, 1}, {1, 1, 1, 1}, {1, 1}, 1));
    c.expectExact("int8 im2col GEMM");
  }
  {
    Case c;
    Tensor xt(S8, {1, 40, 7, 7}), wt(S8, {3, 40, 3, 3});
    std::memset(xt.raw(), 0x80, xt.byteSize());  // -128
    std::memset(wt.raw(), 0x7f, wt.byteSize());  // 127
    const ValueId xzp = c.constant(Case::ints(S8, {}, {127}));
    const ValueId wzp = c.constant(Case::ints(S8, {}, {-128}));
    c.node("ConvInteger", {c.input(xt), c.constant(wt), xzp, wzp}, convAttrs({1, 1}, {1, 1, 1, 1}, {1, 1}, 1));
    c.expectExact("int8 im2col GEMM");
  }
}

// ---------------------------------------------------------------- MatMulInteger

TEST(NativeInt8, MatMulIntegerMatchesTheReference) {
  struct MM {
    ElementType a, b;
    Shape as, bs;
    bool perRow, perCol;
  };
  const std::vector<MM> cases = {
      {U8, S8, {2, 3, 13, 37}, {37, 70}, true, true},
      {S8, U8, {3, 1, 5, 9}, {1, 4, 9, 17}, false, false},
      {U8, U8, {1, 1}, {1, 1}, false, true},
      {S8, S8, {67, 130}, {130, 3}, true, false},
  };
  int index = 0;
  for (const MM& mm : cases) {
    SCOPED_TRACE("case " + std::to_string(index++));
    Case c(20 + index);
    const int64_t M = mm.as[mm.as.size() - 2], N = mm.bs.back();
    const ValueId a = c.input(c.bytes(mm.a, mm.as));
    const ValueId b = c.input(c.bytes(mm.b, mm.bs));
    std::vector<int64_t> az, bz;
    for (int64_t i = 0; i < (mm.perRow ? M : 1); ++i) az.push_back(mm.a == U8 ? (37 * i + 5) % 256 : (37 * i) % 256 - 128);
    for (int64_t i = 0; i < (mm.perCol ? N : 1); ++i) bz.push_back(mm.b == U8 ? (91 * i + 200) % 256 : (91 * i + 3) % 256 - 128);
    const ValueId azp = c.constant(Case::ints(mm.a, mm.perRow ? Shape{M} : Shape{}, az));
    const ValueId bzp = c.constant(Case::ints(mm.b, mm.perCol ? Shape{N} : Shape{}, bz));
    c.node("MatMulInteger", {a, b, azp, bzp});
    c.expectExact("int8 GEMM");
  }
}

// ---------------------------------------------------------------- QLinear

// Counts of y's values at the type's two ends.
std::pair<int64_t, int64_t> saturated(const Tensor& y) {
  int64_t lo = 0, hi = 0;
  for (int64_t i = 0; i < y.numElements(); ++i) {
    if (y.elementType() == U8) {
      lo += y.data<uint8_t>()[i] == 0;
      hi += y.data<uint8_t>()[i] == 255;
    } else {
      lo += y.data<int8_t>()[i] == -128;
      hi += y.data<int8_t>()[i] == 127;
    }
  }
  return {lo, hi};
}

TEST(NativeInt8, QLinearConvRequantizesAsTheReference) {
  for (int64_t group : {1, 5})
  for (ElementType yType : {U8, S8}) {
    for (ElementType xType : {U8, S8}) {
      SCOPED_TRACE(std::string(elementTypeName(xType)) + " -> " + std::string(elementTypeName(yType)) +
                   ", group " + std::to_string(group));
      Case c(31);
      const int64_t M = 10;
      const ValueId x = c.input(c.bytes(xType, {2, 5, 9, 8}));
      // Power-of-two scales: acc * scale lands exactly on .5 for many sums
      // (ties to even), and the range is wide enough to saturate both ends.
      const ValueId xs = c.constant(Case::floats({}, {0.5f}));
      const ValueId xzp = c.constant(Case::ints(xType, {}, {xType == U8 ? 120 : -3}));
      const ValueId w = c.constant(c.bytes(S8, {M, 5 / group, 3, 3}, group == 1 ? -20 : -120, group == 1 ? 20 : 120));
      const ValueId ws = c.constant(
          Case::floats({M}, {0.25f, 0.5f, 0.125f, 1.0f, 0.0625f, 0.5f, 0.03125f, 2.0f, 0.5f, 0.25f}));
      const ValueId wzp = c.constant(Case::ints(S8, {M}, {0, 1, -2, 3, 0, -1, 2, 0, 5, -5}));
      const ValueId ys = c.constant(Case::floats({}, {1.0f}));
      const ValueId yzp = c.constant(Case::ints(yType, {}, {yType == U8 ? 128 : 0}));
      const ValueId bias = c.constant(Case::ints(I32, {M}, {1, -1, 1000, -1000, 7, 0, -3, 20, -20, 2}));
      c.node("QLinearConv", {x, xs, xzp, w, ws, wzp, ys, yzp, bias}, convAttrs({2, 1}, {1, 2, 0, 1}, {1, 2}, group));
      const std::vector<Tensor> y = c.expectExact(group == 1 ? "int8 im2col GEMM" : "int8 direct depthwise");
      ASSERT_EQ(y.size(), 1u);
      const auto [lo, hi] = saturated(y[0]);
      EXPECT_GT(lo, 0) << "the case should saturate at the low end";
      EXPECT_GT(hi, 0) << "the case should saturate at the high end";
    }
  }
}

TEST(NativeInt8, QLinearMatMulRequantizesAsTheReference) {
  for (ElementType yType : {U8, S8}) {
    SCOPED_TRACE(elementTypeName(yType));
    Case c(41);
    const int64_t M = 11, K = 29, N = 67;
    const ValueId a = c.input(c.bytes(U8, {2, M, K}));
    std::vector<float> asv, bsv;
    for (int64_t i = 0; i < M; ++i) asv.push_back(i % 2 ? 0.5f : 0.013f * static_cast<float>(i + 1));
    for (int64_t j = 0; j < N; ++j) bsv.push_back(j % 3 ? 0.25f : 0.0071f * static_cast<float>(j + 1));
    std::vector<int64_t> az, bz;
    for (int64_t i = 0; i < M; ++i) az.push_back(100 + i);
    for (int64_t j = 0; j < N; ++j) bz.push_back(j % 7 - 3);
    const ValueId as = c.constant(Case::floats({M}, asv));
    const ValueId azp = c.constant(Case::ints(U8, {M}, az));
    const ValueId b = c.constant(c.bytes(S8, {K, N}));
    const ValueId bs = c.constant(Case::floats({N}, bsv));
    const ValueId bzp = c.constant(Case::ints(S8, {N}, bz));
    const ValueId ys = c.constant(Case::floats({}, {16.0f}));
    const ValueId yzp = c.constant(Case::ints(yType, {}, {yType == U8 ? 10 : -5}));
    c.node("QLinearMatMul", {a, as, azp, b, bs, bzp, ys, yzp});
    const std::vector<Tensor> y = c.expectExact("int8 GEMM");
    ASSERT_EQ(y.size(), 1u);
    const auto [lo, hi] = saturated(y[0]);
    EXPECT_GT(lo, 0);
    EXPECT_GT(hi, 0);
  }
}

// A sum that could leave int32 goes to the reference, whose accumulator is int64.
TEST(NativeInt8, QLinearConvWithAnOverlongSumRunsOnTheReference) {
  Case c;
  const int64_t C = 33100;  // K = 33100 > INT32_MAX / (255 * 255)
  const ValueId x = c.input(c.bytes(U8, {1, C, 1, 1}));
  const ValueId xs = c.constant(Case::floats({}, {0.01f}));
  const ValueId xzp = c.constant(Case::ints(U8, {}, {0}));
  const ValueId w = c.constant(c.bytes(U8, {1, C, 1, 1}));
  const ValueId ws = c.constant(Case::floats({}, {0.01f}));
  const ValueId wzp = c.constant(Case::ints(U8, {}, {0}));
  const ValueId ys = c.constant(Case::floats({}, {1000.0f}));
  const ValueId yzp = c.constant(Case::ints(U8, {}, {0}));
  c.node("QLinearConv", {x, xs, xzp, w, ws, wzp, ys, yzp});
  c.expectExact("reference kernel");
}

// What the backend tells the measurement screen (Backend::referenceNodes):
// the int8 kernels are not the scalar reference, the overlong QLinearConv
// above is.
TEST(NativeInt8, ReferenceNodesNameOnlyWhatRunsOnTheScalarLoops) {
  std::unique_ptr<Backend> backend = createBackend("native");
  {
    Case c;
    const ValueId x = c.input(c.bytes(U8, {1, 3, 8, 8}));
    const ValueId w = c.constant(c.bytes(S8, {4, 3, 3, 3}));
    c.node("ConvInteger", {x, w});
    const Graph& g = c.graph();
    EXPECT_EQ(backend->referenceNodes(KernelRequest::of(g, NodeSet::all(g.numNodes()), "test")).count(), 0);
  }
  {
    Case c;
    const int64_t C = 33100;
    const ValueId x = c.input(c.bytes(U8, {1, C, 1, 1}));
    const ValueId s = c.constant(Case::floats({}, {0.01f}));
    const ValueId zp = c.constant(Case::ints(U8, {}, {0}));
    const ValueId w = c.constant(c.bytes(U8, {1, C, 1, 1}));
    c.node("QLinearConv", {x, s, zp, w, s, zp, s, zp});
    const Graph& g = c.graph();
    EXPECT_EQ(backend->referenceNodes(KernelRequest::of(g, NodeSet::all(g.numNodes()), "test")).count(), 1);
  }
}

// ---------------------------------------------------------------- quantise / dequantise

// x with exact halfway points of x / scale, values past both ends, and a
// length that is no multiple of the vector width.
std::vector<float> quantizeInputs(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-400.0f, 400.0f);
  for (int64_t i = 0; i < n; ++i) {
    if (i % 3 == 0)
      v[i] = scale * (static_cast<float>(i % 301) - 150.0f + 0.5f);  // ties
    else
      v[i] = d(rng) * scale;
  }
  return v;
}

TEST(NativeInt8, QuantizeLinearMatchesTheReferenceBitForBit) {
  for (ElementType q : {U8, S8}) {
    SCOPED_TRACE(elementTypeName(q));
    {  // Per tensor, over several chunks.
      Case c;
      const int64_t n = 70001;
      const ValueId x = c.input(Case::floats({n}, quantizeInputs(n, 0.5f)));
      const ValueId s = c.constant(Case::floats({}, {0.5f}));
      const ValueId z = c.constant(Case::ints(q, {}, {q == U8 ? 3 : -2}));
      c.node("QuantizeLinear", {x, s, z});
      const std::vector<Tensor> y = c.expectExact("vectorised quantise");
      ASSERT_EQ(y.size(), 1u);
      const auto [lo, hi] = saturated(y[0]);
      EXPECT_GT(lo, 0);
      EXPECT_GT(hi, 0);
    }
    for (int64_t axis : {1, -1}) {  // per channel; per last axis (rows of one element)
      SCOPED_TRACE("axis " + std::to_string(axis));
      Case c;
      const Shape shape{2, 3, 5, 7};
      const int64_t len = axis == 1 ? 3 : 7;
      std::vector<float> scales, zps;
      std::vector<int64_t> z;
      for (int64_t i = 0; i < len; ++i) {
        scales.push_back(0.25f * static_cast<float>(i + 1));
        z.push_back(q == U8 ? 120 + i : i - 3);
      }
      const ValueId x = c.input(Case::floats(shape, quantizeInputs(numElements(shape), 0.25f)));
      const ValueId s = c.constant(Case::floats({len}, scales));
      const ValueId zp = c.constant(Case::ints(q, {len}, z));
      AttributeMap a;
      a.set("axis", Attribute(axis));
      c.node("QuantizeLinear", {x, s, zp}, a);
      c.expectExact("vectorised quantise");
    }
  }
  {  // No zero point: uint8.
    Case c;
    const ValueId x = c.input(Case::floats({37}, quantizeInputs(37, 0.1f)));
    c.node("QuantizeLinear", {x, c.constant(Case::floats({}, {0.1f}))});
    c.expectExact("vectorised quantise");
  }
}

// Every class of float32 input a quantizer meets, for `scale` and the
// output range [lo, hi] shifted by the zero point `zp`: signed zeros,
// denormals, the ends of the normal range, infinities, NaNs (quiet, negative,
// signalling payload), integer multiples of the scale and the rounding ties
// (k + 1/2) * scale with their neighbours one ulp off, the saturation bounds
// and their ties, and a dense sweep: random bit patterns (every exponent) and
// random values within the type's range. Its length is no multiple of 16.
std::vector<float> everyFloatClass(float scale, float zp, float lo, float hi, uint32_t seed) {
  auto bits = [](uint32_t b) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
  };
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f, -0.0f, bits(1), bits(0x80000001u), bits(0x007FFFFFu), bits(0x807FFFFFu),
                          bits(0x00400000u), bits(0x80000123u), FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX, inf, -inf,
                          std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                          bits(0x7F800001u), bits(0xFFC00123u), 1.0f, -1.0f};
  auto withNeighbours = [&](float x) {
    v.push_back(x);
    v.push_back(std::nextafter(x, inf));
    v.push_back(std::nextafter(x, -inf));
  };
  for (int k = -300; k <= 300; ++k) {
    withNeighbours(static_cast<float>(k) * scale);
    withNeighbours((static_cast<float>(k) + 0.5f) * scale);
  }
  for (float end : {lo - zp, hi - zp})
    for (float d : {-1.5f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}) withNeighbours((end + d) * scale);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> anyBits;
  std::uniform_real_distribution<float> inRange(-400.0f, 400.0f);
  for (int i = 0; i < 40000; ++i) {
    v.push_back(bits(anyBits(rng)));
    v.push_back(inRange(rng) * scale);
  }
  v.push_back(0.5f * scale);  // an odd length: the masked tail
  if (v.size() % 16 == 0) v.push_back(-0.5f * scale);
  return v;
}

// Which scales the quantizers multiply by the reciprocal of: a power of two
// whose reciprocal is a float (core/ops/requantize.h), no other.
TEST(NativeInt8, OnlyAPowerOfTwoScaleHasAnExactReciprocal) {
  float r = 0.0f;
  for (float s : {0.5f, 1.0f, 0.0078125f, 1024.0f, -0.25f, FLT_MIN, 0x1p127f, 0x1p-127f}) {
    EXPECT_TRUE(exactReciprocal(s, r)) << s;
    EXPECT_EQ(r * s, 1.0f) << s;
  }
  for (float s : {1.0f / 255.0f, 0.0123f, 3.0f, 0.1f, 1e-30f, 1e30f, 0x1p-128f, 0x1p-149f, 0.0f, -0.0f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    EXPECT_FALSE(exactReciprocal(s, r)) << s;
}

// The other scales (core/ops/requantize.h): a reciprocal is taken only where
// the scale and its reciprocal are normal floats (refused: zeros,
// denormals, a scale whose reciprocal is denormal or overflows, infinities,
// NaN), and the product decides the integer only clear of a rounding tie:
// wherever reciprocalDecides says so, x * RN(1 / scale) rounds to the
// division's integer (or both saturate to the same end), for ties, their
// neighbours and random values at each scale; at the ties where the two
// differ, it says no.
TEST(NativeInt8, BoundedReciprocalDecidesOnlyClearOfTies) {
  float r = 0.0f;
  for (float s : {1.0f / 255.0f, 0.0123f, 3.0f, 0.1f, 1e30f, 1e-30f, FLT_MIN, -0.07f, 0.5f}) {
    EXPECT_TRUE(boundedReciprocal(s, r)) << s;
    EXPECT_EQ(r, 1.0f / s) << s;
  }
  for (float s : {0.0f, -0.0f, 1e-40f, 0x1p-149f, 3e38f, FLT_MAX, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    EXPECT_FALSE(boundedReciprocal(s, r)) << s;
  std::mt19937 rng(40);
  std::uniform_real_distribution<float> wide(-2000.0f, 2000.0f);
  int64_t undecided = 0;
  for (float s : {1.0f / 255.0f, 0.0123f, 0.0371f, 3.0f, 0.1f, 1e-30f, 1e30f, -0.07f}) {
    SCOPED_TRACE("scale " + std::to_string(s));
    ASSERT_TRUE(boundedReciprocal(s, r));
    std::vector<float> xs;
    for (int k = -1100; k <= 1100; ++k) {
      const float tie = (static_cast<float>(k) + 0.5f) * s;
      for (float x : {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 2 * tie + 1), static_cast<float>(k) * s})
        xs.push_back(x);
    }
    for (int i = 0; i < 20000; ++i) xs.push_back(wide(rng) * s);
    for (float x : xs) {
      const float q = x * r, exact = x / s;
      const float a = std::nearbyint(q), b = std::nearbyint(exact);
      if (!reciprocalDecides(q)) {
        ++undecided;
        continue;
      }
      if (std::fabs(q) > kReciprocalSaturates) {
        EXPECT_TRUE((a > 600) == (b > 600) && (a < -600) == (b < -600)) << "x = " << x << ": " << q << " vs " << exact;
      } else {
        EXPECT_EQ(a, b) << "x = " << x << ": x * r = " << q << ", x / scale = " << exact;
      }
    }
    // Where the product and the division round apart, the rule divides.
    for (float x : xs)
      if (std::fabs(x * r) <= kReciprocalSaturates && std::nearbyint(x * r) != std::nearbyint(x / s))
        EXPECT_FALSE(reciprocalDecides(x * r)) << "x = " << x;
#ifdef __AVX512F__
    // The quantizers' 16 lanes apply the same rule: the product where it
    // decides, the division elsewhere, bit for bit.
    const __m512 vrec = _mm512_set1_ps(r), vs = _mm512_set1_ps(s);
    for (size_t i = 0; i + 16 <= xs.size(); i += 16) {
      float got[16];
      _mm512_storeu_ps(got, divideByReciprocal16(_mm512_loadu_ps(xs.data() + i), vrec, vs));
      for (size_t l = 0; l < 16; ++l) {
        const float x = xs[i + l], want = reciprocalDecides(x * r) ? x * r : x / s;
        EXPECT_EQ(std::memcmp(&got[l], &want, sizeof want), 0) << "x = " << x << ": " << got[l] << " vs " << want;
      }
    }
#endif
  }
  EXPECT_GT(undecided, 0) << "the ties were left to the division";
}

// QuantizeLinear multiplies by 1 / scale only where that gives the spec's
// division bit for bit: every class of float32 input (everyFloatClass), for
// power-of-two scales (the multiplication, the smallest normal and the
// largest included), the denormal ones whose reciprocal overflows, and scales
// with no exact reciprocal (1/255, 0.0123, tiny, huge), u8 and s8, zero
// points at both ends and between. Native's vectorised step, native's fused
// pass and oneDNN's quantizer against the reference executor's division.
TEST(NativeInt8, QuantizeLinearMultipliesOnlyWhereThatIsTheDivision) {
  const std::vector<float> scales = {0.5f,       0.0078125f, 1024.0f, FLT_MIN, 0x1p127f, 0x1p-127f, 0x1p-149f,
                                     1.0f / 255, 0.0123f,    1e-30f,  1e-40f,  1e30f,    3e38f,     -0.25f};
  uint32_t seed = 1;
  for (ElementType q : {U8, S8})
    for (int64_t zero : q == U8 ? std::vector<int64_t>{0, 128, 255} : std::vector<int64_t>{-128, 0, 7})
      for (float scale : scales) {
        const float lo = q == U8 ? 0.0f : -128.0f, hi = q == U8 ? 255.0f : 127.0f;
        SCOPED_TRACE(std::string(elementTypeName(q)) + " zero point " + std::to_string(zero) + " scale " +
                     std::to_string(scale) + " (" + std::to_string(std::ilogb(scale)) + ")");
        const std::vector<float> v = everyFloatClass(scale, static_cast<float>(zero), lo, hi, seed++);
        const int64_t n = static_cast<int64_t>(v.size());
        Tensor want;
        {
          Case c;
          c.node("QuantizeLinear", {c.input(Case::floats({n}, v)), c.constant(Case::floats({}, {scale})),
                                    c.constant(Case::ints(q, {}, {zero}))});
          want = referenceValues(c.graph(), {Case::floats({n}, v)})[c.graph().outputs()[0]];
          c.expectExact("vectorised quantise");
        }
        {  // Fused after a Mul by 1, which keeps every x as it is.
          Case c;
          const ValueId x =
              c.node("Mul", {c.input(Case::floats({n}, v)), c.constant(Case::floats({}, {1.0f}))}, {}, 1, true)[0];
          c.node("QuantizeLinear", {x, c.constant(Case::floats({}, {scale})), c.constant(Case::ints(q, {}, {zero}))});
          c.expectExact("pass");
        }
        Tensor mine(q, {n});
        onednn::quantizeLinear(v.data(), n, scale, static_cast<int32_t>(zero), q == S8, mine.raw());
        const int64_t at = Case::firstDifference(mine, want);
        EXPECT_EQ(at, -1) << "oneDNN's quantizer, x = " << (at < 0 ? 0.0f : v[static_cast<size_t>(at)]) << ": "
                          << Case::valueAt(mine, at) << ", reference " << Case::valueAt(want, at);
      }
  {  // Per channel: a power of two next to scales without an exact reciprocal.
    Case c;
    const std::vector<float> v = everyFloatClass(0.5f, 0.0f, -128.0f, 127.0f, 99);
    const int64_t rows = static_cast<int64_t>(v.size()) / 4;
    const std::vector<float> x(v.begin(), v.begin() + rows * 4);
    c.node("QuantizeLinear", {c.input(Case::floats({rows, 4}, x)),
                              c.constant(Case::floats({4}, {0.5f, 0.0123f, 0x1p-149f, 2.0f})),
                              c.constant(Case::ints(S8, {4}, {0, -3, 5, 127}))},
           [] {
             AttributeMap a;
             a.set("axis", Attribute(int64_t{1}));
             return a;
           }());
    c.expectExact("vectorised quantise");
  }
}

// NaN quantises to the type's lowest value (uint8 0, int8 -128) whatever
// the zero point, as ONNX Runtime (MLAS) and the ONNX reference give on x86;
// +-inf saturate to the ends (core/ops/requantize.h). The reference first,
// then native's vectorised step (NaNs in full vectors and in the masked
// tail), its scalar loop's arithmetic, and a fused pass: the same bytes.
TEST(NativeInt8, QuantizeLinearOfNaNIsTheTypesLowestValue) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(quantizeValue(nan, 0.5f, 3.0f, 0.0f, 255.0f), 0.0f);
  EXPECT_EQ(quantizeValue(-nan, 0.5f, -7.0f, -128.0f, 127.0f), -128.0f);
  EXPECT_EQ(quantizeValue(inf, 0.5f, 3.0f, 0.0f, 255.0f), 255.0f);
  EXPECT_EQ(quantizeValue(-inf, 0.5f, 3.0f, -128.0f, 127.0f), -128.0f);
  EXPECT_EQ(quantizeValue(2.5f, 1.0f, 0.0f, 0.0f, 255.0f), 2.0f);  // ties to even, as before
  for (ElementType q : {U8, S8}) {
    for (int64_t zero : {int64_t{0}, int64_t{5}, int64_t{-5}}) {
      if (q == U8 && zero < 0) continue;
      SCOPED_TRACE(std::string(elementTypeName(q)) + " zero point " + std::to_string(zero));
      const int64_t n = 37;  // two full vectors of 16 and a tail of 5
      std::vector<float> v = quantizeInputs(n, 0.5f);
      for (int64_t i : {0, 17, 33, 36}) v[static_cast<size_t>(i)] = nan;
      v[5] = inf;
      v[34] = -inf;
      const int64_t lowest = q == U8 ? 0 : -128, highest = q == U8 ? 255 : 127;
      {
        Case c;
        c.node("QuantizeLinear", {c.input(Case::floats({n}, v)), c.constant(Case::floats({}, {0.5f})),
                                  c.constant(Case::ints(q, {}, {zero}))});
        const std::vector<Tensor> ref = referenceValues(c.graph(), {Case::floats({n}, v)});
        const std::vector<int64_t> y = ref[c.graph().outputs()[0]].toInts();
        for (int64_t i : {0, 17, 33, 36}) EXPECT_EQ(y[static_cast<size_t>(i)], lowest) << "element " << i;
        EXPECT_EQ(y[5], highest);
        EXPECT_EQ(y[34], lowest);
        c.expectExact("vectorised quantise");
      }
      {  // In a fused pass: an Add keeps a NaN a NaN, then the quantizer.
        Case c;
        const ValueId r =
            c.node("Add", {c.input(Case::floats({n}, v)), c.constant(Case::floats({}, {0.0f}))}, {}, 1, true)[0];
        c.node("QuantizeLinear", {r, c.constant(Case::floats({}, {0.5f})), c.constant(Case::ints(q, {}, {zero}))});
        const std::vector<Tensor> y = c.expectExact("pass");
        ASSERT_EQ(y.size(), 1u);
        EXPECT_EQ(y[0].toInts()[17], lowest);
      }
    }
  }
}

TEST(NativeInt8, DequantizeLinearMatchesTheReference) {
  for (ElementType q : {U8, S8}) {
    SCOPED_TRACE(elementTypeName(q));
    {
      Case c;
      const ValueId x = c.input(c.bytes(q, {3, 1000, 7}));
      c.node("DequantizeLinear", {x, c.constant(Case::floats({}, {0.037f})),
                                  c.constant(Case::ints(q, {}, {q == U8 ? 250 : -100}))});
      c.expectExact("vectorised dequantise");
    }
    {
      Case c;
      const ValueId x = c.input(c.bytes(q, {2, 5, 3}));
      AttributeMap a;
      a.set("axis", Attribute(int64_t{-2}));
      c.node("DequantizeLinear",
             {x, c.constant(Case::floats({5}, {0.1f, 0.2f, 0.3f, 3.0f, 1e-3f})),
              c.constant(Case::ints(q, {5}, {0, 1, 2, 3, 4}))},
             a);
      c.expectExact("vectorised dequantise");
    }
  }
}

TEST(NativeInt8, DynamicQuantizeLinearMatchesTheReferenceBitForBit) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-3.0f, 7.0f);
  std::vector<std::vector<float>> inputs;
  std::vector<float> mixed(100003);
  for (float& v : mixed) v = d(rng);
  inputs.push_back(mixed);
  inputs.push_back(std::vector<float>(45, 0.0f));  // all zero: scale 1
  std::vector<float> positive(333);
  for (size_t i = 0; i < positive.size(); ++i) positive[i] = 0.01f * static_cast<float>(i);
  inputs.push_back(positive);  // min clamps to 0
  std::vector<float> negative(129);
  for (size_t i = 0; i < negative.size(); ++i) negative[i] = -0.37f * static_cast<float>(i) - 1.0f;
  inputs.push_back(negative);  // max clamps to 0
  for (const std::vector<float>& v : inputs) {
    SCOPED_TRACE("n " + std::to_string(v.size()));
    Case c;
    c.node("DynamicQuantizeLinear", {c.input(Case::floats({static_cast<int64_t>(v.size())}, v))}, {}, 3);
    c.expectExact("parallel min/max");
  }
}

// A residual join as QDQ models write it, DequantizeLinear x2 -> Add -> Relu
// -> QuantizeLinear, is one fused pass reading and writing 8-bit integers,
// bit for bit the reference's (ties rounded to even, both ends saturated).
// So is a float tensor quantized and dequantized in the pass, per channel
// too, and a quantized tensor that is both stored and read on.
TEST(NativeInt8, QuantizersFuseIntoOneElementwisePass) {
  for (ElementType q : {U8, S8}) {
    SCOPED_TRACE(elementTypeName(q));
    const int64_t zero = q == U8 ? 128 : 0;
    {
      Case c;
      const Shape shape{1, 19, 23, 29};
      const ValueId a = c.input(c.bytes(q, shape));
      const ValueId b = c.input(c.bytes(q, shape));
      const ValueId da = c.node("DequantizeLinear", {a, c.constant(Case::floats({}, {0.05f})),
                                                     c.constant(Case::ints(q, {}, {zero + 3}))}, {}, 1, true)[0];
      const ValueId db = c.node("DequantizeLinear", {b, c.constant(Case::floats({}, {0.0625f})),
                                                     c.constant(Case::ints(q, {}, {zero - 5}))}, {}, 1, true)[0];
      const ValueId sum = c.node("Add", {da, db}, {}, 1, true)[0];
      const ValueId r = c.node("Relu", {sum}, {}, 1, true)[0];
      c.node("QuantizeLinear", {r, c.constant(Case::floats({}, {0.025f})), c.constant(Case::ints(q, {}, {zero - 100}))});
      const std::vector<Tensor> y = c.expectExact("pass");
      ASSERT_EQ(y.size(), 1u);
      EXPECT_EQ(y[0].elementType(), q);
      const auto [lo, hi] = saturated(y[0]);
      EXPECT_GT(hi, 0);  // the sum overflows the output's range
      if (q == U8) EXPECT_EQ(lo, 0);  // Relu keeps it at or above the zero point
    }
    {  // Float in, quantized and dequantized per channel, added to a float.
      Case c;
      const Shape shape{2, 3, 5, 33};
      const ValueId x = c.input(Case::floats(shape, quantizeInputs(numElements(shape), 0.25f)));
      const ValueId y = c.input(Case::floats(shape, quantizeInputs(numElements(shape), 0.5f)));
      const ValueId s = c.constant(Case::floats({3}, {0.25f, 0.5f, 0.125f}));
      const ValueId z = c.constant(Case::ints(q, {3}, {zero, zero + 7, zero - 9}));
      const ValueId xq = c.node("QuantizeLinear", {x, s, z})[0];  // stored, and read on
      const ValueId xd = c.node("DequantizeLinear", {xq, s, z}, {}, 1, true)[0];
      c.node("Add", {xd, y});
      c.expectExact("pass");
    }
  }
}

// Every pair of bytes (a, b), twice over: a[i] = i >> 8, b[i] = i & 255.
std::vector<int64_t> everyPair(bool high, int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = high ? (i >> 8) & 255 : i & 255;
  return v;
}

// The residual join on 8-bit tensors of one shape and layout runs as one
// table lookup (native_byte_table.h), its bytes the reference's for every
// pair of input bytes: u8 and s8, different scales and zero points for a, b
// and the output (scales that are not powers of two, so x / scale is a true
// division with ties), with and without Relu; and a quantized activation of
// one input (DequantizeLinear -> Relu -> QuantizeLinear) by a 256 table.
TEST(NativeInt8, AQuantizedJoinRunsAsOneTableLookup) {
  const Shape shape{2, 256, 16, 16};  // 131072 elements: every pair twice
  const int64_t n = numElements(shape);
  for (ElementType q : {U8, S8}) {
    for (bool relu : {true, false}) {
      SCOPED_TRACE(std::string(elementTypeName(q)) + (relu ? " relu" : " no relu"));
      const int64_t zero = q == U8 ? 128 : 0;
      Case c;
      const ValueId a = c.input(Case::ints(q, shape, everyPair(true, n)));
      const ValueId b = c.input(Case::ints(q, shape, everyPair(false, n)));
      const ValueId da = c.node("DequantizeLinear", {a, c.constant(Case::floats({}, {0.0371f})),
                                                     c.constant(Case::ints(q, {}, {zero + 3}))}, {}, 1, true)[0];
      const ValueId db = c.node("DequantizeLinear", {b, c.constant(Case::floats({}, {0.0625f})),
                                                     c.constant(Case::ints(q, {}, {zero - 11}))}, {}, 1, true)[0];
      ValueId v = c.node("Add", {da, db}, {}, 1, true)[0];
      if (relu) v = c.node("Relu", {v}, {}, 1, true)[0];
      c.node("QuantizeLinear", {v, c.constant(Case::floats({}, {0.0123f})), c.constant(Case::ints(q, {}, {zero - 100}))});
      const std::vector<Tensor> y = c.expectExact("256x256 table");
      ASSERT_EQ(y.size(), 1u);
      EXPECT_EQ(y[0].elementType(), q);
      const auto [lo, hi] = saturated(y[0]);
      EXPECT_GT(hi, 0);  // saturates at the top
      if (!relu) EXPECT_GT(lo, 0);  // and, without Relu, at the bottom
    }
    {
      SCOPED_TRACE(std::string(elementTypeName(q)) + " one input");
      Case c;
      const ValueId a = c.input(Case::ints(q, {3, 7, 13, 17}, everyPair(false, 3 * 7 * 13 * 17)));
      const ValueId da = c.node("DequantizeLinear", {a, c.constant(Case::floats({}, {0.1f})),
                                                     c.constant(Case::ints(q, {}, {q == U8 ? 120 : -7}))}, {}, 1, true)[0];
      const ValueId r = c.node("Relu", {da}, {}, 1, true)[0];
      c.node("QuantizeLinear", {r, c.constant(Case::floats({}, {0.3f})), c.constant(Case::ints(q, {}, {q == U8 ? 5 : -60}))});
      c.expectExact("256 table");
    }
  }
}

// Every join the table takes (native_byte_table.h: Add, Sub, Mul, Max, Min,
// then an activation) at odd channel counts and sizes, u8 in and s8 out or
// the other way, against the reference's bytes; and the backend's rule
// names each as one group.
TEST(NativeInt8, EveryQuantizedJoinAtOddChannelsRunsAsOneTableLookup) {
  const char* joins[] = {"Add", "Sub", "Mul", "Max", "Min"};
  const Shape shapes[] = {{1, 17, 17, 15}, {2, 7, 19, 17}};
  int k = 0;
  for (const char* join : joins)
    for (const Shape& shape : shapes) {
      const ElementType in = k % 2 ? S8 : U8, out = k % 2 ? U8 : S8;
      ++k;
      SCOPED_TRACE(std::string(join) + " " + shapeToString(shape) + " " + std::string(elementTypeName(in)) + " -> " +
                   std::string(elementTypeName(out)));
      Case c;
      const ValueId a = c.input(c.bytes(in, shape));
      const ValueId b = c.input(c.bytes(in, shape));
      const int64_t zin = in == U8 ? 131 : -3, zout = out == U8 ? 100 : 7;
      const ValueId da = c.node("DequantizeLinear", {a, c.constant(Case::floats({}, {0.0371f})),
                                                     c.constant(Case::ints(in, {}, {zin}))}, {}, 1, true)[0];
      const ValueId db = c.node("DequantizeLinear", {b, c.constant(Case::floats({}, {0.0213f})),
                                                     c.constant(Case::ints(in, {}, {zin - 2}))}, {}, 1, true)[0];
      ValueId v = c.node(join, {da, db}, {}, 1, true)[0];
      AttributeMap clip;
      clip.set("min", Attribute(-1.5f));
      clip.set("max", Attribute(2.5f));
      v = c.node("Clip", {v}, clip, 1, true)[0];
      c.node("QuantizeLinear", {v, c.constant(Case::floats({}, {0.0173f})), c.constant(Case::ints(out, {}, {zout}))});
      c.expectExact("256x256 table");
      const auto groups = native::quantizedJoinGroups(c.graph());
      ASSERT_EQ(groups.size(), 1u);
      EXPECT_EQ(groups[0].first.count(), c.graph().numNodes());
    }
}

// Where the rule does not hold the join runs as the float pass, still
// exact: a scale per channel (a leaf of its own), a broadcast input, an
// output of float, fewer than 4096 elements.
TEST(NativeInt8, AJoinTheTableCannotTakeRunsAsTheFloatPass) {
  const Shape shape{2, 16, 48, 48};
  auto join = [&](Case& c, ValueId a, ValueId b, ValueId scaleA, bool quantize) {
    const ValueId da = c.node("DequantizeLinear", {a, scaleA, c.constant(Case::ints(U8, {}, {131}))}, {}, 1, true)[0];
    const ValueId db = c.node("DequantizeLinear", {b, c.constant(Case::floats({}, {0.0625f})),
                                                   c.constant(Case::ints(U8, {}, {123}))}, {}, 1, true)[0];
    const ValueId r = c.node("Relu", {c.node("Add", {da, db}, {}, 1, true)[0]}, {}, 1, quantize)[0];
    if (quantize) c.node("QuantizeLinear", {r, c.constant(Case::floats({}, {0.025f})), c.constant(Case::ints(U8, {}, {28}))});
  };
  {
    SCOPED_TRACE("scale per channel");
    Case c;
    std::vector<float> scales;
    for (int k = 0; k < 16; ++k) scales.push_back(0.01f * static_cast<float>(k + 1));
    AttributeMap axis;
    axis.set("axis", Attribute(int64_t{1}));
    const ValueId a = c.input(c.bytes(U8, shape));
    const ValueId b = c.input(c.bytes(U8, shape));
    const ValueId da = c.node("DequantizeLinear", {a, c.constant(Case::floats({16}, scales)),
                                                   c.constant(Case::ints(U8, {16}, std::vector<int64_t>(16, 131)))}, axis, 1, true)[0];
    const ValueId db = c.node("DequantizeLinear", {b, c.constant(Case::floats({}, {0.0625f})),
                                                   c.constant(Case::ints(U8, {}, {123}))}, {}, 1, true)[0];
    const ValueId r = c.node("Relu", {c.node("Add", {da, db}, {}, 1, true)[0]}, {}, 1, true)[0];
    c.node("QuantizeLinear", {r, c.constant(Case::floats({}, {0.025f})), c.constant(Case::ints(U8, {}, {28}))});
    c.expectExact("pass");
    EXPECT_EQ(c.description().find("table"), std::string::npos) << c.description();
  }
  {
    SCOPED_TRACE("broadcast");
    Case c;
    const ValueId a = c.input(c.bytes(U8, shape));
    const ValueId b = c.input(c.bytes(U8, {1, 16, 1, 48}));
    join(c, a, b, c.constant(Case::floats({}, {0.05f})), true);
    c.expectExact("pass");
    EXPECT_EQ(c.description().find("table"), std::string::npos) << c.description();
  }
  {
    SCOPED_TRACE("float output");
    Case c;
    const ValueId a = c.input(c.bytes(U8, shape));
    const ValueId b = c.input(c.bytes(U8, shape));
    join(c, a, b, c.constant(Case::floats({}, {0.05f})), false);
    c.expectExact("pass");
    EXPECT_EQ(c.description().find("table"), std::string::npos) << c.description();
  }
  {
    SCOPED_TRACE("fewer than 4096 elements");
    Case c;
    const ValueId a = c.input(c.bytes(U8, {1, 15, 16, 17}));
    const ValueId b = c.input(c.bytes(U8, {1, 15, 16, 17}));
    join(c, a, b, c.constant(Case::floats({}, {0.05f})), true);
    c.expectExact("pass");
    EXPECT_EQ(c.description().find("table"), std::string::npos) << c.description();
  }
}

// [N, C, spatial...] in plain order -> the same values channels last.
Tensor toChannelsLast(const Tensor& t) {
  const Shape& s = t.shape();
  const int64_t n = s[0], c = s[1], spatial = t.numElements() / (n * c);
  const size_t es = elementSize(t.elementType());
  Tensor out(t.elementType(), s);
  const char* from = static_cast<const char*>(t.raw());
  char* to = static_cast<char*>(out.raw());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < spatial; ++p)
        std::memcpy(to + ((b * spatial + p) * c + ch) * es, from + ((b * c + ch) * spatial + p) * es, es);
  return out;
}

// The residual join above offers channels last (the layout the int8
// convolutions hand over) for its full-shape inputs and output, under the
// name every backend shares, and, switched on one input and the output
// (the other input stays plain), computes the reference's bytes in that
// layout. A group with a view or a reduction offers nothing.
TEST(NativeInt8, AnElementwisePassRunsOverChannelsLastMemory) {
  test_support::ThreadCountGuard guard;
  Case c;
  const Shape shape{2, 19, 7, 5};
  const ValueId a = c.input(c.bytes(U8, shape));
  const ValueId b = c.input(c.bytes(U8, shape));
  const ValueId da = c.node("DequantizeLinear", {a, c.constant(Case::floats({}, {0.05f})),
                                                 c.constant(Case::ints(U8, {}, {131}))}, {}, 1, true)[0];
  const ValueId db = c.node("DequantizeLinear", {b, c.constant(Case::floats({}, {0.0625f})),
                                                 c.constant(Case::ints(U8, {}, {123}))}, {}, 1, true)[0];
  const ValueId sum = c.node("Add", {da, db}, {}, 1, true)[0];
  const ValueId r = c.node("Relu", {sum}, {}, 1, true)[0];
  c.node("QuantizeLinear", {r, c.constant(Case::floats({}, {0.025f})), c.constant(Case::ints(U8, {}, {28}))});
  const Graph& g = c.graph();
  const KernelRequest request = KernelRequest::of(g, NodeSet::all(g.numNodes()), "test");
  std::unique_ptr<Backend> backend = createBackend("native");
  const std::vector<Tensor> in = {c.bytes(U8, shape), c.bytes(U8, shape)};
  const std::vector<Tensor> ref = referenceValues(g, in);
  for (int threads : {1, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    setThreadCount(threads);
    CompileResult k = backend->compile(request);
    ASSERT_TRUE(k) << k.refusal;
    ASSERT_EQ(k.kernel->nativeInputLayout(0), channelsLastLayout(shape, U8));
    ASSERT_EQ(k.kernel->nativeOutputLayout(0), channelsLastLayout(shape, U8));
    k.kernel->useNativeInputLayout(0);
    k.kernel->useNativeOutputLayout(0);
    const size_t first = request.inputs[0] == a ? 0 : 1;  // the kernel's input 0 is graph input `first`
    std::vector<Tensor> given = {in[0].clone(), in[1].clone()};
    given[first] = toChannelsLast(in[first]);
    if (first == 1) std::swap(given[0], given[1]);
    const std::vector<Tensor> out = runKernel(*k.kernel, request, given);
    ASSERT_EQ(out.size(), 1u);
    const Tensor want = toChannelsLast(ref[request.outputs[0]]);
    EXPECT_EQ(std::memcmp(out[0].raw(), want.raw(), static_cast<size_t>(want.numElements())), 0);
  }
  {  // A reduction in the group: no layout offered.
    Case v;
    const ValueId x = v.input(Case::floats({1, 4, 3, 3}, std::vector<float>(36, 1.0f)));
    const ValueId e = v.node("Exp", {x}, {}, 1, true)[0];
    AttributeMap axes;
    axes.set("axes", Attribute(std::vector<int64_t>{1}));
    v.node("ReduceSum", {e}, axes);
    const Graph& vg = v.graph();
    CompileResult k = backend->compile(KernelRequest::of(vg, NodeSet::all(vg.numNodes()), "test"));
    ASSERT_TRUE(k) << k.refusal;
    EXPECT_FALSE(k.kernel->nativeInputLayout(0).has_value());
    EXPECT_FALSE(k.kernel->nativeOutputLayout(0).has_value());
  }
}

// ---------------------------------------------------------------- candidates

// The dynamic chain ONNX Runtime's quantiser writes: the native spec's rule
// (every op) offers each quantised op as a single-node group, and each one
// compiles to its int8 kernel, not the reference.
TEST(NativeInt8, RuleOffersTheQuantizedOpsAsCandidates) {
  Case c;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> xs(2 * 3 * 9 * 9);
  for (float& v : xs) v = d(rng);
  const ValueId x = c.input(Case::floats({2, 3, 9, 9}, xs));
  const std::vector<ValueId> q = c.node("DynamicQuantizeLinear", {x}, {}, 3, true);
  const ValueId w = c.constant(c.bytes(U8, {4, 3, 3, 3}));
  const ValueId wzp = c.constant(Case::ints(U8, {}, {128}));
  const ValueId acc = c.node("ConvInteger", {q[0], w, q[2], wzp}, {}, 1, true)[0];
  AttributeMap to;
  to.set("to", Attribute(int64_t{1}));
  const ValueId f = c.node("Cast", {acc}, to, 1, true)[0];
  c.node("Mul", {f, q[1]});
  const Graph& g = c.graph();
  const BackendSpec spec = loadBackendSpec(std::string(COLLAGE_SOURCE_DIR) + "/resources/backends/native.toml");
  const std::vector<GeneratedGroup> groups = generateGroups(g, *spec.rule, spec.limits);
  std::unique_ptr<Backend> backend = createBackend("native");
  for (const std::string op : {"DynamicQuantizeLinear", "ConvInteger"}) {
    SCOPED_TRACE(op);
    bool offered = false;
    for (const GeneratedGroup& group : groups) {
      const std::vector<NodeId> nodes = group.nodes.members();
      if (nodes.size() != 1 || g.node(nodes[0]).op != op) continue;
      offered = true;
      CompileResult r = backend->compile(KernelRequest::of(g, group.nodes, group.label));
      ASSERT_TRUE(r) << r.refusal;
      const std::string description = describeNativeKernel(*r.kernel);
      EXPECT_EQ(description.find("reference"), std::string::npos) << description;
      KernelCheckResult check = checkKernelAgainstReference(*backend, g, group.nodes, 3);
      EXPECT_TRUE(check.ok) << check.message;
    }
    EXPECT_TRUE(offered) << "no single-node group";
  }
}

// On a QDQ ResNet the candidate generator offers each residual join for
// native, both DequantizeLinears (the skip input's is the importer's copy
// for that reader) with the Add, the Relu and the QuantizeLinear, as one
// group: the backend's rule in code names it (the grown groups never hold
// both DequantizeLinears). Each of 4096 elements or more compiles to the
// table lookup, and every one matches the reference.
TEST(NativeInt8, GeneratorOffersTheQdqResidualJoinAsOneGroup) {
  const Graph g = importOnnx(std::string(COLLAGE_SOURCE_DIR) + "/resources/models/resnet50_small_int8_qdq.onnx");
  const BackendSpec spec = loadBackendSpec(std::string(COLLAGE_SOURCE_DIR) + "/resources/backends/native.toml");
  std::unique_ptr<Backend> backend = createBackend("native");
  const CandidateSet set = enumerateCandidates(g, {BackendCapabilities{&spec, backend->codeRule()}});
  int joins = 0, tables = 0;
  for (const Candidate& candidate : set.all()) {
    std::map<std::string, int> ops;
    for (NodeId n : candidate.nodes.members()) ++ops[g.node(n).op];
    if (candidate.nodes.count() != 5 || ops["DequantizeLinear"] != 2 || ops["Add"] != 1 || ops["Relu"] != 1 ||
        ops["QuantizeLinear"] != 1)
      continue;
    ++joins;
    EXPECT_EQ(candidate.origin, "rule:quantized_join");
    CompileResult r = backend->compile(KernelRequest::of(g, candidate.nodes, candidate.origin));
    ASSERT_TRUE(r) << r.refusal;
    const std::string description = describeNativeKernel(*r.kernel);
    const bool table = description.find("256x256 table") != std::string::npos;
    int64_t elements = 0;
    for (NodeId n : candidate.nodes.members())
      if (g.node(n).op == "QuantizeLinear") elements = g.value(g.node(n).outputs[0]).type.numElements();
    EXPECT_EQ(table, elements >= 4096) << description;
    tables += table;
    KernelCheckResult check = checkKernelAgainstReference(*backend, g, candidate.nodes, 3);
    EXPECT_TRUE(check.ok) << check.message;
  }
  std::printf("%d residual joins offered, %d run as a table\n", joins, tables);
  EXPECT_GE(joins, 4) << "no residual join offered";
  EXPECT_GE(tables, 2);
}

}  // namespace
}  // namespace collage
