// The native backend's depthwise-pointwise kernel
// (native_depthwise_pointwise.h) against the reference executor: odd
// channel counts (3, 17, 24 -> 40), strides 1 and 2, symmetric, asymmetric
// and SAME_UPPER pads, batch 2, each epilogue (BatchNormalization, Relu,
// Clip, LeakyRelu, HardSwish, PRelu per channel and shared; the residual Add with and
// without its activation) alone and together, bands over several rows and
// a last partial one, at 1 and 3 threads, on the AVX-512 tiles (where the
// build targets them) and the portable loops; the refusals, each naming its
// node; and the rule naming the block and the block with its residual.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <tuple>

#include "backends/backend_list.h"
#include "backends/native/native_backend.h"
#include "backends/native/native_depthwise_pointwise.h"
#include "core/ir/threading.h"
#include "core/measure/kernel_check.h"
#include "core/onnx/onnx_import.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using test_support::ThreadCountGuard;

std::unique_ptr<Backend> native() {
  std::unique_ptr<Backend> b = createBackend("native");
  EXPECT_NE(b, nullptr);
  return b;
}

// Sets COLLAGE_NATIVE_DWPW for the scope (the portable loops or the default).
class PathGuard {
 public:
  explicit PathGuard(bool portable) {
    if (portable) setenv("COLLAGE_NATIVE_DWPW", "portable", 1);
    else unsetenv("COLLAGE_NATIVE_DWPW");
  }
  ~PathGuard() { unsetenv("COLLAGE_NATIVE_DWPW"); }
};

// Compiles `group` at 1 and 3 threads on both paths, expects this kernel
// (not the generic lowering) and the reference's result; returns the
// kernel's description.
std::string expectBlockMatches(const Graph& g, const NodeSet& group, uint64_t seed = 5) {
  ThreadCountGuard guard;
  auto backend = native();
  std::string description;
  for (bool portable : {false, true})
    for (int threads : {1, 3}) {
      SCOPED_TRACE(std::string(portable ? "portable" : "default") + ", threads " + std::to_string(threads));
      PathGuard path(portable);
      setThreadCount(threads);
      CompileResult c = backend->compile(KernelRequest::of(g, group, "test"));
      EXPECT_TRUE(c) << c.refusal;
      if (!c) return {};
      description = describeNativeKernel(*c.kernel);
      EXPECT_EQ(description.rfind("depthwise_pointwise ", 0), 0u) << description;
      if (portable) {
        EXPECT_NE(description.find(", portable"), std::string::npos) << description;
      }
      KernelCheckResult r = checkKernelAgainstReference(*backend, g, group, seed);
      EXPECT_TRUE(r.compiled) << r.refusal;
      EXPECT_TRUE(r.ok) << r.message;
    }
  return description;
}

std::string refusalOf(const Graph& g, const NodeSet& group) {
  CompileResult c = native()->compile(KernelRequest::of(g, group, "test"));
  EXPECT_FALSE(c) << "compiled: " << (c ? describeNativeKernel(*c.kernel) : "");
  std::printf("refused: %s\n", c.refusal.c_str());
  return c.refusal;
}

enum class Act { None, Relu, Relu6, Leaky, HardSwish, PReluShared, PReluPerChannel };

const char* actName(Act a) {
  switch (a) {
    case Act::None: return "none";
    case Act::Relu: return "relu";
    case Act::Relu6: return "relu6";
    case Act::Leaky: return "leaky";
    case Act::HardSwish: return "hard_swish";
    case Act::PReluShared: return "prelu1";
    case Act::PReluPerChannel: return "preluC";
  }
  return "?";
}

