// checkPlan, behind `--verify` and the end-to-end check: a plan whose
// outputs differ from the reference only because a summation order moved a
// computed float across a quantizer's rounding tie passes, with the reason;
// a wrong kernel, or a difference no tie explains, fails and is named.
#include "core/measure/plan_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "backends/backend_list.h"
#include "core/ops/reference_executor.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

// Evaluates its group's nodes with the reference ops, in order, and then
// moves every float32 value a node makes by a relative `nudge` (another
// summation order, well within float32 tolerance) and every integer value
// of the nodes named in `offByOne` by +1 at element 0 (a wrong kernel).
// With `wrongAfterFirstRun`, a kernel's runs after its first are off by
// one step everywhere (and its floats by `driftAfterFirstRun`): right when
// rerun alone, wrong inside the plan. Planted faults on the float output of
// the node named `faultNode`: times `faultScale`, and element `flipIndex`'s
// sign flipped (>= 0). With `reversedSums`, a MatMul sums its terms
// one by one from the last (another summation order than the reference's).
class ReorderingBackend : public Backend {
 public:
  float nudge = 1e-6f;
  std::string offByOne;
  bool wrongAfterFirstRun = false;
  float driftAfterFirstRun = 0;
  std::string faultNode;
  float faultScale = 1;
  int64_t flipIndex = -1;
  bool reversedSums = false;

  int compiles = 0;

  std::string name() const override { return "reordering"; }
  std::string version() const override { return "1"; }
  CompileResult compile(const KernelRequest& request) override {
    ++compiles;
    struct K : Kernel {
      KernelRequest request;
      const ReorderingBackend* backend = nullptr;
      int runs = 0;
      void run(const std::vector<const DLTensor*>& inputs, const std::vector<DLTensor*>& outputs) override {
        const Graph& g = *request.graph;
        std::map<ValueId, Tensor> values;
        for (size_t i = 0; i < inputs.size(); ++i)
          values[request.inputs[i]] = Tensor::view(g.value(request.inputs[i]).type, inputs[i]->data).clone();
        for (NodeId n : request.members()) {
          const Node& node = g.node(n);
          std::vector<const Tensor*> in;
          for (ValueId v : node.inputs) {
            if (v == kNoValue) in.push_back(nullptr);
            else if (g.value(v).isConstant()) in.push_back(&*g.value(v).constant);
            else in.push_back(&values.at(v));
          }
          std::vector<Tensor> out = evaluateNode(node, in);
          Tensor& y = out[0];
          if (backend->reversedSums && node.op == "MatMul") {
            const Shape& a = in[0]->shape();
            const int64_t m = a[0], k = a[1], cols = in[1]->shape()[1];
            const float* x = in[0]->data<float>();
            const float* w = in[1]->data<float>();
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = 0; j < cols; ++j) {
                float sum = 0;
                for (int64_t t = k - 1; t >= 0; --t) sum += x[i * k + t] * w[t * cols + j];
                y.data<float>()[i * cols + j] = sum;
              }
          }
          if (y.elementType() == ElementType::Float32) {
            for (int64_t i = 0; i < y.numElements(); ++i) y.data<float>()[i] *= 1 + backend->nudge;
            if (backend->driftAfterFirstRun != 0 && runs > 0)
              for (int64_t i = 0; i < y.numElements(); ++i)
                y.data<float>()[i] *= 1 + backend->driftAfterFirstRun;
            if (node.name == backend->faultNode) {
              for (int64_t i = 0; i < y.numElements(); ++i)
                y.data<float>()[i] *= backend->faultScale;
              if (backend->flipIndex >= 0) y.data<float>()[backend->flipIndex] *= -1;
            }
          }
          if (y.elementType() == ElementType::UInt8) {
            if (node.name == backend->offByOne) y.data<uint8_t>()[0] += 1;
            if (backend->wrongAfterFirstRun && runs > 0)
              for (int64_t i = 0; i < y.numElements(); ++i) y.data<uint8_t>()[i] += 1;
          }
          values[node.outputs[0]] = std::move(y);
          for (size_t o = 1; o < out.size() && o < node.outputs.size(); ++o)
            if (node.outputs[o] != kNoValue) values[node.outputs[o]] = std::move(out[o]);
        }
        for (size_t i = 0; i < outputs.size(); ++i) {
          const Tensor& t = values.at(request.outputs[i]);
          std::memcpy(outputs[i]->data, t.raw(), static_cast<size_t>(t.type().byteSize()));
        }
        ++runs;
      }
    };
    auto kernel = std::make_unique<K>();
    kernel->request = request;
    kernel->backend = this;
    return CompileResult::ok(std::move(kernel));
  }
};

