// Reference kernels of the elementwise, broadcast, reduction and shape ops,
// evaluated one node at a time.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/ops/op_registry.h"
#include "core/ops/broadcast.h"
#include "core/ops/reference_executor.h"

namespace collage {
namespace {

Node makeNode(const std::string& op, AttributeMap attrs = {}, int numInputs = 1,
              int numOutputs = 1) {
  Node n;
  n.name = "n1";
  n.op = op;
  n.attrs = std::move(attrs);
  for (int i = 0; i < numInputs; ++i) n.inputs.push_back(i);
  for (int i = 0; i < numOutputs; ++i) n.outputs.push_back(100 + i);
  return n;
}

AttributeMap attrs(std::initializer_list<std::pair<const std::string, Attribute>> list) {
  AttributeMap m;
  for (const auto& [k, v] : list) m.set(k, v);
  return m;
}

using Ints = std::vector<int64_t>;

// Evaluates `op` on the inputs with the registry's defaults filled in as the importer would.
std::vector<Tensor> eval(const std::string& op, const std::vector<Tensor>& inputs,
                         AttributeMap a = {}, int numOutputs = 1) {
  const OpSchema& schema = OpRegistry::instance().get(op);
  for (const AttributeSpec& spec : schema.attributes)
    if (!a.has(spec.name) && spec.defaultValue) a.set(spec.name, *spec.defaultValue);
  Node node = makeNode(op, a, static_cast<int>(inputs.size()), numOutputs);
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  return evaluateNode(node, ptrs);
}

Tensor ints32(Shape shape, const std::vector<int32_t>& v) {
  Tensor t(ElementType::Int32, std::move(shape));
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(int32_t));
  return t;
}

Tensor bools(Shape shape, const std::vector<bool>& v) {
  Tensor t(ElementType::Bool, std::move(shape));
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  return t;
}

std::vector<float> iota(int64_t n, float start = 0) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

TEST(OpsBroadcast, AddBroadcastsBothWays) {
  // [2,1,3] + [4,1] -> [2,4,3]
  Tensor a = Tensor::fromFloats({2, 1, 3}, iota(6));
  Tensor b = Tensor::fromFloats({4, 1}, {100, 200, 300, 400});
  Tensor y = eval("Add", {a, b})[0];
  ASSERT_EQ(y.shape(), (Shape{2, 4, 3}));
  const float* p = y.data<float>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k)
        EXPECT_EQ(p[(i * 4 + j) * 3 + k], static_cast<float>(i * 3 + k + 100 * (j + 1)));
}

TEST(OpsBroadcast, BiasOverChannelsAndScalar) {
  Tensor x = Tensor::fromFloats({1, 2, 2, 2}, iota(8));
  Tensor bias = Tensor::fromFloats({2, 1, 1}, {10, 20});
  Tensor y = eval("Add", {x, bias})[0];
  EXPECT_EQ(y.toFloats(), (std::vector<float>{10, 11, 12, 13, 24, 25, 26, 27}));
  Tensor z = eval("Mul", {Tensor::scalarFloat(2), x})[0];
  EXPECT_EQ(z.shape(), x.shape());
  EXPECT_EQ(z.toFloats()[7], 14.0f);
}

