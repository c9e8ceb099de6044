// The oneDNN backend against the reference executor: every family of groups
// it lowers (Conv/ConvTranspose/MatMul/Gemm/pooling/normalisations/softmax/
// elementwise, each with post-op chains), over several shapes, and the
// groups it must refuse with a reason instead of crashing.
#include "backends/onednn/onednn_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <dnnl.hpp>
#include <functional>
#include <random>

#include "backends/backend_list.h"
#include "backends/onednn/onednn_chain.h"
#include "backends/onednn/onednn_descs.h"
#include "core/measure/kernel_check.h"
#include "core/measure/measurer.h"
#include "core/ops/op_helpers.h"
#include "core/ops/op_registry.h"
#include "core/ops/reference_executor.h"
#include "core/patterns/backend_spec.h"
#include "core/patterns/pattern_generator.h"
#include "core/patterns/pattern_matcher.h"
#include "core/runtime/kernel_cache.h"
#include "core/runtime/session.h"
#include "tests/unit/backends/every_group_runs.h"
#include "tests/unit/backends/written_out_idioms.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/syscall_counter.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

class OneDnn : public ::testing::Test {
 protected:
  void SetUp() override { backend_ = createOneDnnBackend(); }
  void TearDown() override { RecordProperty("checked", checked_); }

  // Compiles the group, runs it on random inputs and compares with the reference.
  void expectMatches(GraphBuilder& b, ValueId out, const std::string& what) {
    const NodeSet nodes = b.finish(out);
    const KernelCheckResult r = checkKernelAgainstReference(*backend_, b.graph(), nodes, 3);
    EXPECT_TRUE(r.compiled) << what << ": refused: " << r.refusal;
    std::string chosen;
    if (r.compiled && !r.ok) {  // say what oneDNN ran, to tell a lowering bug from a library one
      CompileResult c = backend_->compile(KernelRequest::of(b.graph(), nodes));
      chosen = describeOneDnnKernel(*c.kernel);
    }
    EXPECT_TRUE(r.ok) << what << ": " << r.message << " [" << chosen << "]";
    ++checked_;
  }

  // Expects a refusal whose reason contains `mention`.
  void expectRefusal(GraphBuilder& b, ValueId out, const std::string& mention) {
    const NodeSet nodes = b.finish(out);
    const CompileResult c = backend_->compile(KernelRequest::of(b.graph(), nodes));
    EXPECT_FALSE(c) << "expected a refusal mentioning '" << mention << "'";
    EXPECT_NE(c.refusal.find(mention), std::string::npos) << c.refusal;
  }

  // Expects the single-chain analysis (what the pattern rule asks) to refuse
  // with `mention`, while the group still runs correctly as a region of
  // several chains (what the graph-level search may hand oneDNN).
  void expectChainRefusalButRegionRuns(GraphBuilder& b, ValueId out, const std::string& mention) {
    const NodeSet nodes = b.finish(out);
    const KernelRequest request = KernelRequest::of(b.graph(), nodes);
    const onednn::ChainAnalysis a = onednn::analyzeChain(request);
    EXPECT_FALSE(a.ok()) << "expected a refusal mentioning '" << mention << "'";
    EXPECT_NE(a.refusal.find(mention), std::string::npos) << a.refusal;
    EXPECT_EQ(backend_->regionRefusal(request), "");
    const KernelCheckResult r = checkKernelAgainstReference(*backend_, b.graph(), nodes, 3);
    EXPECT_TRUE(r.compiled && r.ok) << r.refusal << r.message;
  }

