// A graph substitution written as text, in the pattern language's terms,
// rather than in C++ (docs/substitutions.md, "Rules in a spec file"):
//
//   [rules.relu-before-transpose]
//   source    = "Relu(t=Transpose(x))"        # a pattern; lower-case names are variables
//   target    = "Transpose[$t](Relu(x))"      # ops, variables, attributes by value or by reference
//   condition = ["rank(x) == 4"]              # optional
//
//        source                 target
//   Relu ── Transpose ── x  ▶  Transpose[perm = $t.perm] ── Relu ── x
//        (y)     (t)               (y, the same value)
//
// The source is a pattern (docs/patterns.md) in which a lower-case bare name
// (`x`) is a variable: any value, captured; its second use is the same value
// (`Mul(x, Sigmoid(x))`). Op nodes are captured as usual (`t=Transpose(x)`).
// The target is a tree of ops over the source's variables; its root computes
// the value the source's root computed, under the same name, so the graph
// downstream does not change. A target that is a bare variable removes an
// identity: the readers of the source's root read that value instead.
//
// Target attributes: `Op[name = literal, name = $cap.attr, $cap]`, where
// `$cap` copies every attribute of the captured source node. An op written
// without `[...]` copies the attributes of the one source node of the same
// op, when there is exactly one; else it takes the op's defaults. `$u(...)`
// is the captured node's own op with its attributes, so one rule covers a
// source with alternatives:
//
//   source = "t=Transpose(u=Relu|Tanh|LeakyRelu(x))"
//   target = "$u(Transpose[$t](x))"
//
// Conditions, each a string: `$a.attr == $b.attr`, `$a.attr != [0,2,1]`
// (a literal on either side), `rank(x) == 4`, `single_reader(x)` (the value
// has one reader and is no graph output), `const(x)`. The matcher already
// asks that every source node but the root be read only inside the match.
//
// Whether a rule is right is not taken on trust: every application goes
// through the equivalence check (core/rewrite/equivalence_check.h) like a
// C++ rule's, so a wrong rule is dropped with a note, never a wrong plan.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/patterns/pattern.h"
#include "core/patterns/pattern_matcher.h"
#include "core/rewrite/substitution.h"

namespace collage {

// A rule as written: its texts and where each begins in its file (1-based;
// a string's position is its first character after the opening quote).
struct SubstitutionRuleText {
  std::string name, source, target;
  std::vector<std::string> conditions;
  std::string file;  // for messages: "FILE:LINE:COLUMN: reason"
  SourcePos namePos, sourcePos, targetPos;
  std::vector<SourcePos> conditionPos;

  // Equal texts: the same rule (positions and file do not count).
  bool sameRule(const SubstitutionRuleText& o) const {
    return name == o.name && source == o.source && target == o.target && conditions == o.conditions;
  }
};

class SpecSubstitution : public Substitution {
 public:
  // Parses and checks a rule against the op registry. Throws SpecError
  // ("FILE:LINE:COLUMN: reason") for a text that does not parse, an
  // unknown op or attribute, a variable or capture the source does not
  // define, a bad condition.
  static std::shared_ptr<const SpecSubstitution> parse(const SubstitutionRuleText& text);

  std::string name() const override { return text_.name; }
  std::string describe() const override;
  // FILE:LINE:COLUMN of its [rules.NAME] table; a plan's carried rule:
  // "PLAN: substitution_rules[i]".
  std::string origin() const override;
  std::vector<SubstitutionSite> find(const Graph& graph) const override;
  RewriteEffect apply(Graph& graph, const SubstitutionSite& site) const override;

  const SubstitutionRuleText& text() const { return text_; }

  // The target's syntax tree (public for the parser in the .cc).
  struct AttrValue {
    enum class Kind { Literal, Ref, All } kind = Kind::Literal;
    Attribute literal;               // Literal: the value, typed as the attribute is
    std::string capture, attribute;  // $capture.attribute, or $capture (All)
  };
  struct TargetAttr {
    std::string name;  // empty for Kind::All
    AttrValue value;
  };
  struct TargetExpr {
    std::string op;        // empty: a variable (or opFrom)
    std::string opFrom;    // $u(...): the op and attributes of the source node captured as u
    std::string variable;  // the source variable (op empty)
    bool hasAttrs = false;
    std::vector<TargetAttr> attrs;
    std::vector<TargetExpr> inputs;
    std::string copyFrom;  // an op without [...]: the source capture whose attributes it copies
    SourcePos pos;
  };
  struct Operand {  // one side of a condition
    enum class Kind { Literal, Attr, Rank } kind = Kind::Literal;
    PatternLiteral literal;
    std::string capture, attribute;  // Attr: $capture.attribute; Rank: capture = the variable
  };
  struct Condition {
    enum class Kind { Compare, SingleReader, Const } kind = Kind::Compare;
    Operand lhs, rhs;
    bool equal = true;     // == or !=
    std::string variable;  // SingleReader, Const
  };

 private:
  SpecSubstitution() = default;
  // Whether a match of the source is a site: the root's other outputs
  // unused, the conditions hold, the target types as the source's root.
  bool usable(const Graph& graph, const PatternMatch& match) const;

  SubstitutionRuleText text_;
  Pattern source_;
  TargetExpr target_;
  std::vector<Condition> conditions_;
  std::vector<std::string> variables_;  // the source's value captures (lower-case names)
};

}  // namespace collage