TEST(OpsBroadcast, IncompatibleShapesNameTheNode) {
  try {
    eval("Sub", {Tensor::fromFloats({2, 3}, iota(6)), Tensor::fromFloats({2}, {1, 2})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'n1' (Sub)"), std::string::npos) << e.what();
  }
}

TEST(OpsBroadcast, PlanMergesContiguousDims) {
  StridedPlan plan = makeBroadcastPlan({4, 3, 5, 5}, {{4, 3, 5, 5}, {3, 1, 1}});
  EXPECT_EQ(plan.dims, (Shape{4, 3, 25}));  // N and C cannot merge: the bias repeats over N
  EXPECT_EQ(plan.innerStride(0), 1);
  EXPECT_EQ(plan.innerStride(1), 0);
}

TEST(OpsBroadcast, IntegerArithmeticAndComparison) {
  Tensor a = ints32({4}, {7, -7, 9, 5});
  Tensor b = ints32({4}, {2, 2, -4, 5});
  EXPECT_EQ(eval("Div", {a, b})[0].toInts(), (Ints{3, -3, -2, 1}));  // truncates toward zero
  EXPECT_EQ(eval("Mod", {a, b})[0].toInts(), (Ints{1, 1, -3, 0}));   // sign of the divisor
  EXPECT_EQ(eval("Mod", {a, b}, attrs({{"fmod", int64_t{1}}}))[0].toInts(),
            (Ints{1, -1, 1, 0}));  // sign of the dividend
  Tensor eq = eval("Equal", {a, ints32({1}, {5})})[0];
  EXPECT_EQ(eq.elementType(), ElementType::Bool);
  EXPECT_EQ(eq.toInts(), (Ints{0, 0, 0, 1}));
  EXPECT_EQ(eval("Greater", {a, b})[0].toInts(), (Ints{1, 0, 1, 0}));
}

TEST(OpsBroadcast, VariadicAndWhere) {
  Tensor a = Tensor::fromFloats({3}, {1, 5, 3});
  Tensor b = Tensor::fromFloats({1}, {2});
  Tensor c = Tensor::fromFloats({2, 1}, {0, 10});
  Tensor m = eval("Max", {a, b, c})[0];
  EXPECT_EQ(m.shape(), (Shape{2, 3}));
  EXPECT_EQ(m.toFloats(), (std::vector<float>{2, 5, 3, 10, 10, 10}));
  EXPECT_EQ(eval("Mean", {a, a, a})[0].toFloats(), a.toFloats());
  Tensor w = eval("Where", {bools({2, 1}, {true, false}), a, b})[0];
  EXPECT_EQ(w.toFloats(), (std::vector<float>{1, 5, 3, 2, 2, 2}));
}

TEST(OpsBroadcast, PowWithIntegerExponentAndPRelu) {
  Tensor x = Tensor::fromFloats({3}, {1, 2, 3});
  Tensor y = eval("Pow", {x, Tensor::fromInts({1}, {3})})[0];
  EXPECT_EQ(y.elementType(), ElementType::Float32);
  EXPECT_EQ(y.toFloats(), (std::vector<float>{1, 8, 27}));
  Tensor p = eval("PRelu", {Tensor::fromFloats({2, 2}, {-1, 2, -3, 4}),
                            Tensor::fromFloats({2}, {0.5f, 0.25f})})[0];
  EXPECT_EQ(p.toFloats(), (std::vector<float>{-0.5f, 2, -1.5f, 4}));
}

TEST(OpsElementwise, UnaryMathAndClip) {
  Tensor x = Tensor::fromFloats({4}, {-2, -0.5f, 0.5f, 3});
  EXPECT_EQ(eval("Relu", {x})[0].toFloats(), (std::vector<float>{0, 0, 0.5f, 3}));
  EXPECT_EQ(eval("Clip", {x}, attrs({{"min", -1.0f}}))[0].toFloats(),
            (std::vector<float>{-1, -0.5f, 0.5f, 3}));
  EXPECT_EQ(eval("Clip", {x}, attrs({{"min", 0.0f}, {"max", 1.0f}}))[0].toFloats(),
            (std::vector<float>{0, 0, 0.5f, 1}));
  std::vector<float> g = eval("Gelu", {x})[0].toFloats();
  EXPECT_NEAR(g[3], 2.99595f, 1e-4);
  EXPECT_EQ(eval("Sign", {ints32({3}, {-4, 0, 9})})[0].toInts(), (Ints{-1, 0, 1}));
}

// Sigmoid in float32 gives ONNX Runtime's bits (logistic.h): inputs from a
// detector's first SiLU where 1 / (1 + exp(-x)) is a step or more off, each
// with ONNX Runtime 1.30's output, and the clamped ends.
TEST(OpsElementwise, SigmoidFloat32MatchesOnnxRuntimeBits) {
  const std::vector<uint32_t> in = {3207521447u, 3222828536u, 1074186527u, 3208778052u, 3236699525u};
  const std::vector<uint32_t> ort = {1051446674u, 1034756964u, 1063532678u, 1050893409u, 975411200u};
  std::vector<float> x(in.size());
  for (size_t i = 0; i < in.size(); ++i) std::memcpy(&x[i], &in[i], sizeof(float));
  x.insert(x.end(), {-20.0f, 0.0f, 18.0f, 25.0f});
  const Tensor y = eval("Sigmoid", {Tensor::fromFloats({static_cast<int64_t>(x.size())}, x)})[0];
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, y.data<float>() + i, sizeof(float));
    EXPECT_EQ(bits, ort[i]) << "Sigmoid(" << x[i] << ")";
  }
  EXPECT_EQ(y.data<float>()[5], 0.0f);
  EXPECT_EQ(y.data<float>()[6], 0.5f);
  EXPECT_EQ(y.data<float>()[7], 1.0f);
  EXPECT_EQ(y.data<float>()[8], 1.0f);
  EXPECT_TRUE(std::isnan(eval("Sigmoid", {Tensor::fromFloats({1}, {std::nanf("")})})[0].data<float>()[0]));
}

