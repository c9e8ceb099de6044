// The compute-heavy reference kernels (Conv, ConvTranspose, Gemm, MatMul,
// pools, normalisations, Softmax, Pad, Resize), their shared ConvGeometry and
// the reference sgemm, checked against naive loops and hand-worked values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/ops/conv_geometry.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_gemm.h"
#include "core/ops/reference_executor.h"

namespace collage {
namespace {

using Ints = std::vector<int64_t>;

AttributeMap attrs(std::initializer_list<std::pair<const std::string, Attribute>> list) {
  AttributeMap m;
  for (const auto& [k, v] : list) m.set(k, v);
  return m;
}

Node makeNode(const std::string& op, AttributeMap a, int numInputs = 1, int numOutputs = 1) {
  Node n;
  n.name = "n1";
  n.op = op;
  n.attrs = std::move(a);
  for (int i = 0; i < numInputs; ++i) n.inputs.push_back(i);
  for (int i = 0; i < numOutputs; ++i) n.outputs.push_back(100 + i);
  return n;
}

// Evaluates `op` with the registry's defaults filled in, as the importer does.
// A null input stands for an absent optional one.
std::vector<Tensor> eval(const std::string& op, const std::vector<const Tensor*>& inputs,
                         AttributeMap a = {}, int numOutputs = 1) {
  const OpSchema& schema = OpRegistry::instance().get(op);
  for (const AttributeSpec& spec : schema.attributes)
    if (!a.has(spec.name) && spec.defaultValue) a.set(spec.name, *spec.defaultValue);
  Node node = makeNode(op, a, static_cast<int>(inputs.size()), numOutputs);
  return evaluateNode(node, inputs);
}

Tensor randomTensor(Shape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor t(ElementType::Float32, std::move(shape));
  for (int64_t i = 0; i < t.numElements(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

void expectNear(const Tensor& got, const std::vector<float>& want, float tol = 1e-4f) {
  ASSERT_EQ(got.numElements(), static_cast<int64_t>(want.size())) << got.toString();
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.data<float>()[i], want[i], tol * (1 + std::fabs(want[i]))) << "at " << i;
}

void expectNear(const Tensor& got, const Tensor& want, float tol = 1e-4f) {
  ASSERT_EQ(got.shape(), want.shape());
  expectNear(got, want.toFloats(), tol);
}

// Odometer over a multi-index; returns false after the last index.
bool nextIndex(std::vector<int64_t>& index, const Shape& shape) {
  for (size_t k = shape.size(); k-- > 0;) {
    if (++index[k] < shape[k]) return true;
    index[k] = 0;
  }
  return false;
}

int64_t flatIndex(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t f = 0;
  for (size_t k = 0; k < shape.size(); ++k) f = f * shape[k] + index[k];
  return f;
}

// ============================== ConvGeometry ==============================

TEST(ConvGeometry, SameUpperAndLowerSplitOddPadding) {
  // in 5, kernel 4, stride 1: out 5, total pad 3.
  Node upper = makeNode("Conv", attrs({{"auto_pad", std::string("SAME_UPPER")}}), 2);
  ConvGeometry g = ConvGeometry::conv(upper, {1, 1, 5}, {1, 1, 4});
  EXPECT_EQ(g.outputSpatial, Ints{5});
  EXPECT_EQ(g.padsBegin, Ints{1});
  EXPECT_EQ(g.padsEnd, Ints{2});
  Node lower = makeNode("Conv", attrs({{"auto_pad", std::string("SAME_LOWER")}}), 2);
  g = ConvGeometry::conv(lower, {1, 1, 5}, {1, 1, 4});
  EXPECT_EQ(g.padsBegin, Ints{2});
  EXPECT_EQ(g.padsEnd, Ints{1});
  EXPECT_EQ(g.onnxPads(), (Ints{2, 1}));
}

TEST(ConvGeometry, SameWithStrideAndDilation) {
  // in 7x8, kernel 3x3, stride 2: out ceil(7/2)=4, ceil(8/2)=4;
  // dim 0: total = 3*2 + 3 - 7 = 2; dim 1 with dilation 2 (effK 5): 3*2 + 5 - 8 = 3.
  Node n = makeNode("Conv", attrs({{"auto_pad", std::string("SAME_UPPER")},
                                   {"strides", Ints{2, 2}},
                                   {"dilations", Ints{1, 2}}}),
                    2);
  ConvGeometry g = ConvGeometry::conv(n, {1, 3, 7, 8}, {4, 3, 3, 3});
  EXPECT_EQ(g.outputShape(), (Shape{1, 4, 4, 4}));
  EXPECT_EQ(g.onnxPads(), (Ints{1, 1, 1, 2}));
}

TEST(ConvGeometry, ValidIgnoresPadsAndDilationShrinksOutput) {
  Node valid = makeNode("Conv", attrs({{"auto_pad", std::string("VALID")}, {"pads", Ints{1, 1}}}), 2);
  EXPECT_EQ(ConvGeometry::conv(valid, {1, 1, 7}, {1, 1, 3}).outputSpatial, Ints{5});
  // Dilation 2 makes a 3-tap kernel span 5 inputs: 7 - 5 + 1 = 3.
  Node dilated = makeNode("Conv", attrs({{"dilations", Ints{2}}}), 2);
  ConvGeometry g = ConvGeometry::conv(dilated, {1, 1, 7}, {1, 1, 3});
  EXPECT_EQ(g.effectiveKernel(0), 5);
  EXPECT_EQ(g.outputSpatial, Ints{3});
}

TEST(ConvGeometry, PoolCeilModeOutputSizes) {
  // 4 inputs, kernel 3, stride 2: floor gives 1 window, ceil 2.
  Node floorNode = makeNode("MaxPool", attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}}));
  EXPECT_EQ(ConvGeometry::pool(floorNode, {1, 1, 4, 4}).outputSpatial, (Ints{1, 1}));
  Node ceilNode = makeNode("MaxPool", attrs({{"kernel_shape", Ints{3, 3}},
                                             {"strides", Ints{2, 2}},
                                             {"ceil_mode", int64_t{1}}}));
  EXPECT_EQ(ConvGeometry::pool(ceilNode, {1, 1, 4, 4}).outputSpatial, (Ints{2, 2}));
  // A window that would start inside the end padding is dropped:
  // in 5, kernel 2, stride 2, pads 1/1: ceil((5+2-2)/2)+1 = 4, but window 4
  // starts at 3*2-1 = 5 = in, so 3 remain.
  Node dropped = makeNode("MaxPool", attrs({{"kernel_shape", Ints{2}},
                                            {"strides", Ints{2}},
                                            {"pads", Ints{1, 1}},
                                            {"ceil_mode", int64_t{1}}}));
  EXPECT_EQ(ConvGeometry::pool(dropped, {1, 1, 5}).outputSpatial, Ints{3});
  EXPECT_EQ(windowOutputSize(5, 2, 2, 1, 1, 1, false), 3);
}

TEST(ConvGeometry, ConvTransposeOutputShapeAndSamePadding) {
  // in 3, stride 2, kernel 3: natural output 7; SAME_UPPER wants 6, so one
  // pad at the end (ONNX's test_convtranspose_autopad_same).
  Node same = makeNode("ConvTranspose", attrs({{"auto_pad", std::string("SAME_UPPER")},
                                               {"strides", Ints{2, 2}}}),
                       2);
  ConvGeometry g = ConvGeometry::convTranspose(same, {1, 1, 3, 3}, {1, 2, 3, 3});
  EXPECT_EQ(g.outputShape(), (Shape{1, 2, 6, 6}));
  EXPECT_EQ(g.onnxPads(), (Ints{0, 0, 1, 1}));
  // An output_shape larger than natural grows the end (negative end pad).
  Node shaped = makeNode("ConvTranspose", attrs({{"output_shape", Ints{10, 8}},
                                                 {"strides", Ints{3, 2}}}),
                         2);
  g = ConvGeometry::convTranspose(shaped, {1, 1, 3, 3}, {1, 2, 3, 3});
  EXPECT_EQ(g.outputShape(), (Shape{1, 2, 10, 8}));
  EXPECT_EQ(g.onnxPads(), (Ints{0, 0, -1, -1}));
  // output_padding adds at the end: 2 * (3 - 1) + 1 + 3 = 8.
  Node outPad = makeNode("ConvTranspose", attrs({{"strides", Ints{2}}, {"output_padding", Ints{1}}}), 2);
  EXPECT_EQ(ConvGeometry::convTranspose(outPad, {1, 1, 3}, {1, 1, 3}).outputSpatial, Ints{8});
}

TEST(ConvGeometry, BadShapesAreErrorsNamingTheNode) {
  Node n = makeNode("Conv", attrs({{"group", int64_t{2}}}), 2);
  try {
    ConvGeometry::conv(n, {1, 3, 8, 8}, {4, 3, 3, 3});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'n1' (Conv)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ConvGeometry::conv(n, {1, 4, 2, 2}, {4, 2, 3, 3}), Error);  // kernel too large
  EXPECT_THROW(ConvGeometry::conv(makeNode("Conv", attrs({{"pads", Ints{1, 1}}}), 2), {1, 1, 4, 4},
                                  {1, 1, 3, 3}),
               Error);  // pads must have 4 values
  EXPECT_THROW(ConvGeometry::conv(makeNode("Conv", attrs({{"auto_pad", std::string("SAME")}}), 2),
                                  {1, 1, 4}, {1, 1, 3}),
               Error);
}

// ============================== reference sgemm ==============================

struct GemmCase {
  int64_t M, N, K;
  bool transA, transB;
  float alpha, beta;
};

class ReferenceGemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(ReferenceGemm, MatchesNaiveTripleLoop) {
  const GemmCase c = GetParam();
  // Stored shapes with padded leading dimensions, to test lda/ldb/ldc.
  const int64_t aRows = c.transA ? c.K : c.M, aCols = c.transA ? c.M : c.K;
  const int64_t bRows = c.transB ? c.N : c.K, bCols = c.transB ? c.K : c.N;
  const int64_t lda = aCols + 3, ldb = bCols + 1, ldc = c.N + 2;
  std::mt19937 rng(static_cast<uint32_t>(c.M * 131 + c.N * 7 + c.K));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> A(aRows * lda), B(bRows * ldb), C(c.M * ldc);
  for (float& v : A) v = u(rng);
  for (float& v : B) v = u(rng);
  for (float& v : C) v = u(rng);
  std::vector<float> want = C;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const float a = c.transA ? A[k * lda + i] : A[i * lda + k];
        const float b = c.transB ? B[j * ldb + k] : B[k * ldb + j];
        acc += static_cast<double>(a) * b;
      }
      want[i * ldc + j] = static_cast<float>(c.alpha * acc + (c.beta == 0 ? 0.0 : c.beta * C[i * ldc + j]));
    }
  if (c.beta == 0)  // C must not be read: NaNs must not leak through.
    for (float& v : C) v = std::numeric_limits<float>::quiet_NaN();
  referenceSgemm(c.transA, c.transB, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta,
                 C.data(), ldc);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j)
      ASSERT_NEAR(C[i * ldc + j], want[i * ldc + j], 1e-4 * (1 + std::sqrt(double(c.K))))
          << "i=" << i << " j=" << j;
  // Padding columns of C are untouched.
  if (c.beta != 0) {
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = c.N; j < ldc; ++j) EXPECT_EQ(C[i * ldc + j], want[i * ldc + j]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceGemm,
    ::testing::Values(GemmCase{1, 1, 1, false, false, 1, 0}, GemmCase{7, 13, 5, false, false, 1, 0},
                      GemmCase{7, 13, 5, true, false, 1, 1}, GemmCase{7, 13, 5, false, true, 2, 0.5},
                      GemmCase{7, 13, 5, true, true, -1, 1},
                      // K beyond one K block, M beyond one M block, ragged tiles.
                      GemmCase{131, 17, 300, false, false, 1, 0},
                      GemmCase{131, 17, 300, true, true, 0.5, 2},
                      // N beyond one N block.
                      GemmCase{5, 2100, 3, false, true, 1, 0}, GemmCase{33, 40, 0, false, false, 1, 0.5},
                      GemmCase{6, 16, 64, false, false, 1, 1},
                      // Matrix-vector shapes take the unpacked path.
                      GemmCase{1, 37, 21, false, false, 1, 0}, GemmCase{1, 37, 21, true, true, 2, 1},
                      GemmCase{29, 1, 19, false, false, 1, 0.5}, GemmCase{29, 1, 19, true, true, 1, 0},
                      GemmCase{1, 40, 9, true, false, 1, 0}, GemmCase{29, 1, 3, false, true, -1, 1}));

