// checkPlan, behind `--verify` and the end-to-end check: a plan whose
// outputs differ from the reference only because a summation order moved a
// computed float across a quantizer's rounding tie passes, with the reason;
// a wrong kernel, or a difference no tie explains, fails and is named.
#include "core/measure/plan_check.h"

#include <gtest/gtest.h>

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
// one step everywhere: right when rerun alone, wrong inside the plan.
class ReorderingBackend final : public Backend {
 public:
  float nudge = 1e-6f;
  std::string offByOne;
  bool wrongAfterFirstRun = false;

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
          if (y.elementType() == ElementType::Float32)
            for (int64_t i = 0; i < y.numElements(); ++i) y.data<float>()[i] *= 1 + backend->nudge;
          if (y.elementType() == ElementType::UInt8) {
            if (node.name == backend->offByOne) y.data<uint8_t>()[0] += 1;
            if (backend->wrongAfterFirstRun && runs > 0)
              for (int64_t i = 0; i < y.numElements(); ++i) y.data<uint8_t>()[i] += 1;
          }
          values[node.outputs[0]] = std::move(y);
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
  BackendLookup lookup() {
    return [this](const std::string& n) -> Backend* {
      return n == "reordering" ? static_cast<Backend*>(&reordering) : native.get();
    };
  }
};

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
  // Another tolerance is another verdict: rerun.
  options.tolerance = Tolerance{0.25, 0.25};
  compilesBefore = f.reordering.compiles;
  checkPlan(again, QuantizedChain::inputs(true), options);
  EXPECT_EQ(f.reordering.compiles - compilesBefore, 1);
}

}  // namespace
}  // namespace collage