TEST(OpsElementwise, UnsupportedElementTypeIsUnsupported) {
  EXPECT_THROW(eval("Sigmoid", {ints32({2}, {1, 2})}), Unsupported);
  EXPECT_THROW(eval("Cast", {Tensor::fromFloats({1}, {1})}, attrs({{"to", int64_t{8}}})),  // string
               Unsupported);
}

TEST(OpsElementwise, Float16ComputesThroughFloat32) {
  Tensor x = Tensor::fromFloats({3}, {1.0f, -2.5f, 1.0f / 3.0f});
  Tensor h = eval("Cast", {x}, attrs({{"to", int64_t{10}}}))[0];  // float16
  ASSERT_EQ(h.elementType(), ElementType::Float16);
  EXPECT_EQ(h.data<uint16_t>()[0], 0x3c00);  // 1.0
  EXPECT_EQ(h.data<uint16_t>()[1], 0xc100);  // -2.5
  Tensor m = eval("Max", {h, eval("Neg", {h})[0]})[0];
  ASSERT_EQ(m.elementType(), ElementType::Float16);
  Tensor back = eval("Cast", {m}, attrs({{"to", int64_t{1}}}))[0];
  std::vector<float> v = back.toFloats();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 2.5f);
  EXPECT_NEAR(v[2], 1.0f / 3.0f, 1e-3);
  EXPECT_THROW(eval("ReduceSum", {h}), Unsupported);
}

TEST(OpsElementwise, CastConvertsBetweenTypes) {
  Tensor x = Tensor::fromFloats({4}, {-1.7f, 0.0f, 2.9f, 0.25f});
  Tensor i = eval("Cast", {x}, attrs({{"to", int64_t{6}}}))[0];  // int32
  EXPECT_EQ(i.elementType(), ElementType::Int32);
  EXPECT_EQ(i.toInts(), (Ints{-1, 0, 2, 0}));
  Tensor b = eval("Cast", {x}, attrs({{"to", int64_t{9}}}))[0];  // bool
  EXPECT_EQ(b.toInts(), (Ints{1, 0, 1, 1}));
  Tensor f = eval("Cast", {b}, attrs({{"to", int64_t{1}}}))[0];
  EXPECT_EQ(f.toFloats(), (std::vector<float>{1, 0, 1, 1}));
  Tensor d =
      eval("Cast", {Tensor::fromInts({2}, {1LL << 40, -3})}, attrs({{"to", int64_t{11}}}))[0];
  EXPECT_EQ(d.elementType(), ElementType::Float64);
  EXPECT_EQ(d.data<double>()[0], static_cast<double>(1LL << 40));
}

TEST(OpsElementwise, DropoutIsIdentityWithTrueMask) {
  Tensor x = Tensor::fromFloats({3}, {1, 2, 3});
  std::vector<Tensor> out = eval("Dropout", {x}, {}, 2);
  EXPECT_EQ(out[0].toFloats(), x.toFloats());
  EXPECT_EQ(out[1].toInts(), (Ints{1, 1, 1}));
  EXPECT_THROW(eval("Dropout", {x}, attrs({{"training_mode", int64_t{1}}})), Unsupported);
}

TEST(OpsShape, ReshapeCopiesZeroAndInfersMinusOne) {
  Tensor x = Tensor::fromFloats({2, 3, 4}, iota(24));
  EXPECT_EQ(eval("Reshape", {x}, attrs({{"shape", Ints{0, -1}}}))[0].shape(), (Shape{2, 12}));
  EXPECT_EQ(eval("Reshape", {x}, attrs({{"shape", Ints{-1, 0, 2}}}))[0].shape(), (Shape{4, 3, 2}));
  Tensor empty(ElementType::Float32, {0, 3});
  EXPECT_EQ(eval("Reshape", {empty}, attrs({{"shape", Ints{3, 0}}, {"allowzero", int64_t{1}}}))[0]
                .shape(),
            (Shape{3, 0}));
  EXPECT_THROW(eval("Reshape", {x}, attrs({{"shape", Ints{5, -1}}})), Error);
  EXPECT_THROW(eval("Reshape", {x}, attrs({{"shape", Ints{-1, -1}}})), Error);
  // Found by onnx_import_fuzzer: sizes whose product passes int64 were
  // multiplied unchecked (undefined behaviour); they are refused.
  EXPECT_THROW(eval("Reshape", {x}, attrs({{"shape", Ints{381, 144071207610744831, -1}}})), Error);
}