// The same, declaring reduced precision as onednn_bf16 does: whole plans
// within 0.25, each kernel alone within 3e-2 of its largest value.
class LowPrecisionBackend final : public ReorderingBackend {
 public:
  std::string name() const override { return "lowprec"; }
  std::optional<Tolerance> reducedPrecisionTolerance() const override {
    return Tolerance{0.25, 0.25};
  }
  double reducedPrecisionKernelError() const override { return 3e-2; }
};

// x -> Mul(2) -> QuantizeLinear(0.5, 128) -> DequantizeLinear -> Mul(3):
// the quantizer rounds a computed float, 4x.
struct QuantizedChain {
  GraphBuilder b;
  std::string mul, quantize;
  QuantizedChain() {
    const ValueId x = b.input({1, 8});
    const ValueId scale = b.scalar(0.5f);
    Tensor zp(ElementType::UInt8, {});
    zp.data<uint8_t>()[0] = 128;
    const ValueId zero = b.graph().addConstant("zp", zp);
    const ValueId m = b.op("Mul", {x, b.scalar(2.0f)});
    const ValueId q = b.op("QuantizeLinear", {m, scale, zero});
    const ValueId d = b.op("DequantizeLinear", {q, scale, zero});
    b.finish(b.op("Mul", {d, b.scalar(3.0f)}));
    mul = b.graph().node(b.graph().value(m).producer).name;
    quantize = b.graph().node(b.graph().value(q).producer).name;
  }
  const Graph& graph() { return b.graph(); }
  // (k + 1/2) / 4 puts 4x at a tie; the others lie far from one.
  static std::vector<Tensor> inputs(bool ties) {
    const std::vector<float> x = ties ? std::vector<float>{0.125f, 0.625f, 1.125f, -0.375f, 0.3f, -0.7f, 0.9f, 0.05f}
                                      : std::vector<float>{0.3f, -0.7f, 0.9f, 0.05f, 1.3f, -1.2f, 0.4f, 0.71f};
    return {Tensor::fromFloats({1, 8}, x)};
  }
};

Plan placing(const Graph& g, const std::vector<std::string>& reordered, bool oneGroup) {
  Plan plan = singleNodePlan(g, "native");
  for (PlanGroup& group : plan.groups)
    for (const std::string& name : group.nodes)
      if (std::find(reordered.begin(), reordered.end(), name) != reordered.end()) group.backend = "reordering";
  if (oneGroup) {  // the reordered nodes as one group
    Plan merged;
    PlanGroup together{{}, "reordering"};
    for (const PlanGroup& group : plan.groups)
      if (group.backend == "reordering") together.nodes.insert(together.nodes.end(), group.nodes.begin(), group.nodes.end());
      else merged.groups.push_back(group);
    merged.groups.insert(merged.groups.begin(), together);
    return merged;
  }
  return plan;
}

struct Fixture {
  std::unique_ptr<Backend> native = createBackend("native");
  ReorderingBackend reordering;
  ReorderingBackend drifting;  // another instance, with its own faults
  LowPrecisionBackend lowprec;
  BackendLookup lookup() {
    return [this](const std::string& n) -> Backend* {
      if (n == "reordering") return &reordering;
      if (n == "drifting") return &drifting;
      if (n == "lowprec") return &lowprec;
      return native.get();
    };
  }
};

// Each node its own group, on native unless `on` names another backend.
Plan placedOn(const Graph& g, const std::map<std::string, std::string>& on) {
  Plan plan = singleNodePlan(g, "native");
  for (PlanGroup& group : plan.groups)
    if (auto it = on.find(group.nodes.front()); it != on.end()) group.backend = it->second;
  return plan;
}

