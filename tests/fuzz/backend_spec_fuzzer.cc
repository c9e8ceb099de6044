// Backend spec files (core/patterns/backend_spec): any text either loads as
// a spec or is refused with an Error (which names the file and line); never
// a crash, a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/patterns/backend_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    BackendSpec spec = parseBackendSpec(text, "fuzz.toml");
    (void)spec;
  } catch (const Error&) {
  }
  return 0;
}
