#include "core/patterns/pattern_parser.h"

#include "core/patterns/pattern_lexer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <set>

namespace collage {
namespace {

// ---------------------------------------------------------------- lexer

using Tok = PatternToken::Kind;
using Token = PatternToken;

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::End: return "the end of the pattern";
    case Tok::String: return "\"" + t.text + "\"";
    default: return "'" + t.text + "'";
  }
}

// ---------------------------------------------------------------- parser

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  PatternExpr parsePatternRoot() {
    if (isPunct("?")) fail(peek(), "'?' marks an optional input; it may only begin an argument");
    PatternExpr root = parseExpr();
    if (peek().kind != Tok::End) fail(peek(), "unexpected " + describe(peek()) + " after the pattern");
    checkRoot(root);
    std::map<std::string, SourcePos> captures = checkCaptures(root);
    std::vector<std::string> enclosing;
    checkRefs(root, captures, enclosing);
    return root;
  }

 private:
  const Token& peek(size_t ahead = 0) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool isPunct(std::string_view p, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::Punct && peek(ahead).text == p;
  }
  bool isIdent(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::Ident && peek(ahead).text == name;
  }
  [[noreturn]] static void fail(const Token& at, const std::string& reason) {
    throw PatternError(at.pos.line, at.pos.column, reason);
  }
  [[noreturn]] static void fail(SourcePos at, const std::string& reason) {
    throw PatternError(at.line, at.column, reason);
  }
  void expectPunct(std::string_view p, const std::string& reason) {
    if (!isPunct(p)) fail(peek(), reason + ", found " + describe(peek()));
    next();
  }
  static bool isKeyword(const std::string& s) { return s == "const"; }

  // arg := '?' expr | expr
  PatternExpr parseArg() {
    if (!isPunct("?")) return parseExpr();
    PatternExpr opt;
    opt.kind = PatternExpr::Kind::Optional;
    opt.pos = next().pos;
    if (isPunct("?")) fail(peek(), "'?' given twice");
    opt.children.push_back(parseExpr());
    return opt;
  }

  // expr := [IDENT '='] primary [':' type]
  PatternExpr parseExpr() {
    // The parser recurses once per nesting level; a bound keeps a pasted
    // pathological text from exhausting the stack.
    struct Depth {
      int& d;
      explicit Depth(int& depth) : d(depth) { ++d; }
      ~Depth() { --d; }
    } depth(depth_);
    if (depth_ > kMaxDepth) fail(peek(), "the pattern is nested too deeply");
    std::string capture;
    SourcePos capturePos;
    if (peek().kind == Tok::Ident && isPunct("=", 1)) {
      capturePos = peek().pos;
      capture = next().text;
      if (isKeyword(capture)) fail(capturePos, "'const' is a keyword, not a capture name");
      next();  // '='
      if (isPunct("?")) fail(peek(), "write the capture after '?': ?" + capture + "=...");
    }
    PatternExpr e = parsePrimary();
    if (!capture.empty()) {
      if (e.kind == PatternExpr::Kind::Alternative)
        fail(capturePos, "a capture names an operator, '*' or 'const'; put '" + capture +
                             "=' inside each alternative of the group");
      if (e.kind == PatternExpr::Kind::Ref)
        fail(capturePos, "a reference ($" + e.refName + ") cannot be captured again");
      if (!e.capture.empty()) fail(capturePos, "two captures on one expression");
      e.capture = capture;
      e.capturePos = capturePos;
    }
    if (isPunct(":")) {
      next();
      if (e.hasType) fail(peek(), "two type constraints on one expression");
      e.type = parseType();
      e.hasType = true;
    }
    return e;
  }

  // primary := '*' | 'const' | '$' IDENT | op | '(' expr ('|' expr)* ')' [args]
  PatternExpr parsePrimary() {
    const Token& t = peek();
    PatternExpr e;
    e.pos = t.pos;
    if (isPunct("*")) {
      next();
      e.kind = PatternExpr::Kind::Wildcard;
      return e;
    }
    if (isIdent("const")) {
      next();
      e.kind = PatternExpr::Kind::Const;
      return e;
    }
    if (isPunct("$")) {
      next();
      if (peek().kind != Tok::Ident) fail(peek(), "expected a capture name after '$'");
      e.kind = PatternExpr::Kind::Ref;
      e.refName = next().text;
      return e;
    }
    if (isPunct("?")) fail(t, "'?' marks an optional input; it may only begin an argument");
    if (isPunct("(")) return parseGroup();
    if (t.kind == Tok::Ident) return parseOp();
    fail(t, "expected an operator name, '*', 'const', '$name' or '(', found " + describe(t));
  }

  PatternExpr parseGroup() {
    SourcePos open = next().pos;  // '('
    std::vector<PatternExpr> alts;
    alts.push_back(parseExpr());
    while (isPunct("|")) {
      next();
      alts.push_back(parseExpr());
    }
    expectPunct(")", "expected '|' or ')' in the group opened at line " +
                         std::to_string(open.line) + ", column " + std::to_string(open.column));
    if (alts.size() == 1) {
      PatternExpr e = std::move(alts[0]);
      // (Relu|Sigmoid)(x): a group of bare op names takes an argument list.
      if (isPunct("(")) {
        if (e.kind != PatternExpr::Kind::Op || e.hasArgs || e.hasType || !e.capture.empty())
          fail(peek(), "only a group of bare operator names, like (Relu|Tanh), takes inputs");
        parseArgs(e);
      }
      return e;
    }
    // Alternatives that are all bare op names are one op of several names,
    // however they were grouped: (Relu | (Tanh)) is Relu|Tanh, and prints so.
    const bool bareNames = std::all_of(alts.begin(), alts.end(), [](const PatternExpr& a) {
      return a.kind == PatternExpr::Kind::Op && !a.hasArgs && !a.hasType && a.attrs.empty() &&
             a.capture.empty() && !a.optionalOp;
    });
    if (bareNames) {
      PatternExpr e = std::move(alts[0]);
      for (size_t i = 1; i < alts.size(); ++i)
        e.ops.insert(e.ops.end(), alts[i].ops.begin(), alts[i].ops.end());
      if (isPunct("(")) parseArgs(e);
      return e;
    }
    if (isPunct("("))
      fail(peek(), "a group of alternatives takes no inputs; give each alternative its own");
    PatternExpr e;
    e.kind = PatternExpr::Kind::Alternative;
    e.pos = open;
    e.children = std::move(alts);
    return e;
  }

  // op := IDENT ('|' IDENT)* ['?'] ['[' constraints ']'] ['(' [arg (',' arg)*] ')']
  PatternExpr parseOp() {
    PatternExpr e;
    e.kind = PatternExpr::Kind::Op;
    e.pos = peek().pos;
    e.ops.push_back(next().text);
    // '|' between bare names binds tightest: Relu|Sigmoid(x) is (Relu|Sigmoid)(x).
    while (isPunct("|") && peek(1).kind == Tok::Ident && !isKeyword(peek(1).text) &&
           !isPunct("=", 2)) {
      next();
      e.ops.push_back(next().text);
    }
    if (isPunct("?")) {
      next();
      e.optionalOp = true;
    }
    if (isPunct("[")) parseAttrs(e);
    if (isPunct("(")) parseArgs(e);
    if (e.optionalOp && e.children.empty())
      fail(e.pos, "optional operator " + e.ops[0] +
                      "? needs inputs: its first input matches in its place when it is absent");
    return e;
  }

  void parseArgs(PatternExpr& e) {
    next();  // '('
    e.hasArgs = true;
    if (isPunct(")")) {
      next();
      return;
    }
    while (true) {
      e.children.push_back(parseArg());
      if (isPunct(",")) {
        next();
        continue;
      }
      expectPunct(")", "expected ')' after the inputs of " + e.ops[0]);
      return;
    }
  }

  void parseAttrs(PatternExpr& e) {
    next();  // '['
    while (true) {
      if (peek().kind != Tok::Ident) fail(peek(), "expected an attribute name, found " + describe(peek()));
      AttrConstraint c;
      c.pos = peek().pos;
      c.attribute = next().text;
      const Token& opTok = peek();
      static const std::pair<std::string_view, CompareOp> kOps[] = {
          {"==", CompareOp::Eq}, {"!=", CompareOp::Ne}, {"<", CompareOp::Lt},
          {"<=", CompareOp::Le}, {">", CompareOp::Gt},  {">=", CompareOp::Ge}};
      bool found = false;
      if (isIdent("in")) {
        c.op = CompareOp::In;
        found = true;
      } else if (opTok.kind == Tok::Punct) {
        for (auto [text, op] : kOps)
          if (opTok.text == text) {
            c.op = op;
            found = true;
          }
      }
      if (!found)
        fail(opTok, "expected ==, !=, <, <=, >, >= or 'in' after attribute '" + c.attribute +
                        "', found " + describe(opTok));
      next();
      const Token& valueTok = peek();
      c.value = parseLiteral();
      if (c.op == CompareOp::In && c.value.kind != PatternLiteral::Kind::List)
        fail(valueTok, "'in' needs a list, like [NOTSET, VALID]");
      if (c.op != CompareOp::In && c.op != CompareOp::Eq && c.op != CompareOp::Ne &&
          !c.value.isNumber())
        fail(valueTok, "'" + std::string(compareOpName(c.op)) + "' compares with a number");
      e.attrs.push_back(std::move(c));
      if (isPunct(",")) {
        next();
        continue;
      }
      expectPunct("]", "expected ',' or ']' after the constraint on '" + e.attrs.back().attribute + "'");
      return;
    }
  }

  PatternLiteral parseLiteral() {
    const Token& t = peek();
    switch (t.kind) {
      case Tok::Int: {
        int64_t v = 0;
        auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (ec != std::errc() || p != t.text.data() + t.text.size())
          fail(t, "integer out of range: " + t.text);
        next();
        return PatternLiteral::ofInt(v);
      }
      case Tok::Float: {
        double v = 0;
        auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (ec != std::errc() || p != t.text.data() + t.text.size())
          fail(t, "bad number: " + t.text);
        next();
        return PatternLiteral::ofFloat(v);
      }
      case Tok::Ident:
      case Tok::String: return PatternLiteral::ofName(next().text);
      case Tok::Punct:
        if (t.text == "[") {
          next();
          std::vector<PatternLiteral> items;
          if (isPunct("]")) {
            next();
            return PatternLiteral::ofList(std::move(items));
          }
          while (true) {
            items.push_back(parseLiteral());
            if (isPunct(",")) {
              next();
              continue;
            }
            expectPunct("]", "expected ',' or ']' in the list");
            return PatternLiteral::ofList(std::move(items));
          }
        }
        break;
      case Tok::End: break;
    }
    fail(t, "expected a value (a number, a name, a \"string\" or a [list]), found " + describe(t));
  }

  // type := 'rank' '(' INT ')' | ELEMTYPE ['[' dims ']'] | '[' dims ']'
  TypeConstraint parseType() {
    TypeConstraint type;
    type.pos = peek().pos;
    if (isIdent("rank") && isPunct("(", 1)) {
      next();
      next();
      if (peek().kind != Tok::Int || peek().text[0] == '-')
        fail(peek(), "expected a rank (0, 1, 2, ...) in rank(...)");
      const Token& r = next();
      int64_t rank = 0;
      auto [p, ec] = std::from_chars(r.text.data(), r.text.data() + r.text.size(), rank);
      if (ec != std::errc() || rank > 64) fail(r, "rank " + r.text + " is too large");
      expectPunct(")", "expected ')' after the rank");
      type.hasShape = true;
      type.dims.assign(static_cast<size_t>(rank), TypeConstraint::kAnyDim);
      return type;
    }
    if (peek().kind == Tok::Ident) {
      const Token& t = next();
      type.elementType = elementTypeFromName(t.text);
      if (type.elementType == ElementType::Undefined)
        fail(t, "unknown element type '" + t.text + "' (float32, float16, int64, bool, ...)");
      if (!isPunct("[")) return type;
    }
    if (!isPunct("["))
      fail(peek(), "expected an element type (float32, int64, ...), a shape like [1,*,*] or "
                   "rank(N) after ':', found " + describe(peek()));
    next();  // '['
    type.hasShape = true;
    if (isPunct("]")) {
      next();
      return type;
    }
    while (true) {
      const Token& d = peek();
      if (isPunct("*")) {
        next();
        type.dims.push_back(TypeConstraint::kAnyDim);
      } else if (isPunct("...")) {
        if (type.ellipsisAt >= 0) fail(d, "'...' may appear only once in a shape");
        next();
        type.ellipsisAt = static_cast<int>(type.dims.size());
      } else if (d.kind == Tok::Int && d.text[0] != '-') {
        int64_t v = 0;
        auto [p, ec] = std::from_chars(d.text.data(), d.text.data() + d.text.size(), v);
        if (ec != std::errc()) fail(d, "dimension out of range: " + d.text);
        next();
        type.dims.push_back(v);
      } else {
        fail(d, "expected a dimension (a number, '*' or '...'), found " + describe(d));
      }
      if (isPunct(",")) {
        next();
        continue;
      }
      expectPunct("]", "expected ',' or ']' in the shape");
      return type;
    }
  }

  // A pattern's root is its exit node, so it must be an operator.
  static void checkRoot(const PatternExpr& e) {
    switch (e.kind) {
      case PatternExpr::Kind::Op: return;
      case PatternExpr::Kind::Alternative:
        for (const auto& c : e.children) checkRoot(c);
        return;
      default:
        fail(e.pos, "a pattern's root must be an operator (it is the match's exit), not '" +
                        e.toString() + "'");
    }
  }

  // Capture names are unique, except across the alternatives of a group (only
  // one of which matches). Returns the names captured in e.
  static std::map<std::string, SourcePos> checkCaptures(const PatternExpr& e) {
    std::map<std::string, SourcePos> names;
    for (const auto& c : e.children) {
      for (auto& [name, pos] : checkCaptures(c)) {
        if (names.count(name) && e.kind != PatternExpr::Kind::Alternative)
          fail(pos, "capture '" + name + "' is defined twice");
        names.emplace(name, pos);
      }
    }
    if (!e.capture.empty()) {
      if (names.count(e.capture)) fail(e.capturePos, "capture '" + e.capture + "' is defined twice");
      names.emplace(e.capture, e.capturePos);
    }
    return names;
  }

  static void checkRefs(const PatternExpr& e, const std::map<std::string, SourcePos>& captures,
                        std::vector<std::string>& enclosing) {
    if (e.kind == PatternExpr::Kind::Ref) {
      if (!captures.count(e.refName)) fail(e.pos, "no capture named '" + e.refName + "'");
      for (const auto& name : enclosing)
        if (name == e.refName)
          fail(e.pos, "'$" + e.refName + "' refers to an expression that contains it");
    }
    if (!e.capture.empty()) enclosing.push_back(e.capture);
    for (const auto& c : e.children) checkRefs(c, captures, enclosing);
    if (!e.capture.empty()) enclosing.pop_back();
  }

  static constexpr int kMaxDepth = 256;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// ---------------------------------------------------------------- validation

