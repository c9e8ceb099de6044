// onednn_bf16, the oneDNN lowering with convolutions and matrix products in
// bf16: its kernels against the float32 reference within the tolerance it
// declares (and not within float32's: they really round), reduced precision
// only where the user allows it, `--verify`'s tolerance per plan, and the
// lines `explain` prints.
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/backend_list.h"
#include "backends/onednn/onednn_backend.h"
#include "backends/onednn/onednn_precision.h"
#include "backends/reduced_precision.h"
#include "core/ir/error.h"
#include "core/measure/kernel_check.h"
#include "core/measure/plan_check.h"
#include "core/measure/measurer.h"
#include "core/ops/reference_executor.h"
#include "core/runtime/session.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

const Tolerance kBf16 = onednn::precisionTolerance(onednn::Precision::Bf16);
// What a float32 kernel is held to: a bf16 kernel of any size misses it.
const Tolerance kFloat32Kernel = onednn::precisionTolerance(onednn::Precision::F32);

// Every node of `g` as one group on `backend`.
Plan planOn(const Graph& g, const std::string& backend) {
  Plan plan;
  PlanGroup group;
  group.backend = backend;
  for (NodeId n = 0; n < static_cast<NodeId>(g.numNodes()); ++n) group.nodes.push_back(g.node(n).name);
  plan.groups.push_back(group);
  return plan;
}

class OneDnnBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = backendUnavailableReason("onednn_bf16"); !why.empty())
      GTEST_SKIP() << why;
    backend_ = createBackend("onednn_bf16");
    ASSERT_TRUE(backend_);
  }

  // The group on onednn_bf16 matches the reference within bf16's declared
  // tolerance, and (`rounds`) not within float32's: it computes in bf16.
  void expectBf16Matches(GraphBuilder& b, ValueId out, const std::string& what, bool rounds = true) {
    SCOPED_TRACE(what);
    const NodeSet nodes = b.finish(out);
    const KernelCheckResult r = checkKernelAgainstReference(*backend_, b.graph(), nodes, 3, kBf16);
    ASSERT_TRUE(r.compiled) << r.refusal;
    std::string chosen;
    if (CompileResult c = backend_->compile(KernelRequest::of(b.graph(), nodes)))
      chosen = describeOneDnnKernel(*c.kernel);
    EXPECT_TRUE(r.ok) << r.message << " [" << chosen << "]";
    // The kernel alone, against its output's scale: within the bound that
    // tells rounding from a wrong kernel.
    Plan plan;
    PlanGroup group;
    group.backend = "onednn_bf16";
    nodes.forEach([&](NodeId n) { group.nodes.push_back(b.graph().node(n).name); });
    plan.groups.push_back(group);
    const std::unique_ptr<Backend> native = createBackend("native");
    Session session(b.graph(), plan, [&](const std::string& name) {
      return name == "onednn_bf16" ? backend_.get() : native.get();
    });
    for (const GroupError& e : groupErrors(session, randomInputs(b.graph(), 4)))
      if (e.backend == "onednn_bf16")
        EXPECT_LE(e.scaledError, onednn::precisionKernelError(onednn::Precision::Bf16)) << e.what;
    if (!rounds) return;
    const KernelCheckResult strict =
        checkKernelAgainstReference(*backend_, b.graph(), nodes, 3, kFloat32Kernel);
    EXPECT_FALSE(strict.ok) << "no bf16 rounding visible: [" << chosen << "]";
  }

  std::unique_ptr<Backend> backend_;
};

TEST_F(OneDnnBf16, IsTheSameLoweringUnderItsOwnNameAndVersion) {
  const std::unique_ptr<Backend> f32 = createBackend("onednn");
  EXPECT_EQ(backend_->name(), "onednn_bf16");
  EXPECT_EQ(backend_->codeRule()->name(), "onednn_bf16");
  // Measurements are keyed by version: bf16 costs never pass for float32 ones.
  EXPECT_NE(backend_->version(), f32->version());
  EXPECT_NE(backend_->version().find("bf16"), std::string::npos) << backend_->version();
}