ValueId activation(GraphBuilder& b, ValueId v, Act a, int64_t channels) {
  switch (a) {
    case Act::None: return v;
    case Act::Relu: return b.op("Relu", {v});
    case Act::Relu6: return b.op("Clip", {v}, attrs({{"min", 0.0f}, {"max", 6.0f}}));
    case Act::Leaky: return b.op("LeakyRelu", {v}, attrs({{"alpha", 0.2f}}));
    case Act::HardSwish: return b.op("HardSwish", {v});
    case Act::PReluShared: return b.op("PRelu", {v, b.constant({1}, 0.05f, 0.5f)});
    case Act::PReluPerChannel: return b.op("PRelu", {v, b.constant({channels, 1, 1}, -0.5f, 0.5f)});
  }
  return v;
}

ValueId batchNorm(GraphBuilder& b, ValueId v, int64_t channels) {
  return b.op("BatchNormalization", {v, b.constant({channels}, 0.5f, 1.5f), b.constant({channels}),
                                     b.constant({channels}), b.constant({channels}, 0.5f, 1.5f)});
}

struct BlockSpec {
  Shape x;  // [N, C, H, W]
  int64_t k = 3, m = 8;
  Ints strides{1, 1}, pads{1, 1, 1, 1};
  std::string autoPad;
  bool bias = true, bn1 = false, bn2 = false;
  Act act1 = Act::None, act2 = Act::None;
  enum { NoAdd, AddInput, AddOther } add = NoAdd;
  Act act3 = Act::None;
};

// X -> dw Conv -> [BN] -> [act1] -> 1x1 Conv -> [BN] -> [act2] -> [Add R] -> [act3]
Graph& buildBlock(GraphBuilder& b, const BlockSpec& s, NodeSet& group) {
  const int64_t c = s.x[1];
  ValueId x = b.input(s.x);
  AttributeMap dwAttrs = attrs({{"group", c}, {"strides", s.strides}, {"kernel_shape", Ints{s.k, s.k}}});
  if (s.autoPad.empty()) dwAttrs.set("pads", s.pads);
  else dwAttrs.set("auto_pad", s.autoPad);
  std::vector<ValueId> dwIn{x, b.constant({c, 1, s.k, s.k})};
  if (s.bias) dwIn.push_back(b.constant({c}));
  ValueId v = b.op("Conv", dwIn, dwAttrs);
  if (s.bn1) v = batchNorm(b, v, c);
  v = activation(b, v, s.act1, c);
  std::vector<ValueId> pwIn{v, b.constant({s.m, c, 1, 1})};
  if (s.bias) pwIn.push_back(b.constant({s.m}));
  v = b.op("Conv", pwIn);
  if (s.bn2) v = batchNorm(b, v, s.m);
  v = activation(b, v, s.act2, s.m);
  if (s.add != BlockSpec::NoAdd) {
    b.endGroup();
    const ValueId r = s.add == BlockSpec::AddInput ? x : b.input(b.shape(v));
    b.beginGroup();
    v = b.op("Add", {r, v});
    v = activation(b, v, s.act3, s.m);
  }
  group = b.finish(v);
  return b.graph();
}

std::string expectSpecMatches(const BlockSpec& s) {
  GraphBuilder b;
  NodeSet group;
  const Graph& g = buildBlock(b, s, group);
  return expectBlockMatches(g, group);
}

TEST(NativeDepthwisePointwise, PlainBlockOddChannelsBatchTwo) {
  BlockSpec s;
  s.x = {2, 3, 11, 13};
  s.m = 5;
  const std::string d = expectSpecMatches(s);
  EXPECT_NE(d.find("N=2 C=3 11x13 dw 3x3 stride 1x1 pads [1,1,1,1] -> 11x13, none, pw M=5, none"),
            std::string::npos)
      << d;
  s.bias = false;
  expectSpecMatches(s);
}

TEST(NativeDepthwisePointwise, StrideTwoFiveByFiveWithBatchNormAndRelu6) {
  BlockSpec s;
  s.x = {2, 17, 19, 21};
  s.k = 5;
  s.m = 24;
  s.strides = {2, 2};
  s.pads = {2, 2, 2, 2};
  s.bn1 = s.bn2 = true;
  s.act1 = Act::Relu6;
  s.act2 = Act::Relu;
  const std::string d = expectSpecMatches(s);
  EXPECT_NE(d.find("stride 2x2 pads [2,2,2,2] -> 10x11, clip, pw M=24, relu"), std::string::npos) << d;
}