// ============================== Conv / ConvTranspose ==============================

// Direct convolution over any number of spatial dims.
Tensor naiveConv(const Tensor& X, const Tensor& W, const Tensor* B, const ConvGeometry& g) {
  Tensor Y(ElementType::Float32, g.outputShape());
  const int64_t cin = g.inChannels / g.group, cout = g.outChannels / g.group;
  const Shape& xs = X.shape();
  const Shape& ws = W.shape();
  const Shape ys = Y.shape();
  std::vector<int64_t> yi(ys.size(), 0);
  do {
    const int64_t n = yi[0], m = yi[1], grp = m / cout;
    double acc = B ? B->data<float>()[m] : 0.0;
    for (int64_t c = 0; c < cin; ++c) {
      std::vector<int64_t> k(g.kernel.size(), 0);
      do {
        std::vector<int64_t> xi{n, grp * cin + c};
        bool inside = true;
        for (size_t d = 0; d < k.size(); ++d) {
          const int64_t p = yi[2 + d] * g.strides[d] - g.padsBegin[d] + k[d] * g.dilations[d];
          inside &= p >= 0 && p < g.inputSpatial[d];
          xi.push_back(p);
        }
        if (!inside) continue;
        std::vector<int64_t> wi{m, c};
        wi.insert(wi.end(), k.begin(), k.end());
        acc += static_cast<double>(X.data<float>()[flatIndex(xi, xs)]) *
               W.data<float>()[flatIndex(wi, ws)];
      } while (nextIndex(k, g.kernel));
    }
    Y.data<float>()[flatIndex(yi, ys)] = static_cast<float>(acc);
  } while (nextIndex(yi, ys));
  return Y;
}

