#include "core/rewrite/substitution_spec_file.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "core/ir/error.h"
#include "core/ir/install_paths.h"
#include "core/patterns/backend_spec.h"

namespace fs = std::filesystem;

namespace collage {
namespace {

SourcePos posOf(const toml::source_region& r) {
  return {static_cast<int>(r.begin.line), static_cast<int>(r.begin.column)};
}

// A string's text begins after its opening quote (or the three of a
// multi-line string, whose first newline TOML drops).
SourcePos stringStart(const toml::node& node, const std::string& fileText) {
  SourcePos p = posOf(node.source());
  // Find the quote(s) in the file to tell "..." from """...""".
  size_t offset = 0;
  for (int line = 1; line < p.line && offset != std::string::npos; ++line) {
    offset = fileText.find('\n', offset);
    if (offset != std::string::npos) ++offset;
  }
  if (offset == std::string::npos) return {p.line, p.column + 1};
  offset += static_cast<size_t>(p.column - 1);
  if (fileText.compare(offset, 3, "\"\"\"") == 0 || fileText.compare(offset, 3, "'''") == 0) {
    if (offset + 3 < fileText.size() && fileText[offset + 3] == '\n') return {p.line + 1, 1};
    return {p.line, p.column + 3};
  }
  return {p.line, p.column + 1};
}

// The key a duplicate rule's table is renamed to before TOML reads the file.
constexpr const char* kSetAside = "__collage_duplicate_rule_line_";

bool validRuleName(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
}

struct Registry {
  std::mutex mutex;
  bool builtinLoaded = false;
  std::vector<std::shared_ptr<const SpecSubstitution>> rules;
  std::vector<std::string> builtinErrors;
};

Registry& registry() {
  static Registry r;
  return r;
}

void addLocked(Registry& r, std::shared_ptr<const SpecSubstitution> rule) {
  for (const auto& known : r.rules)
    if (known->name() == rule->name()) {
      if (known->text().sameRule(rule->text())) return;
      const SubstitutionRuleText& t = rule->text();
      throw SpecError(
          t.file, t.namePos.line, t.namePos.column,
          "rule '" + t.name + "' is already defined, differently, by " +
              (known->text().file.empty() ? std::string("another file") : known->text().file));
    }
  r.rules.push_back(std::move(rule));
}

// Loads the built-in files once (the caller holds the mutex).
void ensureBuiltin(Registry& r) {
  if (r.builtinLoaded) return;
  r.builtinLoaded = true;
  const std::string dir = builtinSubstitutionDirectory();
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".toml") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    SubstitutionRulesLoad load = loadSubstitutionRules(f);
    r.builtinErrors.insert(r.builtinErrors.end(), load.errors.begin(), load.errors.end());
    for (auto& rule : load.rules) {
      try {
        addLocked(r, std::move(rule));
      } catch (const Error& e) {
        r.builtinErrors.push_back(e.what());
      }
    }
  }
}

}  // namespace

