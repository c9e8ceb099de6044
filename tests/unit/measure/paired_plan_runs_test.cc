// Whole plans timed against each other (the graph-level search's fitness):
// in the worker, a plan is checked against the reference before it is
// timed, a plan that cannot compile or computes something else is Invalid
// with the reason, and plans share compiled kernels. Through the isolated
// measurer, a worker that crashes or hangs on a plan is a failed plan.
#include "core/measure/paired_plan_runs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include <unistd.h>

#include "backends/backend_list.h"
#include "core/measure/measurer.h"
#include "tests/unit/graph_builder.h"

namespace collage {
namespace {

// x -> relu -> {sigmoid, tanh} -> add
struct Diamond {
  GraphBuilder b;
  Diamond() {
    const ValueId r = b.op("Relu", {b.input({4, 8})});
    b.finish(b.op("Add", {b.op("Sigmoid", {r}), b.op("Tanh", {r})}));
  }
  const Graph& g() { return b.graph(); }
};

// Writes zeros: compiles, runs, and is wrong.
class ZeroBackend final : public Backend {
 public:
  std::string name() const override { return "zeros"; }
  std::string version() const override { return "1"; }
  CompileResult compile(const KernelRequest&) override {
    struct Zero : Kernel {
      void run(const std::vector<const DLTensor*>&, const std::vector<DLTensor*>& outputs) override {
        for (DLTensor* t : outputs) {
          int64_t n = 1;
          for (int i = 0; i < t->ndim; ++i) n *= t->shape[i];
          std::fill_n(static_cast<float*>(t->data), n, 0.0f);
        }
      }
    };
    return CompileResult::ok(std::make_unique<Zero>());
  }
};

struct Backends {
  std::unique_ptr<Backend> native = createBackend("native");
  ZeroBackend zeros;
  BackendLookup lookup() {
    return [this](const std::string& n) -> Backend* {
      if (n == "native") return native.get();
      if (n == "zeros") return &zeros;
      return nullptr;
    };
  }
};

// A large model's plans get the time their runs need; small ones the
// measurer's limit; an unpredicted plan counts as instant.
TEST(PairedPlanRuns, ThePairingsTimeLimitGrowsWithThePlansPredictedTime) {
  PairedRunOptions o;
  o.minRounds = 5;
  o.seconds = 4;
  Plan small, large, unknown;
  small.predictedNs = 2e6;   // 2 ms
  large.predictedNs = 8e9;   // 8 s a run
  EXPECT_EQ(pairedRunTimeoutSeconds(small, small, o, 60), 60);
  EXPECT_EQ(pairedRunTimeoutSeconds(unknown, unknown, o, 60), 60);
  // 4 x (4 s + 2 plans x (2 x 5 + 3) runs x 8 s), whichever side is the large one.
  EXPECT_DOUBLE_EQ(pairedRunTimeoutSeconds(small, large, o, 60), 4 * (4 + 26 * 8.0));
  EXPECT_DOUBLE_EQ(pairedRunTimeoutSeconds(large, unknown, o, 60), 4 * (4 + 26 * 8.0));
}

TEST(PairedPlanRuns, TimesBothPlansRoundByRoundAndReusesKernels) {
  Diamond d;
  Backends backends;
  PairedPlanRunner runner(d.g(), backends.lookup());
  const Plan single = singleNodePlan(d.g(), "native");
  Plan fused = single;
  fused.groups = {PlanGroup{{d.g().node(0).name, d.g().node(1).name, d.g().node(2).name, d.g().node(3).name},
                            "native"}};
  PairedRunOptions options;
  options.minRounds = 4;
  options.maxRounds = 6;
  options.seconds = 0;
  const PairedPlanRuns first = runner.run(fused, single, options);
  ASSERT_TRUE(first.ok()) << first.message;
  EXPECT_EQ(first.aMs.size(), 4u);
  EXPECT_EQ(first.bMs.size(), 4u);
  EXPECT_GT(first.medianRatio(), 0);
  EXPECT_EQ(first.kernelsCompiled, 5);  // four single nodes and the fused group
  // Again: every kernel from the worker's cache.
  const PairedPlanRuns again = runner.run(fused, single, options);
  ASSERT_TRUE(again.ok()) << again.message;
  EXPECT_EQ(again.kernelsCompiled, 0);
}

// Writes zeros and notes each run in a log shared by the backends of a test.
class RecordingBackend final : public Backend {
 public:
  RecordingBackend(std::string name, std::string* log) : name_(std::move(name)), log_(log) {}
  std::string name() const override { return name_; }
  std::string version() const override { return "1"; }
  CompileResult compile(const KernelRequest&) override {
    struct Noted : Kernel {
      std::string* log;
      char tag;
      void run(const std::vector<const DLTensor*>&, const std::vector<DLTensor*>&) override { *log += tag; }
    };
    auto k = std::make_unique<Noted>();
    k->log = log_;
    k->tag = name_[0];
    return CompileResult::ok(std::move(k));
  }