TEST_F(OneDnnBf16, ConvolutionsMatchTheReferenceWithinTheDeclaredTolerance) {
  {
    GraphBuilder b;  // 3x3, bias, Relu: K = 9 x 32 = 288
    const ValueId y = b.op("Conv", {b.input({1, 32, 14, 14}), b.constant({64, 32, 3, 3}), b.constant({64})},
                           attrs({{"pads", Ints{1, 1, 1, 1}}}));
    expectBf16Matches(b, b.op("Relu", {y}), "Conv 3x3 + bias + Relu");
  }
  {
    GraphBuilder b;  // pointwise, residual Add (a sum post-op) and Relu
    const ValueId x = b.input({1, 64, 8, 8});
    const ValueId y = b.op("Conv", {x, b.constant({64, 64, 1, 1}), b.constant({64})});
    expectBf16Matches(b, b.op("Relu", {b.op("Add", {y, b.input({1, 64, 8, 8})})}),
                      "Conv 1x1 + residual + Relu");
  }
  {
    GraphBuilder b;  // strided, folded BatchNormalization as Mul + Add
    const ValueId y = b.op("Conv", {b.input({2, 16, 15, 15}), b.constant({24, 16, 3, 3})},
                           attrs({{"strides", Ints{2, 2}}}));
    const ValueId bn = b.op("Add", {b.op("Mul", {y, b.constant({1, 24, 1, 1})}), b.constant({1, 24, 1, 1})});
    expectBf16Matches(b, bn, "strided Conv + scale and shift");
  }
  {
    GraphBuilder b;  // depthwise: K = 9 only
    const ValueId y = b.op("Conv", {b.input({1, 32, 10, 10}), b.constant({32, 1, 3, 3})},
                           attrs({{"group", int64_t{32}}, {"pads", Ints{1, 1, 1, 1}}}));
    expectBf16Matches(b, y, "depthwise Conv");
  }
}

TEST_F(OneDnnBf16, MatrixProductsMatchTheReferenceWithinTheDeclaredTolerance) {
  {
    GraphBuilder b;  // a transformer's projection: K = 256, bias and GELU
    const ValueId y = b.op("MatMul", {b.input({1, 32, 256}), b.constant({256, 128})});
    expectBf16Matches(b, b.op("Gelu", {b.op("Add", {y, b.constant({128})})}), "MatMul + bias + Gelu");
  }
  {
    GraphBuilder b;  // attention scores: both operands run-time, scaled
    const ValueId y = b.op("MatMul", {b.input({2, 4, 16, 64}), b.input({2, 4, 64, 16})});
    expectBf16Matches(b, b.op("Div", {y, b.scalar(8.0f)}), "batched run-time MatMul / 8");
  }
  for (int transA : {0, 1})
    for (int transB : {0, 1}) {
      GraphBuilder b;  // Gemm's transposed views are converted to plain bf16 copies
      const int64_t M = 12, K = 96, N = 40;
      const ValueId A = b.input(transA ? Shape{K, M} : Shape{M, K});
      const ValueId B = b.constant(transB ? Shape{N, K} : Shape{K, N});
      const ValueId y = b.op("Gemm", {A, B, b.constant({N})},
                             attrs({{"transA", int64_t{transA}}, {"transB", int64_t{transB}}}));
      expectBf16Matches(b, y, "Gemm transA=" + std::to_string(transA) + " transB=" + std::to_string(transB));
    }
  {
    GraphBuilder b;  // a wide constant B: one bf16 product per column panel
    const ValueId y = b.op("MatMul", {b.input({1, 8, 64}), b.constant({64, 1600})});
    expectBf16Matches(b, b.op("Add", {y, b.constant({1600})}), "wide MatMul in panels");
  }
}

