// groupErrors, behind `--verify`'s "worst kernel": each group of a plan run
// alone on the reference's values of its inputs, so the kernel that loses
// precision is named, not the ones downstream that inherit its error.
#include "core/measure/plan_check.h"

#include <gtest/gtest.h>

#include "backends/backend_list.h"
#include "core/ops/reference_executor.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

// Computes the reference's result of its one node, then nudges every value
// by a relative 1e-4: a kernel with an approximate algorithm.
class NudgingBackend final : public Backend {
 public:
  std::string name() const override { return "nudging"; }
  std::string version() const override { return "1"; }
  CompileResult compile(const KernelRequest& request) override {
    struct Nudge : Kernel {
      KernelRequest request;
      void run(const std::vector<const DLTensor*>& inputs, const std::vector<DLTensor*>& outputs) override {
        const Graph& g = *request.graph;
        std::vector<Tensor> in;
        std::vector<const Tensor*> ptrs;
        for (size_t i = 0; i < inputs.size(); ++i)
          in.push_back(Tensor::view(g.value(request.inputs[i]).type, inputs[i]->data));
        for (const Tensor& t : in) ptrs.push_back(&t);
        const std::vector<Tensor> out = evaluateNode(g.node(request.nodes.first()), ptrs);
        const float* src = out[0].data<float>();
        float* dst = static_cast<float*>(outputs[0]->data);
        for (int64_t i = 0; i < out[0].numElements(); ++i) dst[i] = src[i] * (1 + 1e-4f);
      }
    };
    auto kernel = std::make_unique<Nudge>();
    kernel->request = request;
    return CompileResult::ok(std::move(kernel));
  }
};

TEST(GroupErrors, NameTheKernelThatDriftsNotTheOnesAfterIt) {
  GraphBuilder b;
  const ValueId x = b.input({4, 8});
  b.finish(b.op("Tanh", {b.op("Neg", {b.op("Relu", {x})})}));
  const Graph& g = b.graph();
  std::unique_ptr<Backend> native = createBackend("native");
  NudgingBackend nudging;
  Plan plan = singleNodePlan(g, "native");
  plan.groups[1].backend = "nudging";  // the Neg
  Session session(g, plan, [&](const std::string& n) -> Backend* {
    return n == "nudging" ? static_cast<Backend*>(&nudging) : native.get();
  });
  const std::vector<GroupError> errors = groupErrors(session, randomInputs(g, 3));
  ASSERT_EQ(errors.size(), 3u);
  for (const GroupError& e : errors) EXPECT_EQ(e.notRun, "") << e.what;
  EXPECT_EQ(errors[1].backend, "nudging");
  EXPECT_GT(errors[1].scaledError, 5e-5);
  EXPECT_LT(errors[1].scaledError, 2e-4);
  // The Tanh after it reads the reference's Neg, not the nudged one: exact
  // up to float32 rounding.
  EXPECT_LT(errors[0].scaledError, 1e-6);
  EXPECT_LT(errors[2].scaledError, 1e-6);
  EXPECT_EQ(errors[2].worstOutput, g.value(g.outputs()[0]).name);
}

}  // namespace
}  // namespace collage
