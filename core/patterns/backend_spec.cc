#include "core/patterns/backend_spec.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>

#include "core/ir/hashing.h"
#include "core/ir/install_paths.h"
#include "core/ops/op_registry.h"
#include "core/patterns/pattern_parser.h"

namespace fs = std::filesystem;

namespace collage {

std::string_view backendKindName(BackendKind kind) {
  return kind == BackendKind::OpLibrary ? "op_library" : "graph_library";
}

namespace {

// Colours declared by the specs parsed so far (any thread may parse or draw).
std::mutex colorsMutex;
std::map<std::string, std::string>& declaredColors() {
  static std::map<std::string, std::string> colors;
  return colors;
}

void declareColor(const BackendSpec& spec) {
  if (spec.color.empty() || spec.name.empty()) return;
  std::lock_guard<std::mutex> lock(colorsMutex);
  declaredColors()[spec.name] = spec.color;
}

}  // namespace

std::string backendColor(const std::string& backend) {
  {
    std::lock_guard<std::mutex> lock(colorsMutex);
    auto it = declaredColors().find(backend);
    if (it != declaredColors().end()) return it->second;
  }
  static const char* palette[] = {"#d62728", "#17becf", "#bcbd22", "#7f7f7f",
                                  "#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5"};
  return palette[stableHash(backend) % (sizeof palette / sizeof palette[0])];
}

SpecError::SpecError(const std::string& file, int line, int column, const std::string& reason)
    : Error(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + reason) {}

const PatternEntry* BackendSpec::findPattern(const std::string& patternName) const {
  for (const auto& p : patterns)
    if (p.name == patternName) return &p;
  return nullptr;
}

std::string BackendSpec::toString() const {
  std::ostringstream os;
  os << name << " (" << device.toString() << ", " << backendKindName(kind) << ") from " << path
     << "\n  limits: " << limits.toString() << "\n";
  for (const auto& p : patterns)
    os << "  pattern " << p.name << (p.userDefined ? " [user]" : "")
       << (p.enabled ? "" : " [disabled]") << ": " << p.text << "\n";
  if (rule) os << "  rule: " << rule->toString() << "\n";
  return os.str();
}

namespace {

// Reads one spec: every problem is a SpecError at the offending key or value.
class SpecReader {
 public:
  SpecReader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const toml::source_region& where, const std::string& reason) const {
    throw SpecError(path_, static_cast<int>(where.begin.line), static_cast<int>(where.begin.column),
                    reason);
  }

  std::string string(const toml::node& node, const std::string& what) const {
    if (auto v = node.value<std::string>()) return *v;
    fail(node.source(), what + " must be a string");
  }

  int integer(const toml::node& node, const std::string& what) const {
    if (auto v = node.value<int64_t>(); v && *v >= 0) return static_cast<int>(*v);
    fail(node.source(), what + " must be a non-negative integer");
  }

  std::vector<std::pair<std::string, toml::source_region>> strings(const toml::node& node,
                                                                    const std::string& what) const {
    const toml::array* arr = node.as_array();
    if (!arr) fail(node.source(), what + " must be a list of strings");
    std::vector<std::pair<std::string, toml::source_region>> out;
    for (const auto& el : *arr) out.emplace_back(string(el, what + " entries"), el.source());
    return out;
  }

  void checkOp(const std::string& op, const toml::source_region& where) const {
    if (!OpRegistry::instance().find(op)) fail(where, "unknown op '" + op + "'");
  }

  PatternEntry pattern(const std::string& name, const toml::node& node, bool user) const {
    PatternEntry e;
    e.name = name;
    e.text = string(node, "pattern '" + name + "'");
    e.file = path_;
    e.line = static_cast<int>(node.source().begin.line);
    e.userDefined = user;
    // The pattern text starts after the opening quote.
    int column = static_cast<int>(node.source().begin.column) + 1;
    try {
      e.pattern = parseValidPattern(e.text, e.line, column);
    } catch (const PatternError& err) {
      throw SpecError(path_, err.line(), err.column(), "pattern '" + name + "': " + err.reason());
    }
    return e;
  }

