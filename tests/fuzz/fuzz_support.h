// What the libFuzzer targets share: a failed property stops the run the way
// a sanitizer does, so that libFuzzer saves the input as a crash.
#pragma once

#include <cstdio>
#include <cstdlib>

#define COLLAGE_FUZZ_ASSERT(condition, what)                                     \
  do {                                                                           \
    if (!(condition)) {                                                          \
      std::fprintf(stderr, "fuzz property failed: %s (%s:%d)\n", what, __FILE__, \
                   __LINE__);                                                    \
      std::abort();                                                              \
    }                                                                            \
  } while (0)
