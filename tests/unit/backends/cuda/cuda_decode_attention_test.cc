// The CUDA decode attention kernel (backends/cuda_fusion/cuda_decode_attention.h).
//
// Without a device: the split of the keys, the launch (threads, tile,
// shared memory) and its refusals, the plan read from the native analysis,
// the rule naming the groups the native rule names, the source compiled to
// PTX by NVRTC (and assembled by ptxas where the toolkit has it), and the
// generated kernels themselves run on the CPU, blocks
// of real threads meeting at their barriers (host_block_emulation.h),
// against the reference executor at odd lengths, grouped heads and masks,
// the keys split; the merge alone against the native log-sum-exp merge.
// On a device (skipped without one): the same cases through the backend.
#include "backends/cuda_fusion/cuda_decode_attention.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <random>

#include "backends/backend_list.h"
#include "backends/cuda_fusion/nvrtc_cache.h"
#include "backends/native/native_attention.h"
#include "backends/native/native_decode_attention.h"
#include "core/ir/tensor_compare.h"
#include "core/measure/kernel_check.h"
#include "core/onnx/onnx_import.h"
#include "core/ops/reference_executor.h"
#include "core/runtime/session.h"
#include "tests/unit/backends/cuda/cuda_test_support.h"
#include "tests/unit/backends/cuda/host_block_emulation.h"
#include "tests/unit/backends/decode_attention_graphs.h"
#include "tests/unit/graph_builder.h"
#include "tests/unit/test_support.h"

namespace collage {
namespace {

using cuda_fusion::CudaDecodePlan;
using cuda_fusion::planDecodeAttention;

// An H200's multiprocessors, for the plans made without a device.
constexpr int kMultiprocessors = 132;

// Splits caches of a few keys into splits of 8 (the default, 256, would
// leave every test cache whole) for the scope of a test.
struct SmallSplits {
  SmallSplits() { setenv("COLLAGE_CUDA_DECODE_MIN_KEYS", "8", 1); }
  ~SmallSplits() { unsetenv("COLLAGE_CUDA_DECODE_MIN_KEYS"); }
};

using decode_graphs::DecodeShape;
using decode_graphs::paddingMask;
using decode_graphs::repeatHeads;

// The step's attention with the KV heads expanded.
NodeSet decodeGraph(GraphBuilder& b, const DecodeShape& s, const std::vector<int64_t>& pad) {
  return decode_graphs::decodeGraph(b, s, false, pad);
}

using decode_graphs::causalGraph;

// K stored as Kᵀ [B, Hkv, D, L] and V transposed: neither has unit stride
// along its columns (read through the strides, no copy).
NodeSet columnMajorCacheGraph(GraphBuilder& b) {
  const int64_t B = 1, H = 4, Hkv = 2, L = 150, D = 12, Dv = 10;
  ValueId kt = b.input({B, Hkv, D, L});
  ValueId u = b.op("Unsqueeze", {kt}, attrs({{"axes", Ints{2}}}));
  u = b.op("Expand", {u}, attrs({{"shape", Ints{B, Hkv, 2, D, L}}}));
  kt = b.op("Reshape", {u}, attrs({{"shape", Ints{B, H, D, L}}}));
  ValueId v = b.op("Transpose", {b.input({B, Hkv, Dv, L})}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
  v = repeatHeads(b, v, 2, false);
  ValueId p = b.op("Softmax", {b.op("MatMul", {b.input({B, H, 1, D}), kt})},
                   attrs({{"axis", int64_t{-1}}}));
  return b.finish(b.op("MatMul", {p, v}));
}

struct Case {
  std::string name;
  std::unique_ptr<GraphBuilder> b;
  NodeSet nodes;
};

// Odd lengths (1 key, 37, 300: tiles and splits with remainders), 1, 2 and
// 4 query heads per KV head, one KV head for all (multi-query), an odd head
// width, several queries under a causal select, a cache stored column-major.
std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](const std::string& name, auto build) {
    Case c;
    c.name = name;
    c.b = std::make_unique<GraphBuilder>();
    c.nodes = build(*c.b);
    out.push_back(std::move(c));
  };
  for (int64_t L : {1, 37, 300})
    for (int64_t ratio : {1, 4})
      add("L " + std::to_string(L) + ", " + std::to_string(ratio) + " query heads per KV head",
          [&](GraphBuilder& b) {
            return decodeGraph(b, {2, 4, 4 / ratio, 1, L, 20}, {0, L / 3});
          });
  add("2 queries, 2 per KV head, D 67", [](GraphBuilder& b) {
    return decodeGraph(b, {1, 4, 2, 2, 83, 67}, {5});
  });
  add("multi-query, 8 heads on 1", [](GraphBuilder& b) {
    return decodeGraph(b, {1, 8, 1, 1, 130, 32}, {0});
  });
  add("causal select, Tile, 3 queries", causalGraph);
  add("column-major cache", columnMajorCacheGraph);
  return out;
}

// The plan's kernels run on the CPU (host_block_emulation.h): the test's
// stand-in for the device, on the same source.
class HostDecodeKernel : public Kernel {
 public:
  explicit HostDecodeKernel(CudaDecodePlan plan)
      : plan_(std::move(plan)),
        module_(cuda_fusion::decodeAttentionSource(plan_),
                {cuda_fusion::kDecodePartialEntry, cuda_fusion::kDecodeMergeEntry}) {}
  bool ok() const { return module_.ok(); }
  const std::string& log() const { return module_.log(); }
  void run(const std::vector<const DLTensor*>& inputs,
           const std::vector<DLTensor*>& outputs) override {
    std::vector<void*> slots;
    for (const DLTensor* t : inputs) slots.push_back(static_cast<char*>(t->data) + t->byte_offset);
    for (Tensor& c : plan_.constants) slots.push_back(c.raw());
    workspace_.assign(static_cast<size_t>(plan_.workspaceFloats()),
                      std::numeric_limits<float>::quiet_NaN());
    slots.push_back(workspace_.data());
    slots.push_back(static_cast<char*>(outputs[0]->data) + outputs[0]->byte_offset);
    module_.launch(cuda_fusion::kDecodePartialEntry, static_cast<unsigned>(plan_.splits),
                   static_cast<unsigned>(plan_.groups()), static_cast<unsigned>(plan_.threads),
                   slots);
    module_.launch(cuda_fusion::kDecodeMergeEntry, static_cast<unsigned>(plan_.mergeBlocks()), 1,
                   cuda_fusion::kCudaDecodeMergeThreads, slots);
  }