std::string nodeOf(const Graph& g, ValueId v) { return g.node(g.value(v).producer).name; }

bool anyLineHas(const std::vector<std::string>& lines, std::initializer_list<const char*> parts) {
  for (const std::string& line : lines) {
    bool all = true;
    for (const char* p : parts) all = all && line.find(p) != std::string::npos;
    if (all) return true;
  }
  return false;
}

TEST(PlanCheck, ATieRoundedTheOtherWayPassesAndSaysWhy) {
  QuantizedChain chain;
  Fixture f;
  Session session(chain.graph(), placing(chain.graph(), {chain.mul}, false), f.lookup());
  const PlanCheck check = checkPlan(session, QuantizedChain::inputs(true), {});
  // The outputs really differ: one step of 0.5, times 3, at the ties.
  ASSERT_EQ(check.comparisons.size(), 1u);
  EXPECT_FALSE(check.comparisons[0].ok);
  EXPECT_NEAR(check.comparisons[0].maxAbsError, 1.5, 1e-6);
  EXPECT_TRUE(check.ok) << (check.problems.empty() ? "" : check.problems[0]);
  EXPECT_NE(check.tiesNote.find("rounding tie"), std::string::npos) << check.tiesNote;
  ASSERT_EQ(check.ties.size(), 1u);
  EXPECT_EQ(check.ties[0].nearTies, 4);
  for (const GroupError& e : check.groups) EXPECT_EQ(e.wrong, "") << e.what;
}

TEST(PlanCheck, WithoutTiesTheSameKernelsMatchExactly) {
  QuantizedChain chain;
  Fixture f;
  Session session(chain.graph(), placing(chain.graph(), {chain.mul}, false), f.lookup());
  const PlanCheck check = checkPlan(session, QuantizedChain::inputs(false), {});
  EXPECT_TRUE(check.ok);
  EXPECT_TRUE(check.comparisons[0].ok);
  EXPECT_EQ(check.tiesNote, "");
}

TEST(PlanCheck, AWrongIntegerKernelFailsAndIsNamed) {
  QuantizedChain chain;
  Fixture f;
  f.reordering.offByOne = chain.quantize;  // element 0 of the quantizer, a tie, one step off
  f.reordering.nudge = 0;
  Session session(chain.graph(), placing(chain.graph(), {chain.quantize}, false), f.lookup());
  const PlanCheck check = checkPlan(session, QuantizedChain::inputs(true), {});
  EXPECT_FALSE(check.ok);
  // Its x is the reference's own (a group input): exact, tie or not.
  bool named = false;
  for (const std::string& line : check.problems)
    named = named || (line.find("on reordering") != std::string::npos && line.find("integers differ") != std::string::npos);
  EXPECT_TRUE(named) << testing::PrintToString(check.problems);
}

TEST(PlanCheck, AQuantizerInsideAKernelMayRoundATieTheOtherWay) {
  QuantizedChain chain;
  Fixture f;
  Session session(chain.graph(), placing(chain.graph(), {chain.mul, chain.quantize}, true), f.lookup());
  PlanCheckOptions options;
  options.eachKernel = true;
  const PlanCheck check = checkPlan(session, QuantizedChain::inputs(true), options);
  EXPECT_TRUE(check.ok) << (check.problems.empty() ? "" : check.problems[0]);
  int64_t steps = 0;
  for (const GroupError& e : check.groups) {
    EXPECT_EQ(e.wrong, "") << e.what;
    steps += e.tieSteps;
  }
  // 4x = 0.5, 2.5, 4.5 round half to even, nudged up they round up; -1.5
  // rounds to -2 either way.
  EXPECT_EQ(steps, 3);
}

