// ONNX Runtime's com.microsoft QLinear* ops (core/ops/qlinear_contrib_ops.cc)
// against hand-worked integers: halfway cases, saturation, broadcasting,
// absent zero points, u8 and s8.
#include <gtest/gtest.h>

#include <vector>

#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"

namespace collage {
namespace {

template <class Q>
Tensor quantized(Shape shape, std::vector<Q> values) {
  Tensor t(std::is_same_v<Q, uint8_t> ? ElementType::UInt8 : ElementType::Int8, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i) t.data<Q>()[i] = values[i];
  return t;
}

Tensor scale(float s) { return Tensor::fromFloats({}, {s}); }

// Evaluates `op` with the registry's defaults filled in, as the importer
// does; a null input stands for an absent optional one.
Tensor eval(const std::string& op, const std::vector<const Tensor*>& inputs, AttributeMap a = {}) {
  const OpSchema& schema = OpRegistry::instance().get(op);
  for (const AttributeSpec& spec : schema.attributes)
    if (!a.has(spec.name) && spec.defaultValue) a.set(spec.name, *spec.defaultValue);
  Node n;
  n.name = "q1";
  n.op = op;
  n.attrs = std::move(a);
  for (size_t i = 0; i < inputs.size(); ++i) n.inputs.push_back(inputs[i] ? static_cast<int>(i) : kNoValue);
  n.outputs.push_back(100);
  return evaluateNode(n, inputs)[0];
}

template <class Q>
std::vector<int> ints(const Tensor& t) {
  std::vector<int> v;
  for (int64_t i = 0; i < t.numElements(); ++i) v.push_back(t.data<Q>()[i]);
  return v;
}

// rA = 0.5 / 0.5 = 1, rB = 0.25 / 0.5 = 0.5, no zero points: c = a + b / 2.
// B [2,1] is one value per row of A [2,2].
TEST(QLinearAddKernel, BroadcastsRoundsHalfToEvenAndSaturatesU8) {
  Tensor a = quantized<uint8_t>({2, 2}, {10, 21, 30, 255});
  Tensor b = quantized<uint8_t>({2, 1}, {1, 4});
  Tensor as = scale(0.5f), bs = scale(0.25f), cs = scale(0.5f);
  Tensor c = eval("com.microsoft.QLinearAdd", {&a, &as, nullptr, &b, &bs, nullptr, &cs, nullptr});
  ASSERT_EQ(c.elementType(), ElementType::UInt8);
  ASSERT_EQ(c.shape(), (Shape{2, 2}));
  // 10.5 -> 10 and 21.5 -> 22 (half to even), 32, 257 -> 255.
  EXPECT_EQ(ints<uint8_t>(c), (std::vector<int>{10, 22, 32, 255}));
}

// ONNX Runtime adds the output zero point before rounding (it folds every
// zero point into one float constant): a = -128, b = 5 with zero points 10,
// -10, -5 and scales 0.5, 0.5, 1 gives -5 + 2.5 - 64 = -66.5 -> -66, where
// round(-69 + 7.5) - 5 = -67 would be the textbook order.
TEST(QLinearAddKernel, ZeroPointsFoldBeforeRoundingAsOnnxRuntimeS8) {
  Tensor a = quantized<int8_t>({4}, {-128, 0, 100, -128});
  Tensor b = quantized<int8_t>({4}, {5, -5, 100, -128});
  Tensor az = quantized<int8_t>({}, {10}), bz = quantized<int8_t>({}, {-10}), cz = quantized<int8_t>({}, {-5});
  Tensor as = scale(0.5f), bs = scale(0.5f), cs = scale(1.0f);
  Tensor c = eval("com.microsoft.QLinearAdd", {&a, &as, &az, &b, &bs, &bz, &cs, &cz});
  ASSERT_EQ(c.elementType(), ElementType::Int8);
  EXPECT_EQ(ints<int8_t>(c), (std::vector<int>{-66, -8, 95, -128}));
}

TEST(QLinearAddKernel, OperandsOfDifferentTypesAreAnError) {
  Tensor a = quantized<uint8_t>({2}, {1, 2});
  Tensor b = quantized<int8_t>({2}, {1, 2});
  Tensor s = scale(1.0f);
  EXPECT_THROW(eval("com.microsoft.QLinearAdd", {&a, &s, nullptr, &b, &s, nullptr, &s, nullptr}), Error);
}

// r = 0.5 * 0.25 / 0.5 = 0.25, c = (a - 2) * 5 * 0.25 + 1 with B a scalar.
TEST(QLinearMulKernel, ScalarOperandTieAndSaturationU8) {
  Tensor a = quantized<uint8_t>({3}, {10, 12, 255});
  Tensor b = quantized<uint8_t>({1}, {5});
  Tensor az = quantized<uint8_t>({}, {2}), cz = quantized<uint8_t>({}, {1});
  Tensor as = scale(0.5f), bs = scale(0.25f), cs = scale(0.5f);
  Tensor c = eval("com.microsoft.QLinearMul", {&a, &as, &az, &b, &bs, nullptr, &cs, &cz});
  // 10 + 1; 12.5 + 1 = 13.5 -> 14 (the zero point is added before rounding); 317.25 -> 255.
  EXPECT_EQ(ints<uint8_t>(c), (std::vector<int>{11, 14, 255}));
}

// scale = 0.5 / (0.25 * 4) = 0.5; acc = sum - 1 * 4.
TEST(QLinearGlobalAveragePoolKernel, ChannelsFirstAndLastAgree) {
  Tensor xs = scale(0.5f), ys = scale(0.25f);
  Tensor xz = quantized<uint8_t>({}, {1});
  Tensor nchw = quantized<uint8_t>({1, 2, 2, 2}, {1, 2, 3, 3, 200, 250, 255, 255});
  Tensor y = eval("com.microsoft.QLinearGlobalAveragePool", {&nchw, &xs, &xz, &ys, nullptr});
  ASSERT_EQ(y.shape(), (Shape{1, 2, 1, 1}));
  // (9 - 4) * 0.5 = 2.5 -> 2; 956 * 0.5 = 478 -> 255.
  EXPECT_EQ(ints<uint8_t>(y), (std::vector<int>{2, 255}));

  AttributeMap last;
  last.set("channels_last", int64_t{1});
  Tensor nhwc = quantized<uint8_t>({1, 2, 2, 2}, {1, 200, 2, 250, 3, 255, 3, 255});
  Tensor y2 = eval("com.microsoft.QLinearGlobalAveragePool", {&nhwc, &xs, &xz, &ys, nullptr}, last);
  ASSERT_EQ(y2.shape(), (Shape{1, 1, 1, 2}));
  EXPECT_EQ(ints<uint8_t>(y2), (std::vector<int>{2, 255}));
}

// X = 1..9 in 3x3, x_scale 0.5: ORT averages the dequantized floats and
// quantizes with the zero point added before rounding.
TEST(QLinearAveragePoolKernel, WindowsPadsAndCountIncludePad) {
  Tensor x = quantized<uint8_t>({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor xs = scale(0.5f), ys = scale(1.0f);
  AttributeMap a;
  a.set("kernel_shape", std::vector<int64_t>{2, 2});
  Tensor y = eval("com.microsoft.QLinearAveragePool", {&x, &xs, nullptr, &ys, nullptr}, a);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  // 6 / 4 = 1.5 -> 2, 2, 3, 3.5 -> 4.
  EXPECT_EQ(ints<uint8_t>(y), (std::vector<int>{2, 2, 3, 4}));

  Tensor yz = quantized<uint8_t>({}, {1});
  a.set("strides", std::vector<int64_t>{2, 2});
  a.set("pads", std::vector<int64_t>{0, 0, 1, 1});
  // Windows {1,2,4,5}, {3,6}, {7,8}, {9}: sums 6, 4.5, 7.5, 4.5.
  Tensor excl = eval("com.microsoft.QLinearAveragePool", {&x, &xs, nullptr, &ys, &yz}, a);
  EXPECT_EQ(ints<uint8_t>(excl), (std::vector<int>{2, 3, 5, 6}));  // 2.5, 3.25, 4.75, 5.5
  a.set("count_include_pad", int64_t{1});
  Tensor incl = eval("com.microsoft.QLinearAveragePool", {&x, &xs, nullptr, &ys, &yz}, a);
  EXPECT_EQ(ints<uint8_t>(incl), (std::vector<int>{2, 2, 3, 2}));  // 2.5, 2.125, 2.875, 2.125
}

TEST(QLinearGlobalAveragePoolKernel, PerChannelScaleIsUnsupported) {
  Tensor x = quantized<int8_t>({1, 2, 1, 1}, {1, 2});
  Tensor xs = Tensor::fromFloats({2}, {0.5f, 0.25f}), ys = scale(1.0f);
  EXPECT_THROW(eval("com.microsoft.QLinearGlobalAveragePool", {&x, &xs, nullptr, &ys, nullptr}), Unsupported);
}

// v = x * 0.5, times alpha = 0.25 below zero; y = round(v / 0.5) + 1.
TEST(QLinearLeakyReluKernel, TieZeroPointAndSaturationS8) {
  Tensor x = quantized<int8_t>({4}, {-10, 0, 10, 127});
  Tensor xs = scale(0.5f), ys = scale(0.5f);
  Tensor yz = quantized<int8_t>({}, {1});
  AttributeMap a;
  a.set("alpha", 0.25f);
  Tensor y = eval("com.microsoft.QLinearLeakyRelu", {&x, &xs, nullptr, &ys, &yz}, a);
  // -1.25 / 0.5 = -2.5 -> -2, + 1; 0 + 1; 10 + 1; 127 + 1 -> 127.
  EXPECT_EQ(ints<int8_t>(y), (std::vector<int>{-1, 1, 11, 127}));
}

// sigmoid(0) = 0.5 = 128 / 256, - 128; sigmoid(127) = 1 -> 256 - 128 saturates.
TEST(QLinearSigmoidKernel, OutputScaleOf256thsS8) {
  Tensor x = quantized<int8_t>({3}, {0, 127, -128});
  Tensor xs = scale(1.0f), ys = scale(1.0f / 256);
  Tensor yz = quantized<int8_t>({}, {-128});
  Tensor y = eval("com.microsoft.QLinearSigmoid", {&x, &xs, nullptr, &ys, &yz});
  EXPECT_EQ(ints<int8_t>(y), (std::vector<int>{0, 127, -128}));
}

// Y_scale 0.5: the first input (same scale and zero point) is copied, the
// second requantised ((7 - 2) * 0.25 / 0.5 = 2.5 -> 2), the third saturates.
TEST(QLinearConcatKernel, CopiesOrRequantisesEachInputAlongAxis) {
  Tensor ys = scale(0.5f), s1 = scale(0.5f), s2 = scale(0.25f), s3 = scale(1.0f);
  Tensor x1 = quantized<uint8_t>({1, 2}, {3, 4}), x2 = quantized<uint8_t>({1, 1}, {7}),
         x3 = quantized<uint8_t>({1, 1}, {255});
  Tensor z2 = quantized<uint8_t>({}, {2});
  AttributeMap a;
  a.set("axis", int64_t{1});
  Tensor y = eval("com.microsoft.QLinearConcat",
                  {&ys, nullptr, &x1, &s1, nullptr, &x2, &s2, &z2, &x3, &s3, nullptr}, a);
  ASSERT_EQ(y.shape(), (Shape{1, 4}));
  EXPECT_EQ(ints<uint8_t>(y), (std::vector<int>{3, 4, 2, 255}));
}

// a - 1 = [0 1 2; 3 4 5]; B's columns less their zero points (0, 1) are
// [1 0 1] and [-1 0 0]; bias (1, -1): acc = [3 -1; 9 -4]; column scales
// 0.5 * 1 and 0.5 * 0.5.
TEST(QGemmKernel, PerColumnScalesBiasAndRequantizationOrFloat) {
  Tensor a = quantized<uint8_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = quantized<int8_t>({3, 2}, {1, 0, 0, 1, 1, 1});
  Tensor as = scale(0.5f), bs = Tensor::fromFloats({2}, {1.0f, 0.5f}), ys = scale(1.0f);
  Tensor az = quantized<uint8_t>({}, {1}), bz = quantized<int8_t>({2}, {0, 1}), yz = quantized<uint8_t>({}, {3});
  Tensor c(ElementType::Int32, {2});
  c.data<int32_t>()[0] = 1;
  c.data<int32_t>()[1] = -1;
  Tensor y = eval("com.microsoft.QGemm", {&a, &as, &az, &b, &bs, &bz, &c, &ys, &yz});
  ASSERT_EQ(y.elementType(), ElementType::UInt8);
  // 1.5 -> 2, -0.25 -> 0, 4.5 -> 4, -1; each + 3.
  EXPECT_EQ(ints<uint8_t>(y), (std::vector<int>{5, 3, 7, 2}));
  Tensor f = eval("com.microsoft.QGemm", {&a, &as, &az, &b, &bs, &bz, &c});
  ASSERT_EQ(f.elementType(), ElementType::Float32);
  EXPECT_EQ(f.toFloats(), (std::vector<float>{1.5f, -0.25f, 4.5f, -1.0f}));
}

TEST(QLinearContribOps, FlopsAreCounted) {
  const OpSchema& add = OpRegistry::instance().get("com.microsoft.QLinearAdd");
  const TensorType t{ElementType::UInt8, {2, 3}};
  EXPECT_GT(add.flops(Node{}, {t}, {t}), 0.0);
}

}  // namespace
}  // namespace collage
