#include "core/ir/json_text.h"

#include "core/ir/error.h"

namespace collage {

nlohmann::json parseJsonText(const std::string& text, const std::string& displayPath) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number no double holds (1e400).
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos && what.rfind("[json.", 0) == 0)
      what = what.substr(p + 2);
    throw Error(displayPath + ": not valid JSON: " + what);
  }
}

}  // namespace collage