TEST(PlanCheck, ADifferenceNoTieExplainsFailsEvenWhenEachKernelAloneIsRight) {
  QuantizedChain chain;
  Fixture f;
  f.reordering.nudge = 0;
  f.reordering.wrongAfterFirstRun = true;
  Session session(chain.graph(), placing(chain.graph(), {chain.quantize}, false), f.lookup());
  session.run(QuantizedChain::inputs(false));  // the plan's kernel goes wrong from now on
  const PlanCheck check = checkPlan(session, QuantizedChain::inputs(false), {});
  EXPECT_FALSE(check.ok);
  ASSERT_FALSE(check.problems.empty());
  EXPECT_NE(check.problems.back().find("between kernels"), std::string::npos) << check.problems.back();
  for (const GroupError& e : check.groups) EXPECT_EQ(e.wrong, "") << e.what;
}

TEST(PlanCheck, AMemoKeepsKernelVerdictsAcrossPlans) {
  QuantizedChain chain;
  Fixture f;
  PlanCheckMemo memo;
  PlanCheckOptions options;
  options.memo = &memo;
  const Plan plan = placing(chain.graph(), {chain.mul}, false);
  int compilesBefore = f.reordering.compiles;
  {
    Session session(chain.graph(), plan, f.lookup());
    EXPECT_TRUE(checkPlan(session, QuantizedChain::inputs(true), options).ok);
  }
  EXPECT_EQ(f.reordering.compiles - compilesBefore, 2);  // the session's, and the rerun alone
  EXPECT_EQ(memo.kernels.size(), plan.groups.size());
  compilesBefore = f.reordering.compiles;
  Session again(chain.graph(), plan, f.lookup());
  const PlanCheck check = checkPlan(again, QuantizedChain::inputs(true), options);
  EXPECT_TRUE(check.ok);
  EXPECT_NE(check.tiesNote, "");
  EXPECT_EQ(f.reordering.compiles - compilesBefore, 1);  // the session's only
  // Another bound for the outputs: each group alone is still held to its
  // own backend's bound, so its verdict stands (no rerun).
  options.outputBound = 0.25;
  compilesBefore = f.reordering.compiles;
  checkPlan(again, QuantizedChain::inputs(true), options);
  EXPECT_EQ(f.reordering.compiles - compilesBefore, 0);
}

// --- Each group at its own backend's precision ---------------------------

// x -> Mul(c) -> Add(c): the Mul on a reduced-precision backend, the Add on
// a float32 one.
struct MixedPrecision {
  GraphBuilder b;
  std::string mul, add;
  MixedPrecision() {
    const ValueId x = b.input({4, 64});
    const ValueId m = b.op("Mul", {x, b.constant({4, 64})});
    const ValueId a = b.op("Add", {m, b.constant({4, 64})});
    b.finish(a);
    mul = nodeOf(b.graph(), m);
    add = nodeOf(b.graph(), a);
  }
};

TEST(PlanCheck, AFloat32GroupTenPercentOffFailsInsideAReducedPrecisionPlan) {
  MixedPrecision m;
  Fixture f;
  f.lowprec.nudge = 0;
  f.reordering.nudge = 0.1f;  // the float32 group: 10 % off
  Session session(m.b.graph(), placedOn(m.b.graph(), {{m.mul, "lowprec"}, {m.add, "reordering"}}),
                  f.lookup());
  const PlanCheck check = checkPlan(session, randomInputs(m.b.graph(), 1), {});
  // The outputs are within the plan's loosest declared bound (0.25)...
  EXPECT_EQ(check.outputBound, 0.25);
  ASSERT_EQ(check.comparisons.size(), 1u);
  EXPECT_TRUE(check.comparisons[0].ok) << check.comparisons[0].message;
  // ...yet the float32 group is held to float32's, and fails.
  EXPECT_FALSE(check.ok);
  EXPECT_TRUE(anyLineHas(check.problems, {"group 2 on reordering", "beyond the 0.0001"}))
      << testing::PrintToString(check.problems);
}

