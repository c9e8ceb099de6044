// collage::Error is the one exception type for problems a user can cause
// (a bad model, pattern, spec or plan). Its message is meant to be shown as
// is: it names the file, line, node or tensor at fault.
#pragma once

#include <stdexcept>
#include <string>

namespace collage {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Checks an internal invariant; a failure is a bug in Collage, not in the input.
#define COLLAGE_CHECK(cond, msg)                                                      \
  do {                                                                                \
    if (!(cond))                                                                      \
      throw ::collage::Error(std::string("internal error: ") + (msg) + " [" #cond "] at " + \
                             __FILE__ + ":" + std::to_string(__LINE__));             \
  } while (0)

}  // namespace collage
