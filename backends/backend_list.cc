#include "backends/backend_list.h"

#include <functional>
#include <utility>

namespace collage {

// Each backend's folder defines its factory.
std::unique_ptr<Backend> createOneDnnBackend();
std::unique_ptr<Backend> createOpenBlasBackend();
std::unique_ptr<Backend> createNativeBackend();

namespace {
const std::vector<std::pair<std::string, std::function<std::unique_ptr<Backend>()>>>& factories() {
  static const std::vector<std::pair<std::string, std::function<std::unique_ptr<Backend>()>>> list = {
      {"onednn", createOneDnnBackend},
      {"openblas", createOpenBlasBackend},
      {"native", createNativeBackend},
  };
  return list;
}
}  // namespace

std::vector<std::string> builtinBackendNames() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : factories()) names.push_back(name);
  return names;
}

std::unique_ptr<Backend> createBackend(const std::string& name) {
  for (const auto& [n, factory] : factories())
    if (n == name) return factory();
  return nullptr;
}

}  // namespace collage
