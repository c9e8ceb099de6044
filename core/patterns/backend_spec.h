// Backend spec files: what a backend can run, in a file a person edits.
// One TOML file per backend under resources/backends/ (format:
// docs/spec-files.md), plus the user's own patterns in a file under the XDG
// config directory, merged over the built-in ones at load.
//
//   name = "onednn"            device = "cpu"          kind = "op_library"
//   [limits]   max_exits = 1   max_depth = 0           max_nodes = 0
//   [patterns] conv_relu = "Relu(Conv(*, const, ?const))"     # one line each
//   [rule]     kinds = ["ElemWise", "Broadcast"]  fusion = ["elemwise_only"]
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/device.h"
#include "core/patterns/pattern.h"
#include "core/patterns/pattern_rule.h"
#include "core/ir/sub_graph.h"

namespace collage {

// A spec file problem: what() is "FILE:LINE:COLUMN: reason".
class SpecError : public Error {
 public:
  SpecError(const std::string& file, int line, int column, const std::string& reason);
};

// What a backend is, as its spec declares (kind = "op_library" or "graph_library").
enum class BackendKind {
  OpLibrary,     // runs ops and small fused groups one kernel at a time (oneDNN, OpenBLAS, cuBLAS)
  GraphLibrary,  // optimises across kernels given a whole region (a fusion engine, TensorRT)
};
std::string_view backendKindName(BackendKind kind);

struct PatternEntry {
  std::string name;
  std::string text;
  Pattern pattern;
  std::string file;  // where it was defined
  int line = 0;
  bool userDefined = false;
  bool enabled = true;
};

struct BackendSpec {
  std::string name;
  Device device;
  BackendKind kind = BackendKind::OpLibrary;
  std::string color;  // "#rrggbb" from the `color` key: how the app and the exports show it
  SubGraphLimits limits;
  std::vector<PatternEntry> patterns;
  // The declarative pattern rule ([rule]); null when the spec has none.
  std::shared_ptr<const DeclarativePatternRule> rule;
  std::string path;

  const PatternEntry* findPattern(const std::string& patternName) const;
  std::string toString() const;  // a readable summary for `collage spec`
};

// Loads and validates one spec file (patterns parsed and checked against the
// op registry). Throws SpecError with file, line and reason.
BackendSpec loadBackendSpec(const std::string& path);
BackendSpec parseBackendSpec(const std::string& text, const std::string& displayPath);

// Loads every *.toml in a folder; a broken file is reported and skipped so
// the others still load.
struct SpecLoadResult {
  std::vector<BackendSpec> specs;
  std::vector<std::string> errors;
};
SpecLoadResult loadBackendSpecs(const std::string& directory);

// Where the built-in spec files are: $COLLAGE_RESOURCES/backends, else an
// installed tree's share/collage-studio/backends (relative to the binary:
// core/ir/install_paths.h), else the source tree's resources/backends
// (compiled in, for the build tree), else a resources/backends above the executable.
std::string builtinSpecDirectory();

// ---------------------------------------------------------------------------
// The colour the app and the exports give a backend ("#rrggbb"): the `color`
// of the last spec of that name parsed in this process, else one derived from
// the name (stable across runs), so a backend without a spec still has one.
std::string backendColor(const std::string& backend);

// The user's own patterns, per backend, in one TOML file:
//   [onednn.patterns]
//   conv_sigmoid = "Sigmoid(Conv(*, const, ?const))"
//   [onednn]
//   disabled = ["conv_relu"]
// The GUI's pattern editor and `collage spec` use this API.
class UserPatternStore {
 public:
  // $XDG_CONFIG_HOME/collage-studio/user_patterns.toml (~/.config/... by default).
  static std::string defaultPath();
  explicit UserPatternStore(std::string path = defaultPath());

  // Reads the file (a missing file is an empty store). Throws SpecError.
  void load();
  // Writes the file, creating its folder.
  void save() const;

  // Adds or replaces a pattern; throws PatternError/SpecError for a bad text or name.
  void add(const std::string& backend, const std::string& name, const std::string& text);
  // Removes a user pattern; false if there was none of that name.
  bool remove(const std::string& backend, const std::string& name);
  // Disables or re-enables any pattern (built-in or user) by name.
  void setEnabled(const std::string& backend, const std::string& name, bool enabled);

  struct Entry {
    std::string name, text;
    int line = 0;
  };
  const std::vector<Entry>& patterns(const std::string& backend) const;
  bool isDisabled(const std::string& backend, const std::string& name) const;
  std::vector<std::string> backends() const;

  // Merges into a loaded spec: user patterns appended (a name clash with a
  // built-in pattern is an error), disabled ones marked.
  void applyTo(BackendSpec& spec) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, std::vector<Entry>> patterns_;
  std::map<std::string, std::vector<std::string>> disabled_;
};

// The built-in specs with the user's patterns merged in: what enumeration uses.
// `errors` receives the problems of files that did not load.
std::vector<BackendSpec> loadAllSpecs(std::vector<std::string>* errors = nullptr,
                                      const std::string& userPatternsPath = UserPatternStore::defaultPath());

}  // namespace collage