struct ConvCase {
  Shape x, w;
  std::vector<std::pair<std::string, Attribute>> attributes;
  bool bias;
};

class ConvKernel : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvKernel, MatchesDirectConvolution) {
  const ConvCase& c = GetParam();
  AttributeMap a;
  for (const auto& [k, v] : c.attributes) a.set(k, v);
  Tensor X = randomTensor(c.x, 1), W = randomTensor(c.w, 2), B = randomTensor({c.w[0]}, 3);
  std::vector<Tensor> y = eval("Conv", {&X, &W, c.bias ? &B : nullptr}, a);
  const ConvGeometry g = ConvGeometry::conv(makeNode("Conv", a, 2), c.x, c.w);
  expectNear(y[0], naiveConv(X, W, c.bias ? &B : nullptr, g));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConvKernel,
    ::testing::Values(
        // 1x1 stride 1: the im2col-free path.
        ConvCase{{2, 5, 4, 3}, {7, 5, 1, 1}, {}, true},
        ConvCase{{1, 3, 9, 8}, {4, 3, 3, 3}, {{"pads", Ints{1, 1, 1, 1}}}, true},
        ConvCase{{1, 4, 11, 10}, {6, 2, 3, 2}, {{"group", int64_t{2}}, {"strides", Ints{2, 3}}, {"pads", Ints{0, 1, 2, 1}}}, false},
        // Depthwise with a channel multiplier, dilation and SAME_LOWER.
        ConvCase{{1, 3, 9, 9}, {6, 1, 3, 3}, {{"group", int64_t{3}}, {"dilations", Ints{2, 2}}, {"auto_pad", std::string("SAME_LOWER")}}, true},
        ConvCase{{2, 3, 17}, {5, 3, 4}, {{"strides", Ints{2}}, {"auto_pad", std::string("SAME_UPPER")}}, true},
        ConvCase{{1, 2, 5, 6, 7}, {3, 2, 2, 3, 3}, {{"pads", Ints{1, 0, 1, 0, 1, 1}}, {"strides", Ints{1, 2, 2}}, {"dilations", Ints{2, 1, 1}}}, true}));

