// The CUDA backends' DeviceRuntime: shared by the three backends, so values
// pass between them on the device; without a GPU it refuses with the reason
// and the copy model stays unmeasured (the search then keeps to the host).
// On a GPU: a plan mixing the host and cuDNN runs through the Session's
// device path with copies at its edges and matches the reference.
#include "backends/cuda_runtime/cuda_device_runtime.h"

#include <gtest/gtest.h>

#include <cmath>

#include "backends/backend_list.h"
#include "core/ops/reference_executor.h"
#include "core/runtime/session.h"
#include "core/search/device_costs.h"
#include "tests/unit/backends/cuda/cuda_test_support.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

TEST(CudaDeviceRuntime, TheCudaBackendsShareOneRuntimeOnCuda0) {
  DeviceRuntime* shared = &cuda::sharedDeviceRuntime();
  EXPECT_EQ(shared->device().toString(), "cuda:0");
  for (const char* name : {"cudnn", "cublas", "cublas_tf32", "cuda_fusion"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Backend> backend = createBackend(name);
    ASSERT_TRUE(backend);
    EXPECT_EQ(backend->deviceRuntime(), shared);
    EXPECT_EQ(backend->device(), shared->device());
  }
}

TEST(CudaDeviceRuntime, WithoutADeviceAllocationNamesTheReasonAndCopiesStayUnmeasured) {
  if (cuda::deviceAvailable()) GTEST_SKIP() << "this machine has a GPU";
  test_support::expectError([] { cuda::sharedDeviceRuntime().allocate(64); },
                            {"cannot allocate on cuda:0", "no CUDA device"});
  std::unique_ptr<Backend> cudnn = createBackend("cudnn");
  const DeviceCosts costs = measureDeviceCosts(
      {"cudnn"}, [&](const std::string& n) { return n == "cudnn" ? cudnn.get() : nullptr; },
      nullptr, HardwareFingerprint::current());
  ASSERT_EQ(costs.copyModels.size(), 1u);
  EXPECT_TRUE(std::isnan(costs.copyModels[0].second.toDeviceLatencyNs));
  EXPECT_TRUE(std::isnan(costs.copyModels[0].second.toHostBytesPerNs));
  ASSERT_EQ(costs.notes.size(), 1u);
  EXPECT_NE(costs.notes[0].find("unmeasured"), std::string::npos) << costs.notes[0];
  EXPECT_NE(costs.notes[0].find("no CUDA device"), std::string::npos) << costs.notes[0];
}

TEST(CudaDeviceRuntime, AHostAndCudnnPlanRunsWithCopiesAtItsEdgesOnTheGpu) {
  COLLAGE_SKIP_WITHOUT_GPU();
  GraphBuilder b;
  ValueId x = b.input({1, 4, 8, 8});
  ValueId c1 = b.op("Conv", {x, b.constant({4, 4, 3, 3})}, attrs({{"pads", Ints{1, 1, 1, 1}}}));
  ValueId r = b.op("Sigmoid", {c1});
  b.finish(b.op("Conv", {r, b.constant({4, 4, 3, 3})}, attrs({{"pads", Ints{1, 1, 1, 1}}})));
  const Graph& g = b.graph();
  std::unique_ptr<Backend> cudnn = createBackend("cudnn"), native = createBackend("native");
  Plan plan;
  for (NodeId n = 0; n < g.numNodes(); ++n) {
    PlanGroup group;
    group.nodes = {g.node(n).name};
    group.backend = g.node(n).op == "Conv" ? "cudnn" : "native";
    plan.groups.push_back(group);
  }
  Session s(g, plan,
            [&](const std::string& n) { return n == "cudnn" ? cudnn.get() : native.get(); });
  EXPECT_EQ(s.deviceEdges().size(), 4u);  // x up, conv down, sigmoid up, the output down
  SessionVerification v = verifySession(s, randomInputs(g, 3));
  for (const auto& p : v.problems) ADD_FAILURE() << p;
  const DeviceCosts costs = measureDeviceCosts(
      {"cudnn"}, [&](const std::string& n) { return n == "cudnn" ? cudnn.get() : nullptr; },
      nullptr, HardwareFingerprint::current());
  ASSERT_EQ(costs.copyModels.size(), 1u);
  EXPECT_TRUE(std::isfinite(costs.copyModels[0].second.toDeviceLatencyNs)) << costs.notes[0];
  EXPECT_TRUE(std::isfinite(costs.copyModels[0].second.toHostBytesPerNs)) << costs.notes[0];
}

}  // namespace
}  // namespace collage