  // Plans with oneDNN groups, the rest on the native backend.
  BackendLookup oneDnnElseNative() {
    if (!native_) native_ = createBackend("native");
    return [this](const std::string& name) { return name == "onednn" ? backend_.get() : native_.get(); };
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Backend> native_;
  int checked_ = 0;
};

// Post-op chains applied after an anchor's result `y` (channel dim 1).
using Chain = std::function<ValueId(GraphBuilder&, ValueId)>;

std::vector<std::pair<std::string, Chain>> postOpChains() {
  auto unary = [](const std::string& op, AttributeMap a = {}) {
    return [op, a](GraphBuilder& b, ValueId y) { return b.op(op, {y}, a); };
  };
  auto perChannel = [](GraphBuilder& b, ValueId y) {
    Shape s(b.shape(y).size() - 1, 1);
    s[0] = b.shape(y)[1];
    return s;  // [C, 1, ...]: broadcasts along the channel dimension
  };
  return {
      {"none", [](GraphBuilder&, ValueId y) { return y; }},
      {"relu", unary("Relu")},
      {"leaky_relu", unary("LeakyRelu", attrs({{"alpha", 0.1f}}))},
      {"clip", unary("Clip", attrs({{"min", 0.0f}, {"max", 0.5f}}))},
      {"clip_max_only", unary("Clip", attrs({{"max", 0.25f}}))},
      {"sigmoid", unary("Sigmoid")},
      {"tanh", unary("Tanh")},
      {"hardswish", unary("HardSwish")},
      {"hardsigmoid", unary("HardSigmoid", attrs({{"alpha", 0.3f}, {"beta", 0.4f}}))},
      {"elu", unary("Elu", attrs({{"alpha", 0.7f}}))},
      {"selu", unary("Selu")},
      {"softplus", unary("Softplus")},
      {"abs_sqrt", [](GraphBuilder& b, ValueId y) { return b.op("Sqrt", {b.op("Abs", {y})}); }},
      {"exp", unary("Exp")},
      {"gelu_erf",
       [](GraphBuilder& b, ValueId y) {
         ValueId d = b.op("Div", {y, b.scalar(1.4142135381698608f)});
         ValueId e = b.op("Erf", {d});
         ValueId a = b.op("Add", {e, b.scalar(1.0f)});
         ValueId m = b.op("Mul", {y, a});
         return b.op("Mul", {m, b.scalar(0.5f)});
       }},
      {"gelu_erf_half_first",
       [](GraphBuilder& b, ValueId y) {
         ValueId h = b.op("Mul", {b.scalar(0.5f), y});
         ValueId d = b.op("Mul", {y, b.scalar(0.70710678f)});
         ValueId a = b.op("Add", {b.scalar(1.0f), b.op("Erf", {d})});
         return b.op("Mul", {h, a});
       }},
      {"swish",
       [](GraphBuilder& b, ValueId y) {
         return b.op("Mul", {b.op("Sigmoid", {y}), y});
       }},
      {"bias_add_relu",
       [perChannel](GraphBuilder& b, ValueId y) {
         return b.op("Relu", {b.op("Add", {b.constant(perChannel(b, y)), y})});
       }},
      {"residual_add_relu",
       [](GraphBuilder& b, ValueId y) {
         return b.op("Relu", {b.op("Add", {y, b.input(b.shape(y))})});
       }},
      {"mul_channel_runtime",
       [perChannel](GraphBuilder& b, ValueId y) {
         return b.op("Mul", {y, b.input(perChannel(b, y))});
       }},
      {"batchnorm_relu",
       [](GraphBuilder& b, ValueId y) {
         const Shape c{b.shape(y)[1]};
         ValueId bn =
             b.op("BatchNormalization",
                  {y, b.constant(c), b.constant(c), b.constant(c), b.constant(c, 0.5f, 2.0f)},
                  attrs({{"epsilon", 1e-3f}}));
         return b.op("Relu", {bn});
       }},
      {"scalar_ops",
       [](GraphBuilder& b, ValueId y) {
         ValueId s = b.op("Sub", {y, b.scalar(0.25f)});
         ValueId d = b.op("Div", {s, b.scalar(3.0f)});
         ValueId m = b.op("Max", {d, b.scalar(-0.1f)});
         return b.op("Sub", {b.scalar(1.0f), m});
       }},
      {"repeated_linear_clip",  // same eltwise algorithms twice with other parameters
       [](GraphBuilder& b, ValueId y) {
         ValueId h = b.op("HardSigmoid", {y}, attrs({{"alpha", 0.5f}, {"beta", 0.25f}}));
         ValueId m = b.op("Mul", {b.op("Tanh", {h}), b.scalar(2.0f)});
         return b.op("Clip", {b.op("Sigmoid", {m})}, attrs({{"min", 0.6f}, {"max", 0.8f}}));
       }},
      {"div_by_runtime_sub",
       [](GraphBuilder& b, ValueId y) {
         b.endGroup();  // a positive run-time divisor, computed outside the group
         const ValueId divisor = b.op("Abs", {b.input({1})});
         b.beginGroup();
         ValueId d = b.op("Div", {b.op("Sigmoid", {y}), divisor});
         return b.op("Sub", {d, b.input(b.shape(y))});
       }},
  };
}

struct ConvCase {
  std::string name;
  Shape x;
  int64_t outChannels;
  Ints kernel;
  AttributeMap attrs;
  bool bias = true;
};

std::vector<ConvCase> convCases() {
  return {
      {"2d_3x3_pad1", {1, 3, 7, 7}, 8, {3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}})},
      {"2d_batch2_strided_dilated_asym",
       {2, 5, 9, 11},
       6,
       {3, 2},
       attrs({{"strides", Ints{2, 1}}, {"dilations", Ints{2, 1}}, {"pads", Ints{0, 1, 2, 0}}}),
       false},
      {"2d_grouped",
       {2, 8, 6, 5},
       12,
       {3, 3},
       attrs({{"group", int64_t{4}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"2d_depthwise_s2",
       {1, 16, 9, 9},
       16,
       {3, 3},
       attrs({{"group", int64_t{16}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"2d_depthwise_multiplier", {1, 8, 6, 7}, 16, {3, 3}, attrs({{"group", int64_t{8}}})},
      {"2d_pointwise", {2, 16, 5, 5}, 24, {1, 1}, {}},
      {"2d_same_upper",
       {1, 4, 8, 7},
       5,
       {4, 3},
       attrs({{"auto_pad", std::string("SAME_UPPER")}, {"strides", Ints{2, 2}}})},
      {"2d_wide_channels", {1, 32, 10, 10}, 64, {3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}})},
      {"1d", {2, 4, 19}, 5, {3}, attrs({{"strides", Ints{2}}, {"pads", Ints{1, 2}}})},
      {"1d_grouped_dilated",
       {1, 6, 17},
       9,
       {3},
       attrs({{"group", int64_t{3}}, {"dilations", Ints{3}}, {"pads", Ints{2, 2}}}),
       false},
      {"3d",
       {1, 3, 5, 6, 7},
       4,
       {3, 3, 3},
       attrs({{"pads", Ints{1, 1, 1, 1, 1, 1}}, {"strides", Ints{1, 2, 2}}})},
      {"3d_grouped_batch2",
       {2, 4, 4, 5, 5},
       8,
       {1, 3, 3},
       attrs({{"group", int64_t{2}}, {"pads", Ints{0, 1, 1, 0, 0, 1}}}),
       false},
  };
}

TEST_F(OneDnn, ConvWithEveryPostOpChain) {
  for (const ConvCase& c : convCases())
    for (const auto& [chainName, chain] : postOpChains()) {
      GraphBuilder b;
      const int64_t group = c.attrs.getInt("group", 1);
      Shape w{c.outChannels, c.x[1] / group};
      w.insert(w.end(), c.kernel.begin(), c.kernel.end());
      std::vector<ValueId> ins{b.input(c.x), b.constant(w)};
      if (c.bias) ins.push_back(b.constant({c.outChannels}));
      const ValueId y = b.op("Conv", ins, c.attrs);
      expectMatches(b, chain(b, y), "Conv " + c.name + " + " + chainName);
    }
  EXPECT_GE(checked_, 12 * 20);
}

TEST_F(OneDnn, ConvWithRuntimeWeightsAndBias) {
  GraphBuilder b;
  const ValueId y = b.op("Conv", {b.input({2, 4, 6, 6}), b.input({6, 2, 3, 3}), b.input({6})},
                         attrs({{"group", int64_t{2}}, {"pads", Ints{1, 0, 1, 0}}}));
  expectMatches(b, b.op("Relu", {y}), "Conv with run-time weights");
}

TEST_F(OneDnn, ConvTranspose) {
  struct Case {
    std::string name;
    Shape x;
    int64_t outChannels;
    Ints kernel;
    AttributeMap attrs;
  };
  const std::vector<Case> cases = {
      {"2d_s2_p1_outpad",
       {1, 4, 5, 5},
       3,
       {3, 3},
       attrs(
           {{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}, {"output_padding", Ints{1, 1}}})},
      {"2d_dcgan",
       {2, 8, 4, 4},
       4,
       {4, 4},
       attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"2d_grouped_dilated",
       {1, 6, 5, 4},
       4,
       {3, 2},
       attrs({{"group", int64_t{2}}, {"dilations", Ints{2, 1}}, {"pads", Ints{0, 1, 1, 0}}})},
      {"1d", {2, 3, 7}, 5, {4}, attrs({{"strides", Ints{3}}})},
      {"3d",
       {1, 2, 3, 4, 4},
       3,
       {2, 3, 3},
       attrs({{"strides", Ints{1, 2, 2}}, {"pads", Ints{0, 1, 1, 0, 1, 1}}})},
      {"2d_output_shape",
       {1, 3, 4, 4},
       2,
       {3, 3},
       attrs({{"strides", Ints{2, 2}},
              {"output_shape", Ints{8, 8}},
              {"auto_pad", std::string("SAME_UPPER")}})},
  };
  const auto chains = postOpChains();
  for (const Case& c : cases)
    for (const char* chainName : {"none", "relu", "tanh", "batchnorm_relu", "residual_add_relu"}) {
      const auto& chain = std::find_if(chains.begin(), chains.end(), [&](auto& p) {
                            return p.first == chainName;
                          })->second;
      GraphBuilder b;
      const int64_t group = c.attrs.getInt("group", 1);
      Shape w{c.x[1], c.outChannels / group};
      w.insert(w.end(), c.kernel.begin(), c.kernel.end());
      const ValueId y = b.op("ConvTranspose",
                             {b.input(c.x), b.constant(w), b.constant({c.outChannels})}, c.attrs);
      expectMatches(b, chain(b, y), "ConvTranspose " + c.name + " + " + chainName);
    }
}

TEST_F(OneDnn, MatMul) {
  struct Case {
    std::string name;
    Shape a, b;
    bool constB;
  };
  const std::vector<Case> cases = {
      {"2d_const", {5, 7}, {7, 3}, true},
      {"batched_x_const", {2, 3, 5, 7}, {7, 4}, true},
      {"batched_runtime", {2, 4, 6, 8}, {2, 4, 8, 5}, false},
      {"broadcast_batch", {2, 1, 6, 8}, {1, 3, 8, 5}, false},
      {"batched_const_b", {3, 4, 6}, {3, 6, 5}, true},
      {"odd_sizes", {1, 13, 33}, {33, 17}, true},
  };
  for (const Case& c : cases)
    for (const char* post : {"none", "bias", "bias_gelu", "bias_relu", "scale_mask", "residual"}) {
      GraphBuilder b;
      const ValueId y = b.op("MatMul", {b.input(c.a), c.constB ? b.constant(c.b) : b.input(c.b)});
      const Shape ys = b.shape(y);
      const Shape n{ys.back()};
      ValueId out = y;
      const std::string p = post;
      if (p.rfind("bias", 0) == 0) out = b.op("Add", {b.constant(n), y});
      if (p == "bias_relu") out = b.op("Relu", {out});
      if (p == "bias_gelu") {
        ValueId d = b.op("Div", {out, b.scalar(1.4142135381698608f)});
        ValueId a = b.op("Add", {b.op("Erf", {d}), b.scalar(1.0f)});
        out = b.op("Mul", {b.op("Mul", {out, a}), b.scalar(0.5f)});
      }
      if (p == "scale_mask") {  // attention scores: / sqrt(d) + mask broadcast over rows
        Shape mask(ys.size(), 1);
        mask[0] = ys[0];
        mask.back() = ys.back();
        out = b.op("Add", {b.op("Div", {y, b.scalar(8.0f)}), b.input(mask)});
      }
      if (p == "residual") out = b.op("Add", {y, b.input(ys)});
      expectMatches(b, out, "MatMul " + c.name + " + " + p);
    }
}

TEST_F(OneDnn, Gemm) {
  for (int transA : {0, 1})
    for (int transB : {0, 1})
      for (const char* cKind : {"none", "vector", "row", "matrix", "scalar", "column", "runtime"})
        for (float alpha : {1.0f, 0.5f}) {
          GraphBuilder b;
          const int64_t M = 6, K = 9, N = 5;
          const ValueId A = b.input(transA ? Shape{K, M} : Shape{M, K});
          const ValueId B = b.constant(transB ? Shape{N, K} : Shape{K, N});
          std::vector<ValueId> ins{A, B};
          const std::string ck = cKind;
          if (ck == "vector") ins.push_back(b.constant({N}));
          if (ck == "row") ins.push_back(b.constant({1, N}));
          if (ck == "matrix") ins.push_back(b.constant({M, N}));
          if (ck == "scalar") ins.push_back(b.constant({1}));
          if (ck == "column") ins.push_back(b.constant({M, 1}));
          if (ck == "runtime") ins.push_back(b.input({M, N}));
          const float beta = ck == "runtime" ? 1.0f : 0.75f;
          const ValueId y = b.op("Gemm", ins,
                                 attrs({{"transA", int64_t{transA}},
                                        {"transB", int64_t{transB}},
                                        {"alpha", alpha},
                                        {"beta", beta}}));
          expectMatches(b, b.op("Relu", {y}),
                        "Gemm transA=" + std::to_string(transA) +
                            " transB=" + std::to_string(transB) + " C=" + ck +
                            " alpha=" + std::to_string(alpha));
        }
  // Run-time B (both operands activations).
  GraphBuilder b;
  const ValueId y = b.op("Gemm", {b.input({4, 3}), b.input({5, 3}), b.constant({5})},
                         attrs({{"transB", int64_t{1}}, {"alpha", 2.0f}}));
  expectMatches(b, y, "Gemm with run-time B");
}

TEST_F(OneDnn, Pooling) {
  struct Case {
    std::string op;
    Shape x;
    AttributeMap attrs;
  };
  const std::vector<Case> cases = {
      {"MaxPool", {1, 3, 8, 8}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})},
      {"MaxPool",
       {2, 4, 9, 11},
       attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"MaxPool",
       {1, 2, 9, 10},
       attrs({{"kernel_shape", Ints{3, 2}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}})},
      {"MaxPool", {1, 2, 10, 10}, attrs({{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}})},
      {"MaxPool",
       {2, 3, 13},
       attrs({{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"pads", Ints{0, 1}}})},
      {"MaxPool",
       {1, 2, 5, 6, 7},
       attrs({{"kernel_shape", Ints{2, 2, 2}}, {"strides", Ints{1, 2, 2}}})},
      {"AveragePool",
       {1, 3, 8, 8},
       attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"AveragePool",
       {1, 3, 8, 8},
       attrs({{"kernel_shape", Ints{3, 3}},
              {"pads", Ints{1, 1, 1, 1}},
              {"count_include_pad", int64_t{1}}})},
      {"AveragePool",
       {2, 2, 9, 7},
       attrs({{"kernel_shape", Ints{2, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", int64_t{1}}})},
      {"AveragePool",
       {1, 4, 6, 5, 7},
       attrs({{"kernel_shape", Ints{3, 3, 3}}, {"pads", Ints{1, 0, 1, 1, 1, 0}}})},
      {"GlobalAveragePool", {2, 5, 7, 6}, {}},
      {"GlobalMaxPool", {1, 3, 4, 5, 6}, {}},
      {"GlobalAveragePool", {3, 4, 9}, {}},
  };
  for (const Case& c : cases)
    for (bool relu : {false, true}) {
      GraphBuilder b;
      ValueId y = b.op(c.op, {b.input(c.x)}, c.attrs);
      if (relu) y = b.op("Relu", {y});
      expectMatches(b, y,
                    c.op + " " + shapeToString(c.x) + c.attrs.toString() + (relu ? " + relu" : ""));
    }
}

TEST_F(OneDnn, BatchNormalization) {
  for (const Shape& x : {Shape{2, 3, 5, 4}, Shape{4, 6}, Shape{1, 5, 3, 3, 2}, Shape{2, 3, 7}})
    for (const char* post : {"none", "relu", "add_sigmoid"}) {
      GraphBuilder b;
      const Shape c{x[1]};
      ValueId y = b.op("BatchNormalization", {b.input(x), b.constant(c), b.constant(c),
                                              b.constant(c), b.constant(c, 0.5f, 2.0f)});
      if (std::string(post) == "relu") y = b.op("Relu", {y});
      if (std::string(post) == "add_sigmoid") y = b.op("Sigmoid", {b.op("Add", {y, b.input(x)})});
      expectMatches(b, y, "BatchNormalization " + shapeToString(x) + " + " + post);
    }
  // Run-time statistics: oneDNN's batch normalization primitive.
  for (bool relu : {false, true}) {
    GraphBuilder b;
    const Shape x{2, 4, 3, 5}, c{4};
    b.endGroup();
    const ValueId var = b.op("Abs", {b.input(c)});
    b.beginGroup();
    ValueId y = b.op("BatchNormalization", {b.input(x), b.input(c), b.input(c), b.input(c), var},
                     attrs({{"epsilon", 0.01f}}));
    if (relu) y = b.op("Relu", {y});
    expectMatches(
        b, y, std::string("BatchNormalization with run-time statistics") + (relu ? " + relu" : ""));
  }
}

TEST_F(OneDnn, LayerNormalization) {
  struct Case {
    Shape x;
    int64_t axis;
    bool bias;
  };
  for (const Case& c : {Case{{2, 5, 16}, -1, true}, Case{{3, 4, 5}, 1, true},
                        Case{{7, 33}, -1, false}, Case{{2, 3, 4, 6}, 2, true}}) {
    GraphBuilder b;
    const int64_t axis = c.axis < 0 ? c.axis + static_cast<int64_t>(c.x.size()) : c.axis;
    const Shape norm(c.x.begin() + axis, c.x.end());
    std::vector<ValueId> ins{b.input(c.x), b.constant(norm)};
    if (c.bias) ins.push_back(b.constant(norm));
    const ValueId y =
        b.op("LayerNormalization", ins, attrs({{"axis", c.axis}, {"epsilon", 1e-5f}}));
    expectMatches(b, y,
                  "LayerNormalization " + shapeToString(c.x) + " axis " + std::to_string(c.axis));
  }
}

TEST_F(OneDnn, NormalizationAndSoftmaxWithPostOps) {
  // oneDNN decides whether these primitives take post-ops; either the kernel
  // is right or the group is refused with a reason.
  for (const char* op : {"LayerNormalization", "Softmax"})
    for (const char* post : {"relu", "mul_tensor"}) {
      GraphBuilder b;
      const Shape x{2, 5, 16};
      ValueId y = std::string(op) == "Softmax"
                      ? b.op(op, {b.input(x)}, attrs({{"axis", int64_t{-1}}}))
                      : b.op(op, {b.input(x), b.constant({16}), b.constant({16})});
      y = std::string(post) == "relu" ? b.op("Relu", {y}) : b.op("Mul", {y, b.input({5, 16})});
      const NodeSet nodes = b.finish(y);
      const KernelCheckResult r = checkKernelAgainstReference(*backend_, b.graph(), nodes, 5);
      if (r.compiled)
        EXPECT_TRUE(r.ok) << op << " + " << post << ": " << r.message;
      else
        EXPECT_NE(r.refusal.find(op), std::string::npos) << r.refusal;
    }
}

TEST_F(OneDnn, SoftmaxAndLogSoftmax) {
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (const auto& [x, axis] : std::vector<std::pair<Shape, int64_t>>{
             {{2, 4, 7, 7}, -1}, {{3, 10}, 1}, {{2, 5, 6}, 1}, {{4, 3, 2, 5}, 0}}) {
      GraphBuilder b;
      const ValueId y = b.op(op, {b.input(x)}, attrs({{"axis", axis}}));
      expectMatches(b, y,
                    std::string(op) + " " + shapeToString(x) + " axis " + std::to_string(axis));
    }
}

TEST_F(OneDnn, ElementwiseOpsAlone) {
  const Shape x{2, 3, 4, 5};
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "HardSwish", "HardSigmoid",
                         "Softplus", "Elu", "Selu", "LeakyRelu", "Reciprocal", "Clip"}) {
    GraphBuilder b;
    AttributeMap a;
    if (std::string(op) == "Clip") a = attrs({{"min", -0.5f}, {"max", 0.5f}});
    expectMatches(b, b.op(op, {b.input(x)}, a), op);
  }
  // Binary ops with broadcasting: the second operand (constant or not) broadcasts.
  struct Case {
    std::string op;
    Shape a, b;
    bool constB, swap;
  };
  for (const Case& c : std::vector<Case>{{"Add", x, {3, 1, 1}, true, false},
                                         {"Add", x, {3, 1, 1}, true, true},
                                         {"Mul", x, {1, 3, 1, 1}, false, false},
                                         {"Sub", x, {5}, false, true},
                                         {"Sub", x, x, false, false},
                                         {"Div", x, {4, 1}, true, false},
                                         {"Div", x, {1}, false, true},
                                         {"Max", x, {4, 5}, false, false},
                                         {"Min", x, x, false, true},
                                         {"Add", {7}, {1}, false, false},
                                         {"Mul", {3, 1000}, {3, 1}, true, false}}) {
    GraphBuilder b;
    const ValueId A = b.input(c.a), B = c.constB ? b.constant(c.b) : b.input(c.b);
    expectMatches(
        b, b.op(c.op, c.swap ? std::vector<ValueId>{B, A} : std::vector<ValueId>{A, B}),
        c.op + " " + shapeToString(c.a) + (c.swap ? " <- " : " -> ") + shapeToString(c.b));
  }
  {  // x op x
    GraphBuilder b;
    const ValueId A = b.input(x);
    expectMatches(b, b.op("Mul", {A, A}), "Mul(x, x)");
  }
  {  // an identity (an exporter's Mul by a scalar 1): its post-op simplifies away
    GraphBuilder b;
    expectMatches(b, b.op("Mul", {b.input(x), b.constant({}, 1.0f, 1.0f)}), "Mul(x, 1)");
  }
  for (const auto& [chainName, chain] : postOpChains()) {  // a chain starting at an input
    if (chainName == "none") continue;
    GraphBuilder b;
    expectMatches(b, chain(b, b.input(x)), "elementwise chain " + chainName);
  }
}

TEST_F(OneDnn, KernelRunsRepeatedlyWithNewBuffers) {
  GraphBuilder b;
  const ValueId x = b.input({1, 4, 6, 6});
  const ValueId y = b.op("Relu", {b.op("Conv", {x, b.constant({8, 4, 3, 3}), b.constant({8})},
                                       attrs({{"pads", Ints{1, 1, 1, 1}}}))});
  const NodeSet nodes = b.finish(y);
  const KernelRequest request = KernelRequest::of(b.graph(), nodes);
  CompileResult c = backend_->compile(request);
  ASSERT_TRUE(c) << c.refusal;
  std::vector<Tensor> in1 = randomInputs(b.graph(), 1), in2 = randomInputs(b.graph(), 2);
  const std::vector<Tensor> first = runKernel(*c.kernel, request, in1);
  const std::vector<Tensor> second = runKernel(*c.kernel, request, in2);
  const std::vector<Tensor> again = runKernel(*c.kernel, request, in1);
  EXPECT_TRUE(compareTensors(again[0], first[0], {0, 0}).ok);
  EXPECT_FALSE(compareTensors(second[0], first[0], {0, 0}).ok);
  EXPECT_FALSE(describeOneDnnKernel(*c.kernel).empty());
}

TEST_F(OneDnn, VersionNamesTheLibrary) {
  EXPECT_EQ(backend_->name(), "onednn");
  EXPECT_EQ(backend_->version().rfind("oneDNN 2.", 0), 0u) << backend_->version();
}

// ---- the spec file: every pattern matches somewhere in a zoo of small
// models, and every match compiles and computes what the reference does.

// A small ResNet as PyTorch exports it (BatchNormalization folded into the
// convs): stem Conv -> Relu -> MaxPool, bottleneck blocks with a
// downsampling and an identity shortcut, basic blocks (one strided), and
// channel counts that are and are not multiples of oneDNN's block of 8.
std::unique_ptr<GraphBuilder> miniResNet() {
  auto b = std::make_unique<GraphBuilder>(24);
  const AttributeMap pad1 = attrs({{"pads", Ints{1, 1, 1, 1}}});
  auto conv = [&](ValueId in, int64_t oc, int64_t k, AttributeMap a = {}) {
    const int64_t ic = b->shape(in)[1];
    return b->op("Conv", {in, b->constant({oc, ic, k, k}, -0.5f, 0.5f), b->constant({oc})}, a);
  };
  auto relu = [&](ValueId v) { return b->op("Relu", {v}); };
  ValueId x = b->input({1, 3, 16, 16});
  ValueId stem = relu(conv(x, 8, 3, pad1));
  ValueId p = b->op("MaxPool", {stem},
                    attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
  // Bottleneck with a downsampling shortcut, then one with an identity shortcut.
  ValueId m1 = relu(conv(relu(conv(p, 4, 1)), 4, 3, pad1));
  ValueId b1 = relu(b->op("Add", {conv(m1, 16, 1), conv(p, 16, 1)}));
  ValueId b2 = b1;
  for (int i = 0; i < 3; ++i) {  // three identity blocks (the x2 and x3 patterns)
    ValueId m2 = relu(conv(relu(conv(b2, 4, 1)), 4, 3, pad1));
    b2 = relu(b->op("Add", {conv(m2, 16, 1), b2}));
  }
  // Basic blocks: strided with a downsampling shortcut, then identity (12 channels).
  const AttributeMap s2 = attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}});
  ValueId m3 = conv(relu(conv(b2, 12, 3, s2)), 12, 3, pad1);
  ValueId b3 = relu(b->op("Add", {m3, conv(b2, 12, 1, attrs({{"strides", Ints{2, 2}}}))}));
  ValueId m4 = conv(relu(conv(b3, 12, 3, pad1)), 12, 3, pad1);
  ValueId b4 = relu(b->op("Add", {m4, b3}));
  b->finish(b->op("GlobalAveragePool", {b4}));
  return b;
}

// MobileNetV2's inverted residuals: expand 1x1 + ReLU6, depthwise 3x3 +
// ReLU6, project 1x1, with the shortcut when the shape allows.
std::unique_ptr<GraphBuilder> miniMobileNet() {
  auto b = std::make_unique<GraphBuilder>(25);
  auto conv = [&](ValueId in, int64_t oc, int64_t k, int64_t group, int64_t stride) {
    const int64_t ic = b->shape(in)[1];
    const int64_t pad = k / 2;
    return b->op("Conv", {in, b->constant({oc, ic / group, k, k}, -0.5f, 0.5f), b->constant({oc})},
                 attrs({{"group", group}, {"strides", Ints{stride, stride}}, {"pads", Ints{pad, pad, pad, pad}}}));
  };
  auto relu6 = [&](ValueId v) { return b->op("Clip", {v}, attrs({{"min", 0.0f}, {"max", 6.0f}})); };
  ValueId x = b->input({1, 8, 10, 10});
  // The first block: depthwise + project, no expansion.
  ValueId f = conv(relu6(conv(x, 8, 3, 8, 1)), 8, 1, 1, 1);
  // An identity block, then a strided one.
  ValueId e1 = relu6(conv(f, 24, 1, 1, 1));
  ValueId r1 = b->op("Add", {conv(relu6(conv(e1, 24, 3, 24, 1)), 8, 1, 1, 1), f});
  ValueId e2 = relu6(conv(r1, 24, 1, 1, 1));
  b->finish(conv(relu6(conv(e2, 24, 3, 24, 2)), 12, 1, 1, 1));
  return b;
}

// Inception-v3's five kinds of block as PyTorch exports them (each branch
// Conv -> Relu, the branch pools as a zero Pad + AveragePool), with channel
// counts that are and are not multiples of oneDNN's block of 8, and a stem
// whose Conv reads a Pad.
std::unique_ptr<GraphBuilder> miniInception() {
  auto b = std::make_unique<GraphBuilder>(26);
  auto cr = [&](ValueId in, int64_t oc, int64_t kh, int64_t kw, int64_t stride = 1) {
    const int64_t ic = b->shape(in)[1];
    const AttributeMap a = attrs({{"strides", Ints{stride, stride}},
                                  {"pads", stride == 1 ? Ints{kh / 2, kw / 2, kh / 2, kw / 2}
                                                       : Ints{0, 0, 0, 0}}});
    return b->op("Relu", {b->op("Conv", {in, b->constant({oc, ic, kh, kw}, -0.5f, 0.5f),
                                         b->constant({oc})}, a)});
  };
  auto branchPool = [&](ValueId in, int64_t oc) {
    ValueId padded = b->op("Pad", {in}, attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}}));
    return cr(b->op("AveragePool", {padded}, attrs({{"kernel_shape", Ints{3, 3}}})), oc, 1, 1);
  };
  auto maxPool = [&](ValueId in) {
    return b->op("MaxPool", {in}, attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}}));
  };
  auto concat = [&](std::vector<ValueId> parts) {
    return b->op("Concat", parts, attrs({{"axis", int64_t{1}}}));
  };
  ValueId x = b->input({1, 3, 13, 13});
  ValueId stemPad = b->op("Pad", {x}, attrs({{"pads", Ints{0, 0, 1, 0, 0, 0, 2, 1}}}));
  ValueId stem = b->op("Conv", {stemPad, b->constant({16, 3, 3, 3}, -0.5f, 0.5f)});
  // A (Mixed_5b): 1x1; 1x1 -> 5x5; 1x1 -> 3x3 -> 3x3; pool -> 1x1.
  ValueId a = concat({cr(stem, 8, 1, 1), cr(cr(stem, 6, 1, 1), 8, 5, 5),
                      cr(cr(cr(stem, 8, 1, 1), 12, 3, 3), 12, 3, 3), branchPool(stem, 4)});
  // B (Mixed_6a): strided 3x3; 1x1 -> 3x3 -> strided 3x3; max pool.
  ValueId bb = concat({cr(a, 16, 3, 3, 2), cr(cr(cr(a, 8, 1, 1), 12, 3, 3), 12, 3, 3, 2), maxPool(a)});
  // C (Mixed_6b): 1x1; 1x1 -> 1x7 -> 7x1; 1x1 -> 7x1 -> 1x7 -> 7x1 -> 1x7; pool -> 1x1.
  ValueId c = concat({cr(bb, 8, 1, 1), cr(cr(cr(bb, 6, 1, 1), 6, 1, 7), 8, 7, 1),
                      cr(cr(cr(cr(cr(bb, 6, 1, 1), 6, 7, 1), 6, 1, 7), 6, 7, 1), 8, 1, 7),
                      branchPool(bb, 8)});
  // D (Mixed_7a): 1x1 -> strided 3x3; 1x1 -> 1x7 -> 7x1 -> strided 3x3; max pool.
  ValueId d = concat({cr(cr(c, 8, 1, 1), 8, 3, 3, 2),
                      cr(cr(cr(cr(c, 8, 1, 1), 8, 1, 7), 8, 7, 1), 8, 3, 3, 2), maxPool(c)});
  // E (Mixed_7b): 1x1; 1x1 -> {1x3, 3x1}; 1x1 -> 3x3 -> {1x3, 3x1}; pool -> 1x1.
  ValueId y = cr(d, 8, 1, 1), z = cr(cr(d, 8, 1, 1), 8, 3, 3);
  ValueId e = concat({cr(d, 8, 1, 1), cr(y, 8, 1, 3), cr(y, 8, 3, 1), cr(z, 8, 1, 3),
                      cr(z, 8, 3, 1), branchPool(d, 8)});
  b->finish(b->op("GlobalAveragePool", {e}));
  return b;
}