TEST(NativeDepthwisePointwise, AsymmetricPadsAndSameUpper) {
  // (0,0,1,1): TensorFlow's SAME at stride 2, padded at the bottom and right only.
  BlockSpec s;
  s.x = {2, 24, 16, 15};
  s.m = 40;
  s.strides = {2, 2};
  s.pads = {0, 0, 1, 1};
  s.act1 = Act::PReluPerChannel;
  s.act2 = Act::PReluPerChannel;
  std::string d = expectSpecMatches(s);
  EXPECT_NE(d.find("pads [0,0,1,1] -> 8x7"), std::string::npos) << d;
  s.pads = {1, 0, 0, 2};
  s.strides = {1, 2};
  d = expectSpecMatches(s);
  EXPECT_NE(d.find("stride 1x2 pads [1,0,0,2] -> 15x8"), std::string::npos) << d;
  s.autoPad = "SAME_UPPER";
  s.strides = {2, 2};
  s.k = 4;
  d = expectSpecMatches(s);
  EXPECT_NE(d.find("pads [1,1,1,2] -> 8x8"), std::string::npos) << d;
}

TEST(NativeDepthwisePointwise, EachEpilogueAloneAndTogether) {
  const Act acts[] = {Act::None,      Act::Relu,        Act::Relu6,          Act::Leaky,
                      Act::HardSwish, Act::PReluShared, Act::PReluPerChannel};
  for (Act a : acts)
    for (int where = 0; where < 3; ++where) {
      BlockSpec s;
      s.x = {2, 17, 9, 7};
      s.m = 17;
      (where == 0 ? s.act1 : where == 1 ? s.act2 : s.act3) = a;
      if (where == 2) s.add = BlockSpec::AddInput;
      SCOPED_TRACE(std::string(actName(a)) + " at " + std::to_string(where));
      expectSpecMatches(s);
    }
  for (bool bn1 : {false, true})
    for (bool bn2 : {false, true}) {
      BlockSpec s;
      s.x = {2, 3, 8, 9};
      s.m = 17;
      s.bn1 = bn1;
      s.bn2 = bn2;
      s.act1 = Act::Relu;
      s.act2 = Act::Relu6;
      s.add = BlockSpec::AddOther;
      s.act3 = Act::Relu;
      SCOPED_TRACE("bn " + std::to_string(bn1) + std::to_string(bn2));
      const std::string d = expectSpecMatches(s);
      EXPECT_NE(d.find("+ residual, relu"), std::string::npos) << d;
    }
}

TEST(NativeDepthwisePointwise, ManyBandsAndAPartialLastTile) {
  // 24 channels at 64x64, 5x5 (a face detector's block): several bands per
  // image; 28 output channels: a partial tile of 4; 64 * rows pixels.
  BlockSpec s;
  s.x = {1, 24, 64, 64};
  s.k = 5;
  s.m = 28;
  s.pads = {2, 2, 2, 2};
  s.act2 = Act::Relu;
  s.add = BlockSpec::AddOther;
  s.act3 = Act::Relu;
  const std::string d = expectSpecMatches(s);
  EXPECT_EQ(d.find("band 64 row(s)"), std::string::npos) << d;
  // A width that is no multiple of a tile, one row per band.
  s.x = {2, 40, 5, 1000};
  s.k = 3;
  s.pads = {1, 1, 1, 1};
  s.m = 9;
  expectSpecMatches(s);
}

