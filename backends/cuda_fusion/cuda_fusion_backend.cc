// The cuda_fusion backend: groups of elementwise, broadcast, injective and
// reduction ops as one generated CUDA kernel each (fusion_codegen.h),
// compiled by NVRTC and cached on disk (nvrtc_cache.h), loaded with the
// runtime's library API (cudaLibraryLoadData), so no libcuda link is needed.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>

#include "backends/cuda_fusion/fusion_codegen.h"
#include "backends/cuda_fusion/nvrtc_cache.h"
#include "backends/cuda_runtime/cuda_device.h"
#include "backends/cuda_runtime/cuda_device_runtime.h"
#include "backends/cuda_runtime/cuda_status.h"
#include "backends/cuda_runtime/device_kernel.h"
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

class CudaFusionBackend : public Backend {
 public:
  std::string name() const override { return "cuda_fusion"; }
  // The GPU's fingerprint is part of the version, so measurements taken on
  // one GPU are never reused on another (the database keys on versions).
  std::string version() const override {
    return "cuda_fusion 0.1 (" + cuda::currentGpuFingerprint().toString() + ")";
  }
  Device device() const override { return Device{DeviceType::CUDA, 0}; }
  DeviceRuntime* deviceRuntime() override { return &cuda::sharedDeviceRuntime(); }
  BackendKind kind() const override { return BackendKind::GraphLibrary; }

  CompileResult compile(const KernelRequest& request) override {
    if (std::string why = cudaFusionUnavailableReason(); !why.empty())
      return CompileResult::refuse(why);
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

  // The rule asks the generator itself, so rule and kernels cannot disagree:
  // any node it writes is a seed, any group it writes (up to 16 nodes)
  // fuses.
  std::shared_ptr<const PatternRule> codeRule() const override {
    return std::make_shared<FunctionPatternRule>(
        "cuda_fusion",
        [](const Graph& g, NodeId n) { return cuda_fusion::nodeRefusal(g, n).empty(); },
        [](const Graph& g, const NodeSet& group, NodeId, NodeId) -> std::optional<std::string> {
          if (group.count() > kMaxFusedNodes) return std::nullopt;
          if (!cuda_fusion::groupRefusal(g, group).empty()) return std::nullopt;
          return std::string("generated_kernel");
        });
  }

 private:
  cuda_fusion::PtxCache cache_;
};

}  // namespace

std::unique_ptr<Backend> createCudaFusionBackend() { return std::make_unique<CudaFusionBackend>(); }

}  // namespace collage