std::vector<std::unique_ptr<GraphBuilder>> patternZoo() {
  std::vector<std::unique_ptr<GraphBuilder>> zoo;
  auto bn = [](GraphBuilder& b, ValueId x) {
    const Shape c{b.shape(x)[1]};
    return b.op("BatchNormalization",
                {x, b.constant(c), b.constant(c), b.constant(c), b.constant(c, 0.5f, 2.0f)});
  };
  const AttributeMap pad1 = attrs({{"pads", Ints{1, 1, 1, 1}}});
  {  // A small CNN: ResNet, MobileNet and EfficientNet blocks and a classifier head.
    auto b = std::make_unique<GraphBuilder>(21);
    ValueId x = b->input({1, 3, 12, 12});
    ValueId r1 = b->op(
        "Relu", {bn(*b, b->op("Conv", {x, b->constant({8, 3, 3, 3}), b->constant({8})}, pad1))});
    ValueId p =
        b->op("MaxPool", {r1}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}));
    ValueId c2 = b->op("Conv", {p, b->constant({8, 8, 3, 3})}, pad1);
    ValueId r2 = b->op("Relu", {b->op("Add", {c2, b->constant({8, 1, 1})})});
    ValueId c3 = b->op("Conv", {r2, b->constant({8, 8, 1, 1}), b->constant({8})});
    ValueId r3 = b->op("Relu", {b->op("Add", {c3, p})});
    ValueId c4 = b->op("Conv", {r3, b->constant({8, 1, 3, 3}), b->constant({8})},
                       attrs({{"group", int64_t{8}}, {"pads", Ints{1, 1, 1, 1}}}));
    ValueId sw = b->op("Mul", {c4, b->op("Sigmoid", {c4})});
    ValueId c5 = b->op("Clip", {b->op("Conv", {sw, b->constant({8, 8, 1, 1}), b->constant({8})})},
                       attrs({{"min", 0.0f}, {"max", 6.0f}}));
    ValueId a = b->op("AveragePool", {c5},
                      attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}));
    ValueId c6 = bn(*b, b->op("Conv", {a, b->constant({8, 8, 3, 3})}, pad1));
    ValueId r6 = b->op("Relu", {b->op("Add", {c6, c5})});
    ValueId c7 = b->op("Conv", {r6, b->constant({8, 8, 1, 1})});
    ValueId g = b->op("Sigmoid", {b->op("GlobalMaxPool", {b->op("Add", {c7, r6})})});
    ValueId h = b->op("Flatten", {b->op("GlobalAveragePool", {b->op("Mul", {r6, g})})});
    ValueId fc = b->op("Relu", {b->op("Gemm", {h, b->constant({10, 8}), b->constant({10})},
                                      attrs({{"transB", int64_t{1}}}))});
    ValueId fc2 = b->op("Gemm", {fc, b->constant({10, 4})});
    b->finish(b->op("LogSoftmax", {fc2}, attrs({{"axis", int64_t{1}}})));
    zoo.push_back(std::move(b));
  }
  {  // A DCGAN generator.
    auto b = std::make_unique<GraphBuilder>(22);
    ValueId z = b->input({2, 8, 1, 1});
    ValueId t1 = b->op("Relu", {bn(*b, b->op("ConvTranspose", {z, b->constant({8, 16, 4, 4})}))});
    const AttributeMap up = attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}});
    ValueId t2 =
        b->op("Relu", {bn(*b, b->op("ConvTranspose", {t1, b->constant({16, 8, 4, 4})}, up))});
    b->finish(b->op(
        "Tanh", {b->op("ConvTranspose", {t2, b->constant({8, 3, 4, 4}), b->constant({3})}, up)}));
    zoo.push_back(std::move(b));
  }
  {  // A BERT layer as PyTorch exports it (bias first in the Adds, erf GELU).
    auto b = std::make_unique<GraphBuilder>(23);
    const int64_t S = 5, H = 16;
    ValueId x = b->input({2, S, H});
    auto linear = [&](ValueId in, int64_t k, int64_t n) {
      return b->op("Add", {b->constant({n}), b->op("MatMul", {in, b->constant({k, n})})});
    };
    ValueId q = linear(x, H, H), k = linear(x, H, H), v = linear(x, H, H);
    ValueId kt = b->op("Transpose", {k}, attrs({{"perm", Ints{0, 2, 1}}}));
    ValueId scores = b->op(
        "Add", {b->op("Div", {b->op("MatMul", {q, kt}), b->scalar(4.0f)}), b->input({2, 1, S})});
    ValueId probs = b->op("Softmax", {scores}, attrs({{"axis", int64_t{-1}}}));
    ValueId attn = b->op("Add", {linear(b->op("MatMul", {probs, v}), H, H), x});
    auto layerNorm = [&](ValueId in) {
      return b->op("LayerNormalization", {in, b->constant({H}), b->constant({H})},
                   attrs({{"axis", int64_t{-1}}, {"epsilon", 1e-12f}}));
    };
    ValueId ln1 = layerNorm(attn);
    ValueId h = linear(ln1, H, 32);
    ValueId erf = b->op("Add", {b->op("Erf", {b->op("Div", {h, b->scalar(1.4142135381698608f)})}),
                                b->scalar(1.0f)});
    ValueId gelu = b->op("Mul", {b->op("Mul", {h, erf}), b->scalar(0.5f)});
    ValueId h2 = linear(gelu, 32, H);
    ValueId erf2 = b->op("Add", {b->op("Erf", {b->op("Div", {h2, b->scalar(1.4142135381698608f)})}),
                                 b->scalar(1.0f)});
    ValueId gelu2 = b->op("Mul", {b->op("Mul", {h2, b->scalar(0.5f)}), erf2});
    ValueId ffn = b->op("Add", {linear(gelu2, H, H), ln1});
    ValueId act = b->op("Tanh", {linear(layerNorm(ffn), H, 8)});
    b->finish(b->op("Add", {b->op("Mul", {act, b->scalar(2.0f)}), b->input({8})}));
    zoo.push_back(std::move(b));
  }
  zoo.push_back(miniResNet());
  zoo.push_back(miniMobileNet());
  zoo.push_back(miniInception());
  {  // An NHWC model as tf2onnx writes it: each block between Transposes.
    auto b = std::make_unique<GraphBuilder>(27);
    const ValueId x = b->input({1, 6, 6, 5});
    const Ints toNchw{0, 3, 1, 2}, toNhwc{0, 2, 3, 1};
    ValueId t = b->op("Transpose", {x}, attrs({{"perm", toNchw}}));
    ValueId c =
        b->op("Relu", {b->op("Conv", {t, b->constant({5, 5, 3, 3}), b->constant({5})}, pad1)});
    ValueId s = b->op("Add", {b->op("Transpose", {c}, attrs({{"perm", toNhwc}})), x});
    t = b->op("Transpose", {s}, attrs({{"perm", toNchw}}));
    c = b->op("Conv", {t, b->constant({7, 5, 1, 1})});
    b->finish(b->op("Transpose", {c}, attrs({{"perm", toNhwc}})));
    zoo.push_back(std::move(b));
  }
  return zoo;
}