// A square input read as it is by one product and transposed by another in
// one kernel: the bf16 copies of the two views are two copies.
TEST_F(OneDnnBf16, TransposedAndPlainReadsOfOneInputAreNotShared) {
  GraphBuilder b;
  const ValueId x = b.input({48, 48});
  const ValueId p = b.op("Gemm", {x, b.constant({48, 48})});
  const ValueId q = b.op("Gemm", {x, b.constant({48, 48})}, attrs({{"transA", int64_t{1}}}));
  const ValueId out = b.op("Add", {p, q});
  const NodeSet nodes = b.finish(out);
  const KernelCheckResult r = checkKernelAgainstReference(*backend_, b.graph(), nodes, 5, kBf16);
  if (!r.compiled) GTEST_SKIP() << "not one kernel: " << r.refusal;
  EXPECT_TRUE(r.ok) << r.message;
}

// Elementwise chains and pools stay float32 on onednn_bf16 (memory bound:
// bf16 would only add conversions), so they match as tightly as onednn's.
TEST_F(OneDnnBf16, PoolsAndElementwiseChainsStayFloat32) {
  GraphBuilder b;
  const ValueId y = b.op("MaxPool", {b.op("Relu", {b.input({1, 16, 8, 8})})},
                         attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}));
  const NodeSet nodes = b.finish(y);
  const KernelCheckResult r = checkKernelAgainstReference(*backend_, b.graph(), nodes, 3, kFloat32Kernel);
  EXPECT_TRUE(r.compiled && r.ok) << r.refusal << r.message;
}

// Between a float32 oneDNN kernel and a bf16 one the tensor stays in
// oneDNN's layout: the bf16 kernel converts from that layout.
TEST_F(OneDnnBf16, TakesOverTheFloat32LayoutAtItsInput) {
  GraphBuilder b;
  const ValueId c1 = b.op("Relu", {b.op("Conv", {b.input({1, 32, 14, 14}), b.constant({32, 32, 3, 3})},
                                        attrs({{"pads", Ints{1, 1, 1, 1}}}))});
  const ValueId c2 = b.op("Conv", {c1, b.constant({32, 32, 3, 3})}, attrs({{"pads", Ints{1, 1, 1, 1}}}));
  b.finish(c2);
  const Graph& g = b.graph();
  const std::unique_ptr<Backend> f32 = createBackend("onednn");
  Plan plan;
  plan.groups = {PlanGroup{{g.node(0).name, g.node(1).name}, "onednn"},
                 PlanGroup{{g.node(2).name}, "onednn_bf16"}};
  Session session(g, plan, [&](const std::string& n) {
    return n == "onednn" ? f32.get() : backend_.get();
  });
  EXPECT_EQ(session.nativeLayoutValues(), 1);
  const SessionVerification v = verifySession(session, randomInputs(g, 1), planTolerance(plan).tolerance);
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems[0]);
}

// ---- reduced precision is the user's choice

TEST(ReducedPrecision, Bf16IsDeclaredAndLeftOutOfTheDefaultSet) {
  const std::optional<ReducedPrecision> r = reducedPrecisionOf("onednn_bf16");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->precision, "bf16");
  EXPECT_EQ(r->tolerance.rtol, kBf16.rtol);
  EXPECT_EQ(r->tolerance.atol, kBf16.atol);
  EXPECT_GT(r->tolerance.rtol, kPlanTolerance.rtol);
  EXPECT_FALSE(reducedPrecisionOf("onednn").has_value());
  const std::vector<std::string> defaults = defaultBackendNames();
  EXPECT_EQ(std::count(defaults.begin(), defaults.end(), "onednn_bf16"), 0);
  EXPECT_EQ(std::count(defaults.begin(), defaults.end(), "onednn"), 1);
  const std::vector<std::string> known = knownPrecisions();
  EXPECT_NE(std::find(known.begin(), known.end(), "bf16"), known.end());
}