TEST(PlanCheck, AReducedPrecisionGroupIsHeldToItsOwnKernelBound) {
  MixedPrecision m;
  Fixture f;
  f.reordering.nudge = 0;
  f.lowprec.nudge = 0.02f;  // within its declared 3e-2 alone
  const Plan plan = placedOn(m.b.graph(), {{m.mul, "lowprec"}, {m.add, "reordering"}});
  {
    Session session(m.b.graph(), plan, f.lookup());
    const PlanCheck check = checkPlan(session, randomInputs(m.b.graph(), 1), {});
    EXPECT_TRUE(check.ok) << testing::PrintToString(check.problems);
  }
  f.lowprec.nudge = 0.05f;  // beyond it, though well within the plan's 0.25
  Session session(m.b.graph(), plan, f.lookup());
  const PlanCheck check = checkPlan(session, randomInputs(m.b.graph(), 1), {});
  EXPECT_TRUE(check.comparisons[0].ok);
  EXPECT_FALSE(check.ok);
  EXPECT_TRUE(anyLineHas(check.problems, {"group 1 on lowprec", "beyond the 0.03"}))
      << testing::PrintToString(check.problems);
}

// --- The tolerance rule: planted faults fail, another summation order not --

// x[4 x 16384] x W[16384 x 32]: long sums, where float32's summation order
// shows.
struct LongSum {
  GraphBuilder b;
  std::string matmul;
  LongSum() {
    const ValueId x = b.input({4, 16384});
    const ValueId y = b.op("MatMul", {x, b.constant({16384, 32})});
    b.finish(y);
    matmul = nodeOf(b.graph(), y);
  }
};

TEST(PlanCheck, AnotherSummationOrderPassesWhereAnElementwiseAbsoluteToleranceFails) {
  LongSum l;
  Fixture f;
  f.reordering.nudge = 0;
  f.reordering.reversedSums = true;
  Session session(l.b.graph(), placedOn(l.b.graph(), {{l.matmul, "reordering"}}), f.lookup());
  const std::vector<Tensor> inputs = randomInputs(l.b.graph(), 3);
  PlanCheckOptions options;
  options.eachKernel = true;
  const PlanCheck check = checkPlan(session, inputs, options);
  EXPECT_TRUE(check.ok) << testing::PrintToString(check.problems);
  // It really is another order: the rule this replaces (elementwise,
  // |d| <= 1e-5 + 1e-4 |expected|) rejects it.
  const std::vector<Tensor> expected = ReferenceExecutor(l.b.graph()).run(inputs);
  EXPECT_GT(check.comparisons[0].maxAbsError, 0);
  EXPECT_FALSE(compareTensors(check.outputs[0], expected[0], Tolerance{1e-4, 1e-5}).ok);
  EXPECT_LT(check.comparisons[0].scaledError, 1e-5);
}

TEST(PlanCheck, PlantedFaultsFailAndNameTheGroup) {
  LongSum l;
  const std::vector<Tensor> inputs = randomInputs(l.b.graph(), 3);
  const std::vector<Tensor> expected = ReferenceExecutor(l.b.graph()).run(inputs);
  // The element of median magnitude: a flip there is a typical element wrong.
  std::vector<std::pair<float, int64_t>> bySize;
  for (int64_t i = 0; i < expected[0].numElements(); ++i)
    bySize.emplace_back(std::fabs(expected[0].data<float>()[i]), i);
  std::sort(bySize.begin(), bySize.end());
  const int64_t median = bySize[bySize.size() / 2].second;
  struct Fault {
    const char* what;
    float scale;
    int64_t flip;
  };
  for (const Fault& fault : {Fault{"1 %", 1.01f, -1}, Fault{"10 %", 1.1f, -1},
                             Fault{"one element flipped", 1, median}}) {
    SCOPED_TRACE(fault.what);
    Fixture f;
    f.reordering.nudge = 0;
    f.reordering.reversedSums = true;  // and another summation order besides
    f.reordering.faultNode = l.matmul;
    f.reordering.faultScale = fault.scale;
    f.reordering.flipIndex = fault.flip;
    Session session(l.b.graph(), placedOn(l.b.graph(), {{l.matmul, "reordering"}}), f.lookup());
    const PlanCheck check = checkPlan(session, inputs, {});
    EXPECT_FALSE(check.comparisons[0].ok);
    EXPECT_FALSE(check.ok);
    EXPECT_TRUE(anyLineHas(check.problems, {"group 1 on reordering", "rerun alone"}))
        << testing::PrintToString(check.problems);
  }
}

// --- Ties must be shown by replay -----------------------------------------