  BackendSpec read(const toml::table& root) const {
    BackendSpec spec;
    spec.path = path_;
    bool haveName = false;
    for (auto&& [key, node] : root) {
      const std::string k(key.str());
      if (k == "name") {
        spec.name = string(node, "name");
        haveName = true;
      } else if (k == "device") {
        std::string d = string(node, "device");
        if (d == "cpu") spec.device = Device{DeviceType::CPU, 0};
        else if (d == "cuda") spec.device = Device{DeviceType::CUDA, 0};
        else fail(node.source(), "device must be \"cpu\" or \"cuda\", not \"" + d + "\"");
      } else if (k == "kind") {
        std::string kind = string(node, "kind");
        if (kind == "op_library") spec.kind = BackendKind::OpLibrary;
        else if (kind == "graph_library") spec.kind = BackendKind::GraphLibrary;
        else fail(node.source(), "kind must be \"op_library\" or \"graph_library\", not \"" + kind + "\"");
      } else if (k == "color") {
        spec.color = string(node, "color");
        if (!std::regex_match(spec.color, std::regex("#[0-9a-fA-F]{6}")))
          fail(node.source(), "color must be \"#rrggbb\", not \"" + spec.color + "\"");
      } else if (k == "limits") {
        readLimits(node, spec.limits);
      } else if (k == "patterns") {
        const toml::table* t = node.as_table();
        if (!t) fail(node.source(), "[patterns] must be a table of name = \"pattern\"");
        for (auto&& [pk, pv] : *t) spec.patterns.push_back(pattern(std::string(pk.str()), pv, false));
      } else if (k == "rule") {
        spec.rule = readRule(node, spec.name);
      } else if (k == "description") {
        string(node, "description");
      } else {
        fail(key.source(), "unknown key '" + k +
                               "' (expected name, description, device, kind, color, limits, patterns, rule)");
      }
    }
    if (!haveName) fail(root.source(), "the spec has no name");
    if (spec.patterns.empty() && !spec.rule)
      fail(root.source(), "the spec declares neither [patterns] nor a [rule]");
    return spec;
  }

  void readLimits(const toml::node& node, SubGraphLimits& limits) const {
    const toml::table* t = node.as_table();
    if (!t) fail(node.source(), "[limits] must be a table");
    for (auto&& [key, v] : *t) {
      const std::string k(key.str());
      if (k == "max_depth") limits.maxDepth = integer(v, k);
      else if (k == "max_exits") limits.maxExits = integer(v, k);
      else if (k == "max_nodes") limits.maxNodes = integer(v, k);
      else if (k == "allow_taps") {
        auto b = v.value<bool>();
        if (!b) fail(v.source(), "allow_taps must be true or false");
        limits.allowTaps = *b;
      } else fail(key.source(), "unknown limit '" + k + "' (expected max_depth, max_exits, max_nodes, allow_taps)");
    }
  }

  std::shared_ptr<const DeclarativePatternRule> readRule(const toml::node& node,
                                                         const std::string& backendName) const {
    const toml::table* t = node.as_table();
    if (!t) fail(node.source(), "[rule] must be a table");
    OpRuleSpec op;
    FusionRuleSpec fusion;
    for (auto&& [key, v] : *t) {
      const std::string k(key.str());
      if (k == "ops" || k == "exclude_ops") {
        for (auto& [name, where] : strings(v, k)) {
          checkOp(name, where);
          (k == "ops" ? op.ops : op.excludedOps).push_back(name);
        }
      } else if (k == "kinds") {
        for (auto& [name, where] : strings(v, k)) {
          auto kind = opKindFromName(name);
          if (!kind)
            fail(where, "unknown OpKind '" + name +
                            "' (expected ElemWise, Broadcast, Injective, Reduction, Anchor, Opaque)");
          op.kinds.push_back(*kind);
        }
      } else if (k == "element_types") {
        for (auto& [name, where] : strings(v, k)) {
          ElementType et = elementTypeFromName(name);
          if (et == ElementType::Undefined) fail(where, "unknown element type '" + name + "'");
          op.elementTypes.push_back(et);
        }
      } else if (k == "max_rank") {
        op.maxRank = integer(v, k);
      } else if (k == "fusion") {
        for (auto& [name, where] : strings(v, k)) {
          if (!fusionStyleFromName(name)) {
            std::string known;
            for (const auto& s : fusionStyleNames()) known += (known.empty() ? "" : ", ") + s;
            fail(where, "unknown fusion style '" + name + "' (expected one of " + known + ")");
          }
          fusion.styles.push_back(name);
        }
      } else if (k == "max_nodes") {
        fusion.maxNodes = integer(v, k);
      } else if (k == "attributes") {
        const toml::array* arr = v.as_array();
        if (!arr) fail(v.source(), "attributes must be a list of {op, attribute, allowed} tables");
        for (const auto& el : *arr) {
          const toml::table* c = el.as_table();
          if (!c) fail(el.source(), "each attribute condition is a table {op, attribute, allowed}");
          AttributeCondition cond;
          for (auto&& [ck, cv] : *c) {
            const std::string name(ck.str());
            if (name == "op") {
              cond.op = string(cv, "op");
              checkOp(cond.op, cv.source());
            } else if (name == "attribute") {
              cond.attribute = string(cv, "attribute");
            } else if (name == "allowed") {
              for (auto& [s, w] : strings(cv, "allowed")) cond.allowed.push_back(s);
            } else {
              fail(ck.source(), "unknown key '" + name + "' in an attribute condition");
            }
          }
          if (cond.attribute.empty()) fail(el.source(), "an attribute condition needs 'attribute'");
          if (!cond.op.empty() &&
              !OpRegistry::instance().get(cond.op).findAttribute(cond.attribute))
            fail(el.source(), "op " + cond.op + " has no attribute '" + cond.attribute + "'");
          op.attributes.push_back(std::move(cond));
        }
      } else {
        fail(key.source(), "unknown key '" + k +
                               "' in [rule] (expected ops, kinds, exclude_ops, element_types, "
                               "max_rank, attributes, fusion, max_nodes)");
      }
    }
    return std::make_shared<DeclarativePatternRule>(backendName, std::move(op), std::move(fusion));
  }