 private:
  CudaDecodePlan plan_;
  test_support::HostBlockModule module_;
  std::vector<float> workspace_;  // NaN before each run: a partial not written shows
};

// Compiles `group` by the plan (or on `device`), runs it, and expects the
// reference executor's output within the plan check's float32 bound.
// Returns the plan.
CudaDecodePlan expectMatches(const Graph& g, const NodeSet& group, Backend* device,
                             std::vector<Tensor> inputs = {}) {
  if (inputs.empty()) inputs = randomInputs(g, 5);
  const std::vector<Tensor> env = referenceValues(g, inputs);
  const KernelRequest request = KernelRequest::of(g, group, "test");
  const CudaDecodePlan plan = planDecodeAttention(request, 4);
  EXPECT_EQ(plan.refusal, "");
  if (!plan.refusal.empty()) return plan;
  std::unique_ptr<Kernel> kernel;
  if (device) {
    CompileResult c = device->compile(request);
    EXPECT_TRUE(c) << c.refusal;
    if (!c) return plan;
    kernel = std::move(c.kernel);
  } else {
    auto host = std::make_unique<HostDecodeKernel>(plan);
    EXPECT_TRUE(host->ok()) << host->log();
    if (!host->ok()) return plan;
    kernel = std::move(host);
  }
  std::vector<Tensor> kernelInputs;
  for (ValueId v : request.inputs) kernelInputs.push_back(env[v].clone());
  const std::vector<Tensor> y = runKernel(*kernel, request, kernelInputs);
  const CompareResult r = compareScaled(y.at(0), env[request.outputs[0]], kFloat32Bound);
  EXPECT_TRUE(r.ok) << plan.describe() << ": " << r.message;
  return plan;
}

// ---- the split and the launch, pure host arithmetic.

TEST(CudaDecodeAttention, SplitsTileTheKeysInNearlyEqualParts) {
  for (int64_t L : {1, 7, 255, 256, 1000, 4097})
    for (int64_t P = 1; P <= std::min<int64_t>(L, 9); ++P) {
      int64_t next = 0, least = L, most = 0;
      for (int64_t s = 0; s < P; ++s) {
        const auto [first, end] = cuda_fusion::splitKeys(L, P, s);
        EXPECT_EQ(first, next) << "L " << L << " P " << P << " split " << s;
        EXPECT_LT(first, end) << "an empty split: L " << L << " P " << P;
        least = std::min(least, end - first);
        most = std::max(most, end - first);
        next = end;
      }
      EXPECT_EQ(next, L);
      EXPECT_LE(most - least, 1);
    }
}

TEST(CudaDecodeAttention, SplitsFillTheDeviceAboveTwiceTheMinimumKeys) {
  using cuda_fusion::chooseSplits;
  // 132 multiprocessors want 264 blocks: 8 groups take 33 splits where the
  // cache holds 33 of 256 keys; a cache under 512 keys is one split.
  EXPECT_EQ(chooseSplits(8192, 8, 132), 32);  // the keys bound it: 8192 / 256
  EXPECT_EQ(chooseSplits(16384, 8, 132), 33);
  EXPECT_EQ(chooseSplits(511, 1, 132), 1);
  EXPECT_EQ(chooseSplits(512, 1, 132), 2);
  EXPECT_EQ(chooseSplits(100000, 300, 132), 1);  // the groups alone fill it
  EXPECT_EQ(chooseSplits(1, 1, 132), 1);
  EXPECT_EQ(chooseSplits(37, 1, 4, 8), 4);
  EXPECT_EQ(chooseSplits(37, 2, 0, 8), 1);  // no multiprocessor count: 2 blocks, 2 groups
}

CudaDecodePlan shapedPlan(int64_t kvGroup, int64_t Sq, int64_t D, int64_t Dv) {
  CudaDecodePlan p;
  p.B = 1;
  p.Hkv = 2;
  p.kvGroup = kvGroup;
  p.H = 2 * kvGroup;
  p.Sq = Sq;
  p.L = 4096;
  p.D = D;
  p.Dv = Dv;
  cuda_fusion::planLaunch(p, kMultiprocessors);
  return p;
}

TEST(CudaDecodeAttention, LaunchKeepsTheOutputInRegistersAndQInSharedMemory) {
  // 16 rows (4 heads x 4 queries) of 128: 128 threads of 16 accumulators.
  CudaDecodePlan p = shapedPlan(4, 4, 128, 128);
  ASSERT_EQ(p.refusal, "");
  EXPECT_EQ(p.threads, 128);
  EXPECT_EQ(p.accumulators, 16);
  EXPECT_EQ(p.keysPerTile, 32);
  EXPECT_EQ(p.sharedBytes, 4u * (16 * 128 + 32 * 129 + 16 * 32 + 3 * 16));
  EXPECT_EQ(p.splits, 16);  // 2 groups want 132 splits; 4096 keys give 16 of 256
  // One row of 64 (one query head per KV head): a thread's one accumulator.
  p = shapedPlan(1, 1, 64, 64);
  EXPECT_EQ(p.threads, 128);
  EXPECT_EQ(p.accumulators, 1);
  // 32 rows of 128: more threads, not more registers.
  p = shapedPlan(8, 4, 128, 128);
  EXPECT_EQ(p.threads, 256);
  EXPECT_EQ(p.accumulators, 16);
  // 32 rows of Q of width 256 (32 KiB): the key tile shrinks to fit.
  p = shapedPlan(8, 4, 256, 256);
  ASSERT_EQ(p.refusal, "");
  EXPECT_EQ(p.keysPerTile, 8);
  EXPECT_LE(p.sharedBytes, cuda_fusion::kCudaDecodeMaxSharedBytes);
}

TEST(CudaDecodeAttention, LaunchRefusesWhatDoesNotFitWithTheReason) {
  // 64 rows of Q of width 256 are 64 KiB of shared memory alone.
  CudaDecodePlan p = shapedPlan(16, 4, 256, 64);
  EXPECT_NE(p.refusal.find("64 rows of Q (16 query heads per KV head x 4 queries) of width 256"),
            std::string::npos)
      << p.refusal;
  EXPECT_NE(p.refusal.find("bytes of shared memory per block, over the 49152"), std::string::npos)
      << p.refusal;
  // 64 rows of 512 outputs: over 1024 threads x 16 registers.
  p = shapedPlan(16, 4, 64, 512);
  EXPECT_NE(p.refusal.find("32768 outputs: over the 16384 its threads keep in registers"),
            std::string::npos)
      << p.refusal;
}

// ---- the plan: the native analysis read for the device.

TEST(CudaDecodeAttention, PlanReadsTheNativeDecodeAnalysis) {
  SmallSplits splits;
  GraphBuilder b;
  const NodeSet all = decodeGraph(b, {2, 8, 2, 3, 300, 24}, {0, 100});
  const KernelRequest request = KernelRequest::of(b.graph(), all, "test");
  const CudaDecodePlan p = planDecodeAttention(request, 4);
  ASSERT_EQ(p.refusal, "");
  EXPECT_EQ(p.H, 8);
  EXPECT_EQ(p.Hkv, 2);
  EXPECT_EQ(p.kvGroup, 4);
  EXPECT_EQ(p.Sq, 3);
  EXPECT_EQ(p.L, 300);
  EXPECT_EQ(p.rows(), 12);
  EXPECT_EQ(p.groups(), 4);
  EXPECT_EQ(p.splits, 2);       // 4 multiprocessors want 8 blocks of 4 groups
  ASSERT_EQ(p.ops.size(), 2u);  // the Div, the mask
  EXPECT_EQ(p.ops[0].kind, cuda_fusion::DecodeScoreOp::Scale);
  EXPECT_FLOAT_EQ(p.ops[0].scale, 1.0f / std::sqrt(24.0f));
  EXPECT_EQ(p.ops[1].kind, cuda_fusion::DecodeScoreOp::Add);
  EXPECT_EQ(p.o.slot, static_cast<int>(p.outputSlot()));
  EXPECT_EQ(p.slots(), request.inputs.size() + p.constants.size() + 2);
  // The KV heads are read in place: head g of K at stride L x D, no repeat.
  EXPECT_EQ(p.k.strides[1], 300 * 24);
  EXPECT_EQ(p.workspaceFloats(), 4 * 2 * 12 * (24 + 2));
  EXPECT_EQ(p.describe().rfind("cuda decode attention B=2 H=8 Hkv=2 Sq=3 L=300 D=24 Dv=24, 2 "
                               "split(s) x 4 group(s) of 12 row(s)",
                               0),
            0u)
      << p.describe();
}

TEST(CudaDecodeAttention, RefusesWhatTheNativeDecodeKernelRefusesAndPrefill) {
  {
    // Tile(K, [1, r, 1, 1]) repeats the KV heads as blocks.
    GraphBuilder b;
    ValueId k = b.op("Tile", {b.input({1, 2, 9, 8})}, attrs({{"repeats", Ints{1, 2, 1, 1}}}));
    ValueId kt = b.op("Transpose", {k}, attrs({{"perm", Ints{0, 1, 3, 2}}}));
    ValueId p = b.op("Softmax", {b.op("MatMul", {b.input({1, 4, 1, 8}), kt})},
                     attrs({{"axis", int64_t{-1}}}));
    const NodeSet all = b.finish(b.op("MatMul", {p, b.input({1, 4, 9, 8})}));
    const CudaDecodePlan plan = planDecodeAttention(KernelRequest::of(b.graph(), all), 4);
    EXPECT_NE(plan.refusal.find("in blocks"), std::string::npos) << plan.refusal;
  }
  {
    // 19 queries: the flash kernel's, which has no CUDA version.
    GraphBuilder b;
    const NodeSet all = decodeGraph(b, {1, 2, 2, 19, 19, 8}, {0});
    const CudaDecodePlan plan = planDecodeAttention(KernelRequest::of(b.graph(), all), 4);
    EXPECT_NE(plan.refusal.find("more query rows than 4"), std::string::npos) << plan.refusal;
    EXPECT_NE(plan.refusal.find("Sq=19"), std::string::npos) << plan.refusal;
  }
}

// ---- the source: NVRTC, without a device.

TEST(CudaDecodeAttention, SourceCompilesToPtxWithNvrtc) {
  SmallSplits splits;
  int compiled = 0;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const CudaDecodePlan plan =
        planDecodeAttention(KernelRequest::of(c.b->graph(), c.nodes), kMultiprocessors);
    ASSERT_EQ(plan.refusal, "");
    const std::string source = cuda_fusion::decodeAttentionSource(plan);
    // The architecture the backend targets here (no device: the oldest),
    // and an H100/H200's.
    for (const std::string& arch : {cuda::targetArchitecture(), std::string("compute_90")}) {
      std::string log;
      const std::string ptx = cuda_fusion::compileToPtx(source, arch, &log);
      ASSERT_FALSE(ptx.empty()) << arch << ": " << log << "\n" << source;
      EXPECT_NE(ptx.find(".entry collage_decode_partial"), std::string::npos);
      EXPECT_NE(ptx.find(".entry collage_decode_merge"), std::string::npos);
      // The accumulators stay in registers: no local-memory array.
      EXPECT_EQ(ptx.find(".local"), std::string::npos) << arch;
      ++compiled;
    }
  }
  std::cout << "[ note ] NVRTC compiled " << compiled << " decode attention modules to PTX\n";
}

