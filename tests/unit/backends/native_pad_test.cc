// A constant-zero Pad in the native backend's fused passes: the rule that
// a Pad fuses as a view with zeros (the consumer reads the Pad's input where
// it lies, its constant elsewhere), so that a channel Pad on a residual path,
// Relu(Add(conv_out, Pad(x, C -> C + k))), is one kernel that writes each
// element once and copies nothing. Against the reference executor for odd
// channel counts, batches, pads at either end and spatial pads; the pad
// forms that are not zero padding refused with the reason; and the pattern
// generator offering the fused group, so that a plan can pick it.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "backends/backend_list.h"
#include "backends/native/native_backend.h"
#include "core/ir/threading.h"
#include "core/measure/kernel_check.h"
#include "core/ops/op_helpers.h"
#include "core/patterns/backend_spec.h"
#include "core/patterns/pattern_generator.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using test_support::ThreadCountGuard;

struct ChannelPad {
  int64_t batch, channels, begin, end, h, w;
  std::string name() const {
    return std::to_string(batch) + "x" + std::to_string(channels) + " pad [" + std::to_string(begin) + ", " +
           std::to_string(end) + "] at " + std::to_string(h) + "x" + std::to_string(w);
  }
};

// x -> Conv (outside the group) gives conv_out with C + k channels; the group
// is Relu(Add(conv_out, Pad(x))) as mobile exporters write a residual block
// that widens its channels.
NodeSet residualWithChannelPad(GraphBuilder& b, const ChannelPad& c, AttributeMap padAttrs = {}) {
  const int64_t out = c.channels + c.begin + c.end;
  b.endGroup();
  const ValueId x = b.input({c.batch, c.channels, c.h, c.w});
  const ValueId conv = b.op("Conv", {x, b.constant({out, c.channels, 3, 3}), b.constant({out})},
                            attrs({{"pads", Ints{1, 1, 1, 1}}}));
  b.beginGroup();
  if (!padAttrs.has("pads")) padAttrs.set("pads", Ints{0, c.begin, 0, 0, 0, c.end, 0, 0});
  const ValueId pad = b.op("Pad", {x}, padAttrs);
  return b.finish(b.op("Relu", {b.op("Add", {conv, pad})}));
}

