// The layering of the source tree, checked on every test run so it stays true
// without anyone watching it (core/README.md explains each folder):
//  - core/'s folders follow the flow of data, lowest first (kCoreOrder); a
//    file includes only its own folder and the folders below it;
//  - core/ never includes Qt, backends/, views/ or app/, and its code names no
//    concrete backend (a string literal equal to a folder name of backends/);
//  - backends/ never include views/ or app/; views/ never includes app/;
//  - the public API (api/, include/collage/) is above core/ and backends/ and
//    below nothing but python/; the installed headers (include/collage/)
//    include only the standard library, DLPack and each other;
//  - core/ has no source files at its top level, and every folder in it is
//    in kCoreOrder, in the same order as core/README.md's sections.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kRoot = COLLAGE_SOURCE_DIR;

// Lowest first: a folder may include the folders before it, never after.
const std::vector<std::string> kCoreOrder = {"ir",   "ops",     "onnx",    "patterns", "rewrite",
                                             "plan", "runtime", "measure", "search", "pipeline",
                                             "decode"};

int rankOf(const std::string& folder) {
  auto it = std::find(kCoreOrder.begin(), kCoreOrder.end(), folder);
  return it == kCoreOrder.end() ? -1 : static_cast<int>(it - kCoreOrder.begin());
}

std::string readFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every .h/.cc under `dir`, as paths relative to the source root.
std::vector<fs::path> sourcesUnder(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(kRoot / dir))
    if (e.is_regular_file() && (e.path().extension() == ".h" || e.path().extension() == ".cc"))
      files.push_back(fs::relative(e.path(), kRoot));
  std::sort(files.begin(), files.end());
  return files;
}

struct Include {
  int line;
  std::string target;  // as written: "core/ir/graph.h", "QWidget"
};

std::vector<Include> includesOf(const fs::path& file) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*[<"]([^>"]+)[>"])");
  std::vector<Include> out;
  std::istringstream in(readFile(kRoot / file));
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    std::smatch m;
    if (std::regex_search(text, m, kInclude)) out.push_back({line, m[1]});
  }
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += "\n  " + l;
  return s;
}

// "core/search/x.h" -> "search"; "" for anything else.
std::string coreFolderOf(const std::string& path) {
  static const std::regex kCore(R"(^core/([a-z_]+)/)");
  std::smatch m;
  return std::regex_search(path, m, kCore) ? std::string(m[1]) : "";
}

TEST(Layering, CoreIncludesPointDownThePipeline) {
  std::vector<std::string> violations;
  for (const auto& file : sourcesUnder("core")) {
    const std::string self = coreFolderOf(file.string());
    for (const auto& inc : includesOf(file)) {
      const std::string other = coreFolderOf(inc.target);
      if (other.empty() || rankOf(other) <= rankOf(self)) continue;
      violations.push_back(file.string() + ":" + std::to_string(inc.line) + ": includes " +
                           inc.target + ", but " + self + "/ comes before " + other +
                           "/ in the flow (core/README.md)");
    }
  }
  EXPECT_TRUE(violations.empty()) << joined(violations);
}

TEST(Layering, CoreUsesNoQtNoBackendNoApp) {
  std::vector<std::string> violations;
  for (const auto& file : sourcesUnder("core"))
    for (const auto& inc : includesOf(file)) {
      const std::string& t = inc.target;
      const bool qt = std::regex_search(t, std::regex(R"(^Q[A-Za-z]*($|/))"));
      if (qt || t.starts_with("backends/") || t.starts_with("views/") || t.starts_with("app/"))
        violations.push_back(file.string() + ":" + std::to_string(inc.line) + ": includes " + t +
                             " (core/ uses only the standard library and its own folders' "
                             "libraries: no Qt, no backend, no views or app)");
    }
  EXPECT_TRUE(violations.empty()) << joined(violations);
}