TEST(NativeDepthwisePointwise, WideRowsAtStridesOneAndTwo) {
  // Rows wide enough for 16 columns in registers (AVX-512), with border
  // columns on either side and a remainder, at stride 1 and 2, symmetric
  // and asymmetric pads, odd widths (the last tap of a stride-2 row is
  // its last float).
  for (const auto& [w, k, stride, pads] : std::vector<std::tuple<int64_t, int64_t, int64_t, Ints>>{
           {70, 3, 2, {0, 0, 1, 1}}, {81, 5, 2, {2, 2, 2, 2}}, {67, 3, 2, {1, 1, 1, 1}}, {50, 3, 1, {1, 1, 1, 1}},
           {53, 5, 1, {0, 0, 2, 3}}, {33, 7, 2, {3, 3, 3, 3}}}) {
    BlockSpec s;
    s.x = {2, 5, 7, w};
    s.k = k;
    s.m = 11;
    s.strides = {stride, stride};
    s.pads = pads;
    s.act1 = Act::Relu6;
    SCOPED_TRACE("width " + std::to_string(w) + " k " + std::to_string(k) + " stride " + std::to_string(stride));
    expectSpecMatches(s);
  }
}

// ---- Refusals: at compile time, naming the node.

TEST(NativeDepthwisePointwise, RefusesWhatItDoesNotTake) {
  // build() makes the group's nodes from `v` and returns the value of the
  // node the refusal must name (or a value the message must name).
  auto refused = [](const std::function<ValueId(GraphBuilder&, ValueId&)>& build, const std::string& part) {
    GraphBuilder b;
    ValueId v = b.input({1, 8, 10, 10});
    const ValueId named = build(b, v);
    const NodeSet group = b.finish(v);
    const Graph& g = b.graph();
    const NodeId producer = g.value(named).producer;
    const std::string who = producer == kNoNode ? "'" + g.value(named).name + "'"
                                                : "node '" + g.node(producer).name + "' (" + g.node(producer).op + ")";
    const std::string why = refusalOf(g, group);
    EXPECT_NE(why.find(who), std::string::npos) << why;
    EXPECT_NE(why.find(part), std::string::npos) << why;
    EXPECT_EQ(why.rfind("depthwise_pointwise: ", 0), 0u) << why;
  };
  auto pw = [](GraphBuilder& b, ValueId v, AttributeMap a = {}, Shape w = {6, 8, 1, 1}) {
    return b.op("Conv", {v, b.constant(w)}, std::move(a));
  };
  auto dw = [](GraphBuilder& b, ValueId v) {
    return b.op("Conv", {v, b.constant({8, 1, 3, 3})}, attrs({{"group", int64_t{8}}, {"pads", Ints{1, 1, 1, 1}}}));
  };
  refused([&](GraphBuilder& b, ValueId& v) {
    const ValueId d = b.op("Conv", {v, b.constant({8, 1, 3, 3})}, attrs({{"group", int64_t{8}}, {"dilations", Ints{2, 2}}}));
    v = pw(b, d);
    return d;
  }, ": dilations [2, 2] (the fused kernel takes 1)");
  refused([&](GraphBuilder& b, ValueId& v) {
    const ValueId d = b.op("Conv", {v, b.constant({8, 8, 3, 3})});
    v = pw(b, d);
    return d;
  }, ": group 1 with 8 input and 8 output channels is not depthwise");
  refused([&](GraphBuilder& b, ValueId& v) {
    const ValueId d = b.op("Conv", {v, b.constant({8, 2, 3, 3})}, attrs({{"group", int64_t{4}}}));
    v = pw(b, d);
    return d;
  }, ": group 4 with 8 input and 8 output channels is not depthwise");
  refused([&](GraphBuilder& b, ValueId& v) {
    const ValueId d = b.op("Conv", {v, b.constant({16, 1, 3, 3})}, attrs({{"group", int64_t{8}}}));
    v = pw(b, d, {}, {6, 16, 1, 1});
    return d;
  }, ": group 8 with 8 input and 16 output channels is not depthwise");
  refused([&](GraphBuilder& b, ValueId& v) { return v = pw(b, dw(b, v), {}, {6, 8, 3, 3}); },
          ": kernel [3, 3] (the fused kernel takes a 1x1 Conv)");
  refused([&](GraphBuilder& b, ValueId& v) { return v = pw(b, dw(b, v), attrs({{"pads", Ints{0, 0, 1, 1}}})); },
          ": pads [0, 0, 1, 1] (none taken)");
  refused([&](GraphBuilder& b, ValueId& v) { return v = pw(b, dw(b, v), attrs({{"strides", Ints{2, 2}}})); },
          ": strides [2, 2] (1 taken)");
  refused([&](GraphBuilder& b, ValueId& v) {
    const ValueId p = b.op("PRelu", {dw(b, v), b.constant({8, 10, 10})});
    v = pw(b, p);
    return p;
  }, ": its slope of shape [8, 10, 10] is not one per channel");
  refused([&](GraphBuilder& b, ValueId& v) {
    const ValueId p = pw(b, dw(b, v), attrs({{"pads", Ints{0, 0, 0, 0}}}));
    v = b.op("Add", {p, b.input({1, 6, 1, 10})});
    return v;
  }, "of shape [1, 6, 1, 10] (the block's output shape [1, 6, 10, 10] taken, no broadcast)");
  refused([&](GraphBuilder& b, ValueId& v) { return v = b.op("Sigmoid", {pw(b, dw(b, v))}); },
          " is not part of the block");
  refused([&](GraphBuilder& b, ValueId& v) {
    const ValueId w = b.input({6, 8, 1, 1});
    v = b.op("Conv", {dw(b, v), w});
    return w;
  }, "is a run-time tensor (constants taken)");
}