TEST(OpsShape, SliceClampsAndSupportsNegativeSteps) {
  Tensor x = Tensor::fromFloats({2, 5}, iota(10));
  const int64_t big = std::numeric_limits<int64_t>::max();
  const int64_t small = std::numeric_limits<int64_t>::min();
  // Whole rows reversed: start -1, end "before the beginning".
  Tensor r = eval("Slice", {x},
                  attrs({{"starts", Ints{-1}},
                         {"ends", Ints{small}},
                         {"axes", Ints{1}},
                         {"steps", Ints{-1}}}))[0];
  EXPECT_EQ(r.toFloats(), (std::vector<float>{4, 3, 2, 1, 0, 9, 8, 7, 6, 5}));
  // Ends past the end are clamped; step 2.
  Tensor s = eval(
      "Slice", {x},
      attrs({{"starts", Ints{1}}, {"ends", Ints{big}}, {"axes", Ints{-1}}, {"steps", Ints{2}}}))[0];
  EXPECT_EQ(s.toFloats(), (std::vector<float>{1, 3, 6, 8}));
  // Negative step from a clamped start, on two axes.
  Tensor t = eval("Slice", {x},
                  attrs({{"starts", Ints{10, 1}},
                         {"ends", Ints{0, -big}},
                         {"axes", Ints{1, 0}},
                         {"steps", Ints{-2, -1}}}))[0];
  EXPECT_EQ(t.shape(), (Shape{2, 2}));
  EXPECT_EQ(t.toFloats(), (std::vector<float>{9, 7, 4, 2}));
  // A start beyond the end gives an empty result.
  Tensor e = eval("Slice", {x},
                  attrs({{"starts", Ints{1000}}, {"ends", Ints{1000}}, {"axes", Ints{1}}}))[0];
  EXPECT_EQ(e.shape(), (Shape{2, 0}));
  EXPECT_THROW(
      eval("Slice", {x}, attrs({{"starts", Ints{0}}, {"ends", Ints{1}}, {"steps", Ints{0}}})),
      Error);
}

TEST(OpsShape, SplitEquallyOrBySizes) {
  Tensor x = Tensor::fromFloats({2, 6}, iota(12));
  std::vector<Tensor> eq = eval("Split", {x}, attrs({{"axis", int64_t{1}}}), 3);
  ASSERT_EQ(eq.size(), 3u);
  EXPECT_EQ(eq[1].toFloats(), (std::vector<float>{2, 3, 8, 9}));
  std::vector<Tensor> parts =
      eval("Split", {x}, attrs({{"axis", int64_t{-1}}, {"split", Ints{1, 0, 5}}}), 3);
  EXPECT_EQ(parts[0].toFloats(), (std::vector<float>{0, 6}));
  EXPECT_EQ(parts[1].shape(), (Shape{2, 0}));
  EXPECT_EQ(parts[2].shape(), (Shape{2, 5}));
  EXPECT_THROW(eval("Split", {x}, attrs({{"axis", int64_t{1}}}), 4), Error);
  std::vector<Tensor> uneven =
      eval("Split", {x}, attrs({{"axis", int64_t{1}}, {"num_outputs", int64_t{4}}}), 4);
  EXPECT_EQ(uneven[3].shape(), (Shape{2, 0}));
}

TEST(OpsShape, GatherTakesNegativeIndices) {
  Tensor x = Tensor::fromFloats({3, 2}, iota(6));
  Tensor y = eval("Gather", {x, Tensor::fromInts({2}, {-1, 0})})[0];
  EXPECT_EQ(y.toFloats(), (std::vector<float>{4, 5, 0, 1}));
  Tensor z = eval("Gather", {x, ints32({2, 1}, {1, -2})}, attrs({{"axis", int64_t{1}}}))[0];
  EXPECT_EQ(z.shape(), (Shape{3, 2, 1}));
  EXPECT_EQ(z.toFloats(), (std::vector<float>{1, 0, 3, 2, 5, 4}));
  EXPECT_THROW(eval("Gather", {x, Tensor::fromInts({1}, {3})}), Error);
  // Found by onnx_import_fuzzer: scalar data made shape inference build a
  // shape past the end of the data's (undefined behaviour).
  try {
    eval("Gather", {Tensor::scalarFloat(1.0f), Tensor::fromInts({1}, {0})});
    ADD_FAILURE() << "a Gather of a scalar ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data is a scalar"), std::string::npos) << e.what();
  }
}

