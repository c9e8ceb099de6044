#include "backends/cuda_fusion/nvrtc_cache.h"

#include <nvrtc.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "backends/cuda_runtime/cuda_libraries.h"
#include "core/ir/hashing.h"

namespace fs = std::filesystem;

namespace collage::cuda_fusion {

namespace {

using cuda::nvrtc;

// Fast math stays off: the fused kernels are checked against the reference
// executor with the same tolerance as the CPU backends.
std::vector<std::string> options(const std::string& architecture) {
  return {"--gpu-architecture=" + architecture, "--std=c++17", "-default-device"};
}

std::string nvrtcVersionString() {
  int major = 0, minor = 0;
  nvrtc().nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace

std::string compileToPtx(const std::string& source, const std::string& architecture,
                         std::string* log) {
  nvrtcProgram program = nullptr;
  nvrtcResult status =
      nvrtc().nvrtcCreateProgram(&program, source.c_str(), "collage_fused.cu", 0, nullptr, nullptr);
  if (status != NVRTC_SUCCESS) {
    if (log) *log = std::string("nvrtcCreateProgram: ") + nvrtc().nvrtcGetErrorString(status);
    return "";
  }
  const std::vector<std::string> opts = options(architecture);
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  status = nvrtc().nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data());
  size_t logSize = 0;
  nvrtc().nvrtcGetProgramLogSize(program, &logSize);
  std::string text(logSize, '\0');
  if (logSize > 0) nvrtc().nvrtcGetProgramLog(program, text.data());
  while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
  std::string ptx;
  if (status == NVRTC_SUCCESS) {
    size_t size = 0;
    nvrtc().nvrtcGetPTXSize(program, &size);
    ptx.resize(size);
    nvrtc().nvrtcGetPTX(program, ptx.data());
    while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  } else {
    text = std::string("nvrtcCompileProgram: ") + nvrtc().nvrtcGetErrorString(status) + "\n" + text;
  }
  if (log) *log = text;
  nvrtc().nvrtcDestroyProgram(&program);
  return ptx;
}

std::string PtxCache::defaultDirectory() {
  if (const char* dir = std::getenv("COLLAGE_CUDA_CACHE"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/collage-studio/cuda_fusion";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/collage-studio/cuda_fusion";
}

PtxCache::PtxCache(std::string directory) : directory_(std::move(directory)) {}

std::string PtxCache::keyOf(const std::string& source, const std::string& architecture) {
  std::string what = "nvrtc " + nvrtcVersionString() + "\n";
  for (const auto& o : options(architecture)) what += o + "\n";
  return sha256Hex(what + source);
}

CompiledPtx PtxCache::get(const std::string& source, const std::string& architecture) {
  CompiledPtx result;
  result.key = keyOf(source, architecture);
  const fs::path file = fs::path(directory_) / (result.key + ".ptx");
  if (std::ifstream in(file, std::ios::binary); in) {
    std::ostringstream text;
    text << in.rdbuf();
    if (!text.str().empty()) {
      result.ptx = text.str();
      result.fromCache = true;
      std::lock_guard lock(mutex_);
      ++hits_;
      return result;
    }
  }
  std::string log;
  result.ptx = compileToPtx(source, architecture, &log);
  {
    std::lock_guard lock(mutex_);
    ++compilations_;
  }
  if (result.ptx.empty()) {
    result.error = log;
    return result;
  }
  // Write beside, then rename: another process never reads half a file. A
  // cache that cannot be written only costs a compilation next time.
  std::error_code ec;
  fs::create_directories(directory_, ec);
  const fs::path tmp = file.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << result.ptx;
  }
  fs::rename(tmp, file, ec);
  if (ec) fs::remove(tmp, ec);
  return result;
}

int PtxCache::compilations() const {
  std::lock_guard lock(mutex_);
  return compilations_;
}

int PtxCache::hits() const {
  std::lock_guard lock(mutex_);
  return hits_;
}

}  // namespace collage::cuda_fusion