TEST(ReducedPrecision, AllowingAPrecisionAddsItsBackends) {
  if (!backendUnavailableReason("onednn_bf16").empty()) GTEST_SKIP() << "no AVX-512 BF16";
  // Nothing allowed: the set is what was asked for (the default when empty).
  EXPECT_TRUE(withAllowedPrecisions({}, {}).empty());
  EXPECT_EQ(withAllowedPrecisions({"native"}, {}), std::vector<std::string>{"native"});
  // --allow-precision bf16 alone: the default set plus onednn_bf16, last.
  std::vector<std::string> expected = defaultBackendNames();
  expected.push_back("onednn_bf16");
  EXPECT_EQ(withAllowedPrecisions({}, {"bf16"}), expected);
  // With --backends: those, plus onednn_bf16 once.
  EXPECT_EQ(withAllowedPrecisions({"onednn", "native"}, {"bf16"}),
            (std::vector<std::string>{"onednn", "native", "onednn_bf16"}));
  EXPECT_EQ(withAllowedPrecisions({"onednn_bf16", "onednn"}, {"bf16"}),
            (std::vector<std::string>{"onednn_bf16", "onednn"}));
  // Named, as cublas_tf32 is, it loads without allowing anything.
  const BackendSet set = loadBackendSet({"onednn", "onednn_bf16"});
  EXPECT_NE(set.find("onednn_bf16"), nullptr);
}

TEST(ReducedPrecision, AnUnknownPrecisionSaysWhichAreKnown) {
  try {
    withAllowedPrecisions({}, {"fp8"});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("fp8"), std::string::npos) << what;
    EXPECT_NE(what.find("bf16"), std::string::npos) << what;
  }
}

// ---- verify: the plan's declared tolerance, only where the plan uses it

TEST(ReducedPrecision, PlanToleranceIsFloat32sUnlessTheDeclaredOneApplies) {
  GraphBuilder b;
  const ValueId y = b.op("Relu", {b.op("MatMul", {b.input({4, 8}), b.constant({8, 8})})});
  const ValueId z = b.op("Sigmoid", {y});
  b.finish(z);
  const Graph& g = b.graph();

  const PlanTolerance f32 = planTolerance(planOn(g, "onednn"));
  EXPECT_EQ(f32.tolerance.rtol, kPlanTolerance.rtol);
  EXPECT_EQ(f32.tolerance.atol, kPlanTolerance.atol);
  EXPECT_TRUE(f32.reducedBackends.empty());
  EXPECT_NE(f32.why.find("float32"), std::string::npos) << f32.why;

  Plan mixed;
  mixed.groups = {PlanGroup{{g.node(0).name, g.node(1).name}, "onednn_bf16"},
                  PlanGroup{{g.node(2).name}, "native"}};
  const PlanTolerance bf16 = planTolerance(mixed);
  EXPECT_EQ(bf16.tolerance.rtol, kBf16.rtol);
  EXPECT_EQ(bf16.tolerance.atol, kBf16.atol);
  EXPECT_EQ(bf16.reducedBackends, std::vector<std::string>{"onednn_bf16"});
  // Which tolerance, and why: the backend, its precision and arithmetic.
  EXPECT_NE(bf16.why.find("1 group(s) on onednn_bf16 in bf16"), std::string::npos) << bf16.why;
  EXPECT_NE(bf16.why.find("loosest declared"), std::string::npos) << bf16.why;
}

// The same bf16 results pass a plan that declares bf16 and fail one whose
// backends all claim float32: verify never loosens float32's tolerance.
TEST_F(OneDnnBf16, VerifyUsesTheDeclaredToleranceOnlyForPlansThatUseIt) {
  GraphBuilder b;
  const ValueId y = b.op("MatMul", {b.input({64, 256}), b.constant({256, 64})});
  b.finish(b.op("Add", {y, b.constant({64})}));
  const Graph& g = b.graph();
  const std::vector<Tensor> inputs = randomInputs(g, 2);

  const Plan bf16Plan = planOn(g, "onednn_bf16");
  Session bf16(g, bf16Plan, [&](const std::string&) { return backend_.get(); });
  const SessionVerification ok = verifySession(bf16, inputs, planTolerance(bf16Plan).tolerance);
  EXPECT_TRUE(ok.ok()) << (ok.problems.empty() ? "" : ok.problems[0]);

  // A plan of float32 backends whose results are off by as much (here: the
  // bf16 kernel behind the name "onednn") fails at float32's tolerance.
  const Plan f32Plan = planOn(g, "onednn");
  Session off(g, f32Plan, [&](const std::string&) { return backend_.get(); });
  const SessionVerification bad = verifySession(off, inputs, planTolerance(f32Plan).tolerance);
  EXPECT_FALSE(bad.ok());
}

