// The cuda_fusion backend: groups of elementwise, broadcast, injective and
// reduction ops as one generated CUDA kernel each (fusion_codegen.h), and
// decode attention as a generated flash-decoding pair of kernels
// (cuda_decode_attention.h), compiled by NVRTC and cached on disk
// (nvrtc_cache.h), loaded with the runtime's library API
// (cudaLibraryLoadData), so no libcuda link is needed.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>

#include "backends/cuda_fusion/cuda_decode_attention.h"
#include "backends/cuda_fusion/fusion_codegen.h"
#include "backends/cuda_fusion/nvrtc_cache.h"
#include "backends/cuda_runtime/cuda_device.h"
#include "backends/cuda_runtime/cuda_device_runtime.h"
#include "backends/cuda_runtime/cuda_status.h"
#include "backends/cuda_runtime/device_kernel.h"
#include "backends/native/native_attention.h"
#include "core/patterns/pattern_rule.h"

namespace collage {

// The libraries it calls, checked before the device (backend_list.cc).
std::string cudaFusionUnavailableReason() {
  return cuda::unavailableReason({cuda::Library::Runtime, cuda::Library::Rtc});
}

namespace {

using cuda::cudart;

// Most nodes one generated kernel takes, as for the native fusing backend.
constexpr int kMaxFusedNodes = 16;
constexpr int kThreadsPerBlock = 256;
// Enough blocks to fill any current GPU; the grid-stride loop does the rest.
constexpr int64_t kMaxBlocks = 1 << 16;

class FusedKernel : public cuda::DeviceKernel {
 public:
  FusedKernel(const std::string& ptx, std::vector<cuda::DeviceBuffer> constants,
              int64_t maxOutputSize, size_t inputs, size_t outputs)
      : constants_(std::move(constants)),
        maxOutputSize_(maxOutputSize),
        slots_(inputs + constants_.size() + outputs) {
    cuda::check(cudart().cudaLibraryLoadData(&library_, ptx.c_str(), nullptr, nullptr, 0, nullptr,
                                             nullptr, 0),
                "cudaLibraryLoadData(generated kernel)");
    cuda::check(cudart().cudaLibraryGetKernel(&kernel_, library_, cuda_fusion::kEntryName),
                "cudaLibraryGetKernel");
  }
  ~FusedKernel() override {
    if (library_) cudart().cudaLibraryUnload(library_);
  }

 protected:
  void runOnDevice(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                   cudaStream_t stream) override {
    // The kernel's one parameter is `struct Args { void* p[slots]; }`: the
    // inputs, the constants, the outputs, in that order.
    std::vector<void*> args;
    args.reserve(slots_);
    for (const void* p : inputs) args.push_back(const_cast<void*>(p));
    for (const auto& c : constants_) args.push_back(c.data());
    for (void* p : outputs) args.push_back(p);
    void* params[] = {args.data()};
    const int64_t blocks = std::clamp<int64_t>(
        (maxOutputSize_ + kThreadsPerBlock - 1) / kThreadsPerBlock, 1, kMaxBlocks);
    cuda::check(cudart().cudaLaunchKernel(reinterpret_cast<const void*>(kernel_),
                                          dim3(static_cast<unsigned>(blocks)),
                                          dim3(kThreadsPerBlock), params, 0, stream),
                "cudaLaunchKernel(generated kernel)");
  }

 private:
  cudaLibrary_t library_ = nullptr;
  cudaKernel_t kernel_ = nullptr;
  std::vector<cuda::DeviceBuffer> constants_;
  int64_t maxOutputSize_;
  size_t slots_;
};

// Decode attention (cuda_decode_attention.h): the partial kernel over
// (split, group) blocks, then the merge, both from one PTX module; the
// workspace of partial results and the constant masks live on the device
// from compile on.
class DecodeAttentionKernel : public cuda::DeviceKernel {
 public:
  DecodeAttentionKernel(const std::string& ptx, const cuda_fusion::CudaDecodePlan& plan)
      : plan_(plan) {
    for (const Tensor& t : plan.constants) constants_.push_back(cuda::DeviceBuffer::upload(t));
    workspace_ = cuda::DeviceBuffer(static_cast<size_t>(plan.workspaceFloats()) * sizeof(float));
    cuda::check(cudart().cudaLibraryLoadData(&library_, ptx.c_str(), nullptr, nullptr, 0, nullptr,
                                             nullptr, 0),
                "cudaLibraryLoadData(decode attention)");
    cuda::check(
        cudart().cudaLibraryGetKernel(&partial_, library_, cuda_fusion::kDecodePartialEntry),
        "cudaLibraryGetKernel(decode attention partial)");
    cuda::check(cudart().cudaLibraryGetKernel(&merge_, library_, cuda_fusion::kDecodeMergeEntry),
                "cudaLibraryGetKernel(decode attention merge)");
    plan_.constants.clear();  // on the device now
  }
  ~DecodeAttentionKernel() override {
    if (library_) cudart().cudaLibraryUnload(library_);
  }
  std::string describe() const { return plan_.describe(); }

