// The ONNX importer (core/onnx/onnx_import): any file either imports as a
// graph or is refused with an Error (Unsupported is one); the declared-input
// reader, which skips weights, is held to the same. The bytes go through a
// file because the importer reads files (external data is found beside it).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/ir/error.h"
#include "core/onnx/onnx_import.h"

namespace {
// One file per fuzzing process, in memory when /dev/shm is there.
const std::string& scratchPath() {
  static const std::string path = [] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/collage-fuzz-" + std::to_string(getpid()) + ".onnx";
  }();
  return path;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  const std::string& path = scratchPath();
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    readDeclaredInputs(path);
  } catch (const Error&) {
  }
  try {
    Graph graph = importOnnx(path);
    (void)graph;
  } catch (const Error&) {
  }
  std::remove(path.c_str());
  return 0;
}