// Compiles the group at 1 and 3 threads, compares with the reference and
// returns the kernel's description.
std::string expectMatches(GraphBuilder& b, const NodeSet& group) {
  ThreadCountGuard guard;
  const std::unique_ptr<Backend> backend = createBackend("native");
  std::string description;
  for (int threads : {1, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    setThreadCount(threads);
    const KernelCheckResult r = checkKernelAgainstReference(*backend, b.graph(), group, 5);
    EXPECT_TRUE(r.compiled) << r.refusal;
    if (!r.compiled) return {};
    EXPECT_TRUE(r.ok) << r.message;
    const CompileResult c = backend->compile(KernelRequest::of(b.graph(), group, "test"));
    description = describeNativeKernel(*c.kernel);
  }
  return description;
}

// Only fused passes, no intermediate tensor: the padded tensor is never made.
void expectPassesOnly(const std::string& d, int passes) {
  EXPECT_EQ(d.rfind(std::to_string(passes) + " step(s), 0 scratch buffer(s)", 0), 0u) << d;
  EXPECT_EQ(d.find("reference kernel"), std::string::npos) << d;
}

TEST(NativePad, ChannelPadOnAResidualPathIsPassesWithNoCopy) {
  // One pass per channel range: the input's channels, and each side padded.
  const ChannelPad cases[] = {
      {1, 3, 0, 4, 5, 5},    // 3 -> 7, padded at the end
      {2, 24, 0, 4, 8, 8},   // 24 -> 28, batch 2
      {3, 5, 3, 0, 4, 6},    // padded at the beginning, batch 3
      {2, 3, 2, 2, 3, 7},    // both ends
      {2, 16, 0, 16, 1, 1},  // doubled, 1x1 spatial
  };
  for (const ChannelPad& c : cases) {
    SCOPED_TRACE(c.name());
    GraphBuilder b;
    const NodeSet group = residualWithChannelPad(b, c);
    expectPassesOnly(expectMatches(b, group), 1 + (c.begin > 0) + (c.end > 0));
  }
}

TEST(NativePad, SpatialAndCroppingPadsFuse) {
  {
    SCOPED_TRACE("asymmetric spatial pads (an exporter's SAME with stride 2) before a Relu");
    GraphBuilder b;
    const ValueId p = b.op("Pad", {b.input({2, 5, 7, 6})}, attrs({{"pads", Ints{0, 0, 0, 0, 0, 0, 1, 1}}}));
    // H: rows 0-6 read x, row 7 is padding; in rows 0-6, W splits likewise.
    expectPassesOnly(expectMatches(b, b.finish(b.op("Relu", {p}))), 3);
  }
  {
    SCOPED_TRACE("every side of H and W, with `axes`");
    GraphBuilder b;
    const ValueId p =
        b.op("Pad", {b.input({1, 3, 5, 5})}, attrs({{"pads", Ints{2, 1, 1, 3}}, {"axes", Ints{2, 3}}}));
    // Two padded bands of rows, and the input's rows cut in three by W.
    expectPassesOnly(expectMatches(b, b.finish(b.op("Sigmoid", {p}))), 5);
  }
  {
    SCOPED_TRACE("a negative pad crops, a positive one pads, on the same axis");
    GraphBuilder b;
    const ValueId p = b.op("Pad", {b.input({2, 7, 4})}, attrs({{"pads", Ints{0, -2, 1, 0, 3, 0}}}));
    expectPassesOnly(expectMatches(b, b.finish(b.op("Neg", {p}))), 3);
  }
  {
    SCOPED_TRACE("a padded value read transposed");
    GraphBuilder b;
    const ValueId p = b.op("Pad", {b.input({2, 3, 4})}, attrs({{"pads", Ints{0, 1, 0, 0, 2, 0}}}));
    const ValueId t = b.op("Transpose", {p}, attrs({{"perm", Ints{2, 0, 1}}}));
    expectPassesOnly(expectMatches(b, b.finish(b.op("Add", {t, b.input({4, 2, 6})}))), 3);
  }
  {
    // A sum over the padded axis cannot cut its row: the padded value is
    // made first, by a pass of its own.
    SCOPED_TRACE("reduced over the padded axis");
    GraphBuilder b;
    const ValueId p = b.op("Pad", {b.input({2, 3, 5})}, attrs({{"pads", Ints{0, 1, 0, 0, 2, 0}}}));
    const ValueId s = b.op("ReduceSum", {p}, attrs({{"axes", Ints{1}}, {"keepdims", int64_t{0}}}));
    const std::string d = expectMatches(b, b.finish(s));
    EXPECT_EQ(d.find("reference kernel"), std::string::npos) << d;
  }
  {
    // The sum is swept along the root's own padded dim (the Add broadcasts
    // it back over that dim): cutting the root there would cut the sum.
    SCOPED_TRACE("a sum over the padded axis broadcast back over it");
    GraphBuilder b;
    const ValueId p = b.op("Pad", {b.input({3, 5})}, attrs({{"pads", Ints{0, 2, 0, 1}}}));
    const ValueId s = b.op("ReduceSum", {p}, attrs({{"axes", Ints{1}}, {"keepdims", int64_t{1}}}));
    const ValueId y = b.op("Add", {b.op("Mul", {s, p}), b.input({3, 8})});
    expectMatches(b, b.finish(y));
  }
}

TEST(NativePad, PadsOfComputedValuesInsideLargerGroups) {
  {
    SCOPED_TRACE("Pad of a value the group computes, joined and clipped (Relu6)");
    GraphBuilder b;
    const ValueId x = b.op("Sigmoid", {b.input({2, 5, 4, 3})});
    const ValueId p = b.op("Pad", {x}, attrs({{"pads", Ints{0, 1, 0, 0, 0, 3, 0, 0}}}));
    const ValueId y = b.op("Add", {p, b.input({2, 9, 4, 3})});
    expectPassesOnly(expectMatches(b, b.finish(b.op("Clip", {y}, attrs({{"min", 0.0f}, {"max", 6.0f}})))), 3);
  }
  {
    SCOPED_TRACE("a padded value concatenated: each input's pass cut apart");
    GraphBuilder b;
    const ValueId p = b.op("Pad", {b.input({2, 3, 4})}, attrs({{"pads", Ints{0, 0, 1, 0, 0, 2}}}));
    const ValueId c = b.op("Concat", {b.op("Relu", {b.input({2, 5, 7})}), p}, attrs({{"axis", int64_t{1}}}));
    expectPassesOnly(expectMatches(b, b.finish(c)), 1 + 3);
  }
  {
    SCOPED_TRACE("a Pad feeding a PRelu with a slope per padded channel");
    GraphBuilder b;
    const ValueId p = b.op("Pad", {b.input({3, 7, 5, 5})}, attrs({{"pads", Ints{0, 0, 0, 0, 0, 1, 0, 0}}}));
    const ValueId y = b.op("PRelu", {b.op("Add", {p, b.input({3, 8, 5, 5})}), b.constant({8, 1, 1})});
    expectPassesOnly(expectMatches(b, b.finish(y)), 2);
  }
}

// Random pads (negative ones crop) of random shapes, read by an
// elementwise op, a second input, a transpose or a sum over a random axis
// broadcast back: each group matches the reference, whatever regions its
// passes are cut into.
TEST(NativePad, RandomPadsAndConsumersMatchTheReference) {
  std::mt19937 rng(40);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 120; ++trial) {
    const size_t rank = static_cast<size_t>(pick(1, 4));
    Shape in(rank), out(rank);
    Ints begins(rank), ends(rank);
    for (size_t d = 0; d < rank; ++d) {
      in[d] = pick(1, 5);
      do {
        begins[d] = pick(-1, 3);
        ends[d] = pick(-1, 3);
      } while (in[d] + begins[d] + ends[d] < 1 || -begins[d] >= in[d] || -ends[d] >= in[d]);
      out[d] = in[d] + begins[d] + ends[d];
    }
    Ints pads = begins;
    pads.insert(pads.end(), ends.begin(), ends.end());
    const int consumer = pick(0, 3);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + shapeToString(in) + " pads " + intsToString(pads) +
                 " consumer " + std::to_string(consumer));
    GraphBuilder b;
    ValueId x = b.input(in);
    if (pick(0, 1)) x = b.op("Sigmoid", {x});
    const ValueId p = b.op("Pad", {x}, attrs({{"pads", pads}}));
    ValueId y;
    if (consumer == 0) {
      y = b.op("Relu", {p});
    } else if (consumer == 1) {
      y = b.op("Add", {p, b.input(out)});
    } else if (consumer == 2) {
      Ints perm(rank);
      for (size_t d = 0; d < rank; ++d) perm[d] = static_cast<int64_t>(d);
      std::shuffle(perm.begin(), perm.end(), rng);
      y = b.op("Neg", {b.op("Transpose", {p}, attrs({{"perm", perm}}))});
    } else {
      const int64_t axis = pick(0, static_cast<int>(rank) - 1);
      const ValueId sum = b.op("ReduceSum", {p}, attrs({{"axes", Ints{axis}}, {"keepdims", int64_t{1}}}));
      y = b.op("Mul", {sum, p});
    }
    const std::string d = expectMatches(b, b.finish(y));
    EXPECT_EQ(d.find("reference kernel"), std::string::npos) << d;
  }
}

