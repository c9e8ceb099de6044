// The built-in backends. Adding a backend: a folder under backends/, its spec
// file under resources/backends/, and one line in backend_list.cc.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"

namespace collage {

// Names of every built-in backend, in the default priority order.
std::vector<std::string> builtinBackendNames();
// Creates a backend by name; nullptr if there is none of that name.
std::unique_ptr<Backend> createBackend(const std::string& name);

}  // namespace collage