// ptxas, where the toolkit has it (it needs no device either): the PTX
// assembles for an H100/H200 (sm_90), every launch's block fits its
// registers (the launch bounds), and the partial kernel's shared memory is
// the plan's count (the refusal at 48 KiB reads that count).
TEST(CudaDecodeAttention, PtxAssemblesForSm90WithThePlannedSharedMemory) {
  namespace fs = std::filesystem;
  std::string ptxas;
  for (const char* home : {static_cast<const char*>(std::getenv("CUDA_HOME")), "/usr/local/cuda"})
    if (home && fs::exists(fs::path(home) / "bin/ptxas"))
      ptxas = (fs::path(home) / "bin/ptxas").string();
  if (ptxas.empty()) GTEST_SKIP() << "no ptxas (CUDA_HOME/bin, /usr/local/cuda/bin)";
  SmallSplits splits;
  const fs::path base =
      fs::temp_directory_path() / ("collage_decode_" + std::to_string(::getpid()));
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const CudaDecodePlan plan =
        planDecodeAttention(KernelRequest::of(c.b->graph(), c.nodes), kMultiprocessors);
    ASSERT_EQ(plan.refusal, "");
    std::string log;
    const std::string ptx =
        cuda_fusion::compileToPtx(cuda_fusion::decodeAttentionSource(plan), "compute_90", &log);
    ASSERT_FALSE(ptx.empty()) << log;
    std::ofstream(base.string() + ".ptx") << ptx;
    const std::string command = ptxas + " -arch=sm_90 -v " + base.string() + ".ptx -o " +
                                base.string() + ".cubin > " + base.string() + ".log 2>&1";
    const int status = std::system(command.c_str());
    std::ifstream in(base.string() + ".log");
    const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(status, 0) << out;
    const size_t partial = out.find("'collage_decode_partial'");
    ASSERT_NE(partial, std::string::npos) << out;
    const size_t smem = out.find(" bytes smem", partial);
    ASSERT_NE(smem, std::string::npos) << out;
    const size_t start = out.rfind(' ', smem - 1) + 1;
    EXPECT_EQ(std::stoull(out.substr(start, smem - start)), plan.sharedBytes) << out;
  }
  for (const char* ext : {".ptx", ".cubin", ".log"}) fs::remove(base.string() + ext);
}