// Scatter form of ConvTranspose, straight from the definition.
Tensor naiveConvTranspose(const Tensor& X, const Tensor& W, const ConvGeometry& g) {
  Tensor Y(ElementType::Float32, g.outputShape());
  const int64_t cin = g.inChannels / g.group, cout = g.outChannels / g.group;
  const Shape& xs = X.shape();
  const Shape& ws = W.shape();
  const Shape ys = Y.shape();
  std::vector<int64_t> xi(xs.size(), 0);
  do {
    const int64_t n = xi[0], c = xi[1], grp = c / cin;
    for (int64_t m = 0; m < cout; ++m) {
      std::vector<int64_t> k(g.kernel.size(), 0);
      do {
        std::vector<int64_t> yi{n, grp * cout + m};
        bool inside = true;
        for (size_t d = 0; d < k.size(); ++d) {
          const int64_t p = xi[2 + d] * g.strides[d] - g.padsBegin[d] + k[d] * g.dilations[d];
          inside &= p >= 0 && p < g.outputSpatial[d];
          yi.push_back(p);
        }
        if (!inside) continue;
        std::vector<int64_t> wi{c, m};
        wi.insert(wi.end(), k.begin(), k.end());
        Y.data<float>()[flatIndex(yi, ys)] +=
            X.data<float>()[flatIndex(xi, xs)] * W.data<float>()[flatIndex(wi, ws)];
      } while (nextIndex(k, g.kernel));
    }
  } while (nextIndex(xi, xs));
  return Y;
}

