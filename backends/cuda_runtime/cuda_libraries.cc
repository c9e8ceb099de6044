#include "backends/cuda_runtime/cuda_libraries.h"

#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <mutex>

#include "core/ir/error.h"

namespace collage::cuda {

namespace {

// A header may map a name to a versioned symbol with a macro
// (`#define cudaFoo cudaFoo_v2`): the string looked up is the expanded name.
#define COLLAGE_CUDA_EXPANDED_NAME(name) COLLAGE_CUDA_STRINGIFY(name)
#define COLLAGE_CUDA_STRINGIFY(name) #name

struct Opened {
  void* handle = nullptr;
  std::string error;  // empty once opened
};

// NVRTC ships with the toolkit and carries its major version.
constexpr int kToolkitMajor = CUDART_VERSION / 1000;

Opened open(Library library) {
  Opened o;
  std::string file = libraryFile(library);
  // A toolkit outside the loader's search path (a pip wheel's nvidia/*/lib,
  // a second toolkit): that folder instead.
  if (const char* dir = std::getenv("COLLAGE_CUDA_LIBRARY_DIR"); dir && *dir)
    file = std::string(dir) + "/" + file;
  // RTLD_LOCAL: the libraries' own symbols must not interpose on anything
  // else in the process (the Python interpreter, a host program).
  o.handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!o.handle) {
    const char* why = dlerror();
    o.error = file + " did not load (" + (why ? why : "unknown reason") + ")";
  }
  return o;
}

const Opened& opened(Library library) {
  static std::array<Opened, 4> all;
  static std::array<std::once_flag, 4> once;
  const size_t i = static_cast<size_t>(library);
  std::call_once(once[i], [&] { all[i] = open(library); });
  return all[i];
}

void* symbol(Library library, const char* name) {
  const Opened& o = opened(library);
  if (!o.handle) throw Error(o.error);
  void* address = dlsym(o.handle, name);
  if (!address)
    throw Error(libraryFile(library) + " has no entry point " + name +
                " (a library older than the headers built against?)");
  return address;
}

// Resolves every entry point of `Api` at once, so that a missing one is
// found when the library is first used, not in the middle of a run.
#define COLLAGE_CUDA_RESOLVE(name) \
  api.name =                       \
      reinterpret_cast<decltype(api.name)>(symbol(kLibrary, COLLAGE_CUDA_EXPANDED_NAME(name)));

}  // namespace

std::string libraryFile(Library library) {
  switch (library) {
    case Library::Runtime:
      return "libcudart.so." + std::to_string(kToolkitMajor);
    case Library::BlasLt:
      return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    case Library::Dnn:
      return "libcudnn.so." + std::to_string(CUDNN_MAJOR);
    case Library::Rtc:
      return "libnvrtc.so." + std::to_string(kToolkitMajor);
  }
  return "";
}

const std::string& loadError(Library library) { return opened(library).error; }

std::string missingLibrary(const std::vector<Library>& needed) {
  for (Library library : needed)
    if (const std::string& why = loadError(library); !why.empty()) return why;
  return "";
}

// One accessor per library: the table is filled once, on first use.
#define COLLAGE_CUDA_DEFINE_TABLE(accessor, Api, library, entryPoints) \
  const Api& accessor() {                                              \
    static const Api table = [] {                                      \
      constexpr Library kLibrary = library;                            \
      Api api;                                                         \
      entryPoints(COLLAGE_CUDA_RESOLVE) return api;                    \
    }();                                                               \
    return table;                                                      \
  }

COLLAGE_CUDA_DEFINE_TABLE(cudart, RuntimeApi, Library::Runtime, COLLAGE_CUDART_ENTRY_POINTS)
COLLAGE_CUDA_DEFINE_TABLE(cublasLt, BlasLtApi, Library::BlasLt, COLLAGE_CUBLASLT_ENTRY_POINTS)
COLLAGE_CUDA_DEFINE_TABLE(cudnn, DnnApi, Library::Dnn, COLLAGE_CUDNN_ENTRY_POINTS)
COLLAGE_CUDA_DEFINE_TABLE(nvrtc, RtcApi, Library::Rtc, COLLAGE_NVRTC_ENTRY_POINTS)

}  // namespace collage::cuda