// Every group the spec's patterns match and the pattern rule generates on a
// zoo of small graphs compiles and matches the reference: the rule asks the
// lowering, so nothing it generates may be refused.
TEST_F(OneDnn, EveryGroupOfTheSpecAndTheRuleRunsCorrectly) {
  BackendSpec spec =
      loadBackendSpec(std::string(COLLAGE_SOURCE_DIR) + "/resources/backends/onednn.toml");
  EXPECT_EQ(spec.name, "onednn");
  EXPECT_EQ(spec.kind, BackendKind::OpLibrary);
  EXPECT_EQ(spec.limits.maxExits, 1);
  std::shared_ptr<const PatternRule> rule = backend_->codeRule();
  ASSERT_TRUE(rule);
  auto zoo = patternZoo();
  std::vector<const Graph*> graphs;
  for (auto& b : zoo) graphs.push_back(&b->graph());
  const GroupCounts counts = expectEveryGroupRuns(*backend_, spec, *rule, graphs);
  EXPECT_GT(counts.checked, 100);
  EXPECT_GT(counts.fused, 50);
  RecordProperty("matches", counts.checked);
}

// ---- sequences of chains: one kernel for several anchors

// Every connected run of the mini ResNet's blocks, as one oneDNN kernel.
TEST_F(OneDnn, SequencesOfChainsMatchTheReference) {
  std::unique_ptr<GraphBuilder> b = miniResNet();
  const Graph& g = b->graph();
  // Node ranges: the stem (3 nodes), the bottlenecks (8, then 3 x 7 nodes),
  // the basic blocks (6 and 5).
  const std::vector<std::pair<NodeId, NodeId>> ranges = {
      {0, 3}, {3, 11}, {11, 18}, {32, 38}, {38, 43}, {0, 11}, {3, 25}, {11, 43}, {0, 43}};
  for (const auto& [first, last] : ranges) {
    std::vector<NodeId> nodes;
    for (NodeId n = first; n < last; ++n) nodes.push_back(n);
    const NodeSet set = NodeSet::of(g.numNodes(), nodes);
    SCOPED_TRACE(KernelRequest::of(g, set).toString());
    const KernelCheckResult r = checkKernelAgainstReference(*backend_, g, set, 5);
    ASSERT_TRUE(r.compiled) << r.refusal;
    EXPECT_TRUE(r.ok) << r.message;
  }
  // A bottleneck keeps the blocked layout between its convolutions: fewer
  // reorders than the four convolutions would need each on their own.
  std::vector<NodeId> block;
  for (NodeId n = 3; n < 11; ++n) block.push_back(n);
  CompileResult c = backend_->compile(KernelRequest::of(g, NodeSet::of(g.numNodes(), block)));
  ASSERT_TRUE(c) << c.refusal;
  const std::string d = describeOneDnnKernel(*c.kernel);
  size_t convs = 0, reorders = 0;
  for (size_t at = d.find("convolution"); at != std::string::npos; at = d.find("convolution", at + 1)) ++convs;
  for (size_t at = d.find("reorder"); at != std::string::npos; at = d.find("reorder", at + 1)) ++reorders;
  EXPECT_EQ(convs, 4u) << d;
  EXPECT_LT(reorders, 2 * convs) << d;
}

// A wide constant B runs as one matmul per 768-column panel (the last one
// narrower), with the bias split and the activation after the product.
TEST_F(OneDnn, WideMatMulRunsInColumnPanels) {
  for (bool gelu : {false, true}) {
    GraphBuilder b;
    const ValueId x = b.input({2, 5, 32});
    ValueId y = b.op("Add", {b.constant({1600}), b.op("MatMul", {x, b.constant({32, 1600})})});
    if (gelu) y = b.op("Gelu", {y});
    const NodeSet nodes = b.finish(y);
    const KernelCheckResult r = checkKernelAgainstReference(*backend_, b.graph(), nodes, 3);
    ASSERT_TRUE(r.compiled) << r.refusal;
    EXPECT_TRUE(r.ok) << r.message;
    CompileResult c = backend_->compile(KernelRequest::of(b.graph(), nodes));
    ASSERT_TRUE(c);
    EXPECT_NE(describeOneDnnKernel(*c.kernel).find("3 column panels"), std::string::npos)
        << describeOneDnnKernel(*c.kernel);
  }
}

TEST_F(OneDnn, SequenceReadsAnEarlierChainsResultTwice) {
  // conv1's Relu feeds conv2 and the residual Add of conv2's chain.
  GraphBuilder b;
  const ValueId r = b.op("Relu", {b.op("Conv", {b.input({1, 8, 6, 6}), b.constant({8, 8, 1, 1})})});
  const ValueId c2 = b.op("Conv", {r, b.constant({8, 8, 3, 3})}, attrs({{"pads", Ints{1, 1, 1, 1}}}));
  expectMatches(b, b.op("Add", {c2, r}), "Conv -> Relu -> Conv + residual");
}

TEST_F(OneDnn, RefusesASequenceWhoseChainHasTwoOutputs) {
  // conv2 reads conv1's output before the Relu that continues conv1's chain.
  GraphBuilder b;
  const ValueId c1 = b.op("Conv", {b.input({1, 8, 6, 6}), b.constant({8, 8, 1, 1})});
  const ValueId r = b.op("Relu", {c1});
  const ValueId c2 = b.op("Conv", {c1, b.constant({8, 8, 1, 1})});
  expectRefusal(b, b.op("Add", {c2, r}), "2 outputs");
}

// ---- Pad folded into the anchor, Concat

TEST_F(OneDnn, PadFoldsIntoConvAndAveragePool) {
  {  // asymmetric pads on a Conv that has pads of its own
    GraphBuilder b;
    ValueId x = b.input({1, 8, 9, 7});
    ValueId p = b.op("Pad", {x}, attrs({{"pads", Ints{0, 0, 2, 0, 0, 0, 1, 3}}}));
    expectMatches(b, b.op("Relu", {b.op("Conv", {p, b.constant({16, 8, 3, 3}), b.constant({16})},
                                        attrs({{"pads", Ints{1, 1, 1, 1}}}))}),
                  "Pad + Conv + Relu");
  }
  {  // Pad with `axes`, then an AveragePool that counts its own pads too
    GraphBuilder b;
    ValueId x = b.input({2, 5, 8, 8});
    ValueId p = b.op("Pad", {x}, attrs({{"pads", Ints{1, 2, 1, 0}}, {"axes", Ints{2, 3}}}));
    expectMatches(b, b.op("AveragePool", {p}, attrs({{"kernel_shape", Ints{3, 3}},
                                                     {"pads", Ints{1, 1, 1, 1}},
                                                     {"count_include_pad", int64_t{1}}})),
                  "Pad + AveragePool(count_include_pad)");
  }
  // Depthwise convolutions (group == channels) as mobile exporters write
  // them: tf2onnx's SAME with stride 2 pads only the end of H and W, with
  // an explicit Pad before a Conv that has none; odd channels, batch 2.
  for (const Ints& pads :
       {Ints{0, 0, 0, 0, 0, 0, 1, 1}, Ints{0, 0, 1, 1, 0, 0, 1, 1}, Ints{0, 0, 0, 1, 0, 0, 1, 0}}) {
    for (int64_t stride : {1, 2}) {
      GraphBuilder b;
      ValueId x = b.input({2, 7, 9, 8});
      ValueId p = b.op("Pad", {x}, attrs({{"pads", pads}}));
      ValueId c = b.op("Conv", {p, b.constant({7, 1, 3, 3}), b.constant({7})},
                       attrs({{"group", int64_t{7}}, {"strides", Ints{stride, stride}}}));
      expectMatches(b, b.op("Relu", {c}), "Pad " + intsToString(pads) + " + depthwise Conv, stride " +
                                              std::to_string(stride));
    }
  }
  {  // strided
    GraphBuilder b;
    ValueId x = b.input({1, 8, 10, 10});
    ValueId p = b.op("Pad", {x}, attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}}));
    expectMatches(b, b.op("AveragePool", {p}, attrs({{"kernel_shape", Ints{3, 3}},
                                                     {"strides", Ints{2, 2}}})),
                  "Pad + strided AveragePool");
  }
}

// The rule names the Pad with the depthwise Conv after it and its
// activation as one group (growth from the Conv never reaches back to the
// Pad, and the spec's pattern names only the pair), and it compiles with
// the Pad as the Conv's padding: the padded tensor is never made.
TEST_F(OneDnn, RuleOffersAPadWithTheDepthwiseConvAfterIt) {
  std::shared_ptr<const PatternRule> rule = backend_->codeRule();
  ASSERT_TRUE(rule);
  GraphBuilder b;
  b.endGroup();
  ValueId x = b.op("Relu", {b.input({2, 24, 16, 16})});
  b.beginGroup();
  ValueId p = b.op("Pad", {x}, attrs({{"pads", Ints{0, 0, 0, 0, 0, 0, 1, 1}}}));
  ValueId c = b.op("Conv", {p, b.constant({24, 1, 3, 3}), b.constant({24})},
                   attrs({{"group", int64_t{24}}, {"strides", Ints{2, 2}}}));
  const NodeSet group = b.finish(b.op("Relu", {c}));
  const Graph& g = b.graph();
  bool named = false;
  for (const auto& [nodes, label] : rule->wholeGroups(g)) named = named || nodes == group;
  EXPECT_TRUE(named) << "the rule does not name " << KernelRequest::of(g, group).toString();
  const CompileResult k = backend_->compile(KernelRequest::of(g, group));
  ASSERT_TRUE(k) << k.refusal;
  const std::string d = describeOneDnnKernel(*k.kernel);
  EXPECT_NE(d.find("Pad + Conv"), std::string::npos) << d;
  const KernelCheckResult r = checkKernelAgainstReference(*backend_, g, group, 3);
  EXPECT_TRUE(r.compiled && r.ok) << r.refusal << r.message;
}

// A mobile block as tf2onnx writes it: Pad -> depthwise Conv (stride 2) ->
// Relu -> pointwise Conv -> Relu, then the residual join with the skip
// path's MaxPool and channel Pad. Every group the rule names runs and
// matches the reference, the series through both Convs and the join among
// them; the channel Pad folds into no Conv, so no group starts at it.
TEST_F(OneDnn, EveryGroupNamedFromAPadRunsCorrectly) {
  std::shared_ptr<const PatternRule> rule = backend_->codeRule();
  ASSERT_TRUE(rule);
  GraphBuilder b;
  ValueId x = b.input({2, 24, 16, 16});
  ValueId p = b.op("Pad", {x}, attrs({{"pads", Ints{0, 0, 0, 0, 0, 0, 1, 1}}}));
  ValueId dw = b.op("Relu", {b.op("Conv", {p, b.constant({24, 1, 3, 3}), b.constant({24})},
                                  attrs({{"group", int64_t{24}}, {"strides", Ints{2, 2}}}))});
  ValueId pw = b.op("Conv", {dw, b.constant({28, 24, 1, 1}), b.constant({28})});
  ValueId skip = b.op("MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}));
  ValueId padded = b.op("Pad", {skip}, attrs({{"pads", Ints{0, 0, 0, 0, 0, 4, 0, 0}}}));
  b.finish(b.op("Relu", {b.op("Add", {pw, padded})}));
  const Graph& g = b.graph();
  // Pad, Conv, Relu, Conv, then the join's Add and Relu as the second chain's post-ops.
  const NodeSet series = NodeSet::of(g.numNodes(), {0, 1, 2, 3, 6, 7});
  bool seriesNamed = false;
  for (const auto& [nodes, label] : rule->wholeGroups(g)) {
    SCOPED_TRACE(label + " " + KernelRequest::of(g, nodes).toString());
    EXPECT_TRUE(nodes.contains(0)) << "only the Pad before the depthwise Conv folds";
    seriesNamed = seriesNamed || nodes == series;
    const KernelCheckResult r = checkKernelAgainstReference(*backend_, g, nodes, 3);
    EXPECT_TRUE(r.compiled && r.ok) << r.refusal << r.message;
  }
  EXPECT_TRUE(seriesNamed);
  // The zoo's Pads (a stem Pad before a Conv, branch pools as Pad +
  // AveragePool): what the rule names there runs too.
  int checked = 0;
  for (auto& zb : patternZoo()) {
    const Graph& z = zb->graph();
    for (const auto& [nodes, label] : rule->wholeGroups(z)) {
      SCOPED_TRACE(label + " " + KernelRequest::of(z, nodes).toString());
      const KernelCheckResult r = checkKernelAgainstReference(*backend_, z, nodes, 3);
      EXPECT_TRUE(r.compiled && r.ok) << r.refusal << r.message;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST_F(OneDnn, RefusesAPadThatDoesNotFold) {
  struct Case {
    AttributeMap pad;
    std::string next;
    AttributeMap nextAttrs;
    std::string mention;
    Shape weight = {};  // a Conv's
  };
  const AttributeMap pool = attrs({{"kernel_shape", Ints{3, 3}}});
  const std::vector<Case> cases = {
      {attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}, {"mode", std::string("reflect")}}),
       "AveragePool", pool, "constant-zero"},
      {attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}, {"mode", std::string("edge")}}),
       "AveragePool", pool, "constant-zero"},
      {attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}, {"constant_value", 0.5f}}), "AveragePool",
       pool, "constant-zero"},
      {attrs({{"pads", Ints{0, 0, 0, 0, 0, 0, 1, 1}}, {"mode", std::string("reflect")}}), "Conv",
       attrs({{"group", int64_t{8}}}), "constant-zero", {8, 1, 3, 3}},
      {attrs({{"pads", Ints{0, 0, 0, 0, 0, 4, 0, 0}}}), "Conv", AttributeMap{}, "spatial", {4, 12, 1, 1}},
      {attrs({{"pads", Ints{0, 1, 1, 1, 0, 0, 1, 1}}}), "AveragePool", pool, "spatial"},
      {attrs({{"pads", Ints{0, 0, -1, 1, 0, 0, 1, 1}}}), "AveragePool", pool, "non-negative"},
      {attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}}), "AveragePool",
       attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}}), "excluded"},
      {attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}}), "MaxPool", pool, "Conv or AveragePool"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mention);
    GraphBuilder b;
    ValueId x = b.input({1, 8, 6, 6});
    std::vector<ValueId> ins{b.op("Pad", {x}, c.pad)};
    if (!c.weight.empty()) ins.push_back(b.constant(c.weight));
    expectRefusal(b, b.op(c.next, ins, c.nextAttrs), c.mention);
  }
}