TEST(ConvTransposeKernel, MatchesScatterDefinition) {
  const std::vector<ConvCase> cases = {
      {{1, 2, 4, 5}, {2, 3, 3, 3}, {{"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 0, 1}}}, false},
      {{2, 4, 3, 3}, {4, 1, 2, 3}, {{"group", int64_t{2}}, {"dilations", Ints{2, 1}}, {"output_padding", Ints{1, 0}}, {"strides", Ints{2, 1}}}, false},
      {{1, 1, 3, 3}, {1, 2, 3, 3}, {{"output_shape", Ints{10, 8}}, {"strides", Ints{3, 2}}}, false},
      {{1, 2, 5}, {2, 2, 3}, {{"auto_pad", std::string("SAME_LOWER")}, {"strides", Ints{2}}}, false},
      {{1, 2, 2, 3, 2}, {2, 1, 2, 2, 2}, {{"strides", Ints{2, 1, 2}}}, false},
  };
  for (const ConvCase& c : cases) {
    AttributeMap a;
    for (const auto& [k, v] : c.attributes) a.set(k, v);
    Tensor X = randomTensor(c.x, 4), W = randomTensor(c.w, 5);
    const ConvGeometry g = ConvGeometry::convTranspose(makeNode("ConvTranspose", a, 2), c.x, c.w);
    std::vector<Tensor> y = eval("ConvTranspose", {&X, &W}, a);
    expectNear(y[0], naiveConvTranspose(X, W, g));
  }
  // Bias is added to every output position of its channel.
  Tensor X = randomTensor({1, 1, 2, 2}, 6), W = randomTensor({1, 2, 2, 2}, 7);
  Tensor B = Tensor::fromFloats({2}, {10.0f, -10.0f});
  std::vector<Tensor> noBias = eval("ConvTranspose", {&X, &W});
  std::vector<Tensor> withBias = eval("ConvTranspose", {&X, &W, &B});
  for (int64_t i = 0; i < 18; ++i)
    EXPECT_NEAR(withBias[0].data<float>()[i], noBias[0].data<float>()[i] + (i < 9 ? 10 : -10), 1e-5);
}

TEST(ConvKernel, FlopsCountMultiplyAddsTwice) {
  Graph g;
  ValueId x = g.addInput("x", {ElementType::Float32, {1, 4, 8, 8}});
  ValueId w = g.addConstant("w", randomTensor({6, 2, 3, 3}, 1));
  ValueId y = g.addValue("y", {ElementType::Float32, {1, 6, 8, 8}});
  g.addNode(Node{"conv", "Conv", attrs({{"group", int64_t{2}}, {"pads", Ints{1, 1, 1, 1}}}), {x, w}, {y}});
  g.markOutput(y);
  g.finalize();
  EXPECT_DOUBLE_EQ(flopsOf(g, 0), 2.0 * 6 * 64 * 2 * 9);
  EXPECT_EQ(opKindOf("Conv"), OpKind::Anchor);
  EXPECT_EQ(opKindOf("BatchNormalization"), OpKind::Broadcast);
  EXPECT_EQ(opKindOf("Softmax"), OpKind::Reduction);
  EXPECT_EQ(opKindOf("Resize"), OpKind::Injective);
}

TEST(ConvKernel, NonFloatIsUnsupported) {
  Tensor X = Tensor::fromInts({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor W = Tensor::fromInts({1, 1, 1, 1}, {1});
  EXPECT_THROW(eval("Conv", {&X, &W}), Unsupported);
}

// ============================== Gemm / MatMul ==============================

TEST(GemmKernel, TransposesAlphaBetaAndBroadcastBias) {
  Tensor A = Tensor::fromFloats({3, 2}, {1, 2, 3, 4, 5, 6});  // transA: op(A) is 2x3
  Tensor B = Tensor::fromFloats({2, 3}, {1, 0, 1, 0, 1, 1});  // transB: op(B) is 3x2
  Tensor C = Tensor::fromFloats({2, 1}, {100, 200});          // broadcast along N
  std::vector<Tensor> y = eval("Gemm", {&A, &B, &C},
                               attrs({{"transA", int64_t{1}}, {"transB", int64_t{1}},
                                      {"alpha", 2.0f}, {"beta", 0.5f}}));
  // op(A) = [[1,3,5],[2,4,6]]; op(B) = [[1,0],[0,1],[1,1]]; product [[6,8],[8,10]].
  EXPECT_EQ(y[0].shape(), (Shape{2, 2}));
  expectNear(y[0], {62, 66, 116, 120});
  Tensor bad = Tensor::fromFloats({3}, {1, 2, 3});
  EXPECT_THROW(eval("Gemm", {&A, &B, &bad}, attrs({{"transA", int64_t{1}}, {"transB", int64_t{1}}})),
               Error);
}

// ONNX leaves requantisation's precision open; ONNX Runtime and oneDNN
// multiply in float32, and so does every backend here (core/ops/requantize.h).
// Here acc * scale is exactly -6.5 in float32 and -6.50000009 in double:
// half to even gives -6, double arithmetic would give -7.
TEST(QLinearMatMulKernel, RequantizesInFloat32AsOnnxRuntimeDoes) {
  Tensor a(ElementType::UInt8, {1, 2});
  a.data<uint8_t>()[0] = 255;
  a.data<uint8_t>()[1] = 1;
  Tensor b(ElementType::Int8, {2, 1});
  b.data<int8_t>()[0] = -10;
  b.data<int8_t>()[1] = 1;  // acc = 255 * -10 + 1 = -2549
  Tensor as = Tensor::fromFloats({}, {0.02f}), bs = Tensor::fromFloats({}, {0.008207762f}),
         ys = Tensor::fromFloats({}, {0.064374104f});
  Tensor azp(ElementType::UInt8, {}), bzp(ElementType::Int8, {}), yzp(ElementType::Int8, {});
  azp.data<uint8_t>()[0] = 0;
  bzp.data<int8_t>()[0] = 0;
  yzp.data<int8_t>()[0] = 0;
  std::vector<Tensor> y = eval("QLinearMatMul", {&a, &as, &azp, &b, &bs, &bzp, &ys, &yzp}, {});
  ASSERT_EQ(y[0].elementType(), ElementType::Int8);
  EXPECT_EQ(y[0].data<int8_t>()[0], -6);
}

// DynamicQuantizeLinear of all zeros: the spec's scale (0 - 0) / 255 would
// divide by zero; ONNX Runtime 1.30 writes scale 1, zero point 0, y 0.
TEST(DynamicQuantizeLinearKernel, AllZerosGiveOnnxRuntimesScaleOfOne) {
  for (float zero : {0.0f, -0.0f}) {
    Tensor x = Tensor::fromFloats({4}, {0.0f, zero, 0.0f, 0.0f});
    std::vector<Tensor> y = eval("DynamicQuantizeLinear", {&x}, {}, 3);
    EXPECT_EQ(y[0].toInts(), (std::vector<int64_t>{0, 0, 0, 0}));
    EXPECT_EQ(y[1].data<float>()[0], 1.0f);
    EXPECT_EQ(y[2].data<uint8_t>()[0], 0);
  }
  // And a range: ONNX Runtime's values for {-3, -2, -1, -0.5}.
  Tensor x = Tensor::fromFloats({4}, {-3.0f, -2.0f, -1.0f, -0.5f});
  std::vector<Tensor> y = eval("DynamicQuantizeLinear", {&x}, {}, 3);
  EXPECT_EQ(y[0].toInts(), (std::vector<int64_t>{0, 85, 170, 213}));
  EXPECT_EQ(y[1].data<float>()[0], 3.0f / 255.0f);
  EXPECT_EQ(y[2].data<uint8_t>()[0], 255);
}

TEST(MatMulKernel, NumpySemantics) {
  // Batched with broadcasting of batch dims: [2,1,3,4] x [3,4,2] -> [2,3,3,2].
  Tensor A = randomTensor({2, 1, 3, 4}, 8), B = randomTensor({3, 4, 2}, 9);
  std::vector<Tensor> y = eval("MatMul", {&A, &B});
  ASSERT_EQ(y[0].shape(), (Shape{2, 3, 3, 2}));
  for (int64_t b0 = 0; b0 < 2; ++b0)
    for (int64_t b1 = 0; b1 < 3; ++b1)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 2; ++j) {
          float acc = 0;
          for (int64_t k = 0; k < 4; ++k)
            acc += A.data<float>()[(b0 * 3 + i) * 4 + k] * B.data<float>()[(b1 * 4 + k) * 2 + j];
          EXPECT_NEAR(y[0].data<float>()[((b0 * 3 + b1) * 3 + i) * 2 + j], acc, 1e-5);
        }
  // 1-D operands are promoted and the promoted dim dropped.
  Tensor v = Tensor::fromFloats({3}, {1, 2, 3});
  Tensor m = Tensor::fromFloats({3, 2}, {1, 0, 0, 1, 1, 1});
  EXPECT_EQ(eval("MatMul", {&v, &m})[0].shape(), (Shape{2}));
  expectNear(eval("MatMul", {&v, &m})[0], {4, 5});
  Tensor mt = Tensor::fromFloats({2, 3}, {1, 0, 1, 0, 1, 1});
  expectNear(eval("MatMul", {&mt, &v})[0], {4, 5});
  EXPECT_EQ(eval("MatMul", {&v, &v})[0].shape(), Shape{});
  expectNear(eval("MatMul", {&v, &v})[0], {14});
  EXPECT_THROW(eval("MatMul", {&m, &m}), Error);
}

// ============================== pools ==============================

TEST(PoolKernel, MaxPoolWithIndicesAndStorageOrder) {
  Tensor X = Tensor::fromFloats({1, 1, 3, 3}, {1, 9, 2, 3, 4, 8, 7, 5, 6});
  AttributeMap a = attrs({{"kernel_shape", Ints{2, 2}}});
  std::vector<Tensor> y = eval("MaxPool", {&X}, a, 2);
  expectNear(y[0], {9, 9, 7, 8});
  EXPECT_EQ(y[1].elementType(), ElementType::Int64);
  EXPECT_EQ(y[1].toInts(), (Ints{1, 1, 6, 5}));
  a.set("storage_order", int64_t{1});  // column-major: h + w * H
  EXPECT_EQ(eval("MaxPool", {&X}, a, 2)[1].toInts(), (Ints{3, 3, 2, 7}));
  // Padding never wins, even against negative values.
  Tensor neg = Tensor::fromFloats({1, 1, 2}, {-5, -3});
  expectNear(eval("MaxPool", {&neg}, attrs({{"kernel_shape", Ints{2}}, {"pads", Ints{1, 1}}}))[0],
             {-5, -3, -3});
}

TEST(PoolKernel, AveragePoolCountIncludePad) {
  Tensor X = Tensor::fromFloats({1, 1, 2, 2}, {1, 2, 3, 4});
  AttributeMap a = attrs({{"kernel_shape", Ints{2, 2}}, {"pads", Ints{1, 1, 0, 0}}});
  // Windows at (-1,-1), (-1,0), (0,-1), (0,0).
  expectNear(eval("AveragePool", {&X}, a)[0], {1, 1.5, 2, 2.5});
  a.set("count_include_pad", int64_t{1});
  expectNear(eval("AveragePool", {&X}, a)[0], {0.25, 0.75, 1, 2.5});
}

TEST(PoolKernel, GlobalPoolsKeepRank) {
  Tensor X = randomTensor({2, 3, 4, 5, 2}, 10);
  std::vector<Tensor> avg = eval("GlobalAveragePool", {&X});
  std::vector<Tensor> mx = eval("GlobalMaxPool", {&X});
  EXPECT_EQ(avg[0].shape(), (Shape{2, 3, 1, 1, 1}));
  for (int64_t p = 0; p < 6; ++p) {
    double sum = 0;
    float m = -1e9f;
    for (int64_t i = 0; i < 40; ++i) {
      sum += X.data<float>()[p * 40 + i];
      m = std::max(m, X.data<float>()[p * 40 + i]);
    }
    EXPECT_NEAR(avg[0].data<float>()[p], sum / 40, 1e-5);
    EXPECT_EQ(mx[0].data<float>()[p], m);
  }
}

// ============================== normalisation ==============================

TEST(NormKernel, BatchNormInferenceAndTrainingIsUnsupported) {
  Tensor X = Tensor::fromFloats({1, 2, 2}, {1, 2, 3, 4});
  Tensor scale = Tensor::fromFloats({2}, {1, 2}), B = Tensor::fromFloats({2}, {0, 1});
  Tensor mean = Tensor::fromFloats({2}, {1, 3}), var = Tensor::fromFloats({2}, {4, 1});
  std::vector<Tensor> y =
      eval("BatchNormalization", {&X, &scale, &B, &mean, &var}, attrs({{"epsilon", 0.0f}}));
  expectNear(y[0], {0, 0.5, 1, 3});
  EXPECT_THROW(eval("BatchNormalization", {&X, &scale, &B, &mean, &var},
                    attrs({{"training_mode", int64_t{1}}})),
               Unsupported);
  EXPECT_THROW(eval("BatchNormalization", {&X, &scale, &B, &mean, &var}, {}, 3), Unsupported);
}

TEST(NormKernel, LayerNormOutputsMeanAndInvStdDev) {
  Tensor X = Tensor::fromFloats({2, 2}, {1, 3, 2, 6});
  Tensor scale = Tensor::fromFloats({2}, {1, 2});
  std::vector<Tensor> y = eval("LayerNormalization", {&X, &scale, nullptr},
                               attrs({{"epsilon", 0.0f}}), 3);
  // Row 0: mean 2, std 1; row 1: mean 4, std 2.
  expectNear(y[0], {-1, 2, -1, 2});
  EXPECT_EQ(y[1].shape(), (Shape{2, 1}));
  expectNear(y[1], {2, 4});
  expectNear(y[2], {1, 0.5});
  // Scale must broadcast to the normalised dims.
  Tensor badScale = Tensor::fromFloats({3}, {1, 2, 3});
  EXPECT_THROW(eval("LayerNormalization", {&X, &badScale}), Error);
}

TEST(NormKernel, InstanceNormNormalisesEachPlane) {
  Tensor X = Tensor::fromFloats({1, 2, 2}, {0, 2, 5, 7});
  Tensor scale = Tensor::fromFloats({2}, {3, 1}), B = Tensor::fromFloats({2}, {1, 7});
  expectNear(eval("InstanceNormalization", {&X, &scale, &B}, attrs({{"epsilon", 0.0f}}))[0],
             {-2, 4, 6, 8});
}

TEST(NormKernel, SoftmaxAndLogSoftmaxAlongAnAxis) {
  Tensor X = Tensor::fromFloats({2, 3}, {1, 2, 3, 1000, 1000, 1000});
  std::vector<Tensor> s = eval("Softmax", {&X});
  const double e = std::exp(1.0), z = e + e * e + e * e * e;
  expectNear(s[0], {float(e / z), float(e * e / z), float(e * e * e / z), 1 / 3.f, 1 / 3.f, 1 / 3.f});
  std::vector<Tensor> l = eval("LogSoftmax", {&X}, attrs({{"axis", int64_t{0}}}));
  // Along axis 0 each column is (x, 1000): log-softmax of the small one is ~x - 1000.
  expectNear(l[0], {-999, -998, -997, 0, 0, 0}, 1e-3f);
  EXPECT_THROW(eval("Softmax", {&X}, attrs({{"axis", int64_t{2}}})), Error);
}

// ============================== Pad / Resize ==============================

TEST(SpatialKernel, PadModesAndNegativePads) {
  Tensor X = Tensor::fromFloats({1, 3}, {1, 2, 3});
  expectNear(eval("Pad", {&X}, attrs({{"pads", Ints{0, 2, 0, 1}}, {"constant_value", 9.0f}}))[0],
             {9, 9, 1, 2, 3, 9});
  expectNear(eval("Pad", {&X}, attrs({{"pads", Ints{0, 2, 0, 2}}, {"mode", std::string("reflect")}}))[0],
             {3, 2, 1, 2, 3, 2, 1});
  expectNear(eval("Pad", {&X}, attrs({{"pads", Ints{0, 1, 0, 2}}, {"mode", std::string("edge")}}))[0],
             {1, 1, 2, 3, 3, 3});
  // Negative pads crop; axes select the padded dimensions.
  Tensor y = eval("Pad", {&X}, attrs({{"pads", Ints{-1, 1}}, {"axes", Ints{-1}}}))[0];
  EXPECT_EQ(y.shape(), (Shape{1, 3}));
  expectNear(y, {2, 3, 0});
  EXPECT_THROW(eval("Pad", {&X}, attrs({{"pads", Ints{0, -4, 0, 0}}})), Error);
}

TEST(SpatialKernel, ResizeNearestLinearAndCubic) {
  Tensor X = Tensor::fromFloats({1, 1, 2, 2}, {1, 2, 3, 4});
  // Nearest, asymmetric, scale 2: each pixel repeated.
  Tensor y = eval("Resize", {&X}, attrs({{"scales", std::vector<float>{1, 1, 2, 2}},
                                          {"coordinate_transformation_mode", std::string("asymmetric")},
                                          {"nearest_mode", std::string("floor")}}))[0];
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  expectNear(y, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  // Bilinear, align_corners, sizes 3x3: the centre is the mean.
  y = eval("Resize", {&X}, attrs({{"sizes", Ints{1, 1, 3, 3}}, {"mode", std::string("linear")},
                                  {"coordinate_transformation_mode", std::string("align_corners")}}))[0];
  expectNear(y, {1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4});
  // Linear on only the last axis (opset-18 axes).
  y = eval("Resize", {&X}, attrs({{"sizes", Ints{4}}, {"axes", Ints{3}}, {"mode", std::string("linear")}}))[0];
  expectNear(y, {1, 1.25, 1.75, 2, 3, 3.25, 3.75, 4});
  // Cubic at integer source coordinates reproduces the input.
  y = eval("Resize", {&X}, attrs({{"scales", std::vector<float>{1, 1, 1, 1}}, {"mode", std::string("cubic")}}))[0];
  expectNear(y, {1, 2, 3, 4});
  EXPECT_THROW(eval("Resize", {&X}, attrs({{"sizes", Ints{1, 1, 3, 3}}, {"antialias", int64_t{1}}})),
               Unsupported);
  EXPECT_THROW(eval("Resize", {&X}, attrs({{"sizes", Ints{1, 1, 3, 3}},
                                           {"scales", std::vector<float>{1, 1, 2, 2}}})),
               Error);
}

}  // namespace
}  // namespace collage