TEST(Layering, CoreCodeNamesNoConcreteBackend) {
  // The backends are the folders of backends/; comments may name them (as
  // examples), code may not: a backend is a plug-in, core/ must work without it.
  std::vector<std::string> backends;
  for (const auto& e : fs::directory_iterator(kRoot / "backends"))
    if (e.is_directory()) backends.push_back(e.path().filename().string());
  ASSERT_FALSE(backends.empty());
  std::vector<std::string> violations;
  for (const auto& file : sourcesUnder("core")) {
    std::istringstream in(readFile(kRoot / file));
    std::string text;
    for (int line = 1; std::getline(in, text); ++line) {
      const auto comment = text.find("//");
      const std::string code = comment == std::string::npos ? text : text.substr(0, comment);
      for (const auto& b : backends)
        if (code.find("\"" + b + "\"") != std::string::npos)
          violations.push_back(file.string() + ":" + std::to_string(line) + ": names the backend \"" +
                               b + "\" (declare it in the backend's spec file or pass it in)");
    }
  }
  EXPECT_TRUE(violations.empty()) << joined(violations);
}

TEST(Layering, BackendsAndViewsDoNotReachUp) {
  std::vector<std::string> violations;
  auto check = [&](const std::string& dir, const std::vector<std::string>& forbidden) {
    for (const auto& file : sourcesUnder(dir))
      for (const auto& inc : includesOf(file))
        for (const auto& f : forbidden)
          if (inc.target.starts_with(f))
            violations.push_back(file.string() + ":" + std::to_string(inc.line) + ": includes " +
                                 inc.target + " (" + dir + "/ may not use " + f + ")");
  };
  check("backends", {"views/", "app/", "api/", "collage/"});
  check("views", {"app/", "api/", "collage/"});
  // The public API sits on core/ and backends/; the Python module on the API.
  check("core", {"api/", "collage/", "python/"});
  check("api", {"app/", "views/", "python/"});
  check("python", {"core/", "backends/", "api/", "app/", "views/"});
  EXPECT_TRUE(violations.empty()) << joined(violations);
}

TEST(Layering, PublicHeadersStandAlone) {
  // include/collage/ is installed alone: its headers may include the standard
  // library, DLPack and each other, nothing of the source tree.
  std::vector<std::string> violations;
  for (const auto& file : sourcesUnder("include"))
    for (const auto& inc : includesOf(file)) {
      const std::string& t = inc.target;
      const bool allowed = t.starts_with("collage/") || t.starts_with("dlpack/") ||
                           (t.find('/') == std::string::npos && t.find('.') == std::string::npos);
      if (!allowed)
        violations.push_back(file.string() + ":" + std::to_string(inc.line) + ": includes " + t +
                             " (an installed header may use only the standard library, DLPack "
                             "and include/collage/)");
    }
  EXPECT_FALSE(sourcesUnder("include").empty());
  EXPECT_TRUE(violations.empty()) << joined(violations);
}

TEST(Layering, CoreHasOnlyStageFoldersInTheDocumentedOrder) {
  std::vector<std::string> unexpected, folders;
  for (const auto& e : fs::directory_iterator(kRoot / "core")) {
    const std::string name = e.path().filename().string();
    if (e.is_directory()) {
      folders.push_back(name);
      if (rankOf(name) < 0) unexpected.push_back("core/" + name + "/ is not in kCoreOrder");
    } else if (name != "CMakeLists.txt" && name != "README.md") {
      unexpected.push_back("core/" + name + " is at core/'s top level: put it in a stage folder");
    }
  }
  EXPECT_TRUE(unexpected.empty()) << joined(unexpected);
  EXPECT_EQ(folders.size(), kCoreOrder.size());

  // core/README.md has one "## name/" section per folder, in this order.
  std::vector<std::string> documented;
  std::istringstream in(readFile(kRoot / "core/README.md"));
  std::string text;
  static const std::regex kSection(R"(^## `?([a-z_]+)/`?)");
  while (std::getline(in, text)) {
    std::smatch m;
    if (std::regex_search(text, m, kSection)) documented.push_back(m[1]);
  }
  EXPECT_EQ(documented, kCoreOrder) << "core/README.md's sections and kCoreOrder disagree";
}

}  // namespace