 private:
  std::string path_;
};

toml::table parseToml(const std::string& text, const std::string& path) {
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw SpecError(path, static_cast<int>(e.source().begin.line),
                    static_cast<int>(e.source().begin.column), std::string(e.description()));
  }
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

BackendSpec parseBackendSpec(const std::string& text, const std::string& displayPath) {
  SpecReader reader(displayPath);
  BackendSpec spec = reader.read(parseToml(text, displayPath));
  declareColor(spec);
  return spec;
}

BackendSpec loadBackendSpec(const std::string& path) { return parseBackendSpec(readFile(path), path); }

SpecLoadResult loadBackendSpecs(const std::string& directory) {
  SpecLoadResult result;
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory, ec))
    if (entry.path().extension() == ".toml") files.push_back(entry.path().string());
  if (ec) result.errors.push_back(directory + ": cannot read the folder (" + ec.message() + ")");
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    try {
      BackendSpec spec = loadBackendSpec(f);
      auto clash = std::find_if(result.specs.begin(), result.specs.end(),
                                [&](const BackendSpec& s) { return s.name == spec.name; });
      if (clash != result.specs.end()) {
        result.errors.push_back(f + ": backend '" + spec.name + "' is already defined by " +
                                clash->path);
        continue;
      }
      result.specs.push_back(std::move(spec));
    } catch (const Error& e) {
      result.errors.push_back(e.what());
    }
  }
  return result;
}

std::string builtinSpecDirectory() {
  if (const char* env = std::getenv("COLLAGE_RESOURCES")) return std::string(env) + "/backends";
  // An installed tree first (core/ir/install_paths.h), so an installation
  // never reads the source tree it was built from, even when that still exists.
#ifdef COLLAGE_INSTALL_SPEC_DIR
  if (auto installed = findInstalledPath(COLLAGE_INSTALL_SPEC_DIR)) return *installed;
#endif
  // The build tree: the source tree's spec files.
#ifdef COLLAGE_SOURCE_RESOURCES
  if (fs::exists(COLLAGE_SOURCE_RESOURCES "/backends")) return COLLAGE_SOURCE_RESOURCES "/backends";
#endif
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path();
         dir = dir.parent_path())
      if (fs::exists(dir / "resources" / "backends")) return (dir / "resources" / "backends").string();
  }
  return "resources/backends";
}

// ---------------------------------------------------------------------------

std::string UserPatternStore::defaultPath() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg)
    return std::string(xdg) + "/collage-studio/user_patterns.toml";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.config/collage-studio/user_patterns.toml";
}

UserPatternStore::UserPatternStore(std::string path) : path_(std::move(path)) {}

void UserPatternStore::load() {
  patterns_.clear();
  disabled_.clear();
  if (!fs::exists(path_)) return;
  toml::table root = parseToml(readFile(path_), path_);
  SpecReader reader(path_);
  for (auto&& [bk, bv] : root) {
    const std::string backend(bk.str());
    const toml::table* t = bv.as_table();
    if (!t) reader.fail(bv.source(), "[" + backend + "] must be a table");
    for (auto&& [key, v] : *t) {
      const std::string k(key.str());
      if (k == "patterns") {
        const toml::table* pt = v.as_table();
        if (!pt) reader.fail(v.source(), "[" + backend + ".patterns] must be a table");
        for (auto&& [pk, pv] : *pt) {
          PatternEntry e = reader.pattern(std::string(pk.str()), pv, true);
          patterns_[backend].push_back(Entry{e.name, e.text, e.line});
        }
      } else if (k == "disabled") {
        for (auto& [name, where] : reader.strings(v, "disabled")) disabled_[backend].push_back(name);
      } else {
        reader.fail(key.source(), "unknown key '" + k + "' (expected patterns, disabled)");
      }
    }
  }
}

