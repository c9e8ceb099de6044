#include "core/ir/install_paths.h"

#include <dlfcn.h>

#include <filesystem>

namespace collage {

std::string thisBinaryPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&thisBinaryPath), &info) == 0 || !info.dli_fname) return "";
  std::error_code ec;
  std::filesystem::path path = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::string(info.dli_fname) : path.string();
}

std::optional<std::string> findInstalledPath(const std::string& relative) {
  const std::string binary = thisBinaryPath();
  if (binary.empty()) return std::nullopt;
  // bin/ and lib/ are one level below the prefix, lib/<arch>/ two; three
  // levels is enough, and stopping there keeps a build tree from finding an
  // unrelated installation further up.
  std::filesystem::path dir = std::filesystem::path(binary).parent_path();
  for (int level = 0; level < 3 && !dir.empty(); ++level, dir = dir.parent_path()) {
    std::error_code ec;
    if (std::filesystem::exists(dir / relative, ec)) return (dir / relative).string();
    if (dir == dir.root_path()) break;
  }
  return std::nullopt;
}

}  // namespace collage
