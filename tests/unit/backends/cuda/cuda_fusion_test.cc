// The cuda_fusion backend: generated sources compile with NVRTC (no GPU
// needed), the cache key and the disk cache behave, the rule and the
// generator agree; on a GPU, the kernels match the reference executor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "backends/backend_list.h"
#include "backends/cuda_fusion/fusion_codegen.h"
#include "backends/cuda_fusion/nvrtc_cache.h"
#include "core/measure/kernel_check.h"
#include "core/patterns/pattern_generator.h"
#include "tests/unit/backends/cuda/cuda_test_support.h"
#include "tests/unit/backends/cuda/host_emulation_backend.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using cuda_fusion::FusionSource;
using cuda_fusion::generateFusionKernel;

struct Group {
  std::string name;
  GraphBuilder b;
  NodeSet nodes;
};

// Groups of every kind the generator writes. Each builds its own graph.
std::vector<std::unique_ptr<Group>> sampleGroups() {
  std::vector<std::unique_ptr<Group>> out;
  auto add = [&](const std::string& name, auto build) {
    auto g = std::make_unique<Group>();
    g->name = name;
    g->nodes = g->b.finish(build(g->b));
    out.push_back(std::move(g));
  };
  add("elementwise chain", [](GraphBuilder& b) {
    ValueId x = b.op("Relu", {b.input({2, 3, 8})});
    x = b.op("Sigmoid", {x});
    x = b.op("Mul", {x, b.constant({2, 3, 8})});
    x = b.op("LeakyRelu", {x}, attrs({{"alpha", 0.1f}}));
    return b.op("Tanh", {x});
  });
  add("broadcast add", [](GraphBuilder& b) {
    ValueId x = b.op("Add", {b.input({2, 1, 4}), b.input({3, 1})});  // -> 2x3x4
    return b.op("Add", {x, b.constant({4})});
  });
  add("softmax written out", [](GraphBuilder& b) {
    ValueId e = b.op("Exp", {b.input({4, 16})});
    ValueId s = b.op("ReduceSum", {e}, attrs({{"axes", Ints{1}}, {"keepdims", int64_t{1}}}));
    return b.op("Div", {e, s});
  });
  add("softmax op after transpose", [](GraphBuilder& b) {
    ValueId t = b.op("Transpose", {b.input({2, 5, 3})}, attrs({{"perm", Ints{0, 2, 1}}}));
    return b.op("Softmax", {t}, attrs({{"axis", int64_t{-1}}}));
  });
  add("mean without keepdims, clip, gelu", [](GraphBuilder& b) {
    ValueId m = b.op("ReduceMean", {b.input({2, 3, 4, 5})},
                     attrs({{"axes", Ints{1, 3}}, {"keepdims", int64_t{0}}}));
    ValueId c = b.op("Clip", {m, b.scalar(-0.5f), b.scalar(0.5f)});
    return b.op("Gelu", {c});
  });
  add("injective chain", [](GraphBuilder& b) {
    ValueId r = b.op("Reshape", {b.input({2, 12})}, attrs({{"shape", Ints{2, 3, 4}}}));
    ValueId t = b.op("Transpose", {r}, attrs({{"perm", Ints{2, 0, 1}}}));
    ValueId u = b.op("Unsqueeze", {t}, attrs({{"axes", Ints{0}}}));
    return b.op("Expand", {u}, attrs({{"shape", Ints{2, 4, 2, 3}}}));
  });
  return out;
}

TEST(CudaFusion, GeneratedSourcesCompileToPtxWithNvrtc) {
  int compiled = 0;
  for (const auto& g : sampleGroups()) {
    SCOPED_TRACE(g->name);
    const FusionSource src = generateFusionKernel(KernelRequest::of(g->b.graph(), g->nodes));
    ASSERT_EQ(src.refusal, "");
    std::string log;
    const std::string ptx = cuda_fusion::compileToPtx(src.source, "compute_75", &log);
    ASSERT_FALSE(ptx.empty()) << log << "\n" << src.source;
    EXPECT_NE(ptx.find(".entry collage_fused"), std::string::npos);
    ++compiled;
  }
  std::cout << "[ note ] NVRTC compiled " << compiled << " generated kernels to PTX\n";
}

