// The pattern language (core/patterns/pattern_parser): any text either
// parses or is refused with a PatternError; what parses prints back as text
// that parses to the same pattern, and validating it against the op registry
// either passes or is a PatternError, never anything else.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/patterns/pattern_parser.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace collage;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<Pattern> pattern;
  try {
    pattern = parsePattern(text);
  } catch (const PatternError&) {
    return 0;
  }
  const std::string printed = pattern->toString();
  try {
    COLLAGE_FUZZ_ASSERT(parsePattern(printed).toString() == printed,
                        "a parsed pattern prints back as text that parses to itself");
  } catch (const PatternError&) {
    COLLAGE_FUZZ_ASSERT(false, "a parsed pattern's printed form parses");
  }
  try {
    validatePattern(*pattern);
  } catch (const PatternError&) {
  }
  return 0;
}