// The backend object declares what backend_list.cc declares for its name,
// so the optimizer's end-to-end checks (which ask the objects) and
// `run --verify` (which asks by name) hold a plan to the same tolerance.
TEST_F(OneDnnBf16, TheBackendDeclaresTheListedToleranceAndCheckedPlansUseIt) {
  const std::optional<Tolerance> declared = backend_->reducedPrecisionTolerance();
  ASSERT_TRUE(declared.has_value());
  EXPECT_EQ(declared->rtol, reducedPrecisionOf("onednn_bf16")->tolerance.rtol);
  EXPECT_EQ(declared->atol, reducedPrecisionOf("onednn_bf16")->tolerance.atol);
  // And its kernel bound, which the plan check holds each of its groups to.
  EXPECT_EQ(backend_->reducedPrecisionKernelError(),
            reducedPrecisionOf("onednn_bf16")->kernelError);
  EXPECT_EQ(groupBound(backend_.get()), reducedPrecisionOf("onednn_bf16")->kernelError);
  const std::unique_ptr<Backend> f32 = createBackend("onednn");
  EXPECT_FALSE(f32->reducedPrecisionTolerance().has_value());
  EXPECT_EQ(groupBound(f32.get()), kFloat32Bound);

  GraphBuilder b;
  b.finish(b.op("Relu", {b.op("MatMul", {b.input({4, 8}), b.constant({8, 8})})}));
  const BackendLookup lookup = [&](const std::string& n) {
    return n == "onednn_bf16" ? backend_.get() : f32.get();
  };
  const Tolerance onF32 = declaredTolerance(planOn(b.graph(), "onednn"), lookup);
  EXPECT_EQ(onF32.rtol, kPlanTolerance.rtol);
  EXPECT_EQ(onF32.atol, kPlanTolerance.atol);
  const Tolerance onBf16 = declaredTolerance(planOn(b.graph(), "onednn_bf16"), lookup);
  EXPECT_EQ(onBf16.rtol, kBf16.rtol);
  EXPECT_EQ(onBf16.atol, kBf16.atol);
}

// A bf16 kernel that errs alone beyond its bound is reported, whatever the
// plan's loose tolerance lets through; float32 kernels are not held to it.
TEST(ReducedPrecision, AKernelBeyondItsDeclaredBoundIsNamed) {
  GroupError wrong;
  wrong.group = 2;
  wrong.backend = "onednn_bf16";
  wrong.what = "{conv Conv}";
  wrong.worstOutput = "y";
  wrong.maxAbsError = 0.8;
  wrong.scaledError = 0.4;
  GroupError rounded = wrong;
  rounded.scaledError = 0.01;
  GroupError f32 = wrong;
  f32.backend = "onednn";
  const std::vector<std::string> lines = kernelsBeyondDeclared({wrong, rounded, f32});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("group 3 on onednn_bf16"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("bf16 declares"), std::string::npos) << lines[0];
}

// ---- explain: which groups run in bf16

TEST(ReducedPrecision, ExplainSaysWhichGroupsRunInBf16) {
  const std::string note = precisionNote("onednn_bf16");
  EXPECT_NE(note.find("runs in bf16"), std::string::npos) << note;
  EXPECT_NE(note.find("float32"), std::string::npos) << note;  // the accumulation
  EXPECT_NE(note.find("rtol"), std::string::npos) << note;
  EXPECT_NE(note.find("each kernel alone"), std::string::npos) << note;
  EXPECT_EQ(precisionNote("onednn"), "");
  EXPECT_EQ(precisionNote("native"), "");
}

}  // namespace
}  // namespace collage