// Reflect and edge padding read the input where the pass reads padding, and
// a non-zero constant is not zero padding: each is refused, with the reason,
// in a fused group (alone, it runs on the reference kernel).
TEST(NativePad, RefusesPadsThatAreNotZeroPadding) {
  struct Case {
    AttributeMap pad;
    std::string mention;
  };
  const Ints pads{0, 0, 0, 0, 0, 4, 0, 0};
  const Case cases[] = {
      {attrs({{"pads", pads}, {"mode", std::string("reflect")}}), "'reflect' Pad is not zero padding"},
      {attrs({{"pads", pads}, {"mode", std::string("edge")}}), "'edge' Pad is not zero padding"},
      {attrs({{"pads", pads}, {"constant_value", 0.5f}}), "constant value 0.5"},
  };
  const std::unique_ptr<Backend> backend = createBackend("native");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.mention);
    GraphBuilder b;
    const NodeSet group = residualWithChannelPad(b, {1, 5, 0, 4, 6, 6}, c.pad);
    const CompileResult r = backend->compile(KernelRequest::of(b.graph(), group, "test"));
    ASSERT_FALSE(r) << "expected a refusal";
    EXPECT_NE(r.refusal.find(c.mention), std::string::npos) << r.refusal;
    EXPECT_NE(r.refusal.find("node 'Pad"), std::string::npos) << r.refusal;
    group.forEach([&](NodeId n) {
      if (b.graph().node(n).op == "Pad") {
        EXPECT_FALSE(backend->codeRule()->opRule(b.graph(), n));
      }
    });
  }
}