TEST(OpsShape, TransposeExpandTileConcat) {
  Tensor x = Tensor::fromFloats({2, 3}, iota(6));
  EXPECT_EQ(eval("Transpose", {x})[0].toFloats(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  Tensor e =
      eval("Expand", {Tensor::fromFloats({3, 1}, {1, 2, 3})}, attrs({{"shape", Ints{2, 1, 2}}}))[0];
  EXPECT_EQ(e.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(e.toFloats(), (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  Tensor t = eval("Tile", {x}, attrs({{"repeats", Ints{2, 2}}}))[0];
  EXPECT_EQ(t.shape(), (Shape{4, 6}));
  EXPECT_EQ(t.toFloats()[6 * 3 + 4], 4.0f);  // row 3 = input row 1, column 4 = input column 1
  Tensor c =
      eval("Concat", {x, Tensor::fromFloats({2, 1}, {9, 9})}, attrs({{"axis", int64_t{-1}}}))[0];
  EXPECT_EQ(c.toFloats(), (std::vector<float>{0, 1, 2, 9, 3, 4, 5, 9}));
  Tensor s = eval("Squeeze", {Tensor::fromFloats({1, 2, 1}, {1, 2})})[0];
  EXPECT_EQ(s.shape(), (Shape{2}));
  Tensor u = eval("Unsqueeze", {s}, attrs({{"axes", Ints{-1, 0}}}))[0];
  EXPECT_EQ(u.shape(), (Shape{1, 2, 1}));
}

TEST(OpsReduce, AxesKeepdimsAndNoop) {
  Tensor x = Tensor::fromFloats({2, 3}, iota(6));
  Tensor s = eval("ReduceSum", {x}, attrs({{"axes", Ints{1}}, {"keepdims", int64_t{0}}}))[0];
  EXPECT_EQ(s.shape(), (Shape{2}));
  EXPECT_EQ(s.toFloats(), (std::vector<float>{3, 12}));
  Tensor m = eval("ReduceMean", {x}, attrs({{"axes", Ints{-2}}}))[0];
  EXPECT_EQ(m.shape(), (Shape{1, 3}));
  EXPECT_EQ(m.toFloats(), (std::vector<float>{1.5f, 2.5f, 3.5f}));
  Tensor all = eval("ReduceMax", {x}, attrs({{"keepdims", int64_t{0}}}))[0];
  EXPECT_EQ(all.shape(), Shape{});
  EXPECT_EQ(all.toFloats()[0], 5.0f);
  Tensor noop = eval("ReduceSum", {x}, attrs({{"noop_with_empty_axes", int64_t{1}}}))[0];
  EXPECT_EQ(noop.toFloats(), x.toFloats());
  Tensor l2 = eval("ReduceL2", {Tensor::fromFloats({2}, {3, 4})})[0];
  EXPECT_FLOAT_EQ(l2.toFloats()[0], 5.0f);
}

TEST(OpsReduce, ArgMaxSelectsFirstOrLastIndex) {
  Tensor x = Tensor::fromFloats({2, 3}, {1, 3, 3, 2, 2, 0});
  Tensor first = eval("ArgMax", {x}, attrs({{"axis", int64_t{1}}}))[0];
  EXPECT_EQ(first.elementType(), ElementType::Int64);
  EXPECT_EQ(first.shape(), (Shape{2, 1}));
  EXPECT_EQ(first.toInts(), (Ints{1, 0}));
  Tensor last = eval(
      "ArgMax", {x},
      attrs(
          {{"axis", int64_t{1}}, {"select_last_index", int64_t{1}}, {"keepdims", int64_t{0}}}))[0];
  EXPECT_EQ(last.toInts(), (Ints{2, 1}));
  EXPECT_EQ(eval("ArgMin", {x}, attrs({{"axis", int64_t{0}}}))[0].toInts(), (Ints{0, 1, 1}));
}

TEST(OpsMisc, ShapeFoldingHelpers) {
  Tensor x(ElementType::Float32, {2, 3, 4});
  EXPECT_EQ(eval("Shape", {x}, attrs({{"start", int64_t{-2}}}))[0].toInts(), (Ints{3, 4}));
  EXPECT_EQ(eval("Size", {x})[0].toInts(), (Ints{24}));
  Tensor c = eval("ConstantOfShape", {Tensor::fromInts({2}, {2, 2})},
                  attrs({{"value", Tensor::fromInts({1}, {7})}}))[0];
  EXPECT_EQ(c.elementType(), ElementType::Int64);
  EXPECT_EQ(c.toInts(), (Ints{7, 7, 7, 7}));
  Tensor r = eval("Range",
                  {Tensor::scalarFloat(1), Tensor::scalarFloat(2), Tensor::scalarFloat(0.25f)})[0];
  EXPECT_EQ(r.toFloats(), (std::vector<float>{1, 1.25f, 1.5f, 1.75f}));
}

TEST(OpsExtra, GatherElementsTriluCumSum) {
  Tensor x = Tensor::fromFloats({2, 3}, iota(6));
  Tensor g = eval("GatherElements", {x, Tensor::fromInts({2, 2}, {2, -3, 0, 1})},
                  attrs({{"axis", int64_t{1}}}))[0];
  EXPECT_EQ(g.toFloats(), (std::vector<float>{2, 0, 3, 4}));
  Tensor up = eval("Trilu", {x}, attrs({{"k", int64_t{1}}}))[0];
  EXPECT_EQ(up.toFloats(), (std::vector<float>{0, 1, 2, 0, 0, 5}));
  Tensor low = eval("Trilu", {x}, attrs({{"upper", int64_t{0}}}))[0];
  EXPECT_EQ(low.toFloats(), (std::vector<float>{0, 0, 0, 3, 4, 0}));
  Tensor c =
      eval("CumSum", {x},
           attrs({{"axis", int64_t{1}}, {"exclusive", int64_t{1}}, {"reverse", int64_t{1}}}))[0];
  EXPECT_EQ(c.toFloats(), (std::vector<float>{3, 2, 0, 9, 5, 0}));
}

TEST(OpsExtra, RoundIsInfBitShift) {
  Tensor x = Tensor::fromFloats({4}, {0.5f, 1.5f, -2.5f, std::numeric_limits<float>::infinity()});
  EXPECT_EQ(eval("Round", {x})[0].toFloats()[0], 0.0f);  // halves go to even
  EXPECT_EQ(eval("Round", {x})[0].toFloats()[1], 2.0f);
  EXPECT_EQ(eval("Round", {x})[0].toFloats()[2], -2.0f);
  EXPECT_EQ(eval("IsInf", {x}, attrs({{"detect_positive", int64_t{0}}}))[0].toInts(),
            (Ints{0, 0, 0, 0}));
  EXPECT_EQ(eval("IsInf", {x})[0].toInts(), (Ints{0, 0, 0, 1}));
  Tensor a(ElementType::UInt8, {3});
  Tensor b(ElementType::UInt8, {3});
  const uint8_t av[] = {1, 255, 16}, bv[] = {3, 1, 9};
  std::memcpy(a.raw(), av, 3);
  std::memcpy(b.raw(), bv, 3);
  EXPECT_EQ(eval("BitShift", {a, b}, attrs({{"direction", std::string("LEFT")}}))[0].toInts(),
            (Ints{8, 254, 0}));
  EXPECT_EQ(eval("BitShift", {a, b}, attrs({{"direction", std::string("RIGHT")}}))[0].toInts(),
            (Ints{0, 127, 0}));
}

TEST(OpsRegistry, CanonicalConstInputsAreDeclared) {
  const OpRegistry& reg = OpRegistry::instance();
  ASSERT_NE(reg.get("Reshape").findConstInput(1), nullptr);
  EXPECT_EQ(reg.get("Reshape").findConstInput(1)->attribute, "shape");
  EXPECT_EQ(reg.get("Slice").findConstInput(4)->attribute, "steps");
  EXPECT_EQ(reg.get("Clip").findAttribute("min")->defaultValue, std::nullopt);
  EXPECT_EQ(reg.get("ReduceMean").findConstInput(1)->attribute, "axes");
  EXPECT_EQ(reg.get("Add").kind, OpKind::Broadcast);
  EXPECT_EQ(reg.get("Transpose").kind, OpKind::Injective);
}

}  // namespace
}  // namespace collage