// The generated source itself, built by the host compiler with CUDA's few
// keywords stood in for, against the reference executor: the index
// arithmetic (broadcast, transpose, reductions) and the math are checked
// here; the device is not.
TEST(CudaFusion, GeneratedSourcesMatchTheReferenceWhenRunOnTheHost) {
  if (std::system("c++ --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no host C++ compiler";
  test_support::HostEmulationBackend host;
  int checked = 0;
  for (const auto& g : sampleGroups()) {
    SCOPED_TRACE(g->name);
    const KernelCheckResult r = checkKernelAgainstReference(host, g->b.graph(), g->nodes, 5);
    EXPECT_TRUE(r.compiled) << r.refusal;
    EXPECT_TRUE(r.ok) << r.message;
    checked += r.ok ? 1 : 0;
  }
  std::cout << "[ note ] " << checked << " generated kernels match the reference on the host\n";
}

TEST(CudaFusion, ConstantsArePassedOrInlined) {
  auto groups = sampleGroups();
  Group& chain = *groups[0];
  const FusionSource src = generateFusionKernel(KernelRequest::of(chain.b.graph(), chain.nodes));
  ASSERT_EQ(src.constants.size(), 1u);  // the 2x3x8 tensor; LeakyRelu's alpha is a literal
  EXPECT_NE(src.source.find("__int_as_float(0x3dcccccd)"), std::string::npos) << src.source;
  ASSERT_EQ(src.outputSizes, std::vector<int64_t>{48});
  Group& mean = *groups[4];
  const FusionSource m = generateFusionKernel(KernelRequest::of(mean.b.graph(), mean.nodes));
  EXPECT_TRUE(m.constants.empty());  // the Clip bounds are scalars: literals
  EXPECT_EQ(m.outputSizes, std::vector<int64_t>{8});
}

// Names never reach the source: the same computation in another graph (with
// other node and value names) gives the same text, hence the same cache key.
TEST(CudaFusion, SourceAndKeyDependOnStructureNotNames) {
  auto build = [](int padding) {
    auto g = std::make_unique<Group>();
    GraphBuilder& b = g->b;
    for (int i = 0; i < padding; ++i) b.input({1});  // shifts every later name
    ValueId x = b.op("Exp", {b.input({4, 16})});
    x = b.op("Add", {x, b.constant({16})});
    g->nodes = b.finish(b.op("Softmax", {x}, attrs({{"axis", int64_t{1}}})));
    return g;
  };
  auto a = build(0), c = build(3);
  const FusionSource sa = generateFusionKernel(KernelRequest::of(a->b.graph(), a->nodes));
  const FusionSource sc = generateFusionKernel(KernelRequest::of(c->b.graph(), c->nodes));
  ASSERT_EQ(sa.refusal, "");
  EXPECT_EQ(sa.source, sc.source);
  EXPECT_EQ(cuda_fusion::PtxCache::keyOf(sa.source, "compute_75"),
            cuda_fusion::PtxCache::keyOf(sc.source, "compute_75"));
  EXPECT_NE(cuda_fusion::PtxCache::keyOf(sa.source, "compute_75"),
            cuda_fusion::PtxCache::keyOf(sa.source, "compute_80"));
  EXPECT_EQ(cuda_fusion::PtxCache::keyOf(sa.source, "compute_75").size(), 64u);
}

TEST(CudaFusion, DiskCacheIsHitTheSecondTime) {
  const fs::path dir =
      fs::temp_directory_path() / ("collage_ptx_cache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto groups = sampleGroups();
  const FusionSource src =
      generateFusionKernel(KernelRequest::of(groups[1]->b.graph(), groups[1]->nodes));
  {
    cuda_fusion::PtxCache cache(dir.string());
    const auto first = cache.get(src.source, "compute_75");
    ASSERT_FALSE(first.ptx.empty()) << first.error;
    EXPECT_FALSE(first.fromCache);
    EXPECT_EQ(cache.compilations(), 1);
    EXPECT_TRUE(fs::exists(dir / (first.key + ".ptx")));
  }
  // A new cache object (another process, the next run) finds the file.
  cuda_fusion::PtxCache again(dir.string());
  const auto second = again.get(src.source, "compute_75");
  EXPECT_TRUE(second.fromCache);
  EXPECT_EQ(again.compilations(), 0);
  EXPECT_EQ(again.hits(), 1);
  EXPECT_EQ(second.ptx, cuda_fusion::compileToPtx(src.source, "compute_75", nullptr));
  fs::remove_all(dir);
}

TEST(CudaFusion, NvrtcErrorsAreReportedNotCached) {
  const fs::path dir =
      fs::temp_directory_path() / ("collage_ptx_bad_" + std::to_string(::getpid()));
  cuda_fusion::PtxCache cache(dir.string());
  const auto r =
      cache.get("extern \"C\" __global__ void collage_fused() { undeclared(); }", "compute_75");
  EXPECT_TRUE(r.ptx.empty());
  EXPECT_NE(r.error.find("undeclared"), std::string::npos) << r.error;
  EXPECT_FALSE(fs::exists(dir / (r.key + ".ptx")));
  fs::remove_all(dir);
}

TEST(CudaFusion, RefusesWhatItCannotWrite) {
  GraphBuilder b;
  ValueId x = b.input({2, 8});
  ValueId mean = b.op("ReduceMean", {x}, attrs({{"axes", Ints{1}}}));
  ValueId d = b.op("Sub", {x, mean});
  ValueId var = b.op("ReduceMean", {b.op("Mul", {d, d})}, attrs({{"axes", Ints{1}}}));
  const NodeSet all = b.finish(b.op("Div", {d, b.op("Sqrt", {var})}));
  const Graph& g = b.graph();
  const FusionSource nested = generateFusionKernel(KernelRequest::of(g, all));
  EXPECT_NE(nested.refusal.find("reduction over another reduction"), std::string::npos)
      << nested.refusal;
  // Each reduction level alone is fine.
  NodeSet first(g.numNodes());
  first.insert(g.value(mean).producer);
  first.insert(g.value(d).producer);
  EXPECT_EQ(generateFusionKernel(KernelRequest::of(g, first)).refusal, "");

  GraphBuilder c;
  ValueId conv = c.op("Conv", {c.input({1, 2, 5, 5}), c.constant({3, 2, 3, 3})});
  const NodeSet convGroup = c.finish(c.op("Relu", {conv}));
  EXPECT_NE(cuda_fusion::groupRefusal(c.graph(), convGroup).find("op Conv has no generated form"),
            std::string::npos);
}

// The rule asks the generator, so it generates the written-out softmax as
// one group, and every group it generates is one the generator writes.
TEST(CudaFusion, RuleGeneratesWhatTheGeneratorWrites) {
  std::unique_ptr<Backend> backend = createBackend("cuda_fusion");
  ASSERT_TRUE(backend);
  EXPECT_EQ(backend->device().toString(), "cuda:0");
  auto rule = backend->codeRule();
  ASSERT_TRUE(rule);
  auto groups = sampleGroups();
  Group& softmax = *groups[2];
  bool whole = false;
  SubGraphLimits limits;
  for (const GeneratedGroup& gg : PatternGenerator(softmax.b.graph()).generate(*rule, limits)) {
    EXPECT_EQ(cuda_fusion::groupRefusal(softmax.b.graph(), gg.nodes), "");
    whole = whole || gg.nodes == softmax.nodes;
  }
  EXPECT_TRUE(whole);
}

TEST(CudaFusion, UnavailableWithoutADeviceWithTheReason) {
  if (cuda::deviceAvailable()) GTEST_SKIP() << "this machine has a GPU: nothing is unavailable";
  const std::vector<std::string> names = builtinBackendNames();
  EXPECT_EQ(std::count(names.begin(), names.end(), "cuda_fusion"), 0);
  const std::vector<std::string> compiled = compiledBackendNames();
  EXPECT_EQ(std::count(compiled.begin(), compiled.end(), "cuda_fusion"), 1);
  EXPECT_NE(backendUnavailableReason("cuda_fusion").find("no CUDA device"), std::string::npos);
  test_support::expectError([] { loadBackendSet({"cuda_fusion"}); },
                            {"cuda_fusion", "unavailable", "no CUDA device"});
  auto groups = sampleGroups();
  std::unique_ptr<Backend> backend = createBackend("cuda_fusion");
  const CompileResult r =
      backend->compile(KernelRequest::of(groups[0]->b.graph(), groups[0]->nodes));
  EXPECT_FALSE(r);
  EXPECT_NE(r.refusal.find("no CUDA device"), std::string::npos);
  EXPECT_EQ(cuda::currentGpuFingerprint().toString(), "no device");
}

TEST(CudaFusion, KernelsMatchTheReferenceOnTheGpu) {
  COLLAGE_SKIP_WITHOUT_GPU();
  std::unique_ptr<Backend> backend = createBackend("cuda_fusion");
  for (const auto& g : sampleGroups()) {
    SCOPED_TRACE(g->name);
    const KernelCheckResult r = checkKernelAgainstReference(*backend, g->b.graph(), g->nodes, 3);
    EXPECT_TRUE(r.compiled) << r.refusal;
    EXPECT_TRUE(r.ok) << r.message;
  }
}

}  // namespace
}  // namespace collage
