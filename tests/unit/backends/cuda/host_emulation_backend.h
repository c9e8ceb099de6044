// A test-only backend that runs cuda_fusion's generated kernels on the CPU:
// the very source NVRTC compiles, built by the host C++ compiler as a
// shared library behind a few lines that stand in for CUDA (__device__ is
// nothing, a launch is one thread whose grid-stride loops cover every
// element). It checks the generator's index arithmetic and math against the
// reference executor on a machine without a GPU; what it cannot check is
// the device itself (launch configuration, the driver's JIT, memory).
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "backends/cuda_fusion/fusion_codegen.h"
#include "core/runtime/backend.h"

namespace collage::test_support {

inline constexpr const char* kCudaOnHostPrelude = R"(#include <math.h>
#include <string.h>
#define __device__
#define __forceinline__ inline
#define __global__
struct Dim3 { unsigned x = 1, y = 1, z = 1; };
static const Dim3 gridDim, blockDim;
static const Dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0};
static inline float __int_as_float(unsigned bits) { float f; memcpy(&f, &bits, 4); return f; }
)";

class HostEmulatedKernel : public Kernel {
 public:
  HostEmulatedKernel(void* library, void (*entry)(void**), std::vector<const void*> constants)
      : library_(library), entry_(entry), constants_(std::move(constants)) {}
  ~HostEmulatedKernel() override { dlclose(library_); }
  void run(const std::vector<const DLTensor*>& inputs,
           const std::vector<DLTensor*>& outputs) override {
    std::vector<void*> p;
    for (const DLTensor* t : inputs) p.push_back(t->data);
    for (const void* c : constants_) p.push_back(const_cast<void*>(c));
    for (DLTensor* t : outputs) p.push_back(t->data);
    entry_(p.data());
  }

 private:
  void* library_;
  void (*entry_)(void**);
  std::vector<const void*> constants_;
};

class HostEmulationBackend : public Backend {
 public:
  std::string name() const override { return "cuda_fusion_on_host"; }
  std::string version() const override { return "test"; }
  CompileResult compile(const KernelRequest& request) override {
    const cuda_fusion::FusionSource src = cuda_fusion::generateFusionKernel(request);
    if (!src.refusal.empty()) return CompileResult::refuse(src.refusal);
    namespace fs = std::filesystem;
    const fs::path base =
        fs::temp_directory_path() /
        ("collage_host_kernel_" + std::to_string(::getpid()) + "_" + std::to_string(count_++));
    {
      std::ofstream out(base.string() + ".cc");
      out << kCudaOnHostPrelude << src.source
          << "extern \"C\" void collage_host_entry(void** p) {\n"
          << "  Args args;\n  memcpy(args.p, p, sizeof args.p);\n  " << cuda_fusion::kEntryName
          << "(args);\n}\n";
    }
    const std::string command = "c++ -std=c++17 -O1 -shared -fPIC -o " + base.string() + ".so " +
                                base.string() + ".cc 2> " + base.string() + ".log";
    const int status = std::system(command.c_str());
    std::ifstream logFile(base.string() + ".log");
    const std::string log((std::istreambuf_iterator<char>(logFile)),
                          std::istreambuf_iterator<char>());
    void* library =
        status == 0 ? dlopen((base.string() + ".so").c_str(), RTLD_NOW | RTLD_LOCAL) : nullptr;
    for (const char* ext : {".cc", ".so", ".log"}) fs::remove(base.string() + ext);
    if (!library) return CompileResult::refuse("host compiler failed: " + log + "\n" + src.source);
    auto entry = reinterpret_cast<void (*)(void**)>(dlsym(library, "collage_host_entry"));
    std::vector<const void*> constants;
    for (ValueId v : src.constants) constants.push_back(request.graph->value(v).constant->raw());
    return CompileResult::ok(
        std::make_unique<HostEmulatedKernel>(library, entry, std::move(constants)));
  }

 private:
  int count_ = 0;
};

}  // namespace collage::test_support