// Pad -> depthwise Conv -> activation as the rule names it (wholeGroups),
// at odd channel counts, batch 2 and odd sizes, for every zero pad form that
// folds: both ends, the end only (tf2onnx's SAME at stride 2), the start
// only, one spatial axis, all zeros, and pads given per axis (`axes`). Each
// named, compiled with the Pad as the Conv's padding, and matching the
// reference.
TEST_F(OneDnn, PadThenDepthwiseConvAtOddChannelsInEveryFoldingForm) {
  std::shared_ptr<const PatternRule> rule = backend_->codeRule();
  ASSERT_TRUE(rule);
  struct Form {
    AttributeMap pad;
    const char* what;
  };
  const std::vector<Form> forms = {
      {attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}}), "both ends"},
      {attrs({{"pads", Ints{0, 0, 0, 0, 0, 0, 1, 1}}}), "the end only"},
      {attrs({{"pads", Ints{0, 0, 2, 1, 0, 0, 0, 0}}}), "the start only"},
      {attrs({{"pads", Ints{0, 0, 0, 1, 0, 0, 0, 2}}}), "W only"},
      {attrs({{"pads", Ints{0, 0, 0, 0, 0, 0, 0, 0}}}), "all zero"},
      {attrs({{"pads", Ints{1, 0, 1, 1}}, {"axes", Ints{2, 3}}}), "per axis"},
  };
  for (int64_t c : {3, 7, 17})
    for (int64_t stride : {1, 2})
      for (const Form& f : forms) {
        const std::string what = std::to_string(c) + " channels, stride " + std::to_string(stride) + ", " + f.what;
        SCOPED_TRACE(what);
        GraphBuilder b;
        b.endGroup();
        const ValueId x = b.input({2, c, 9, 7});
        b.beginGroup();
        const ValueId p = b.op("Pad", {x}, f.pad);
        const ValueId conv = b.op("Conv", {p, b.constant({c, 1, 3, 3}), b.constant({c})},
                                  attrs({{"group", c}, {"strides", Ints{stride, stride}}}));
        const NodeSet group = b.finish(b.op("Clip", {conv}, attrs({{"min", 0.0f}, {"max", 6.0f}})));
        const Graph& g = b.graph();
        bool named = false;
        for (const auto& [nodes, label] : rule->wholeGroups(g)) named = named || nodes == group;
        EXPECT_TRUE(named);
        const CompileResult k = backend_->compile(KernelRequest::of(g, group));
        ASSERT_TRUE(k) << k.refusal;
        EXPECT_NE(describeOneDnnKernel(*k.kernel).find("Pad + Conv"), std::string::npos)
            << describeOneDnnKernel(*k.kernel);
        const KernelCheckResult r = checkKernelAgainstReference(*backend_, g, group, 3);
        EXPECT_TRUE(r.compiled && r.ok) << r.refusal << r.message;
      }
}

// The Pads that do not fold, in the group the rule would name: each
// refused at compile time with the reason, and not named. Non-zero and
// non-constant modes, a negative (cropping) pad, a channel pad, and a Pad
// whose constant_value or pads are run-time inputs rather than attributes.
TEST_F(OneDnn, PadThenDepthwiseConvRefusesWhatDoesNotFold) {
  std::shared_ptr<const PatternRule> rule = backend_->codeRule();
  ASSERT_TRUE(rule);
  auto check = [&](const Graph& g, const NodeSet& group, const std::string& mention) {
    const CompileResult k = backend_->compile(KernelRequest::of(g, group));
    EXPECT_FALSE(k) << "compiled: " << describeOneDnnKernel(*k.kernel);
    EXPECT_NE(k.refusal.find(mention), std::string::npos) << k.refusal;
    for (const auto& [nodes, label] : rule->wholeGroups(g))
      EXPECT_FALSE(nodes == group) << "named as " << label;
  };
  struct Case {
    AttributeMap pad;
    std::string mention;
  };
  const Ints spatial{0, 0, 1, 1, 0, 0, 1, 1};
  const std::vector<Case> cases = {
      {attrs({{"pads", spatial}, {"mode", std::string("reflect")}}), "constant-zero"},
      {attrs({{"pads", spatial}, {"mode", std::string("edge")}}), "constant-zero"},
      {attrs({{"pads", spatial}, {"constant_value", -1.0f}}), "constant-zero"},
      {attrs({{"pads", Ints{0, 0, -1, 0, 0, 0, 1, 1}}}), "non-negative"},
      {attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}, {"mode", std::string("wrap")}}), "constant-zero"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mention);
    GraphBuilder b;
    const ValueId p = b.op("Pad", {b.input({1, 7, 8, 8})}, c.pad);
    const int64_t ch = b.shape(p)[1];
    const ValueId conv = b.op("Conv", {p, b.constant({ch, 1, 3, 3})}, attrs({{"group", ch}}));
    const NodeSet group = b.finish(b.op("Relu", {conv}));
    check(b.graph(), group, c.mention);
  }
  {
    SCOPED_TRACE("a channel pad before a depthwise Conv of the padded channels");
    GraphBuilder b;
    const ValueId p = b.op("Pad", {b.input({1, 5, 8, 8})}, attrs({{"pads", Ints{0, 0, 0, 0, 0, 2, 0, 0}}}));
    const ValueId conv = b.op("Conv", {p, b.constant({7, 1, 3, 3})}, attrs({{"group", int64_t{7}}}));
    const NodeSet group = b.finish(b.op("Relu", {conv}));
    check(b.graph(), group, "spatial");
  }
  {
    SCOPED_TRACE("constant_value as a run-time input");
    GraphBuilder b;
    b.endGroup();
    const ValueId x = b.input({1, 7, 8, 8});
    const ValueId value = b.input({});
    b.beginGroup();
    const ValueId p = b.op("Pad", {x, kNoValue, value}, attrs({{"pads", spatial}}));
    const ValueId conv = b.op("Conv", {p, b.constant({7, 1, 3, 3})}, attrs({{"group", int64_t{7}}}));
    const NodeSet group = b.finish(b.op("Relu", {conv}));
    check(b.graph(), group, "run-time");
  }
  {
    SCOPED_TRACE("pads as a run-time input, the output shape declared");
    Graph g;
    const ValueId x = g.addInput("x", {ElementType::Float32, {1, 7, 8, 8}});
    const ValueId pads = g.addInput("pads", {ElementType::Int64, {8}});
    const ValueId w = g.addConstant("w", Tensor::fromFloats({7, 1, 3, 3}, std::vector<float>(63, 0.1f)));
    const ValueId y = g.addValue("y", {ElementType::Float32, {1, 7, 10, 10}});
    const ValueId z = g.addValue("z", {ElementType::Float32, {1, 7, 8, 8}});
    g.addNode(Node{"pad", "Pad", attrs({{"mode", std::string("constant")}, {"constant_value", 0.0f}}), {x, pads}, {y}});
    AttributeMap conv = attrs({{"group", int64_t{7}}});
    for (const AttributeSpec& a : OpRegistry::instance().get("Conv").attributes)
      if (!conv.has(a.name) && a.defaultValue) conv.set(a.name, *a.defaultValue);
    g.addNode(Node{"conv", "Conv", conv, {y, w}, {z}});
    g.markOutput(z);
    g.finalize();
    check(g, NodeSet::of(g.numNodes(), {0, 1}), "run-time");
  }
}

// ---- a channels-last Transpose read as the Conv's nhwc source --------------

TEST_F(OneDnn, ChannelsLastTransposeIsTheConvsSource) {
  struct Case {
    Shape input;  // channels last
    Ints perm;
    Shape weights;
    AttributeMap conv;
    const char* what;
  };
  const std::vector<Case> cases = {
      {{1, 9, 7, 8}, {0, 3, 1, 2}, {16, 8, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}}), "3x3, NHWC"},
      {{2, 10, 10, 6},
       {0, 3, 1, 2},
       {6, 1, 3, 3},
       attrs({{"pads", Ints{0, 0, 1, 1}}, {"strides", Ints{2, 2}}, {"group", int64_t{6}}}),
       "strided depthwise"},
      {{1, 5, 5, 7}, {0, 3, 1, 2}, {5, 7, 1, 1}, {}, "1x1, odd channel counts"},
      {{1, 12, 3}, {0, 2, 1}, {4, 3, 3}, {}, "1-D, NWC"},
      {{1, 3, 4, 5, 4}, {0, 4, 1, 2, 3}, {2, 4, 1, 3, 3}, {}, "3-D, NDHWC"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    GraphBuilder b;
    const ValueId t = b.op("Transpose", {b.input(c.input)}, attrs({{"perm", c.perm}}));
    const ValueId y = b.op(
        "Relu", {b.op("Conv", {t, b.constant(c.weights), b.constant({c.weights[0]})}, c.conv)});
    expectMatches(b, y, c.what);
    NodeSet all(b.graph().numNodes());
    for (NodeId n = 0; n < b.graph().numNodes(); ++n) all.insert(n);
    const CompileResult compiled = backend_->compile(KernelRequest::of(b.graph(), all));
    ASSERT_TRUE(compiled) << compiled.refusal;
    const std::string text = describeOneDnnKernel(*compiled.kernel);
    EXPECT_NE(text.find("Transpose + Conv"), std::string::npos) << text;
    // Where oneDNN's convolutions run channels last (AVX-512), nothing is
    // copied before the convolution: it reads the input as stored.
    const auto tag = onednn::activationTag(c.input.size());
    if (tag && !onednn::channelBlocked(*tag)) EXPECT_EQ(text.rfind("convolution(", 0), 0u) << text;
  }
}

// And at the end: the Conv writes its result channels last into the
// Transpose's output (a whole block as tf2onnx wraps it is one kernel).
TEST_F(OneDnn, ChannelsLastTransposeIsTheConvsResult) {
  const Ints toNchw{0, 3, 1, 2}, toNhwc{0, 2, 3, 1};
  {  // the whole block: NHWC in, NHWC out
    GraphBuilder b;
    const ValueId t = b.op("Transpose", {b.input({1, 7, 9, 6})}, attrs({{"perm", toNchw}}));
    const ValueId c = b.op("Conv", {t, b.constant({10, 6, 3, 3}), b.constant({10})},
                           attrs({{"pads", Ints{1, 1, 1, 1}}}));
    const ValueId y = b.op("Transpose", {b.op("Relu", {c})}, attrs({{"perm", toNhwc}}));
    expectMatches(b, y, "Transpose + Conv + Relu + Transpose");
    NodeSet all(b.graph().numNodes());
    for (NodeId n = 0; n < b.graph().numNodes(); ++n) all.insert(n);
    const CompileResult compiled = backend_->compile(KernelRequest::of(b.graph(), all));
    ASSERT_TRUE(compiled) << compiled.refusal;
    const std::string text = describeOneDnnKernel(*compiled.kernel);
    EXPECT_NE(text.find("Transpose + Conv + eltwise_relu + Transpose"), std::string::npos) << text;
    // With AVX-512 (nhwc convolutions) the convolution is the only step.
    const auto tag = onednn::activationTag(4);
    if (tag && !onednn::channelBlocked(*tag))
      EXPECT_EQ(text.find("reorder"), std::string::npos) << text;
  }
  {  // a residual Add (a binary post-op) before, 1-D
    GraphBuilder b;
    const ValueId x = b.input({2, 5, 11});
    const ValueId c =
        b.op("Conv", {x, b.constant({5, 5, 3}), b.constant({5})}, attrs({{"pads", Ints{1, 1}}}));
    expectMatches(b, b.op("Transpose", {b.op("Add", {c, x})}, attrs({{"perm", Ints{0, 2, 1}}})),
                  "Conv + Add + Transpose, NWC");
  }
  {  // depthwise, odd channels, no post-op
    GraphBuilder b;
    const ValueId c = b.op("Conv", {b.input({1, 7, 6, 6}), b.constant({7, 1, 3, 3})},
                           attrs({{"group", int64_t{7}}, {"strides", Ints{2, 2}}}));
    expectMatches(b, b.op("Transpose", {c}, attrs({{"perm", toNhwc}})), "depthwise + Transpose");
  }
  {  // a pool's result
    GraphBuilder b;
    const ValueId m =
        b.op("MaxPool", {b.input({1, 4, 6, 6})}, attrs({{"kernel_shape", Ints{2, 2}}}));
    expectRefusal(b, b.op("Transpose", {m}, attrs({{"perm", toNhwc}})), "only a Conv writes");
  }
  {  // the Conv's result read elsewhere too
    GraphBuilder b;
    const ValueId c = b.op("Conv", {b.input({1, 4, 6, 6}), b.constant({4, 4, 1, 1})});
    b.graph().markOutput(c);
    expectRefusal(b, b.op("Transpose", {c}, attrs({{"perm", toNhwc}})), "a oneDNN kernel has one");
  }
  {  // at the end of a group of two chains
    GraphBuilder b;
    const ValueId c = b.op("Relu", {b.op("Conv", {b.input({1, 4, 6, 6}), b.constant({4, 4, 1, 1})})});
    const ValueId d = b.op("Conv", {c, b.constant({4, 4, 1, 1})});
    const ValueId t = b.op("Transpose", {d}, attrs({{"perm", toNhwc}}));
    b.finish(t);
    const std::string why =
        backend_->regionRefusal(KernelRequest::of(b.graph(), NodeSet::all(b.graph().numNodes())));
    EXPECT_NE(why.find("lone chain"), std::string::npos) << why;
  }
  {  // another perm
    GraphBuilder b;
    const ValueId c = b.op("Conv", {b.input({1, 4, 6, 6}), b.constant({4, 4, 1, 1})});
    expectRefusal(b, b.op("Transpose", {c}, attrs({{"perm", Ints{0, 3, 2, 1}}})), "Transpose");
  }
}