TEST(PlanCheck, ATieDoesNotExcuseADifferenceElsewhere) {
  // Two outputs: the quantized chain (its ties flip), and a float branch
  // whose kernel goes wrong inside the plan but not when rerun alone.
  GraphBuilder b;
  const ValueId x = b.input({1, 8});
  const ValueId scale = b.scalar(0.5f);
  Tensor zp(ElementType::UInt8, {});
  zp.data<uint8_t>()[0] = 128;
  const ValueId zero = b.graph().addConstant("zp", zp);
  const ValueId m = b.op("Mul", {x, b.scalar(2.0f)});
  const ValueId q = b.op("QuantizeLinear", {m, scale, zero});
  const ValueId d = b.op("DequantizeLinear", {q, scale, zero});
  const ValueId y = b.op("Mul", {d, b.scalar(3.0f)});
  const ValueId z = b.op("Add", {x, b.scalar(1.0f)});
  b.graph().markOutput(y);
  b.finish(z);
  Fixture f;
  f.drifting.nudge = 0;
  f.drifting.driftAfterFirstRun = 0.5f;
  Session session(b.graph(),
                  placedOn(b.graph(), {{nodeOf(b.graph(), m), "reordering"},
                                       {nodeOf(b.graph(), z), "drifting"}}),
                  f.lookup());
  session.run(QuantizedChain::inputs(true));  // the Add's kernel goes wrong from now on
  const PlanCheck check = checkPlan(session, QuantizedChain::inputs(true), {});
  for (const GroupError& e : check.groups) EXPECT_EQ(e.wrong, "") << e.what;
  EXPECT_FALSE(check.ok) << check.tiesNote;
  EXPECT_TRUE(anyLineHas(check.problems,
                         {"ties do not explain", "on drifting", nodeOf(b.graph(), z).c_str()}))
      << testing::PrintToString(check.problems);
}

TEST(PlanCheck, TheReplayPutsTheReferenceBackAtTheTies) {
  QuantizedChain chain;
  Fixture f;
  Session session(chain.graph(), placing(chain.graph(), {chain.mul}, false), f.lookup());
  const PlanCheck check = checkPlan(session, QuantizedChain::inputs(true), {});
  EXPECT_TRUE(check.ok) << testing::PrintToString(check.problems);
  // 4x = 0.5, 2.5, 4.5 flip (nudged up, they round up); -1.5 does not.
  EXPECT_EQ(check.substituted, 3);
  ASSERT_EQ(check.replayed.size(), 1u);
  EXPECT_TRUE(check.replayed[0].ok);
  EXPECT_EQ(check.replayed[0].maxAbsError, 0);
}

// A DynamicQuantizeLinear inside a kernel takes its scale from its input's
// range. Here another summation order moves only the input's largest value
// (1e-6 relative, far from any tie), so the kernel divides by another scale
// and rounds the ties 0.75 / 0.5 and 1.75 / 0.5 down where the reference
// rounds them to even. Nothing is wrong: with the reference's extremes put
// back as well as its values at ties, the replay matches exactly.
TEST(PlanCheck, ADynamicQuantizersRangeIsPutBackWithItsTies) {
  GraphBuilder b;
  const ValueId top = b.input({1, 1});
  const ValueId rest = b.input({1, 4});
  const ValueId largest = b.op("Mul", {top, b.scalar(2.0f)});
  const ValueId others = b.op("Mul", {rest, b.scalar(2.0f)});
  const ValueId joined = b.op("Concat", {largest, others}, attrs({{"axis", int64_t{1}}}));
  const ValueId q = b.op("DynamicQuantizeLinear", {joined}, {}, 3);
  const std::vector<ValueId> qOut = b.graph().nodes().back().outputs;  // y, scale, zero point
  const ValueId d = b.op("DequantizeLinear", {qOut[0], qOut[1], qOut[2]});
  b.finish(b.op("Mul", {d, b.scalar(3.0f)}));
  const Graph& g = b.graph();
  Plan plan;
  plan.groups.push_back({{nodeOf(g, largest)}, "reordering"});  // the extreme, 1e-6 larger
  plan.groups.push_back({{nodeOf(g, others)}, "native"});
  plan.groups.push_back({{nodeOf(g, joined)}, "native"});
  plan.groups.push_back({{nodeOf(g, q), nodeOf(g, d), g.node(static_cast<NodeId>(g.numNodes() - 1)).name},
                         "drifting"});  // the quantizer inside a kernel, exact
  Fixture f;
  f.drifting.nudge = 0;
  Session session(g, plan, f.lookup());
  // Range [0, 127.5]: scale 0.5, zero point 0; 0.75 and 1.75 are ties
  // (to 2 and 4, even), 0.25 one too (to 0), 10.1 none.
  const std::vector<Tensor> inputs = {Tensor::fromFloats({1, 1}, {63.75f}),
                                      Tensor::fromFloats({1, 4}, {0.375f, 0.875f, 0.125f, 5.05f})};
  const PlanCheck check = checkPlan(session, inputs, {});
  ASSERT_EQ(check.comparisons.size(), 1u);
  EXPECT_FALSE(check.comparisons[0].ok);  // the outputs really differ: one step of 0.5, times 3
  EXPECT_TRUE(check.ok) << testing::PrintToString(check.problems);
  EXPECT_GE(check.substituted, 1);
  ASSERT_EQ(check.replayed.size(), 1u);
  EXPECT_EQ(check.replayed[0].maxAbsError, 0);
}