SubstitutionRulesLoad parseSubstitutionRules(const std::string& text,
                                             const std::string& displayPath) {
  SubstitutionRulesLoad load;
  // TOML refuses a table defined twice, which would lose the whole file: a
  // second [rules.NAME] is reported here and its table set aside, so the
  // other rules still load.
  std::string source = text;
  {
    static const std::regex header(
        R"(^([ \t]*)\[[ \t]*rules[ \t]*\.[ \t]*([A-Za-z0-9_-]+)[ \t]*\])");
    std::map<std::string, int> firstLine;
    size_t begin = 0;
    for (int line = 1; begin <= source.size(); ++line) {
      size_t end = source.find('\n', begin);
      if (end == std::string::npos) end = source.size();
      std::smatch m;
      const std::string row = source.substr(begin, end - begin);
      if (std::regex_search(row, m, header)) {
        const std::string name = m[2].str();
        auto [it, fresh] = firstLine.emplace(name, line);
        if (!fresh) {
          const int column = static_cast<int>(m.position(2)) + 1;
          load.errors.push_back(SpecError(displayPath, line, column,
                                          "rule '" + name + "' is defined twice (first at line " +
                                              std::to_string(it->second) + ")")
                                    .what());
          const std::string hidden = m[1].str() + "[" + kSetAside + std::to_string(line) + "]";
          source.replace(begin, static_cast<size_t>(m.length(0)), hidden);
          end = source.find('\n', begin);
          if (end == std::string::npos) end = source.size();
        }
      }
      begin = end + 1;
    }
  }
  toml::table root;
  try {
    root = toml::parse(source, displayPath);
  } catch (const toml::parse_error& e) {
    load.errors.push_back(SpecError(displayPath, static_cast<int>(e.source().begin.line),
                                    static_cast<int>(e.source().begin.column),
                                    std::string(e.description()))
                              .what());
    return load;
  }
  auto error = [&](const toml::source_region& where, const std::string& why) {
    const SourcePos p = posOf(where);
    load.errors.push_back(SpecError(displayPath, p.line, p.column, why).what());
  };
  std::set<std::string> cxxNames;
  for (const auto& r : standardSubstitutions()) cxxNames.insert(r->name());
  std::set<std::string> names;
  for (const auto& [key, node] : root) {
    if (key.str().rfind(kSetAside, 0) == 0) continue;  // a duplicate, reported above
    if (key.str() != "rules") {
      error(key.source(),
            "unknown key '" + std::string(key.str()) + "' (rules go in [rules.NAME] tables)");
      continue;
    }
    const toml::table* rules = node.as_table();
    if (!rules) {
      error(node.source(), "'rules' must be a table of [rules.NAME] tables");
      continue;
    }
    for (const auto& [nameKey, ruleNode] : *rules) {
      const std::string name(nameKey.str());
      const toml::source_region where =
          nameKey.source().begin.line ? nameKey.source() : ruleNode.source();
      const toml::table* t = ruleNode.as_table();
      if (!t) {
        error(where,
              "rule '" + name + "' must be a table with source, target and an optional condition");
        continue;
      }
      if (!validRuleName(name)) {
        error(where, "rule name '" + name + "': use letters, digits, '-' and '_'");
        continue;
      }
      if (cxxNames.count(name)) {
        error(where, "rule '" + name + "': a built-in C++ rule has that name");
        continue;
      }
      if (!names.insert(name).second) {
        error(where, "rule '" + name + "' is defined twice");
        continue;
      }
      SubstitutionRuleText rt;
      rt.name = name;
      rt.file = displayPath;
      rt.namePos = posOf(where);
      bool ok = true, haveSource = false, haveTarget = false;
      for (const auto& [k, v] : *t) {
        const std::string field(k.str());
        if (field == "source" || field == "target") {
          auto s = v.value<std::string>();
          if (!s) {
            error(v.source(), "rule '" + name + "': " + field + " must be a string");
            ok = false;
            continue;
          }
          (field == "source" ? rt.source : rt.target) = *s;
          (field == "source" ? rt.sourcePos : rt.targetPos) = stringStart(v, text);
          (field == "source" ? haveSource : haveTarget) = true;
        } else if (field == "condition") {
          const toml::array* arr = v.as_array();
          auto single = v.value<std::string>();
          if (single) {
            rt.conditions.push_back(*single);
            rt.conditionPos.push_back(stringStart(v, text));
            continue;
          }
          if (!arr) {
            error(v.source(),
                  "rule '" + name + "': condition must be a string or a list of strings");
            ok = false;
            continue;
          }
          for (const auto& el : *arr) {
            auto c = el.value<std::string>();
            if (!c) {
              error(el.source(), "rule '" + name + "': each condition must be a string");
              ok = false;
              continue;
            }
            rt.conditions.push_back(*c);
            rt.conditionPos.push_back(stringStart(el, text));
          }
        } else {
          error(k.source(),
                "rule '" + name + "': unknown key '" + field + "' (source, target, condition)");
          ok = false;
        }
      }
      if (ok && (!haveSource || !haveTarget)) {
        error(where, "rule '" + name + "' needs a " + (haveSource ? "target" : "source"));
        ok = false;
      }
      if (!ok) continue;
      try {
        load.rules.push_back(SpecSubstitution::parse(rt));
      } catch (const Error& e) {
        load.errors.push_back(e.what());
      }
    }
  }
  return load;
}

SubstitutionRulesLoad loadSubstitutionRules(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    SubstitutionRulesLoad load;
    load.errors.push_back(path + ": cannot open");
    return load;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return parseSubstitutionRules(ss.str(), path);
}

bool isSubstitutionRuleFile(const std::string& path) {
  try {
    const toml::table root = toml::parse_file(path);
    return root.contains("rules") && !root.contains("name");
  } catch (const std::exception&) {
    return false;
  }
}

std::string builtinSubstitutionDirectory() {
  if (const char* env = std::getenv("COLLAGE_RESOURCES"))
    return std::string(env) + "/substitutions";
#ifdef COLLAGE_INSTALL_SUBSTITUTION_DIR
  if (auto installed = findInstalledPath(COLLAGE_INSTALL_SUBSTITUTION_DIR)) return *installed;
#endif
#ifdef COLLAGE_SOURCE_RESOURCES
  if (fs::exists(COLLAGE_SOURCE_RESOURCES "/substitutions"))
    return COLLAGE_SOURCE_RESOURCES "/substitutions";
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path();
         dir = dir.parent_path())
      if (fs::exists(dir / "resources" / "substitutions"))
        return (dir / "resources" / "substitutions").string();
  return "resources/substitutions";
}

std::vector<const Substitution*> specSubstitutions() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  ensureBuiltin(r);
  std::vector<const Substitution*> out;
  for (const auto& rule : r.rules) out.push_back(rule.get());
  return out;
}

const SpecSubstitution* findSpecSubstitution(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  ensureBuiltin(r);
  for (const auto& rule : r.rules)
    if (rule->name() == name) return rule.get();
  return nullptr;
}

std::vector<std::string> builtinSubstitutionErrors() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  ensureBuiltin(r);
  return r.builtinErrors;
}

void registerSubstitution(std::shared_ptr<const SpecSubstitution> rule) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  ensureBuiltin(r);
  addLocked(r, std::move(rule));
}

std::vector<std::string> registerSubstitutionRules(const std::string& path) {
  SubstitutionRulesLoad load = loadSubstitutionRules(path);
  for (auto& rule : load.rules) {
    try {
      registerSubstitution(std::move(rule));
    } catch (const Error& e) {
      load.errors.push_back(e.what());
    }
  }
  return load.errors;
}

}  // namespace collage