 protected:
  void runOnDevice(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                   cudaStream_t stream) override {
    // `struct Args { void* p[slots]; }`: inputs, constants, workspace, output.
    std::vector<void*> args;
    args.reserve(plan_.slots());
    for (const void* p : inputs) args.push_back(const_cast<void*>(p));
    for (const auto& c : constants_) args.push_back(c.data());
    args.push_back(workspace_.data());
    args.push_back(outputs.at(0));
    void* params[] = {args.data()};
    cuda::check(
        cudart().cudaLaunchKernel(
            reinterpret_cast<const void*>(partial_),
            dim3(static_cast<unsigned>(plan_.splits), static_cast<unsigned>(plan_.groups())),
            dim3(static_cast<unsigned>(plan_.threads)), params, 0, stream),
        "cudaLaunchKernel(decode attention partial)");
    cuda::check(
        cudart().cudaLaunchKernel(reinterpret_cast<const void*>(merge_),
                                  dim3(static_cast<unsigned>(plan_.mergeBlocks())),
                                  dim3(cuda_fusion::kCudaDecodeMergeThreads), params, 0, stream),
        "cudaLaunchKernel(decode attention merge)");
  }

 private:
  cuda_fusion::CudaDecodePlan plan_;
  std::vector<cuda::DeviceBuffer> constants_;
  cuda::DeviceBuffer workspace_;
  cudaLibrary_t library_ = nullptr;
  cudaKernel_t partial_ = nullptr, merge_ = nullptr;
};

int multiprocessorCount() {
  int count = 0;
  if (cudart().cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess)
    return 1;
  return std::max(1, count);
}

// The generator's groups (asked of the generator itself, so rule and
// kernels cannot disagree: any node it writes is a seed, any group it
// writes, up to 16 nodes, fuses), and the decode attention groups named
// whole, as the native backend names them (native::attentionGroups).
class CudaFusionRule : public PatternRule {
 public:
  std::string name() const override { return "cuda_fusion"; }
  bool opRule(const Graph& g, NodeId n) const override {
    return cuda_fusion::nodeRefusal(g, n).empty();
  }
  std::optional<std::string> fusionRule(const Graph& g, const NodeSet& group, NodeId,
                                        NodeId) const override {
    if (group.count() > kMaxFusedNodes) return std::nullopt;
    if (!cuda_fusion::groupRefusal(g, group).empty()) return std::nullopt;
    return std::string("generated_kernel");
  }
  std::vector<std::pair<NodeSet, std::string>> wholeGroups(const Graph& g) const override {
    std::vector<std::pair<NodeSet, std::string>> out;
    for (auto& [group, label] : native::attentionGroups(g))
      if (label.rfind("decode_attention", 0) == 0) out.emplace_back(std::move(group), label);
    return out;
  }
};

class CudaFusionBackend : public Backend {
 public:
  std::string name() const override { return "cuda_fusion"; }
  // The GPU's fingerprint is part of the version, so measurements taken on
  // one GPU are never reused on another (the database keys on versions).
  // 0.2: decode attention groups compile (a stored refusal of one is stale).
  std::string version() const override {
    return "cuda_fusion 0.2 (" + cuda::currentGpuFingerprint().toString() + ")";
  }
  Device device() const override { return Device{DeviceType::CUDA, 0}; }
  DeviceRuntime* deviceRuntime() override { return &cuda::sharedDeviceRuntime(); }
  BackendKind kind() const override { return BackendKind::GraphLibrary; }

  CompileResult compile(const KernelRequest& request) override {
    if (std::string why = cudaFusionUnavailableReason(); !why.empty())
      return CompileResult::refuse(why);
    // A Softmax between two MatMuls is the decode attention kernel's to take or refuse.
    if (native::isAttentionGroup(*request.graph, request.nodes))
      return compileDecodeAttention(request);
    const cuda_fusion::FusionSource source = cuda_fusion::generateFusionKernel(request);
    if (!source.refusal.empty()) return CompileResult::refuse(source.refusal);
    const cuda_fusion::CompiledPtx ptx = cache_.get(source.source, cuda::targetArchitecture());
    if (ptx.ptx.empty()) return CompileResult::refuse("NVRTC failed: " + ptx.error);
    try {
      std::vector<cuda::DeviceBuffer> constants;
      for (ValueId v : source.constants)
        constants.push_back(cuda::DeviceBuffer::upload(*request.graph->value(v).constant));
      return CompileResult::ok(
          std::make_unique<FusedKernel>(ptx.ptx, std::move(constants), source.maxOutputSize,
                                        request.inputs.size(), request.outputs.size()));
    } catch (const Error& e) {
      return CompileResult::refuse(e.what());
    }
  }

  // As a graph library it takes any region the generator can write as one
  // kernel (the rule below, without the size limit).
  bool compilesRegions() const override { return true; }
  std::string regionRefusal(const KernelRequest& region) const override {
    return cuda_fusion::groupRefusal(*region.graph, region.nodes);
  }

  std::shared_ptr<const PatternRule> codeRule() const override {
    return std::make_shared<CudaFusionRule>();
  }

 private:
  CompileResult compileDecodeAttention(const KernelRequest& request) {
    const cuda_fusion::CudaDecodePlan plan =
        cuda_fusion::planDecodeAttention(request, multiprocessorCount());
    if (!plan.refusal.empty()) return CompileResult::refuse(plan.refusal);
    const cuda_fusion::CompiledPtx ptx =
        cache_.get(cuda_fusion::decodeAttentionSource(plan), cuda::targetArchitecture());
    if (ptx.ptx.empty()) return CompileResult::refuse("NVRTC failed: " + ptx.error);
    try {
      return CompileResult::ok(std::make_unique<DecodeAttentionKernel>(ptx.ptx, plan));
    } catch (const Error& e) {
      return CompileResult::refuse(e.what());
    }
  }

  cuda_fusion::PtxCache cache_;
};

}  // namespace

std::unique_ptr<Backend> createCudaFusionBackend() { return std::make_unique<CudaFusionBackend>(); }

}  // namespace collage
