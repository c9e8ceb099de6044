// Runs a generated CUDA source's kernels on the CPU, blocks of real threads:
// the very text NVRTC compiles, built by the host C++ compiler behind a few
// lines that stand in for CUDA. Each block's threads are std::threads that
// share the block's __shared__ arrays (function statics: one block runs at a
// time) and meet at __syncthreads() (a std::barrier), so a kernel that
// needs its barriers shows a race here as on a device. It checks the
// kernels' index arithmetic, tiling and math against the reference on a
// machine without a GPU; what it cannot check is the device itself (warps,
// the driver's JIT, memory, timing). (host_emulation_backend.h runs the
// fusion kernels, which need no block, on one thread.)
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace collage::test_support {

inline constexpr const char* kCudaBlocksOnHostPrelude = R"(#include <math.h>
#include <string.h>
#include <barrier>
#include <thread>
#include <vector>
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(n)
#define __shared__ static
struct Dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local Dim3 threadIdx, blockIdx;
static Dim3 gridDim, blockDim;
static std::barrier<>* collage_block_barrier = nullptr;
static inline void __syncthreads() { collage_block_barrier->arrive_and_wait(); }
static inline float __int_as_float(unsigned bits) { float f; memcpy(&f, &bits, 4); return f; }
)";

// A source whose kernels take `struct Args { void* p[N]; }`, built with an
// entry per kernel name: host_<name>(gridX, gridY, threads, p).
class HostBlockModule {
 public:
  HostBlockModule(const std::string& source, const std::vector<std::string>& entries) {
    namespace fs = std::filesystem;
    static int count = 0;
    const fs::path base =
        fs::temp_directory_path() /
        ("collage_host_blocks_" + std::to_string(::getpid()) + "_" + std::to_string(count++));
    {
      std::ofstream out(base.string() + ".cc");
      out << kCudaBlocksOnHostPrelude << source
          << "template <class F> static void collage_launch(F f, unsigned gx, unsigned gy,\n"
             "    unsigned threads, void** p) {\n"
             "  Args args;\n  memcpy(args.p, p, sizeof args.p);\n"
             "  gridDim = {gx, gy, 1};\n  blockDim = {threads, 1, 1};\n"
             "  for (unsigned y = 0; y < gy; ++y)\n    for (unsigned x = 0; x < gx; ++x) {\n"
             "      std::barrier<> bar(threads);\n      collage_block_barrier = &bar;\n"
             "      std::vector<std::thread> ts;\n"
             "      for (unsigned t = 0; t < threads; ++t)\n"
             "        ts.emplace_back([&, t] { threadIdx = {t, 0, 0}; blockIdx = {x, y, 0}; "
             "f(args); });\n"
             "      for (auto& th : ts) th.join();\n    }\n}\n";
      for (const std::string& e : entries)
        out << "extern \"C\" void host_" << e
            << "(unsigned gx, unsigned gy, unsigned threads, void** p) { collage_launch(" << e
            << ", gx, gy, threads, p); }\n";
    }
    const std::string command = "c++ -std=c++20 -O1 -shared -fPIC -pthread -o " + base.string() +
                                ".so " + base.string() + ".cc 2> " + base.string() + ".log";
    const int status = std::system(command.c_str());
    std::ifstream logFile(base.string() + ".log");
    log_.assign(std::istreambuf_iterator<char>(logFile), std::istreambuf_iterator<char>());
    if (status == 0) library_ = dlopen((base.string() + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (status == 0 && !library_) log_ = dlerror();
    for (const char* ext : {".cc", ".so", ".log"}) fs::remove(base.string() + ext);
  }
  ~HostBlockModule() {
    if (library_) dlclose(library_);
  }
  HostBlockModule(const HostBlockModule&) = delete;
  HostBlockModule& operator=(const HostBlockModule&) = delete;

  bool ok() const { return library_ != nullptr; }
  const std::string& log() const { return log_; }  // the compiler's, when it failed
  void launch(const std::string& entry, unsigned gridX, unsigned gridY, unsigned threads,
              std::vector<void*>& slots) const {
    using Fn = void (*)(unsigned, unsigned, unsigned, void**);
    auto fn = reinterpret_cast<Fn>(dlsym(library_, ("host_" + entry).c_str()));
    if (fn) fn(gridX, gridY, threads, slots.data());
  }

 private:
  void* library_ = nullptr;
  std::string log_;
};

}  // namespace collage::test_support
