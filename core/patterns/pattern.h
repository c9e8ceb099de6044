// The pattern language's syntax tree. A Pattern describes a group of ops a
// backend can run as one kernel; the text form (docs/patterns.md) is what a
// person types in a spec file or the pattern editor:
//
//   act=Relu|Clip?(Add?(conv=Conv[group == 1](*, const, ?const), *))
//
//        Op Relu|Clip  (optional wrapper, capture "act")
//        └── Op Add    (optional wrapper)
//            ├── Op Conv [group == 1]  (capture "conv")
//            │   ├── Wildcard *
//            │   ├── Const
//            │   └── Optional ── Const
//            └── Wildcard *
//
// The tree's root is the match's one exit. Wildcard and Const leaves are the
// match's inputs. A Ref leaf ($name) stands for the very value that the capture
// `name` matched, which turns the tree into a DAG (Mul(x=*, Sigmoid($x))).
//
// Nodes remember where they came from in the text, so that validation and
// tools can point at the spot (PatternError's line and column).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ir/element_type.h"
#include "core/ir/error.h"

namespace collage {

// A pattern text error: what() is "line 3, column 12: expected ')' after the
// inputs of Conv"; line and column are 1-based.
class PatternError : public Error {
 public:
  PatternError(int line, int column, const std::string& reason);
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& reason() const { return reason_; }

 private:
  int line_;
  int column_;
  std::string reason_;
};

struct SourcePos {
  int line = 1;
  int column = 1;
};

// A literal on the right of an attribute constraint: 3, -1, 0.5, NOTSET,
// "same upper", [3,3], [[1,1],[3,3]].
struct PatternLiteral {
  enum class Kind { Int, Float, Name, List };
  Kind kind = Kind::Int;
  int64_t intValue = 0;
  double floatValue = 0;
  std::string name;
  std::vector<PatternLiteral> list;

  static PatternLiteral ofInt(int64_t v);
  static PatternLiteral ofFloat(double v);
  static PatternLiteral ofName(std::string v);
  static PatternLiteral ofList(std::vector<PatternLiteral> v);
  bool isNumber() const { return kind == Kind::Int || kind == Kind::Float; }
  double number() const { return kind == Kind::Int ? static_cast<double>(intValue) : floatValue; }
  // Canonical text; names that are not plain identifiers are quoted.
  std::string toString() const;
};

enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge, In };
std::string_view compareOpName(CompareOp op);

// `kernel_shape == [3,3]`, `group > 1`, `auto_pad in [NOTSET, VALID]`.
struct AttrConstraint {
  std::string attribute;
  CompareOp op = CompareOp::Eq;
  PatternLiteral value;
  SourcePos pos;  // of the attribute name

  std::string toString() const;
};

// `:float32`, `:float32[1,*,*,*]`, `:[...,64]`, `:rank(4)` (same as `[*,*,*,*]`).
struct TypeConstraint {
  static constexpr int64_t kAnyDim = -1;
  ElementType elementType = ElementType::Undefined;  // Undefined: any
  bool hasShape = false;
  std::vector<int64_t> dims;  // kAnyDim for '*'; the '...' is not stored here
  int ellipsisAt = -1;        // index into dims where '...' stands, or -1
  SourcePos pos;

  std::string toString() const;  // without the leading ':'
};

struct PatternExpr {
  enum class Kind {
    Wildcard,     // *        any value, a match input
    Const,        // const    a constant value (initializer), a match input
    Optional,     // ?X       X, or an absent input; children[0] is X
    Op,           // Conv(...) an operator; children are its arguments
    Alternative,  // (A | B)  any one of children
    Ref,          // $name    the value that capture `name` matched
  };
  Kind kind = Kind::Wildcard;

  // Op: the accepted op names (Relu|Sigmoid|Tanh has three).
  std::vector<std::string> ops;
  // Op: Relu?(X): the op may be absent, children[0] then matches in its place.
  bool optionalOp = false;
  // Op: false for a bare name (`Relu`): any inputs, each a match input.
  bool hasArgs = false;
  std::vector<AttrConstraint> attrs;

  std::vector<PatternExpr> children;
  bool hasType = false;
  TypeConstraint type;
  std::string capture;  // Op, Wildcard, Const: the capture's name, or empty
  std::string refName;  // Ref: the capture referred to
  SourcePos pos;        // of the expression's first token after any capture
  SourcePos capturePos;  // of the capture's name

  bool isValue() const { return kind == Kind::Wildcard || kind == Kind::Const; }
  // Canonical text: the parser reads it back to an equal tree.
  std::string toString() const;
};

// A parsed pattern. Cheap to copy; immutable once built.
class Pattern {
 public:
  Pattern() = default;
  // `text` is the source as typed (kept for messages and the editor).
  explicit Pattern(PatternExpr root, std::string text = {});

  const PatternExpr& root() const { return root_; }
  const std::string& text() const { return text_; }
  // The op names a match's exit node can have (for indexing candidate roots).
  const std::vector<std::string>& rootOps() const { return rootOps_; }
  // Every capture name in the pattern, sorted.
  const std::vector<std::string>& captureNames() const { return captureNames_; }
  // Canonical text, e.g. "Relu(Conv(*, const, ?const))".
  std::string toString() const { return root_.toString(); }

 private:
  PatternExpr root_;
  std::string text_;
  std::vector<std::string> rootOps_;
  std::vector<std::string> captureNames_;
};

}  // namespace collage
