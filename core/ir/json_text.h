// Reading a JSON file's text, with the file named in the error: every file
// format of the tool (plans, topologies) starts here.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace collage {

// The parsed text, or an Error "PATH: not valid JSON: <what and where>"
// (nlohmann's "[json.exception.parse_error.101] " prefix dropped).
nlohmann::json parseJsonText(const std::string& text, const std::string& displayPath);

}  // namespace collage