 private:
  std::string name_;
  std::string* log_;
};

// A timed run follows a run of its own plan, never the other plan's: timed
// right after plan B, plan A ran in the caches B left (15 % slower than
// back to back on a small mobile net), and the plan's prediction read
// short of what `collage run` measures.
TEST(PairedPlanRuns, EachTimedRunFollowsARunOfItsOwnPlan) {
  Diamond d;
  std::string log;
  RecordingBackend a("a", &log), b("b", &log);
  PairedPlanRunner runner(d.g(), [&](const std::string& n) -> Backend* {
    return n == "a" ? &a : n == "b" ? &b : nullptr;
  });
  auto wholeOn = [&](const std::string& backend) {
    Plan p = singleNodePlan(d.g(), backend);
    p.groups = {PlanGroup{{d.g().node(0).name, d.g().node(1).name, d.g().node(2).name, d.g().node(3).name},
                          backend}};
    return p;
  };
  PairedRunOptions options;
  options.minRounds = options.maxRounds = 3;
  options.seconds = 0;
  options.verify = false;
  const PairedPlanRuns runs = runner.run(wholeOn("a"), wholeOn("b"), options);
  ASSERT_TRUE(runs.ok()) << runs.message;
  EXPECT_EQ(runs.aMs.size(), 3u);
  // b's first run, a's warm-up and b's; then the rounds in alternating
  // order, each plan run twice in a row (the second timed).
  EXPECT_EQ(log, "bab" "aabb" "bbaa" "aabb");
}

TEST(PairedPlanRuns, WrongResultsAndRefusalsAreInvalidPlansWithTheReason) {
  Diamond d;
  Backends backends;
  PairedPlanRunner runner(d.g(), backends.lookup());
  const Plan good = singleNodePlan(d.g(), "native");
  Plan wrong = good;
  wrong.groups[3].backend = "zeros";  // the Add writes zeros
  const PairedPlanRuns w = runner.run(wrong, good, PairedRunOptions{});
  EXPECT_EQ(w.status, MeasurementStatus::Invalid);
  EXPECT_NE(w.message.find("wrong result: output"), std::string::npos) << w.message;
  // ... and the kernel at fault, rerun alone, as `collage run --verify` names it.
  EXPECT_NE(w.message.find("group 4 on zeros"), std::string::npos) << w.message;
  EXPECT_NE(w.message.find("rerun alone on the reference's inputs"), std::string::npos) << w.message;
  EXPECT_TRUE(w.aMs.empty());
  Plan missing = good;
  missing.groups[1].backend = "nowhere";
  const PairedPlanRuns m = runner.run(missing, good, PairedRunOptions{});
  EXPECT_EQ(m.status, MeasurementStatus::Invalid);
  EXPECT_NE(m.message.find("'nowhere' is not available"), std::string::npos) << m.message;
}

// The incumbent (plan B) is checked as well: a wrong plan that every other
// is paired with (the op-level plan in the end-to-end check, the starting
// plan in the graph-level search) is written when nothing beats it, so it
// is reported as the reference plan's failure, naming its kernel.
TEST(PairedPlanRuns, AWrongIncumbentIsTheReferencePlansFailure) {
  Diamond d;
  Backends backends;
  PairedPlanRunner runner(d.g(), backends.lookup());
  const Plan good = singleNodePlan(d.g(), "native");
  Plan wrong = good;
  wrong.groups[3].backend = "zeros";  // the Add writes zeros
  const PairedPlanRuns r = runner.run(good, wrong, PairedRunOptions{});
  EXPECT_EQ(r.status, MeasurementStatus::Invalid);
  EXPECT_EQ(r.message.rfind(kReferencePlanFailed, 0), 0u) << r.message;
  EXPECT_NE(r.message.find("wrong result: output"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("group 4 on zeros"), std::string::npos) << r.message;
  EXPECT_TRUE(r.aMs.empty());
  // Unchecked (the reference cannot run in time): timed as before.
  PairedRunOptions unchecked;
  unchecked.verify = false;
  EXPECT_TRUE(runner.run(good, wrong, unchecked).ok());
}

// The worker's side of the pipe: a "pair" request gets a JSON reply line.
TEST(PairedPlanRuns, TheWorkerAnswersAPairRequest) {
  Diamond d;
  Backends backends;
  const Plan plan = singleNodePlan(d.g(), "native");
  const nlohmann::json request{{"pair",
                                {{"a", nlohmann::json::parse(planToJson(plan))},
                                 {"b", nlohmann::json::parse(planToJson(plan))},
                                 {"min_rounds", 3},
                                 {"max_rounds", 3}}}};
  std::istringstream in(request.dump() + "\n" + "{\"pair\": {\"a\": 1}}\n");
  std::ostringstream out;
  // A timing lock of its own: another test run on this machine holding the
  // machine's would add "waiting" lines to the replies checked here.
  const std::string lock =
      ::testing::TempDir() + "paired_plan_runs_test_" + std::to_string(getpid()) + ".lock";
  setenv("COLLAGE_TIMING_LOCK", lock.c_str(), 1);
  runMeasurementWorker(d.g(), backends.lookup(), MeasurerOptions{}, in, out);
  unsetenv("COLLAGE_TIMING_LOCK");
  std::istringstream replies(out.str());
  std::string line;
  ASSERT_TRUE(std::getline(replies, line));
  const PairedPlanRuns ok = pairedPlanRunsFromJson(nlohmann::json::parse(line));
  EXPECT_TRUE(ok.ok()) << ok.message;
  EXPECT_EQ(ok.aMs.size(), 3u);
  ASSERT_TRUE(std::getline(replies, line));  // a malformed plan: a failure, and the worker goes on
  const PairedPlanRuns bad = pairedPlanRunsFromJson(nlohmann::json::parse(line));
  EXPECT_EQ(bad.status, MeasurementStatus::Failed);
  EXPECT_FALSE(bad.message.empty());
}

TEST(PairedPlanRuns, AWorkerThatCrashesOrHangsOnAPlanIsAFailedPlan) {
  Diamond d;
  const Plan plan = singleNodePlan(d.g(), "native");
  IsolatedMeasurer crashing({"/bin/sh", "-c", "read line; kill -SEGV $$"}, MeasurerOptions{});
  const PairedPlanRuns c = crashing.timePlans(plan, plan, PairedRunOptions{}, 10);
  EXPECT_EQ(c.status, MeasurementStatus::Failed);
  EXPECT_NE(c.message.find("crashed"), std::string::npos) << c.message;
  IsolatedMeasurer hanging({"/bin/sh", "-c", "read line; exec sleep 60"}, MeasurerOptions{});
  const PairedPlanRuns h = hanging.timePlans(plan, plan, PairedRunOptions{}, 0.5);
  EXPECT_EQ(h.status, MeasurementStatus::TimedOut);
  // Neither says anything lasting about the plan: a later search retries it.
  EXPECT_FALSE(c.isVerdict());
  EXPECT_FALSE(h.isVerdict());
  IsolatedMeasurer answering({"/bin/sh", "-c",
                              "while read line; do echo '{\"status\":\"ok\",\"a_ms\":[1,2,3],"
                              "\"b_ms\":[2,2,2]}'; done"},
                             MeasurerOptions{});
  const PairedPlanRuns a = answering.timePlans(plan, plan, PairedRunOptions{}, 10);
  ASSERT_TRUE(a.ok()) << a.message;
  EXPECT_TRUE(a.isVerdict());
  EXPECT_DOUBLE_EQ(a.medianRatio(), 1.0);  // ratios 0.5, 1, 1.5
  IsolatedMeasurer refusing({"/bin/sh", "-c",
                             "while read line; do echo '{\"status\":\"invalid\",\"message\":\"no\"}'; done"},
                            MeasurerOptions{});
  const PairedPlanRuns r = refusing.timePlans(plan, plan, PairedRunOptions{}, 10);
  EXPECT_EQ(r.status, MeasurementStatus::Invalid) << r.message;
  EXPECT_TRUE(r.isVerdict());  // the worker's own reason: it holds
  EXPECT_NEAR(a.aFasterShare(), 1.0 / 3, 1e-12);
}

}  // namespace
}  // namespace collage
