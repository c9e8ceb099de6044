// Substitution rules in spec files (TOML, docs/substitutions.md "Rules in a
// spec file"): the built-in ones under resources/substitutions/*.toml, found
// as the backends' spec files are, and a user's own file
// (`collage optimize --substitution-rules FILE`). One table per rule:
//
//   [rules.relu-before-transpose]           # the name plans and notes use
//   source    = "Relu(t=Transpose(x))"
//   target    = "Transpose[$t](Relu(x))"
//   condition = ["single_reader(x)"]        # optional
//
// A rule that does not load is reported as "FILE:LINE:COLUMN: reason" and
// the file's other rules still load.
//
// The rules a process knows: the C++ ones (standardSubstitutions()), the
// built-in spec rules (loaded on first use), and the rules registered since
// (a user's file, a plan's own copies). findSubstitution() finds all of
// them, so plans that name a spec rule replay it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/rewrite/spec_substitution.h"

namespace collage {

struct SubstitutionRulesLoad {
  std::vector<std::shared_ptr<const SpecSubstitution>> rules;
  std::vector<std::string> errors;  // "FILE:LINE:COLUMN: reason", one per rule that did not load
};

// Reads a rule file's text; never throws for the file's content (a TOML
// syntax error is one error, and then no rule loads). A name that a C++
// rule has, or an earlier rule of the file, is an error at that rule.
SubstitutionRulesLoad parseSubstitutionRules(const std::string& text,
                                             const std::string& displayPath);
// The same for a file; "PATH: cannot open" when it cannot be read.
SubstitutionRulesLoad loadSubstitutionRules(const std::string& path);

// Whether the file holds substitution rules (a top-level `rules` table and
// no backend `name`) rather than a backend's spec: what `collage spec
// --check` reads it as. False for a file that is no TOML.
bool isSubstitutionRuleFile(const std::string& path);

// Where the built-in rule files are: $COLLAGE_RESOURCES/substitutions, else
// an installed tree's share/collage-studio/substitutions, else the source
// tree's resources/substitutions.
std::string builtinSubstitutionDirectory();

// The spec rules this process knows, built-in first, then in the order registered.
std::vector<const Substitution*> specSubstitutions();
// The spec rule of that name, or nullptr.
const SpecSubstitution* findSpecSubstitution(const std::string& name);
// Problems of the built-in rule files (empty when they all loaded).
std::vector<std::string> builtinSubstitutionErrors();

// Makes `rule` known to this process. Registering a rule again with the
// same texts does nothing; a different rule of a known name is an Error
// naming both places.
void registerSubstitution(std::shared_ptr<const SpecSubstitution> rule);
// Loads a user's rule file and registers what loads; returns the problems
// (those of its rules that did not load or clash with a known name).
std::vector<std::string> registerSubstitutionRules(const std::string& path);

}  // namespace collage