// --- The solo rerun in the layouts the plan runs a kernel in ----------------

// Native's kernels, except that one whose output the Session switches to
// channels last writes element 1 of it wrong: a fault only in that layout.
class ChannelsLastFaultBackend final : public Backend {
 public:
  std::unique_ptr<Backend> inner = createBackend("native");
  std::string name() const override { return "faulty"; }
  std::string version() const override { return "1"; }
  CompileResult compile(const KernelRequest& request) override {
    CompileResult compiled = inner->compile(request);
    if (!compiled) return compiled;
    struct K : Kernel {
      std::unique_ptr<Kernel> inner;
      bool switched = false;
      void run(const std::vector<const DLTensor*>& inputs,
               const std::vector<DLTensor*>& outputs) override {
        inner->run(inputs, outputs);
        if (switched) static_cast<float*>(outputs[0]->data)[1] *= 1.5f;
      }
      std::optional<NativeLayout> nativeOutputLayout(size_t o) const override {
        return inner->nativeOutputLayout(o);
      }
      std::optional<NativeLayout> nativeInputLayout(size_t i) const override {
        return inner->nativeInputLayout(i);
      }
      void useNativeOutputLayout(size_t o) override {
        inner->useNativeOutputLayout(o);
        switched = true;
      }
      void useNativeInputLayout(size_t i) override { inner->useNativeInputLayout(i); }
      bool layoutAgnostic() const override { return inner->layoutAgnostic(); }
    };
    auto kernel = std::make_unique<K>();
    kernel->inner = std::move(compiled.kernel);
    return CompileResult::ok(std::move(kernel));
  }
};

TEST(PlanCheck, AKernelWrongOnlyInChannelsLastIsNamedByItsRerunAlone) {
  GraphBuilder b;
  const ValueId x = b.input({1, 8, 5, 5});
  const ValueId t = b.op("Add", {x, b.scalar(1.0f)});
  const ValueId y = b.op("Mul", {t, b.scalar(2.0f)});
  b.finish(y);
  const std::unique_ptr<Backend> native = createBackend("native");
  ChannelsLastFaultBackend faulty;
  Session session(
      b.graph(), placedOn(b.graph(), {{nodeOf(b.graph(), t), "faulty"}}),
      [&](const std::string& n) -> Backend* { return n == "faulty" ? &faulty : native.get(); });
  // The two native passes hand `t` over in channels last.
  ASSERT_EQ(session.nativeLayoutValues(), 1);
  ASSERT_TRUE(session.valueLayout(t).has_value());
  const PlanCheck check = checkPlan(session, randomInputs(b.graph(), 2), {});
  EXPECT_FALSE(check.ok);
  EXPECT_TRUE(anyLineHas(check.problems, {"group 1 on faulty", "rerun alone", "channels last"}))
      << testing::PrintToString(check.problems);
}

}  // namespace
}  // namespace collage