TEST_F(OneDnn, RefusesATransposeThatIsNoChannelsLastSource) {
  {  // the other way round: channels first into channels last
    GraphBuilder b;
    const ValueId t =
        b.op("Transpose", {b.input({1, 4, 6, 6})}, attrs({{"perm", Ints{0, 2, 3, 1}}}));
    expectRefusal(b, b.op("Conv", {t, b.constant({2, 6, 1, 1})}),
                  "channels last into channels first");
  }
  {  // read by something else too
    GraphBuilder b;
    const ValueId t =
        b.op("Transpose", {b.input({1, 6, 6, 4})}, attrs({{"perm", Ints{0, 3, 1, 2}}}));
    b.graph().markOutput(t);
    expectRefusal(b, b.op("Conv", {t, b.constant({2, 4, 1, 1})}), "a oneDNN kernel has one");
  }
  {  // before a pool
    GraphBuilder b;
    const ValueId t =
        b.op("Transpose", {b.input({1, 6, 6, 4})}, attrs({{"perm", Ints{0, 3, 1, 2}}}));
    expectRefusal(b, b.op("MaxPool", {t}, attrs({{"kernel_shape", Ints{2, 2}}})),
                  "source of a Conv");
  }
  {  // alone
    GraphBuilder b;
    expectRefusal(b,
                  b.op("Transpose", {b.input({1, 6, 6, 4})}, attrs({{"perm", Ints{0, 3, 1, 2}}})),
                  "channels-last source of the Conv after it");
  }
}

TEST_F(OneDnn, ConcatAloneAndAfterChains) {
  {  // plain inputs, several ranks and axes
    GraphBuilder b;
    expectMatches(b, b.op("Concat", {b.input({1, 3, 4, 4}), b.input({1, 5, 4, 4}), b.input({1, 8, 4, 4})},
                          attrs({{"axis", int64_t{1}}})),
                  "Concat of 3 on channels");
  }
  {
    GraphBuilder b;
    expectMatches(b, b.op("Concat", {b.input({2, 6}), b.input({2, 3})}, attrs({{"axis", int64_t{-1}}})),
                  "Concat of matrices");
  }
  {  // blocked results of two convs (8 and 12 channels) and the group input (5 channels)
    GraphBuilder b;
    ValueId x = b.input({1, 5, 7, 7});
    ValueId c1 = b.op("Relu", {b.op("Conv", {x, b.constant({8, 5, 3, 3})}, attrs({{"pads", Ints{1, 1, 1, 1}}}))});
    ValueId c2 = b.op("Conv", {x, b.constant({12, 5, 1, 1}), b.constant({12})});
    expectMatches(b, b.op("Concat", {c1, x, c2}, attrs({{"axis", int64_t{1}}})),
                  "Concat of conv results and the input");
  }
  {  // a post-op after a Concat has no oneDNN form
    GraphBuilder b;
    ValueId c = b.op("Concat", {b.input({1, 8, 4, 4}), b.input({1, 8, 4, 4})}, attrs({{"axis", int64_t{1}}}));
    expectRefusal(b, b.op("Relu", {c}), "no post-ops");
  }
}

// ---- the pattern rule: idioms as exporters write them, fused by the rule

// Each idiom after a Conv whose BatchNormalization was exported as a
// per-channel Mul + Add: the rule generates the whole group from the Conv,
// oneDNN runs it as one convolution with post-ops, and it matches the
// reference.
TEST_F(OneDnn, RuleFusesTheIdiomsExportersWriteAfterAConv) {
  std::shared_ptr<const PatternRule> rule = backend_->codeRule();
  ASSERT_TRUE(rule);
  for (const Idiom& idiom : writtenOutIdioms()) {
    SCOPED_TRACE(idiom.name);
    GraphBuilder b;
    ValueId y = b.op("Conv", {b.input({1, 4, 6, 6}), b.constant({8, 4, 3, 3})},
                     attrs({{"pads", Ints{1, 1, 1, 1}}}));
    y = b.op("Add", {b.op("Mul", {y, b.constant({8, 1, 1}, 0.5f, 1.5f)}), b.constant({8, 1, 1})});
    const NodeSet group = b.finish(idiom.write(b, y));
    const Graph& g = b.graph();
    bool generated = false;
    for (const GeneratedGroup& gg : PatternGenerator(g).generate(*rule, SubGraphLimits{}))
      generated = generated || gg.nodes == group;
    EXPECT_TRUE(generated) << "the rule did not generate " << KernelRequest::of(g, group).toString();
    const CompileResult c = backend_->compile(KernelRequest::of(g, group));
    ASSERT_TRUE(c) << c.refusal;
    const std::string d = describeOneDnnKernel(*c.kernel);
    EXPECT_NE(d.find(idiom.postOp), std::string::npos) << d;
    // The whole written-out function is one post-op, not a function plus a rescaling.
    if (idiom.postOp != "clip") EXPECT_EQ(d.find("linear"), std::string::npos) << d;
    EXPECT_EQ(d.find("Conv"), d.rfind("Conv")) << "one convolution: " << d;
    const KernelCheckResult r = checkKernelAgainstReference(*backend_, g, group, 3);
    EXPECT_TRUE(r.ok) << r.message << " [" << d << "]";
  }
}