// Why `value` cannot be compared with an attribute of type `type` by `op`, or "".
std::string literalProblem(AttributeType type, CompareOp op, const PatternLiteral& value) {
  using K = PatternLiteral::Kind;
  auto all = [](const PatternLiteral& list, auto pred) {
    for (const auto& item : list.list)
      if (!pred(item)) return false;
    return true;
  };
  auto isNumber = [](const PatternLiteral& l) { return l.isNumber(); };
  auto isName = [](const PatternLiteral& l) { return l.kind == K::Name; };
  auto isNumberList = [&](const PatternLiteral& l) { return l.kind == K::List && all(l, isNumber); };
  auto isNameList = [&](const PatternLiteral& l) { return l.kind == K::List && all(l, isName); };
  bool ordering = op != CompareOp::Eq && op != CompareOp::Ne && op != CompareOp::In;
  switch (type) {
    case AttributeType::Int:
    case AttributeType::Float:
      if (op == CompareOp::In ? isNumberList(value) : value.isNumber()) return "";
      return "compare it with a number";
    case AttributeType::String:
      if (ordering) return "compare it with == != or in";
      if (op == CompareOp::In ? isNameList(value) : value.kind == K::Name) return "";
      return "compare it with a name or a \"string\"";
    case AttributeType::Ints:
    case AttributeType::Floats:
      if (op == CompareOp::In ? (isNumberList(value) || all(value, isNumberList))
                              : (value.isNumber() || (!ordering && isNumberList(value))))
        return "";
      return ordering ? "compare it with a number (each element is compared)"
                      : "compare it with a list of numbers or a number";
    case AttributeType::Strings:
      if (ordering) return "compare it with == != or in";
      if (op == CompareOp::In ? (isNameList(value) || all(value, isNameList))
                              : (value.kind == K::Name || isNameList(value)))
        return "";
      return "compare it with a list of names or a name";
    case AttributeType::Tensor: return "patterns cannot constrain tensor attributes";
    case AttributeType::Graph: return "patterns cannot constrain graph attributes";
  }
  return "";
}

