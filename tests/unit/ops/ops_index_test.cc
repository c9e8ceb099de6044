// Edges of the index-driven and data-dependent reference kernels that ONNX's
// conformance cases do not reach: bad indices are Errors naming the node and
// the input (never a read out of bounds), run-time shape inputs (TopK's k,
// Compress's condition) give real output shapes, OneHot's out-of-range
// indices, Einsum's implicit output and malformed equations.
#include <gtest/gtest.h>

#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"

namespace collage {
namespace {

std::vector<Tensor> eval(const std::string& op, const std::vector<const Tensor*>& inputs,
                         AttributeMap attrs = {}, int numOutputs = 1) {
  const OpSchema& schema = OpRegistry::instance().get(op);
  for (const AttributeSpec& spec : schema.attributes)
    if (!attrs.has(spec.name) && spec.defaultValue) attrs.set(spec.name, *spec.defaultValue);
  Node node;
  node.name = "n1";
  node.op = op;
  node.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i) node.inputs.push_back(static_cast<ValueId>(i));
  for (int i = 0; i < numOutputs; ++i) node.outputs.push_back(100 + i);
  return evaluateNode(node, inputs);
}

// The Error's message, or "" if none was thrown.
template <class F>
std::string errorOf(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(IndexOps, OutOfRangeIndicesAreErrorsNamingTheNodeAndInput) {
  Tensor data = Tensor::fromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor updates = Tensor::fromFloats({1, 3}, {7, 8, 9});
  Tensor badRow = Tensor::fromInts({1, 1}, {2});
  std::string msg = errorOf([&] { eval("ScatterND", {&data, &badRow, &updates}); });
  EXPECT_NE(msg.find("node 'n1' (ScatterND)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("indices index 2 is out of range"), std::string::npos) << msg;

  msg = errorOf([&] { eval("GatherND", {&data, &badRow}); });
  EXPECT_NE(msg.find("node 'n1' (GatherND)"), std::string::npos) << msg;

  Tensor elemIdx = Tensor::fromInts({1, 3}, {0, -3, 1});
  msg = errorOf([&] { eval("ScatterElements", {&data, &elemIdx, &updates}); });
  EXPECT_NE(msg.find("index -3 is out of range"), std::string::npos) << msg;

  // Negative indices count from the end.
  Tensor negIdx = Tensor::fromInts({1, 3}, {-1, 0, -2});
  auto out = eval("ScatterElements", {&data, &negIdx, &updates});
  EXPECT_EQ(out[0].toFloats(), (std::vector<float>{1, 8, 9, 7, 5, 6}));
}

TEST(IndexOps, LossTargetOutsideTheClassesIsAnError) {
  Tensor logp = Tensor::fromFloats({2, 3}, {-1, -2, -3, -1, -2, -3});
  Tensor target = Tensor::fromInts({2}, {0, 3});
  EXPECT_NE(errorOf([&] { eval("NegativeLogLikelihoodLoss", {&logp, &target}); })
                .find("target 3 at position 1 is not a class"),
            std::string::npos);
  // ... unless it is ignore_index.
  AttributeMap ignore;
  ignore.set("ignore_index", int64_t{3});
  auto out = eval("NegativeLogLikelihoodLoss", {&logp, &target}, ignore);
  EXPECT_FLOAT_EQ(out[0].data<float>()[0], 1.0f);  // only the first element counts
}

TEST(IndexOps, TopKReadsARunTimeK) {
  // k as a run-time tensor: infer gives a placeholder, the kernel the real shape.
  Tensor x = Tensor::fromFloats({2, 4}, {1, 3, 3, 2, 0, -1, 5, 5});
  Tensor k = Tensor::fromInts({1}, {2});
  auto out = eval("TopK", {&x, &k}, {}, 2);
  EXPECT_EQ(out[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(out[0].toFloats(), (std::vector<float>{3, 3, 5, 5}));
  EXPECT_EQ(out[1].toInts(), (std::vector<int64_t>{1, 2, 2, 3}));  // ties: lower index first
  Tensor tooBig = Tensor::fromInts({1}, {5});
  EXPECT_NE(errorOf([&] { eval("TopK", {&x, &tooBig}, {}, 2); }).find("k = 5 is out of range"),
            std::string::npos);
}

TEST(IndexOps, CompressReadsARunTimeCondition) {
  Tensor x = Tensor::fromFloats({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor cond = Tensor::fromInts({3}, {0, 1, 1});
  AttributeMap a;
  a.set("axis", int64_t{0});
  auto out = eval("Compress", {&x, &cond}, a);
  EXPECT_EQ(out[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(out[0].toFloats(), (std::vector<float>{3, 4, 5, 6}));
}

TEST(IndexOps, OneHotIndexOutsideDepthIsAllOff) {
  Tensor indices = Tensor::fromInts({3}, {0, -1, 7});
  AttributeMap a;
  a.set("depth", 3.0f);
  a.set("values", Tensor::fromFloats({2}, {0, 1}));
  auto out = eval("OneHot", {&indices}, a);
  EXPECT_EQ(out[0].shape(), (Shape{3, 3}));
  EXPECT_EQ(out[0].toFloats(), (std::vector<float>{1, 0, 0, 0, 0, 1, 0, 0, 0}));
}

TEST(IndexOps, EinsumImplicitOutputAndBadEquations) {
  Tensor a = Tensor::fromFloats({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::fromFloats({3, 2}, {1, 0, 0, 1, 1, 1});
  AttributeMap eq;
  eq.set("equation", std::string("ij,jk"));  // implicit: "ik"
  auto out = eval("Einsum", {&a, &b}, eq);
  EXPECT_EQ(out[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(out[0].toFloats(), (std::vector<float>{4, 5, 10, 11}));
  eq.set("equation", std::string("ij,ij->i"));  // i is 2 in one operand, 3 in the other
  EXPECT_NE(errorOf([&] { eval("Einsum", {&a, &b}, eq); }).find("label 'i' have sizes 2 and 3"),
            std::string::npos);
  eq.set("equation", std::string("ij->ik"));
  EXPECT_NE(errorOf([&] { eval("Einsum", {&a}, eq); }).find("output label 'k' appears in no operand"),
            std::string::npos);
}

}  // namespace
}  // namespace collage