// The same idioms with no anchor: an elementwise group on its own.
TEST_F(OneDnn, RuleFusesTheIdiomsOnTheirOwn) {
  for (const Idiom& idiom : writtenOutIdioms()) {
    SCOPED_TRACE(idiom.name);
    GraphBuilder b;
    const NodeSet group = b.finish(idiom.write(b, b.input({2, 16, 5})));
    const KernelCheckResult r = checkKernelAgainstReference(*backend_, b.graph(), group, 3);
    EXPECT_TRUE(r.compiled) << r.refusal;
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// A written-out HardSwish, then a learned scale and a tiny bias (PP-LCNet's
// affine blocks: 0.0327 and -2.65e-6): the bias is no rounding and must
// stay. Fitted within 1e-5 of 1 + |y| it was dropped, and the kernel was
// off by the bias wherever HardSwish is 0; checked here far tighter than
// that, at what float32 rounding of these few ops allows.
TEST_F(OneDnn, AWrittenOutFunctionKeepsATinyBias) {
  for (float bias : {-2.6521523e-06f, 0.0f}) {
    SCOPED_TRACE(bias);
    GraphBuilder b;
    const ValueId x = b.input({2, 16, 5});
    const ValueId three = b.constant({}, 3.0f, 3.0f), six = b.constant({}, 6.0f, 6.0f);
    const ValueId clip = b.op("Clip", {b.op("Add", {x, three}), b.constant({}, 0.0f, 0.0f), six});
    const ValueId hardSwish = b.op("Div", {b.op("Mul", {x, clip}), six});
    const ValueId y = b.op("Add", {b.op("Mul", {b.constant({1}, 0.03271981f, 0.03271981f), hardSwish}),
                                   b.constant({1}, bias, bias)});
    const NodeSet group = b.finish(y);
    const KernelCheckResult r =
        checkKernelAgainstReference(*backend_, b.graph(), group, 3, Tolerance{1e-5, 1e-8});
    EXPECT_TRUE(r.compiled) << r.refusal;
    EXPECT_TRUE(r.ok) << r.message;
    const CompileResult c = backend_->compile(KernelRequest::of(b.graph(), group));
    ASSERT_TRUE(c) << c.refusal;
    EXPECT_NE(describeOneDnnKernel(*c.kernel).find("hardswish"), std::string::npos)
        << describeOneDnnKernel(*c.kernel);
  }
}

// What the rule must not generate, with the lowering's reason: a second
// anchor (two convolutions are two kernels here; regions are the graph-level
// search's), and an operand computed by another branch of the group.
TEST_F(OneDnn, RuleStopsWhereTheLoweringRefuses) {
  std::shared_ptr<const PatternRule> rule = backend_->codeRule();
  GraphBuilder b;
  const ValueId x = b.input({1, 8, 6, 6});
  const ValueId c1 = b.op("Relu", {b.op("Conv", {x, b.constant({8, 8, 1, 1})})});
  // Erf is no post-op, and has no kernel of its own to start a second chain.
  const ValueId out = b.op("Erf", {c1});
  const NodeSet all = b.finish(out);
  const Graph& g = b.graph();
  for (const GeneratedGroup& gg : PatternGenerator(g).generate(*rule, SubGraphLimits{}))
    EXPECT_NE(gg.nodes, all) << gg.toString(g);
  EXPECT_FALSE(rule->fusionRule(g, all, 0, 2).has_value());
  const onednn::ChainAnalysis a = onednn::analyzeChain(KernelRequest::of(g, all));
  EXPECT_FALSE(a.ok());
  EXPECT_NE(a.refusal.find("Erf"), std::string::npos) << a.refusal;
  // A single Erf has no oneDNN kernel: not a seed, but a member of a GELU.
  GraphBuilder e;
  const ValueId erf = e.op("Erf", {e.input({4})});
  e.finish(erf);
  EXPECT_FALSE(rule->opRule(e.graph(), 0));
  EXPECT_TRUE(rule->memberRule(e.graph(), 0));
}

// The rule grows on past the next anchor, since one kernel runs several
// chains keeping oneDNN's layout between them: every block of the mini
// networks (what lies between a fork and the join of its branches, with the
// join's post-ops) and every run of chains between two forks is a generated
// group. What the rule generates also compiles and matches the reference
// (EveryGroupOfTheSpecAndTheRuleRunsCorrectly runs these graphs too).
TEST_F(OneDnn, RuleGeneratesBlocksAndSeriesOfChainsOnAnyNetwork) {
  std::shared_ptr<const PatternRule> rule = backend_->codeRule();
  auto expectGroups = [&](const Graph& g, const std::vector<std::pair<NodeId, NodeId>>& ranges,
                          const std::vector<std::string>& labels) {
    const std::vector<GeneratedGroup> groups = PatternGenerator(g).generate(*rule, {});
    for (size_t i = 0; i < ranges.size(); ++i) {
      std::vector<NodeId> nodes;
      for (NodeId n = ranges[i].first; n < ranges[i].second; ++n) nodes.push_back(n);
      const NodeSet want = NodeSet::of(g.numNodes(), nodes);
      auto it = std::find_if(groups.begin(), groups.end(),
                             [&](const GeneratedGroup& gg) { return gg.nodes == want; });
      ASSERT_NE(it, groups.end()) << "not generated: " << KernelRequest::of(g, want).toString();
      // "either": a series from the block's first anchor reaches the same
      // set before the fork does; a block with a second path from its fork
      // (a downsampling shortcut, parallel branches) only comes from the fork.
      if (labels[i] == "either") {
        EXPECT_TRUE(it->label == "fusion:series" || it->label == "fusion:block") << it->label;
      } else {
        EXPECT_EQ(it->label, "fusion:" + labels[i]) << it->toString(g);
      }
    }
  };
  // ResNet: the bottlenecks (the first with a downsampling shortcut) and the
  // basic blocks, each grown from the fork that feeds its two paths.
  {
    std::unique_ptr<GraphBuilder> b = miniResNet();
    SCOPED_TRACE("mini ResNet");
    expectGroups(b->graph(), {{3, 11}, {11, 18}, {18, 25}, {25, 32}, {32, 38}, {38, 43}},
                 {"block", "either", "either", "either", "block", "either"});
  }
  // MobileNetV2: depthwise + project as a series, an inverted residual as a
  // block, and a strided inverted residual (no shortcut) as a series.
  {
    std::unique_ptr<GraphBuilder> b = miniMobileNet();
    SCOPED_TRACE("mini MobileNet");
    expectGroups(b->graph(), {{0, 3}, {3, 9}, {9, 14}}, {"series", "either", "series"});
  }
  // Inception: each of the five blocks, branches and Concat (two of them
  // with a branch pool written as Pad + AveragePool).
  {
    std::unique_ptr<GraphBuilder> b = miniInception();
    const Graph& g = b->graph();
    SCOPED_TRACE("mini Inception");
    std::vector<std::pair<NodeId, NodeId>> blocks;
    NodeId start = 2;  // after the stem's Pad and Conv
    for (NodeId n = 0; n < g.numNodes(); ++n)
      if (g.node(n).op == "Concat") {
        blocks.emplace_back(start, n + 1);
        start = n + 1;
      }
    ASSERT_EQ(blocks.size(), 5u);
    expectGroups(g, blocks, std::vector<std::string>(5, "block"));
  }
}

// ---- layout hand-over: consecutive oneDNN kernels pass blocked tensors

// Whether oneDNN's convolutions keep channels last on this CPU (AVX-512's
// brgemm kernels): then pointwise convs, pools and elementwise chains run in
// that layout too, and every kernel of an inverted-residual block can hand
// its result to the next.
bool channelsLastConvs() { return dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core; }

// A plan of oneDNN groups, each the nodes [first, last) of `g`.
Plan oneDnnRangesPlan(const Graph& g, const std::vector<std::pair<NodeId, NodeId>>& ranges) {
  Plan plan;
  for (const auto& [first, last] : ranges) {
    PlanGroup group;
    group.backend = "onednn";
    for (NodeId n = first; n < last; ++n) group.nodes.push_back(g.node(n).name);
    plan.groups.push_back(group);
  }
  return plan;
}

// conv+relu -> {conv, sigmoid} -> add: the first chain's result is read by a
// second convolution and by an elementwise op.
void convBranches(GraphBuilder& b) {
  ValueId x = b.input({1, 8, 6, 6});
  ValueId c = b.op("Relu", {b.op("Conv", {x, b.constant({8, 8, 3, 3})}, attrs({{"pads", Ints{1, 1, 1, 1}}}))});
  ValueId d = b.op("Conv", {c, b.constant({8, 8, 3, 3})}, attrs({{"pads", Ints{1, 1, 1, 1}}}));
  ValueId e = b.op("Sigmoid", {c});
  b.finish(b.op("Add", {d, e}));
}

// A plan of the mini ResNet with one oneDNN group per block: every block
// boundary (8, 16 and 12 channels: 12 pads to 16 in the blocked layout) can
// stay blocked, and the Session's result must still be the reference's.
TEST_F(OneDnn, SessionPassesBlockedTensorsBetweenKernels) {
  std::unique_ptr<GraphBuilder> b = miniResNet();
  const Graph& g = b->graph();
  const std::vector<std::pair<NodeId, NodeId>> ranges = {
      {0, 3}, {3, 11}, {11, 18}, {18, 25}, {25, 32}, {32, 38}, {38, 43}, {43, 44}};
  const Plan plan = oneDnnRangesPlan(g, ranges);
  ASSERT_EQ(static_cast<NodeId>(g.numNodes()), ranges.back().second);
  const BackendLookup lookup = [&](const std::string& name) {
    return name == "onednn" ? backend_.get() : nullptr;
  };
  Session session(g, plan, lookup);
  // Every boundary between the blocks (identity shortcuts included, whose
  // residual copy then reads the blocked input); the last one only where the
  // convolutions keep channels last: a GlobalAveragePool of 12 channels (not
  // whole blocks of 8) pools NCHW with AVX2, in nhwc with AVX-512.
  EXPECT_EQ(session.nativeLayoutValues(), channelsLastConvs() ? 7 : 6);
  for (uint64_t seed : {1, 2}) {
    const SessionVerification v = verifySession(session, randomInputs(g, seed), kPlanTolerance);
    EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
  }
}

// A Session run with the default thread count ("the number of cores") does
// exactly what it does with that count named: in particular no file I/O per
// kernel (the default was once looked up in sysfs by every oneDNN kernel on
// every run, 1.35x slower on a 13-kernel plan than `--threads 2`).
TEST_F(OneDnn, SessionRunsWithTheDefaultThreadCountAsWithItNamed) {
  std::unique_ptr<GraphBuilder> b = miniResNet();
  const Graph& g = b->graph();
  const Plan plan = oneDnnRangesPlan(g, {{0, 3}, {3, 11}, {11, 18}, {18, 25}, {25, 32}, {32, 38},
                                         {38, 43}, {43, 44}});
  const BackendLookup lookup = [&](const std::string& name) {
    return name == "onednn" ? backend_.get() : nullptr;
  };
  test_support::ThreadCountGuard guard;
  const std::vector<Tensor> inputs = randomInputs(g, 1);
  std::vector<Tensor> named, byDefault;
  for (int threads : {hardwareCores(), 0}) {
    setThreadCount(threads);
    Session session(g, plan, lookup);
    (void)session.run(inputs);
    const ReadSyscalls reads;
    for (int r = 0; r < 20; ++r) (threads ? named : byDefault) = session.run(inputs);
    EXPECT_LT(reads.since(), 5) << (threads ? "--threads named" : "the default")
                                << ": a Session run reads files";
  }
  ASSERT_EQ(named.size(), byDefault.size());
  for (size_t i = 0; i < named.size(); ++i) {
    const CompareResult c = compareTensors(byDefault[i], named[i], Tolerance{0, 0});
    EXPECT_TRUE(c.ok) << c.message;
  }
}

// A value read by a oneDNN kernel and by an elementwise kernel of the native
// backend passes channels last to both where the convolutions keep that
// layout (the native pass runs over it as well as over plain memory): the
// first convolution's result (read by the second and by the Sigmoid) and the
// second's (read by the Add). Blocked layouts are oneDNN's own and stay.
TEST_F(OneDnn, SessionHandsChannelsLastToAnElementwiseKernelOfAnotherBackend) {
  GraphBuilder b;
  convBranches(b);
  const Graph& g = b.graph();
  const BackendLookup lookup = oneDnnElseNative();
  Plan plan;
  plan.groups = {PlanGroup{{g.node(0).name, g.node(1).name}, "onednn"},
                 PlanGroup{{g.node(2).name}, "onednn"},
                 PlanGroup{{g.node(3).name, g.node(4).name}, "native"}};
  Session session(g, plan, lookup);
  EXPECT_EQ(session.nativeLayoutValues(), channelsLastConvs() ? 2 : 0);
  const SessionVerification v = verifySession(session, randomInputs(g, 3), kPlanTolerance);
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
}

// ---- one layout across the plan: depthwise and pointwise convolutions,
// pools and elementwise chains in the convolutions' layout


ValueId convOf(GraphBuilder& b, ValueId in, int64_t oc, int64_t k, int64_t group, int64_t stride) {
  const int64_t ic = b.shape(in)[1], pad = k / 2;
  return b.op("Conv", {in, b.constant({oc, ic / group, k, k}, -0.5f, 0.5f), b.constant({oc})},
              attrs({{"group", group}, {"strides", Ints{stride, stride}}, {"pads", Ints{pad, pad, pad, pad}}}));
}

// Depthwise and pointwise convolutions with channel counts that are not a
// multiple of the block (20, 37), odd spatial sizes and strides 1 and 2,
// each with its activation: the reference's result, and never im2col + GEMM.
TEST_F(OneDnn, DepthwiseAndPointwiseConvsOnOddShapes) {
  for (int64_t c : {20, 37})
    for (int64_t hw : {7, 13})
      for (int64_t stride : {1, 2}) {
        const std::string what = "C=" + std::to_string(c) + " HW=" + std::to_string(hw) +
                                 " stride " + std::to_string(stride);
        for (bool depthwise : {true, false}) {
          GraphBuilder b(static_cast<uint64_t>(c * 100 + hw * 10 + stride));
          ValueId x = b.input({1, c, hw, hw + 2});
          b.beginGroup();
          ValueId y = depthwise ? convOf(b, x, c, 3, c, stride) : convOf(b, x, c + 3, 1, 1, stride);
          y = b.op("HardSwish", {y});
          b.endGroup();
          expectMatches(b, y, (depthwise ? "depthwise " : "pointwise ") + what);
          const CompileResult k = backend_->compile(KernelRequest::of(b.graph(), b.finish(y)));
          ASSERT_TRUE(k) << k.refusal;
          const std::string d = describeOneDnnKernel(*k.kernel);
          EXPECT_EQ(d.find("gemm"), std::string::npos) << what << ": " << d;
          if (channelsLastConvs()) {
            // Blocked inside, so it offers that layout at both ends.
            EXPECT_TRUE(k.kernel->nativeInputLayout(0).has_value()) << what << ": " << d;
            EXPECT_TRUE(k.kernel->nativeOutputLayout(0).has_value()) << what << ": " << d;
          }
        }
      }
}

// MobileNetV3's inverted residual with squeeze-excitation, one oneDNN kernel
// per step: expand 1x1 + HardSwish, depthwise 3x3 + HardSwish, the SE
// (GlobalAveragePool, 1x1 + Relu, 1x1 + HardSigmoid, Mul), project 1x1, and
// the residual Add. 20 and 37 channels, 9x11 pixels.
struct SeBlock {
  std::unique_ptr<GraphBuilder> b = std::make_unique<GraphBuilder>(31);
  std::vector<std::vector<NodeId>> kernels;  // nodes of each kernel, in order
};
SeBlock seBlock(int64_t stride) {
  SeBlock s;
  GraphBuilder& b = *s.b;
  const Graph& g = b.graph();
  auto last = [&](int n) {
    std::vector<NodeId> ids;
    for (int i = n; i >= 1; --i) ids.push_back(g.numNodes() - i);
    s.kernels.push_back(ids);
  };
  ValueId x = b.input({1, 20, 9, 11});
  ValueId e = b.op("HardSwish", {convOf(b, x, 37, 1, 1, 1)});
  last(2);
  ValueId d = b.op("HardSwish", {convOf(b, e, 37, 3, 37, stride)});
  last(2);
  ValueId p = b.op("GlobalAveragePool", {d});
  last(1);
  ValueId se = b.op("HardSigmoid", {convOf(b, b.op("Relu", {convOf(b, p, 8, 1, 1, 1)}), 37, 1, 1, 1)},
                    attrs({{"alpha", 1.0f / 6.0f}, {"beta", 0.5f}}));
  last(4);
  ValueId m = b.op("Mul", {d, se});
  last(1);
  ValueId y = convOf(b, m, 20, 1, 1, 1);
  last(1);
  if (stride == 1) {
    y = b.op("Add", {y, x});
    last(1);
  }
  b.finish(y);
  return s;
}

Plan planOf(const Graph& g, const std::vector<std::vector<NodeId>>& kernels,
            const std::vector<std::string>& backends) {
  Plan plan;
  for (size_t k = 0; k < kernels.size(); ++k) {
    PlanGroup group;
    group.backend = backends[k];
    for (NodeId n : kernels[k]) group.nodes.push_back(g.node(n).name);
    plan.groups.push_back(group);
  }
  return plan;
}

// Every value between two of the block's oneDNN kernels stays in the
// convolutions' layout: the depthwise result read by the pool and the SE Mul,
// the SE scale, the Mul's result, and (stride 1) the projection read by the
// residual Add. The Session's result is the reference's.
TEST_F(OneDnn, SessionHandsOverEveryValueOfAnInvertedResidualBlock) {
  for (int64_t stride : {1, 2}) {
    SeBlock s = seBlock(stride);
    const Graph& g = s.b->graph();
    Session session(g, planOf(g, s.kernels, std::vector<std::string>(s.kernels.size(), "onednn")),
                    oneDnnElseNative());
    // e, d (read by the pool and the Mul), m and (stride 1) the projection.
    // The pool's result and the SE scale are [1, C, 1, 1]: the same bytes in
    // either layout, so no kernel reorders them and nothing is handed over.
    if (channelsLastConvs()) {
      EXPECT_EQ(session.nativeLayoutValues(), stride == 1 ? 4 : 3);
    }
    for (uint64_t seed : {1, 2}) {
      const SessionVerification v = verifySession(session, randomInputs(g, seed), kPlanTolerance);
      EXPECT_TRUE(v.ok()) << "stride " << stride << ": " << (v.problems.empty() ? "" : v.problems[0]);
    }
  }
}

// With the SE Mul on the native backend, an elementwise pass that runs over
// channels-last memory as well, the depthwise result (read by the pool and
// the Mul) and the Mul's result still pass channels last, as between oneDNN
// kernels; with the pool there instead (a reduction, plain only), the
// depthwise result it reads is plain, and so is every value of a plan whose
// convolutions are blocked.
TEST_F(OneDnn, SessionReordersOnlyWhereAConsumerNeedsPlainLayout) {
  for (int64_t stride : {1, 2}) {
    SeBlock s = seBlock(stride);
    const Graph& g = s.b->graph();
    for (int onNative : {4, 2}) {  // the Mul; the pool
      SCOPED_TRACE("stride " + std::to_string(stride) + ", kernel " + std::to_string(onNative) + " on native");
      std::vector<std::string> backends(s.kernels.size(), "onednn");
      backends[static_cast<size_t>(onNative)] = "native";
      Session session(g, planOf(g, s.kernels, backends), oneDnnElseNative());
      // e, m and (stride 1) the projection; d too when the Mul reads it on native.
      if (channelsLastConvs()) {
        EXPECT_EQ(session.nativeLayoutValues(), (stride == 1 ? 3 : 2) + (onNative == 4 ? 1 : 0));
      }
      const SessionVerification v = verifySession(session, randomInputs(g, 5), kPlanTolerance);
      EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
    }
  }
}

// An elementwise chain runs in the convolutions' layout only when each
// operand has the result's shape or broadcasts over the spatial dimensions
// alone; a row broadcast ([1, 1, 1, W]) keeps it plain, and then it offers no
// layout to hand over. Both match the reference.
TEST_F(OneDnn, ElementwiseChainTakesTheConvLayoutOnlyWithPerChannelOperands) {
  for (bool perChannel : {true, false}) {
    GraphBuilder b(41);
    ValueId x = b.input({1, 37, 7, 9});
    ValueId s = b.input(perChannel ? Shape{1, 37, 1, 1} : Shape{1, 1, 1, 9});
    b.beginGroup();
    ValueId y = b.op("HardSwish", {b.op("Mul", {x, s})});
    b.endGroup();
    expectMatches(b, y, perChannel ? "per-channel" : "row broadcast");
    const CompileResult k = backend_->compile(KernelRequest::of(b.graph(), b.finish(y)));
    ASSERT_TRUE(k) << k.refusal;
    const bool offers = k.kernel->nativeInputLayout(0).has_value();
    EXPECT_EQ(offers, perChannel && channelsLastConvs()) << describeOneDnnKernel(*k.kernel);
    EXPECT_EQ(k.kernel->nativeOutputLayout(0).has_value(), perChannel && channelsLastConvs());
  }
}

// The measurement the op-level DP charges a kernel that hands tensors over
// (core/search/layout_charges.h): every offered boundary switched to the
// kernel's own layout, with buffers of that layout's size (channels padded to
// a block where the layout does). It runs, and is timed.
TEST_F(OneDnn, MeasuresAKernelWithItsBoundariesInItsOwnLayout) {
  GraphBuilder b(51);
  ValueId x = b.input({1, 20, 9, 11});
  b.beginGroup();
  ValueId y = b.op("HardSwish", {convOf(b, x, 37, 3, 1, 2)});
  b.endGroup();
  const KernelRequest request = KernelRequest::of(b.graph(), b.finish(y));
  MeasurerOptions options;
  options.minSamples = 3;
  options.maxSeconds = 0.05;
  const Measurement m = measureKernel(*backend_, request, options, true);
  EXPECT_EQ(m.status, MeasurementStatus::Ok) << m.message;
  EXPECT_GT(m.samples, 0);
}

// ---- region mode: oneDNN as a graph library (the graph-level search)

// Every prefix of the mini ResNet's nodes that regionRefusal accepts runs as
// one kernel (the rest on the native backend, one node each) and matches the
// reference: the region keeps the blocked layout through all of its chains,
// and a chain whose result leaves the region as well as feeding later chains
// (a residual block's input) is written out once for its other readers.
TEST_F(OneDnn, EveryAcceptedRegionOfTheMiniResNetRunsAsOneKernel) {
  std::unique_ptr<GraphBuilder> b = miniResNet();
  const Graph& g = b->graph();
  const BackendLookup lookup = oneDnnElseNative();
  ASSERT_TRUE(backend_->compilesRegions());
  int accepted = 0;
  for (NodeId end = 2; end <= g.numNodes(); ++end) {
    std::vector<NodeId> members;
    for (NodeId n = 0; n < end; ++n) members.push_back(n);
    const KernelRequest region = KernelRequest::of(g, NodeSet::of(g.numNodes(), members), "region");
    if (!backend_->regionRefusal(region).empty()) continue;
    ++accepted;
    Plan plan;
    plan.groups.push_back(PlanGroup{nodeNames(g, region.nodes), "onednn"});
    for (NodeId n = end; n < g.numNodes(); ++n) plan.groups.push_back(PlanGroup{{g.node(n).name}, "native"});
    Session session(g, plan, lookup);
    const SessionVerification v = verifySession(session, randomInputs(g, 5), kPlanTolerance);
    EXPECT_TRUE(v.ok()) << "region of the first " << end << " nodes: "
                        << (v.problems.empty() ? "" : v.problems[0]);
  }
  // Every prefix that ends on a chain's last node is accepted: at least one
  // per block, and the whole network.
  EXPECT_GE(accepted, 8);
  EXPECT_EQ(backend_->regionRefusal(KernelRequest::of(g, NodeSet::all(g.numNodes()))), "");
}

// A region whose middle result is also read outside it: the chain sequence
// gives it as a second output (it used to be refused).
TEST_F(OneDnn, RegionWithAnOutputReadInsideAndOutside) {
  GraphBuilder b;
  convBranches(b);
  const Graph& g = b.graph();
  const NodeSet region = NodeSet::of(g.numNodes(), {0, 1, 2});
  const KernelRequest request = KernelRequest::of(g, region, "region");
  ASSERT_EQ(request.outputs.size(), 2u);
  EXPECT_EQ(backend_->regionRefusal(request), "");
  const BackendLookup lookup = oneDnnElseNative();
  Plan plan;
  plan.groups = {PlanGroup{nodeNames(g, region), "onednn"},
                 PlanGroup{{g.node(3).name, g.node(4).name}, "native"}};
  Session session(g, plan, lookup);
  const SessionVerification v = verifySession(session, randomInputs(g, 4), kPlanTolerance);
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
}

// A transformer's residual + LayerNormalization: the normalisation views the
// MatMul chain's [1, S, H] result as [S, H] (the same plain bytes, no copy).
TEST_F(OneDnn, RegionWithALayerNormAfterAMatMulChain) {
  GraphBuilder b;
  const ValueId x = b.input({1, 4, 8});
  const ValueId h = b.op("Add", {b.op("MatMul", {x, b.constant({8, 8})}), x});
  b.finish(b.op("LayerNormalization", {h, b.constant({8}), b.constant({8})}, attrs({{"axis", int64_t{-1}}})));
  const Graph& g = b.graph();
  const NodeSet all = NodeSet::all(g.numNodes());
  EXPECT_EQ(backend_->regionRefusal(KernelRequest::of(g, all, "region")), "");
  const KernelCheckResult r = checkKernelAgainstReference(*backend_, g, all, 3);
  EXPECT_TRUE(r.compiled && r.ok) << r.refusal << r.message;
}

// A region with two outputs whose second is a wide constant MatMul chain
// (a BERT block's LayerNorm, then FFN1 + GELU): the column panels write the
// chain's own kernel output, not output 0 (they once overwrote the
// LayerNorm's result and left theirs stale).
TEST_F(OneDnn, RegionWhoseSecondOutputIsAPanelMatMul) {
  GraphBuilder b;
  const ValueId x = b.input({1, 4, 32});
  const ValueId ln = b.op("LayerNormalization", {x, b.constant({32}), b.constant({32})},
                          attrs({{"axis", int64_t{-1}}}));
  b.graph().markOutput(ln);
  const ValueId ffn = b.op("Gelu", {b.op("Add", {b.op("MatMul", {ln, b.constant({32, 1600})}),
                                                 b.constant({1600})})});
  b.finish(ffn);
  const Graph& g = b.graph();
  const NodeSet all = NodeSet::all(g.numNodes());
  const KernelRequest request = KernelRequest::of(g, all, "region");
  ASSERT_EQ(request.outputs.size(), 2u);
  ASSERT_EQ(request.outputs[1], ffn) << "the panel MatMul's result is the second output";
  EXPECT_EQ(backend_->regionRefusal(request), "");
  CompileResult c = backend_->compile(request);
  ASSERT_TRUE(c) << c.refusal;
  EXPECT_NE(describeOneDnnKernel(*c.kernel).find("column panels"), std::string::npos)
      << describeOneDnnKernel(*c.kernel);
  const KernelCheckResult r = checkKernelAgainstReference(*backend_, g, all, 3);
  ASSERT_TRUE(r.compiled) << r.refusal;
  EXPECT_TRUE(r.ok) << r.message;
}

// What a region cannot hold is refused with the node, without compiling.
TEST_F(OneDnn, RegionRefusalNamesWhatOneDnnCannotRun) {
  GraphBuilder b;
  ValueId x = b.input({1, 8, 6, 6});
  ValueId c = b.op("Relu", {b.op("Conv", {x, b.constant({8, 8, 1, 1})})});
  // (perm 0, 2, 3, 1 folds now: the Conv writes channels last.)
  ValueId t = b.op("Transpose", {c}, attrs({{"perm", Ints{0, 3, 2, 1}}}));
  b.finish(t);
  const std::string why = backend_->regionRefusal(KernelRequest::of(b.graph(), NodeSet::all(3)));
  EXPECT_NE(why.find("Transpose"), std::string::npos) << why;
}

// Sessions built through one KernelCache share kernels: a second plan that
// differs in one group compiles only that group (and the kernels whose
// layout hand-over changes), and both still match the reference.
TEST_F(OneDnn, SessionsShareKernelsThroughTheCache) {
  std::unique_ptr<GraphBuilder> b = miniResNet();
  const Graph& g = b->graph();
  const BackendLookup lookup = [&](const std::string& name) {
    return name == "onednn" ? backend_.get() : nullptr;
  };
  const Plan blocks =
      oneDnnRangesPlan(g, {{0, 3}, {3, 11}, {11, 18}, {18, 25}, {25, 32}, {32, 38}, {38, 43}, {43, 44}});
  const Plan merged = oneDnnRangesPlan(g, {{0, 3}, {3, 18}, {18, 25}, {25, 32}, {32, 38}, {38, 43}, {43, 44}});
  KernelCache cache;
  {
    Session first(g, blocks, lookup, &cache);
    EXPECT_TRUE(verifySession(first, randomInputs(g, 1), kPlanTolerance).ok());
  }
  const int compiledFirst = cache.compiled();
  Session again(g, blocks, lookup, &cache);
  EXPECT_EQ(cache.compiled(), compiledFirst) << "the same plan again compiles nothing";
  Session second(g, merged, lookup, &cache);
  const int newKernels = cache.compiled() - compiledFirst;
  EXPECT_GE(newKernels, 1);
  EXPECT_LE(newKernels, 3) << "the merged group, plus switched variants of at most its neighbours";
  for (Session* s : {&again, &second}) {
    const SessionVerification v = verifySession(*s, randomInputs(g, 2), kPlanTolerance);
    EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
  }
}

// ---- refusals: a reason, never a crash

TEST_F(OneDnn, RefusesMaxPoolWithIndices) {
  GraphBuilder b;
  const ValueId x = b.input({1, 2, 4, 4});
  const ValueId y = b.op("MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2}}}), 2);
  const NodeId pool = b.graph().numNodes() - 1;
  const ValueId indices = b.graph().node(pool).outputs[1];
  b.graph().markOutput(indices);
  expectRefusal(b, y, "output");
}

TEST_F(OneDnn, RefusesTwoOutputs) {
  GraphBuilder b;
  const ValueId c = b.op("Conv", {b.input({1, 2, 5, 5}), b.constant({3, 2, 3, 3})});
  b.graph().markOutput(c);
  expectRefusal(b, b.op("Relu", {c}), "2 outputs");
}

TEST_F(OneDnn, RefusesANodeOutsideTheChain) {
  GraphBuilder b;
  const ValueId c = b.op("Conv", {b.input({1, 2, 5, 5}), b.constant({3, 2, 3, 3})});
  const ValueId r = b.op("Relu", {b.input({1, 3, 3, 3})});  // does not read the Conv
  expectChainRefusalButRegionRuns(b, b.op("Add", {c, r}), "does not consume");
}

TEST_F(OneDnn, RefusesAnUnmappableOp) {
  GraphBuilder b;
  const ValueId c = b.op("Conv", {b.input({1, 2, 5, 5}), b.constant({3, 2, 3, 3})});
  expectRefusal(b, b.op("Softsign", {c}), "Softsign");
}

TEST_F(OneDnn, RefusesAnOperandComputedInsideTheGroup) {
  GraphBuilder b;
  const ValueId x = b.input({2, 8});
  const ValueId s = b.op("Sigmoid", {x});
  expectChainRefusalButRegionRuns(b, b.op("Add", {s, b.op("Tanh", {b.input({2, 8})})}), "does not consume");
}

// Sigmoid(x) + Tanh(x) is a function of x, but not one oneDNN has: the
// chain analysis says so and names what was tried (as a region it runs as
// two chains, the second adding the first's result).
TEST_F(OneDnn, RefusesAFunctionOfTheResultWithNoEltwiseAlgorithm) {
  GraphBuilder b;
  const ValueId x = b.input({2, 8});
  expectChainRefusalButRegionRuns(b, b.op("Add", {b.op("Sigmoid", {x}), b.op("Tanh", {x})}),
                                  "matches no oneDNN eltwise algorithm (linear, relu");
}

TEST_F(OneDnn, RefusesBroadcastThatGrowsTheResult) {
  GraphBuilder b;
  expectRefusal(b, b.op("Add", {b.input({3, 1}), b.input({1, 4})}), "shape");
}

TEST_F(OneDnn, RefusesNonFloat) {
  GraphBuilder b;
  const ValueId x = b.graph().addInput("ints", {ElementType::Int64, {4}});
  expectRefusal(b, b.op("Relu", {x}), "float32");
}

TEST_F(OneDnn, RefusesGemmWithRuntimeCAndBeta) {
  GraphBuilder b;
  const ValueId y =
      b.op("Gemm", {b.input({3, 4}), b.constant({4, 5}), b.input({3, 5})}, attrs({{"beta", 0.5f}}));
  expectRefusal(b, y, "beta");
}

TEST_F(OneDnn, RefusesOneDimensionalMatMul) {
  GraphBuilder b;
  expectRefusal(b, b.op("MatMul", {b.input({4}), b.constant({4, 3})}), "1-D");
}

TEST_F(OneDnn, RefusesRepeatedEltwiseAlgorithmWithOtherParameters) {
  // Two LeakyRelus with different slopes would share one slope in oneDNN 2.6's JIT.
  GraphBuilder b;
  const ValueId c = b.op("Conv", {b.input({1, 2, 5, 5}), b.constant({3, 2, 3, 3})});
  const ValueId l = b.op("LeakyRelu", {c}, attrs({{"alpha", 0.1f}}));
  expectRefusal(b, b.op("LeakyRelu", {b.op("Tanh", {l})}, attrs({{"alpha", 0.2f}})), "first one's");
}

// A MaxPool runs in the convolutions' layout (nhwc with AVX-512), and
// oneDNN 2.6's JIT pooling read a binary post-op's operand of the result's
// shape in that layout whatever its descriptor said: the residual Add after
// the skip path's MaxPool 2x2 stride 2 of a residual block ([1, 48, 4, 4]
// pooled, plus a plain [1, 48, 2, 2]) came out with 190 of 192 elements
// wrong. Operands broadcast along a dimension were right and stay covered.
TEST_F(OneDnn, MaxPoolWithOperandOfTheResultsShapeOnChannelsLast) {
  const AttributeMap pool2x2 = attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}});
  for (const Shape& x : {Shape{1, 48, 4, 4}, Shape{1, 16, 8, 8}, Shape{1, 3, 8, 8}, Shape{2, 24, 8, 8}})
    for (int kind = 0; kind < 6; ++kind) {
      GraphBuilder b;
      const ValueId p = b.op("MaxPool", {b.input(x)}, pool2x2);
      const Shape full{x[0], x[1], x[2] / 2, x[3] / 2};
      const char* what[] = {"+ run-time residual", "residual + (Add's second input)", "+ constant",
                            "residual - ... then Relu", "* per-channel run-time", "+ per-row run-time"};
      ValueId y = kNoValue;
      if (kind == 0) y = b.op("Add", {p, b.input(full)});
      if (kind == 1) y = b.op("Add", {b.input(full), p});
      if (kind == 2) y = b.op("Add", {p, b.constant(full)});
      if (kind == 3) y = b.op("Relu", {b.op("Sub", {b.input(full), p})});
      if (kind == 4) y = b.op("Mul", {p, b.input({1, x[1], 1, 1})});
      if (kind == 5) y = b.op("Add", {p, b.input({1, 1, 1, x[3] / 2})});
      expectMatches(b, y, "MaxPool 2x2/2 on " + shapeToString(x) + " " + what[kind]);
    }
  // In a sequence: the Add continues the pool's chain, its other operand the
  // strided conv's result, which stays in oneDNN's layout between the chains.
  GraphBuilder b;
  const ValueId x = b.input({1, 16, 8, 8});
  const ValueId c = b.op("Conv", {x, b.constant({16, 16, 3, 3})},
                         attrs({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
  expectMatches(b, b.op("Add", {b.op("MaxPool", {x}, pool2x2), c}), "Conv, MaxPool, Add(pool, conv)");
}

}  // namespace
}  // namespace collage