// ---- the kernels, run on the CPU (blocks of threads) against the reference.

TEST(CudaDecodeAttention, KernelsMatchTheReferenceWhenRunOnTheHost) {
  if (std::system("c++ --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no host C++ compiler";
  SmallSplits splits;
  int split = 0;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const CudaDecodePlan plan = expectMatches(c.b->graph(), c.nodes, nullptr);
    split += plan.splits > 1;
  }
  EXPECT_GE(split, 4);  // the keys split across blocks in most cases
}

TEST(CudaDecodeAttention, MergeKernelIsTheNativeLogSumExpMerge) {
  if (std::system("c++ --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no host C++ compiler";
  // One group of 3 rows of 5 columns over 4 splits, the output [1, 3, 1, 5]
  // (3 query heads, 1 query): row 1 has a split with no finite score (its
  // max -inf, sum 0), row 2 none at all (NaN, as the reference's softmax).
  CudaDecodePlan plan;
  plan.H = 3;
  plan.kvGroup = 3;
  plan.L = 1000;
  plan.D = plan.Dv = 5;
  plan.splits = 4;
  plan.o.slot = static_cast<int>(plan.outputSlot());
  plan.o.strides[1] = 5;
  plan.o.strides[3] = 1;
  cuda_fusion::planLaunch(plan, 4, 8);
  plan.splits = 4;
  ASSERT_EQ(plan.refusal, "");
  native::AttentionPartials parts;
  parts.resize(4, 3, 5);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  for (int64_t p = 0; p < 4; ++p)
    for (int64_t r = 0; r < 2; ++r) {
      if (r == 1 && p == 2) continue;  // -inf, 0, zeros
      parts.maxAt(p, r) = u(rng);
      parts.sumAt(p, r) = 1.0f + std::abs(u(rng));
      for (int64_t d = 0; d < 5; ++d) parts.accAt(p, r)[d] = u(rng);
    }
  // The workspace of one group is the native partials' layout: max, sum, acc.
  std::vector<float> workspace = parts.max;
  workspace.insert(workspace.end(), parts.sum.begin(), parts.sum.end());
  workspace.insert(workspace.end(), parts.acc.begin(), parts.acc.end());
  ASSERT_EQ(static_cast<int64_t>(workspace.size()), plan.workspaceFloats());
  std::vector<float> out(15, -7.0f);
  test_support::HostBlockModule module(cuda_fusion::decodeAttentionSource(plan),
                                       {cuda_fusion::kDecodeMergeEntry});
  ASSERT_TRUE(module.ok()) << module.log();
  std::vector<void*> slots = {workspace.data(), out.data()};
  module.launch(cuda_fusion::kDecodeMergeEntry, 1, 1, 4, slots);  // 4 threads stride the 15
  for (int64_t r = 0; r < 3; ++r) {
    float expected[5];
    native::mergeAttentionPartials(parts, 0, 4, r, expected, 1);
    for (int64_t d = 0; d < 5; ++d) {
      if (r == 2) {
        EXPECT_TRUE(std::isnan(out[static_cast<size_t>(r * 5 + d)])) << d;
        continue;
      }
      EXPECT_NEAR(out[static_cast<size_t>(r * 5 + d)], expected[d],
                  1e-6f * std::abs(expected[d]) + 1e-7f)
          << "row " << r << " column " << d;
    }
  }
}

// ---- the rule: the groups the native rule names, on the generated decoders.

// A committed decoder model of tests/models/decoder and its inputs.
std::pair<Graph, std::vector<Tensor>> committedDecoder(const std::string& model) {
  const std::string base = std::string(COLLAGE_SOURCE_DIR) + "/tests/models/decoder/" + model;
  Graph g = importOnnx(base + ".onnx");
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < g.inputs().size(); ++i)
    inputs.push_back(readTensorProtoFile(base + ".input_" + std::to_string(i) + ".pb"));
  return {std::move(g), std::move(inputs)};
}

TEST(CudaDecodeAttention, RuleNamesTheNativeDecodeGroupsAndTheyRunOnTheHost) {
  const bool hostCompiler = std::system("c++ --version > /dev/null 2>&1") == 0;
  SmallSplits splits;
  std::unique_ptr<Backend> backend = createBackend("cuda_fusion");
  ASSERT_TRUE(backend);
  for (const char* model : {"mha_where_two_layers", "gqa_expand_padded", "gqa_tile_two_tokens"}) {
    SCOPED_TRACE(model);
    const auto [g, inputs] = committedDecoder(model);
    std::vector<std::pair<NodeSet, std::string>> expected;
    for (auto& [group, label] : native::attentionGroups(g))
      if (label.rfind("decode_attention", 0) == 0) expected.emplace_back(group, label);
    ASSERT_FALSE(expected.empty());
    const auto named = backend->codeRule()->wholeGroups(g);
    ASSERT_EQ(named.size(), expected.size());
    bool ran = false;
    for (size_t i = 0; i < named.size(); ++i) {
      EXPECT_TRUE(named[i].first == expected[i].first);
      EXPECT_EQ(named[i].second, expected[i].second);
      // One group a model runs on the host (each is a host compilation):
      // the first with the head split, scale and repeat folded in.
      if (!hostCompiler || ran || named[i].second != "decode_attention_views") continue;
      expectMatches(g, named[i].first, nullptr, inputs);
      ran = true;
    }
    EXPECT_TRUE(ran || !hostCompiler);
  }
}

// ---- on a device.

TEST(CudaDecodeAttention, KernelsMatchTheReferenceOnTheGpu) {
  COLLAGE_SKIP_WITHOUT_GPU();
  SmallSplits splits;
  std::unique_ptr<Backend> backend = createBackend("cuda_fusion");
  ASSERT_TRUE(backend);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    expectMatches(c.b->graph(), c.nodes, backend.get());
  }
  for (const char* model : {"mha_where_two_layers", "gqa_expand_padded", "gqa_tile_two_tokens"}) {
    SCOPED_TRACE(model);
    const auto [g, inputs] = committedDecoder(model);
    for (const auto& [group, label] : backend->codeRule()->wholeGroups(g))
      expectMatches(g, group, backend.get(), inputs);
  }
}

}  // namespace
}  // namespace collage