// Pads given as inputs rather than attributes. A constant input the
// importer makes an attribute (op_registry.h), so what stays an input is a
// run-time tensor: its padding is known only when the model runs, so a
// fused pass cannot be cut by it (pads) or cannot take it as the zero it
// assumes (constant_value). Refused in a fused group, with the reason; the
// Pad alone runs on the reference kernel, which reads them at run time.
TEST(NativePad, RefusesPadsGivenAsRunTimeInputs) {
  const std::unique_ptr<Backend> backend = createBackend("native");
  {
    SCOPED_TRACE("constant_value as a run-time input, pads an attribute");
    GraphBuilder b;
    b.endGroup();
    const ValueId x = b.input({1, 7, 5, 5});
    const ValueId value = b.input({});
    b.beginGroup();
    const ValueId p = b.op("Pad", {x, kNoValue, value}, attrs({{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}}));
    const NodeSet group = b.finish(b.op("Relu", {p}));
    const CompileResult r = backend->compile(KernelRequest::of(b.graph(), group, "test"));
    ASSERT_FALSE(r) << "expected a refusal";
    EXPECT_NE(r.refusal.find("run-time tensor"), std::string::npos) << r.refusal;
    EXPECT_NE(r.refusal.find("node 'Pad"), std::string::npos) << r.refusal;
  }
  {
    SCOPED_TRACE("pads as a run-time input, the output shape declared");
    Graph g;
    const ValueId x = g.addInput("x", {ElementType::Float32, {1, 3, 4, 4}});
    const ValueId pads = g.addInput("pads", {ElementType::Int64, {8}});
    const ValueId y = g.addValue("y", {ElementType::Float32, {1, 3, 6, 6}});
    const ValueId z = g.addValue("z", {ElementType::Float32, {1, 3, 6, 6}});
    g.addNode(Node{"pad", "Pad", attrs({{"mode", std::string("constant")}, {"constant_value", 0.0f}}), {x, pads}, {y}});
    g.addNode(Node{"relu", "Relu", AttributeMap{}, {y}, {z}});
    g.markOutput(z);
    g.finalize();
    const CompileResult r = backend->compile(KernelRequest::of(g, NodeSet::of(g.numNodes(), {0, 1}), "test"));
    ASSERT_FALSE(r) << "expected a refusal";
    EXPECT_NE(r.refusal.find("node 'pad'"), std::string::npos) << r.refusal;
    EXPECT_NE(r.refusal.find("run-time"), std::string::npos) << r.refusal;
  }
}

// The backend's rules (its spec's styles and its rule in code) offer
// Pad -> Add -> Relu as one group and the backend compiles it, so the
// search can measure and pick it.
TEST(NativePad, GeneratorOffersThePadWithItsResidualJoin) {
  GraphBuilder b;
  const NodeSet group = residualWithChannelPad(b, {2, 3, 0, 4, 6, 6});
  const Graph& g = b.graph();
  const BackendSpec spec =
      loadBackendSpec(std::string(COLLAGE_SOURCE_DIR) + "/resources/backends/native.toml");
  std::vector<GeneratedGroup> groups = generateGroups(g, *spec.rule, spec.limits);
  for (GeneratedGroup& extra : generateGroups(g, *createBackend("native")->codeRule(), spec.limits))
    groups.push_back(std::move(extra));
  bool offered = false;
  for (const GeneratedGroup& gg : groups) offered = offered || gg.nodes == group;
  EXPECT_TRUE(offered) << "Pad + Add + Relu is not among " << groups.size() << " groups";
  // And the backend takes it (a refused candidate is never measured), as
  // passes only, so it is the kernel a plan can pick.
  const CompileResult c = createBackend("native")->compile(KernelRequest::of(g, group, "test"));
  ASSERT_TRUE(c) << c.refusal;
  expectPassesOnly(describeNativeKernel(*c.kernel), 2);
}

}  // namespace
}  // namespace collage