void validateExpr(const PatternExpr& e, const OpRegistry& registry) {
  if (e.kind == PatternExpr::Kind::Op) {
    for (const auto& op : e.ops) {
      const OpSchema* schema = registry.find(op);
      if (!schema) throw PatternError(e.pos.line, e.pos.column, "unknown op '" + op + "'");
      if (e.hasArgs) {
        int n = static_cast<int>(e.children.size());
        if (n > schema->maxInputs)
          throw PatternError(e.pos.line, e.pos.column,
                             op + " takes at most " + std::to_string(schema->maxInputs) +
                                 (schema->maxInputs == 1 ? " input" : " inputs") +
                                 ", the pattern gives " + std::to_string(n));
        if (n < schema->minInputs)
          throw PatternError(e.pos.line, e.pos.column,
                             op + " takes at least " + std::to_string(schema->minInputs) +
                                 (schema->minInputs == 1 ? " input" : " inputs") +
                                 ", the pattern gives " + std::to_string(n));
      }
      for (const auto& c : e.attrs) {
        std::optional<AttributeType> type;
        if (const AttributeSpec* spec = schema->findAttribute(c.attribute)) type = spec->type;
        for (const auto& ci : schema->constInputs)
          if (ci.attribute == c.attribute) type = ci.type;
        if (!type)
          throw PatternError(c.pos.line, c.pos.column,
                             "op " + op + " has no attribute '" + c.attribute + "'");
        std::string problem = literalProblem(*type, c.op, c.value);
        if (!problem.empty())
          throw PatternError(c.pos.line, c.pos.column,
                             "attribute '" + c.attribute + "' of " + op + " has type " +
                                 std::string(attributeTypeName(*type)) + ": " + problem);
      }
    }
  }
  for (const auto& c : e.children) validateExpr(c, registry);
}

}  // namespace

Pattern parsePattern(std::string_view text, int firstLine, int firstColumn) {
  Parser parser(lexPattern(text, firstLine, firstColumn));
  return Pattern(parser.parsePatternRoot(), std::string(text));
}

void validatePattern(const Pattern& pattern, const OpRegistry& registry) {
  validateExpr(pattern.root(), registry);
}

Pattern parseValidPattern(std::string_view text, int firstLine, int firstColumn) {
  Pattern p = parsePattern(text, firstLine, firstColumn);
  validatePattern(p, OpRegistry::instance());
  return p;
}

}  // namespace collage