// An explicit Pad in front of the depthwise Conv (as tf2onnx writes SAME
// padding) is no member the kernel takes: in the group, refused naming the
// Pad, whatever its form (zero spatial, channel, reflect), at odd channel
// counts. The Pad then runs apart (a native pass or oneDNN's Pad + Conv),
// and the rule names the block after it, which the kernel takes.
TEST(NativeDepthwisePointwise, RefusesAPadInFrontOfTheBlock) {
  const std::vector<std::pair<AttributeMap, std::string>> pads = {
      {attrs({{"pads", Ints{0, 0, 0, 0, 0, 0, 1, 1}}}), "zero, the end of H and W"},
      {attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}}), "zero, both ends"},
      {attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}, {"mode", std::string("reflect")}}), "reflect"},
      {attrs({{"pads", Ints{0, 2, 0, 0, 0, 0, 0, 0}}}), "channels"},
  };
  for (int64_t c : {3, 17})
    for (const auto& [pad, what] : pads) {
      SCOPED_TRACE(std::to_string(c) + " channels, " + what);
      GraphBuilder b;
      const ValueId p = b.op("Pad", {b.input({1, c, 9, 7})}, pad);
      const int64_t padded = b.shape(p)[1];
      const ValueId d = b.op("Conv", {p, b.constant({padded, 1, 3, 3})}, attrs({{"group", padded}}));
      const ValueId y = b.op("Conv", {b.op("Relu", {d}), b.constant({5, padded, 1, 1})});
      const NodeSet group = b.finish(y);
      const Graph& g = b.graph();
      const std::string why = refusalOf(g, group);
      EXPECT_EQ(why.rfind("depthwise_pointwise: ", 0), 0u) << why;
      EXPECT_NE(why.find("node '" + g.node(g.value(p).producer).name + "' (Pad)"), std::string::npos) << why;
      EXPECT_NE(why.find("is not part of the block"), std::string::npos) << why;
      // The block after the Pad is named, and runs as this kernel.
      const auto groups = native::depthwisePointwiseGroups(g);
      ASSERT_EQ(groups.size(), 1u);
      EXPECT_FALSE(groups[0].first.contains(g.value(p).producer));
      expectBlockMatches(g, groups[0].first);
    }
}

