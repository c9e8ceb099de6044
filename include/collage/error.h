// The one exception type of the public API. Its message is the one the
// `collage` command line prints after "error: ": it names the file, node,
// input or backend at fault, and says what to do where there is something to do.
#pragma once

#include <stdexcept>
#include <string>

#include "collage/export.h"

namespace collage::api {

class COLLAGE_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace collage::api
