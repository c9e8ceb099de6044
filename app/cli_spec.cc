// `collage spec`: check a spec file, show the loaded specs, manage user patterns.
#include <iostream>

#include "app/cli_common.h"
#include "backends/backend_list.h"
#include "core/patterns/backend_spec.h"
#include "core/rewrite/substitution_spec_file.h"

namespace collage::cli {

Action addSpecCommand(CLI::App& app) {
  struct Options {
    std::string check;
    bool show = false;
    std::vector<std::string> add;  // backend name text
    std::vector<std::string> remove;
    std::vector<std::string> disable;
    std::vector<std::string> enable;
    std::string userFile = UserPatternStore::defaultPath();
  };
  auto* command = app.add_subcommand("spec", "check spec files and manage user patterns");
  auto options = std::make_shared<Options>();
  command->add_option("--check", options->check,
                      "validate one spec file: a backend's, or a file of substitution rules ([rules.NAME] tables)");
  command->add_flag("--show", options->show, "print every loaded spec (built-in + user patterns)");
  command->add_option("--add", options->add, "register a user pattern: BACKEND NAME PATTERN")
      ->expected(3);
  command->add_option("--remove", options->remove, "remove a user pattern: BACKEND NAME")
      ->expected(2);
  command->add_option("--disable", options->disable, "disable a pattern: BACKEND NAME")->expected(2);
  command->add_option("--enable", options->enable, "re-enable a pattern: BACKEND NAME")->expected(2);
  command->add_option("--user-file", options->userFile, "the user pattern file");
  return [options]() {
    if (!options->check.empty() && isSubstitutionRuleFile(options->check)) {
      // A file of substitution rules ([rules.NAME] tables): every rule's error.
      const SubstitutionRulesLoad load = loadSubstitutionRules(options->check);
      for (const std::string& e : load.errors) std::cerr << e << "\n";
      std::cout << options->check << ": " << (load.errors.empty() ? "ok, " : "") << load.rules.size()
                << " substitution rule(s) loaded" << (load.errors.empty() ? "" : ", " + std::to_string(load.errors.size()) + " not") << "\n";
      for (const auto& rule : load.rules) std::cout << "  rule " << rule->name() << ": " << rule->describe() << "\n";
      return load.errors.empty() ? 0 : 1;
    }
    if (!options->check.empty()) {
      BackendSpec spec = loadBackendSpec(options->check);
      std::cout << options->check << ": ok\n" << spec.toString();
      return 0;
    }
    bool edited = false;
    UserPatternStore store(options->userFile);
    store.load();
    if (!options->add.empty()) {
      store.add(options->add[0], options->add[1], options->add[2]);
      edited = true;
    }
    if (!options->remove.empty()) {
      if (!store.remove(options->remove[0], options->remove[1]))
        throw Error("no user pattern '" + options->remove[1] + "' for " + options->remove[0]);
      edited = true;
    }
    if (!options->disable.empty()) {
      store.setEnabled(options->disable[0], options->disable[1], false);
      edited = true;
    }
    if (!options->enable.empty()) {
      store.setEnabled(options->enable[0], options->enable[1], true);
      edited = true;
    }
    if (edited) {
      store.save();
      std::cout << "saved " << store.path() << "\n";
    }
    if (options->show || !edited) {
      std::vector<std::string> errors;
      for (const auto& spec : loadAllSpecs(&errors, options->userFile)) std::cout << spec.toString();
      // The substitution rules in spec files (docs/substitutions.md).
      std::cout << "substitution rules from " << builtinSubstitutionDirectory() << "\n";
      for (const Substitution* rule : specSubstitutions())
        std::cout << "  rule " << rule->name() << ": " << rule->describe() << "\n";
      for (const auto& e : builtinSubstitutionErrors()) errors.push_back(e);
      for (const auto& e : errors) std::cerr << "error: " << e << "\n";
      return errors.empty() ? 0 : 1;
    }
    return 0;
  };
}

}  // namespace collage::cli