TEST(NativeDepthwisePointwise, RefusesAnIntermediateReadOutside) {
  // The depthwise output also read by a node outside the group: the group
  // would have two outputs, and the kernel never writes the first.
  GraphBuilder b;
  ValueId x = b.input({1, 8, 10, 10});
  ValueId d = b.op("Conv", {x, b.constant({8, 1, 3, 3})}, attrs({{"group", int64_t{8}}, {"pads", Ints{1, 1, 1, 1}}}));
  ValueId r = b.op("Relu", {d});
  ValueId y = b.op("Conv", {r, b.constant({6, 8, 1, 1})});
  b.endGroup();
  b.graph().markOutput(b.op("Sigmoid", {r}));
  const NodeSet group = b.finish(y);
  const std::string why = refusalOf(b.graph(), group);
  EXPECT_NE(why.find("the group has 2 outputs ('" + b.graph().value(r).name + "', '" + b.graph().value(y).name + "')"),
            std::string::npos)
      << why;
}

// ---- The rule.

TEST(NativeDepthwisePointwise, RuleNamesTheBlockAndTheBlockWithItsResidual) {
  BlockSpec s;
  s.x = {1, 8, 12, 12};
  s.m = 8;
  s.act1 = Act::Relu;
  s.add = BlockSpec::AddInput;
  s.act3 = Act::Relu;
  GraphBuilder b;
  NodeSet all;
  const Graph& g = buildBlock(b, s, all);
  const auto groups = native::depthwisePointwiseGroups(g);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].second, "depthwise_pointwise");
  EXPECT_EQ(groups[0].first.count(), 3);
  EXPECT_EQ(groups[1].second, "depthwise_pointwise_residual");
  EXPECT_TRUE(groups[1].first == all);
  expectBlockMatches(g, groups[0].first);
  expectBlockMatches(g, groups[1].first);
  // The backend's rule in code offers both.
  std::shared_ptr<const PatternRule> rule = native()->codeRule();
  int named = 0;
  for (const auto& [set, label] : rule->wholeGroups(g)) named += label.rfind("depthwise_pointwise", 0) == 0;
  EXPECT_EQ(named, 2);

  // A block the kernel refuses (dilated) is not named.
  GraphBuilder d;
  ValueId x = d.input({1, 8, 12, 12});
  ValueId v = d.op("Conv", {x, d.constant({8, 1, 3, 3})}, attrs({{"group", int64_t{8}}, {"dilations", Ints{2, 2}}}));
  v = d.op("Conv", {v, d.constant({4, 8, 1, 1})});
  d.finish(v);
  EXPECT_TRUE(native::depthwisePointwiseGroups(d.graph()).empty());
}

TEST(NativeDepthwisePointwise, RuleFindsTheBlocksOfTheSampleMobileModels) {
  // Exported graphs (BatchNormalization folded or not, Clip as Relu6, the
  // inverted residual's Add): each block the rule names runs as this
  // kernel and matches the reference.
  for (const char* model : {"mobilenet_v2_small", "mobilenet_v3_large_small", "efficientnet_b0_small"}) {
    SCOPED_TRACE(model);
    const Graph g = importOnnx(std::string(COLLAGE_SOURCE_DIR) + "/resources/models/" + model + ".onnx");
    const auto groups = native::depthwisePointwiseGroups(g);
    int residual = 0;
    for (const auto& [set, label] : groups) {
      residual += label == "depthwise_pointwise_residual";
      auto backend = native();
      CompileResult c = backend->compile(KernelRequest::of(g, set, label));
      ASSERT_TRUE(c) << c.refusal;
      EXPECT_EQ(describeNativeKernel(*c.kernel).rfind("depthwise_pointwise ", 0), 0u);
      KernelCheckResult r = checkKernelAgainstReference(*backend, g, set, 3);
      EXPECT_TRUE(r.ok) << label << ": " << r.message;
    }
    std::printf("%s: %zu blocks named, %d with their residual\n", model, groups.size(), residual);
    if (std::string(model) == "mobilenet_v2_small") {
      EXPECT_GE(groups.size(), 10u);
      EXPECT_GT(residual, 0);
    }
  }
}

}  // namespace
}  // namespace collage