void UserPatternStore::save() const {
  toml::table root;
  for (const auto& name : backends()) {
    toml::table backend;
    toml::table pats;
    auto pit = patterns_.find(name);
    if (pit != patterns_.end())
      for (const auto& e : pit->second) pats.insert_or_assign(e.name, e.text);
    if (!pats.empty()) backend.insert_or_assign("patterns", std::move(pats));
    auto dit = disabled_.find(name);
    if (dit != disabled_.end() && !dit->second.empty()) {
      toml::array arr;
      for (const auto& d : dit->second) arr.push_back(d);
      backend.insert_or_assign("disabled", std::move(arr));
    }
    if (!backend.empty()) root.insert_or_assign(name, std::move(backend));
  }
  fs::path p(path_);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw Error(path_ + ": cannot write");
    out << "# Collage Studio: user-registered patterns (edited by the app and `collage spec`).\n";
    out << root << "\n";
    if (!out) throw Error(path_ + ": cannot write");
  }
  fs::rename(tmp, path_);  // atomic: a crash never leaves half a file
}

namespace {
bool isPatternName(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}
}  // namespace

void UserPatternStore::add(const std::string& backend, const std::string& name,
                           const std::string& text) {
  if (!isPatternName(name))
    throw Error("pattern name '" + name + "' must be letters, digits, '_' or '-'");
  parseValidPattern(text);  // throws PatternError with the position
  auto& list = patterns_[backend];
  for (auto& e : list)
    if (e.name == name) {
      e.text = text;
      return;
    }
  list.push_back(Entry{name, text, 0});
}

bool UserPatternStore::remove(const std::string& backend, const std::string& name) {
  auto it = patterns_.find(backend);
  if (it == patterns_.end()) return false;
  auto& list = it->second;
  auto e = std::find_if(list.begin(), list.end(), [&](const Entry& x) { return x.name == name; });
  if (e == list.end()) return false;
  list.erase(e);
  return true;
}

void UserPatternStore::setEnabled(const std::string& backend, const std::string& name,
                                  bool enabled) {
  auto& list = disabled_[backend];
  auto it = std::find(list.begin(), list.end(), name);
  if (enabled && it != list.end()) list.erase(it);
  if (!enabled && it == list.end()) list.push_back(name);
}

const std::vector<UserPatternStore::Entry>& UserPatternStore::patterns(
    const std::string& backend) const {
  static const std::vector<Entry> none;
  auto it = patterns_.find(backend);
  return it == patterns_.end() ? none : it->second;
}

bool UserPatternStore::isDisabled(const std::string& backend, const std::string& name) const {
  auto it = disabled_.find(backend);
  return it != disabled_.end() &&
         std::find(it->second.begin(), it->second.end(), name) != it->second.end();
}

std::vector<std::string> UserPatternStore::backends() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : patterns_) out.push_back(k);
  for (const auto& [k, v] : disabled_)
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  return out;
}

void UserPatternStore::applyTo(BackendSpec& spec) const {
  for (const auto& e : patterns(spec.name)) {
    if (const PatternEntry* existing = spec.findPattern(e.name)) {
      throw SpecError(path_, e.line, 1,
                      "pattern '" + e.name + "' of " + spec.name + " clashes with the one in " +
                          existing->file + ":" + std::to_string(existing->line));
    }
    PatternEntry p;
    p.name = e.name;
    p.text = e.text;
    p.file = path_;
    p.line = e.line;
    p.userDefined = true;
    p.pattern = parseValidPattern(e.text, e.line > 0 ? e.line : 1);
    spec.patterns.push_back(std::move(p));
  }
  for (auto& p : spec.patterns) p.enabled = !isDisabled(spec.name, p.name);
}

std::vector<BackendSpec> loadAllSpecs(std::vector<std::string>* errors,
                                      const std::string& userPatternsPath) {
  SpecLoadResult result = loadBackendSpecs(builtinSpecDirectory());
  UserPatternStore store(userPatternsPath);
  try {
    store.load();
    for (auto& spec : result.specs) store.applyTo(spec);
  } catch (const Error& e) {
    result.errors.push_back(e.what());
  }
  if (errors) *errors = std::move(result.errors);
  return std::move(result.specs);
}

}  // namespace collage
