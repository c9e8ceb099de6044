#include "core/rewrite/spec_substitution.h"

#include "core/patterns/pattern_lexer.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "core/ir/error.h"
#include "core/ops/op_registry.h"
#include "core/patterns/backend_spec.h"
#include "core/patterns/pattern_matcher.h"
#include "core/patterns/pattern_parser.h"

namespace collage {
namespace {

using TargetExpr = SpecSubstitution::TargetExpr;
using Condition = SpecSubstitution::Condition;
using Operand = SpecSubstitution::Operand;

bool isVariableName(const std::string& s) {
  return !s.empty() && (std::islower(static_cast<unsigned char>(s[0])) || s[0] == '_');
}

// ---- a small lexer for targets and conditions (the pattern language's tokens)

struct Tok {
  enum Kind { Ident, Number, String, Punct, End } kind = End;
  std::string text;
  SourcePos pos;
};

// The rule's text in the pattern language's tokens (pattern_lexer.h), a
// number being a number here whether integer or float.
std::vector<Tok> lexRule(const std::string& text, SourcePos start) {
  std::vector<Tok> out;
  for (PatternToken& p : lexPattern(text, start.line, start.column)) {
    Tok t;
    switch (p.kind) {
      case PatternToken::Ident: t.kind = Tok::Ident; break;
      case PatternToken::Int:
      case PatternToken::Float: t.kind = Tok::Number; break;
      case PatternToken::String: t.kind = Tok::String; break;
      case PatternToken::Punct: t.kind = Tok::Punct; break;
      case PatternToken::End: t.kind = Tok::End; break;
    }
    t.text = std::move(p.text);
    t.pos = p.pos;
    out.push_back(std::move(t));
  }
  return out;
}

class TokenStream {
 public:
  explicit TokenStream(std::vector<Tok> toks) : toks_(std::move(toks)) {}
  const Tok& peek() const { return toks_[at_]; }
  Tok next() { return toks_[at_ < toks_.size() - 1 ? at_++ : at_]; }
  bool isPunct(const char* p) const { return peek().kind == Tok::Punct && peek().text == p; }
  bool accept(const char* p) {
    if (!isPunct(p)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const Tok& t, const std::string& why) const {
    throw PatternError(t.pos.line, t.pos.column, why);
  }
  void expect(const char* p, const std::string& what) {
    if (!accept(p))
      fail(peek(), "expected '" + std::string(p) + "' " + what + ", found " + describe(peek()));
  }
  std::string ident(const std::string& what) {
    if (peek().kind != Tok::Ident) fail(peek(), "expected " + what + ", found " + describe(peek()));
    return next().text;
  }
  static std::string describe(const Tok& t) {
    return t.kind == Tok::End ? "the end of the text" : "'" + t.text + "'";
  }

 private:
  std::vector<Tok> toks_;
  size_t at_ = 0;
};

PatternLiteral parseLiteral(TokenStream& ts) {
  const Tok t = ts.peek();
  if (ts.accept("[")) {
    std::vector<PatternLiteral> items;
    if (!ts.accept("]")) {
      do items.push_back(parseLiteral(ts));
      while (ts.accept(","));
      ts.expect("]", "after the list");
    }
    return PatternLiteral::ofList(std::move(items));
  }
  ts.next();
  if (t.kind == Tok::Ident || t.kind == Tok::String) return PatternLiteral::ofName(t.text);
  if (t.kind == Tok::Number) {
    try {
      size_t used = 0;
      if (t.text.find_first_of(".eE") == std::string::npos) {
        const long long v = std::stoll(t.text, &used);
        if (used == t.text.size()) return PatternLiteral::ofInt(v);
      } else {
        const double v = std::stod(t.text, &used);
        if (used == t.text.size()) return PatternLiteral::ofFloat(v);
      }
    } catch (const std::exception&) {
    }
    ts.fail(t, "'" + t.text + "' is not a number");
  }
  ts.fail(t, "expected a value, found " + TokenStream::describe(t));
}

// The literal as an attribute of `type`; nullopt when it cannot be one.
std::optional<Attribute> literalAs(const PatternLiteral& l, AttributeType type) {
  auto scalarInt = [](const PatternLiteral& x) -> std::optional<int64_t> {
    if (x.kind == PatternLiteral::Kind::Int) return x.intValue;
    return std::nullopt;
  };
  switch (type) {
    case AttributeType::Int:
      if (auto v = scalarInt(l)) return Attribute{*v};
      return std::nullopt;
    case AttributeType::Float:
      if (l.isNumber()) return Attribute{static_cast<float>(l.number())};
      return std::nullopt;
    case AttributeType::String:
      if (l.kind == PatternLiteral::Kind::Name) return Attribute{l.name};
      return std::nullopt;
    case AttributeType::Ints: {
      if (l.kind != PatternLiteral::Kind::List) return std::nullopt;
      std::vector<int64_t> v;
      for (const auto& x : l.list) {
        auto i = scalarInt(x);
        if (!i) return std::nullopt;
        v.push_back(*i);
      }
      return Attribute{v};
    }
    case AttributeType::Floats: {
      if (l.kind != PatternLiteral::Kind::List) return std::nullopt;
      std::vector<float> v;
      for (const auto& x : l.list) {
        if (!x.isNumber()) return std::nullopt;
        v.push_back(static_cast<float>(x.number()));
      }
      return Attribute{v};
    }
    case AttributeType::Strings: {
      if (l.kind != PatternLiteral::Kind::List) return std::nullopt;
      std::vector<std::string> v;
      for (const auto& x : l.list) {
        if (x.kind != PatternLiteral::Kind::Name) return std::nullopt;
        v.push_back(x.name);
      }
      return Attribute{v};
    }
    default:
      return std::nullopt;
  }
}

// ---- the source: a pattern whose lower-case bare names are variables

struct SourceInfo {
  std::set<std::string> variables;
  std::map<std::string, std::vector<std::string>> nodeCaptures;  // capture -> its ops
  std::map<std::string, SourcePos> capturePos;
  int hidden = 0;
};

void rewriteSource(PatternExpr& e, SourceInfo& info, const std::string& file,
                   const std::string& rule) {
  auto fail = [&](SourcePos p, const std::string& why) {
    throw SpecError(file, p.line, p.column, "rule '" + rule + "': source: " + why);
  };
  if (e.kind == PatternExpr::Kind::Op && !e.hasArgs && e.ops.size() == 1 &&
      isVariableName(e.ops[0])) {
    if (!e.attrs.empty() || e.hasType || e.optionalOp)
      fail(e.pos, "a variable ('" + e.ops[0] + "') takes no [...], ':' or '?'");
    if (!e.capture.empty()) fail(e.capturePos, "a variable cannot be captured again");
    const std::string name = e.ops[0];
    const SourcePos pos = e.pos;
    e = PatternExpr{};
    e.pos = pos;
    if (info.variables.count(name)) {
      e.kind = PatternExpr::Kind::Ref;
      e.refName = name;
    } else {
      e.kind = PatternExpr::Kind::Wildcard;
      e.capture = name;
      e.capturePos = pos;
      info.variables.insert(name);
    }
    return;
  }
  switch (e.kind) {
    case PatternExpr::Kind::Wildcard:
    case PatternExpr::Kind::Const:
      if (!e.capture.empty()) {
        if (!isVariableName(e.capture))
          fail(e.capturePos, "a variable's name begins with a lower-case letter");
        info.variables.insert(e.capture);
      }
      return;
    case PatternExpr::Kind::Ref:
      return;
    case PatternExpr::Kind::Optional:
      fail(e.pos,
           "optional inputs ('?') are not allowed in a rule's source: write one rule per form");
      return;
    case PatternExpr::Kind::Alternative:
      fail(e.pos, "alternatives are not allowed in a rule's source: write one rule per form");
      return;
    case PatternExpr::Kind::Op:
      break;
  }
  if (e.optionalOp)
    fail(e.pos, "optional ops ('?') are not allowed in a rule's source: write one rule per form");
  if (!e.hasArgs) fail(e.pos, "give " + e.ops[0] + " its inputs, e.g. " + e.ops[0] + "(x)");
  if (e.capture.empty()) {
    // Every source node is captured, so a match says which node is which.
    e.capture = "_" + std::to_string(++info.hidden);
  } else if (e.capture[0] == '_') {
    fail(e.capturePos, "a capture's name may not begin with '_'");
  }
  info.nodeCaptures[e.capture] = e.ops;
  info.capturePos[e.capture] = e.capturePos;
  for (auto& c : e.children) rewriteSource(c, info, file, rule);
}

// ---- the target

class TargetParser {
 public:
  TargetParser(TokenStream& ts, const SourceInfo& info, const std::string& file,
               const std::string& rule)
      : ts_(ts), info_(info), file_(file), rule_(rule) {}

  [[noreturn]] void fail(SourcePos p, const std::string& why) const {
    throw SpecError(file_, p.line, p.column, "rule '" + rule_ + "': target: " + why);
  }

  TargetExpr expr() {
    TargetExpr e;
    e.pos = ts_.peek().pos;
    if (ts_.peek().kind == Tok::Punct && ts_.peek().text == "$") {
      const Tok at = ts_.next();
      e.opFrom = nodeCapture(at);
      if (ts_.isPunct("["))
        fail(ts_.peek().pos, "$" + e.opFrom + "(...) takes the node's own attributes; no [...]");
      const Tok open = ts_.peek();
      ts_.expect("(", "with the inputs of $" + e.opFrom);
      if (!ts_.accept(")")) {
        do e.inputs.push_back(expr());
        while (ts_.accept(","));
        ts_.expect(")", "after the inputs of $" + e.opFrom);
      }
      for (const std::string& op : info_.nodeCaptures.at(e.opFrom))
        checkArity(OpRegistry::instance().get(op), e, open);
      return e;
    }
    const std::string name = ts_.ident("an op or a variable");
    if (isVariableName(name)) {
      if (!info_.variables.count(name))
        fail(e.pos, "the source defines no variable '" + name + "'");
      if (ts_.isPunct("(") || ts_.isPunct("["))
        fail(e.pos, "'" + name + "' is a variable (ops begin with a capital)");
      e.variable = name;
      return e;
    }
    const OpSchema* schema = OpRegistry::instance().find(name);
    if (!schema) fail(e.pos, "unknown op '" + name + "'");
    e.op = name;
    if (ts_.accept("[")) {
      e.hasAttrs = true;
      if (!ts_.accept("]")) {
        do e.attrs.push_back(attr(*schema));
        while (ts_.accept(","));
        ts_.expect("]", "after the attributes of " + name);
      }
    }
    const Tok open = ts_.peek();
    ts_.expect("(", "with the inputs of " + name + " (Op(...), Op() for none)");
    if (!ts_.accept(")")) {
      do e.inputs.push_back(expr());
      while (ts_.accept(","));
      ts_.expect(")", "after the inputs of " + name);
    }
    checkArity(*schema, e, open);
    if (!e.hasAttrs && !schema->attributes.empty()) {
      std::vector<std::string> same;
      for (const auto& [cap, ops] : info_.nodeCaptures)
        if (ops.size() == 1 && ops[0] == name) same.push_back(cap);
      if (same.size() > 1)
        fail(e.pos, name + " appears " + std::to_string(same.size()) +
                        " times in the source: say whose attributes it takes (" + name +
                        "[$capture]) or give them");
      if (same.size() == 1) e.copyFrom = same[0];
    }
    return e;
  }

 private:
  void checkArity(const OpSchema& schema, const TargetExpr& e, const Tok& open) const {
    const int n = static_cast<int>(e.inputs.size());
    if (n < schema.minInputs || n > schema.maxInputs)
      fail(open.pos,
           schema.name + " takes " + std::to_string(schema.minInputs) +
               (schema.maxInputs != schema.minInputs ? " to " + std::to_string(schema.maxInputs)
                                                     : "") +
               " input(s), the target gives " + std::to_string(n));
  }

  std::string nodeCapture(const Tok& at) {
    const std::string cap = ts_.ident("a capture's name after '$'");
    if (!info_.nodeCaptures.count(cap))
      fail(at.pos, info_.variables.count(cap)
                       ? "'$" + cap + "' is a variable, not a captured node"
                       : "the source captures no node '" + cap + "' (write c=Op(...) there)");
    return cap;
  }

  SpecSubstitution::TargetAttr attr(const OpSchema& schema) {
    SpecSubstitution::TargetAttr a;
    const Tok at = ts_.peek();
    if (ts_.accept("$")) {
      a.value.kind = SpecSubstitution::AttrValue::Kind::All;
      a.value.capture = nodeCapture(at);
      for (const std::string& op : info_.nodeCaptures.at(a.value.capture))
        if (op != schema.name)
          fail(at.pos, "'$" + a.value.capture + "' is a " + op + ", its attributes are not " +
                           schema.name + "'s");
      return a;
    }
    a.name = ts_.ident("an attribute name");
    const AttributeSpec* spec = schema.findAttribute(a.name);
    if (!spec) fail(at.pos, "op " + schema.name + " has no attribute '" + a.name + "'");
    ts_.expect("=", "after the attribute name");
    const Tok v = ts_.peek();
    if (ts_.accept("$")) {
      a.value.kind = SpecSubstitution::AttrValue::Kind::Ref;
      a.value.capture = nodeCapture(v);
      ts_.expect(".",
                 "after '$" + a.value.capture + "' (write $" + a.value.capture + ".attribute)");
      const Tok an = ts_.peek();
      a.value.attribute = ts_.ident("an attribute name");
      for (const std::string& op : info_.nodeCaptures.at(a.value.capture)) {
        const AttributeSpec* from = OpRegistry::instance().get(op).findAttribute(a.value.attribute);
        if (!from) fail(an.pos, "op " + op + " has no attribute '" + a.value.attribute + "'");
        if (from->type != spec->type)
          fail(an.pos, std::string("attribute '") + a.value.attribute + "' of " + op + " is " +
                           std::string(attributeTypeName(from->type)) + ", '" + a.name + "' of " +
                           schema.name + " is " + std::string(attributeTypeName(spec->type)));
      }
      return a;
    }
    const PatternLiteral lit = parseLiteral(ts_);
    auto value = literalAs(lit, spec->type);
    if (!value)
      fail(v.pos, "attribute '" + a.name + "' of " + schema.name + " is " +
                      std::string(attributeTypeName(spec->type)) + ", not " + lit.toString());
    a.value.literal = *value;
    return a;
  }

  TokenStream& ts_;
  const SourceInfo& info_;
  const std::string& file_;
  const std::string& rule_;
};

// ---- conditions

class ConditionParser {
 public:
  ConditionParser(const SourceInfo& info, const std::string& file, const std::string& rule)
      : info_(info), file_(file), rule_(rule) {}

  Condition parse(const std::string& text, SourcePos start) {
    TokenStream ts(lexRule(text, start));
    Condition c;
    const Tok first = ts.peek();
    if (first.kind == Tok::Ident && (first.text == "single_reader" || first.text == "const")) {
      ts.next();
      if (ts.isPunct("(")) {
        ts.next();
        c.kind = first.text == "const" ? Condition::Kind::Const : Condition::Kind::SingleReader;
        c.variable = variable(ts);
        ts.expect(")", "after the variable");
        end(ts);
        return c;
      }
      ts.fail(first, "expected '(' after " + first.text);
    }
    c.lhs = operand(ts);
    const Tok op = ts.peek();
    if (ts.accept("=="))
      c.equal = true;
    else if (ts.accept("!="))
      c.equal = false;
    else
      fail(op.pos, "expected '==' or '!=', found " + TokenStream::describe(op));
    c.rhs = operand(ts);
    end(ts);
    if (c.lhs.kind == Operand::Kind::Literal && c.rhs.kind == Operand::Kind::Literal)
      fail(first.pos, "a condition compares something of the source; both sides are literals");
    return c;
  }

 private:
  [[noreturn]] void fail(SourcePos p, const std::string& why) const {
    throw SpecError(file_, p.line, p.column, "rule '" + rule_ + "': condition: " + why);
  }
  void end(TokenStream& ts) const {
    if (ts.peek().kind != Tok::End)
      fail(ts.peek().pos, "unexpected " + TokenStream::describe(ts.peek()));
  }
  std::string variable(TokenStream& ts) const {
    const Tok t = ts.peek();
    const std::string v = ts.ident("a variable");
    if (!info_.variables.count(v)) fail(t.pos, "the source defines no variable '" + v + "'");
    return v;
  }
  Operand operand(TokenStream& ts) const {
    Operand o;
    const Tok t = ts.peek();
    if (ts.accept("$")) {
      o.kind = Operand::Kind::Attr;
      o.capture = ts.ident("a capture's name after '$'");
      if (!info_.nodeCaptures.count(o.capture))
        fail(t.pos, "the source captures no node '" + o.capture + "'");
      ts.expect(".", "after '$" + o.capture + "'");
      const Tok an = ts.peek();
      o.attribute = ts.ident("an attribute name");
      for (const std::string& op : info_.nodeCaptures.at(o.capture))
        if (!OpRegistry::instance().get(op).findAttribute(o.attribute))
          fail(an.pos, "op " + op + " has no attribute '" + o.attribute + "'");
      return o;
    }
    if (t.kind == Tok::Ident && t.text == "rank") {
      ts.next();
      ts.expect("(", "after rank");
      o.kind = Operand::Kind::Rank;
      o.capture = variable(ts);
      ts.expect(")", "after the variable");
      return o;
    }
    o.literal = parseLiteral(ts);
    return o;
  }

  const SourceInfo& info_;
  const std::string& file_;
  const std::string& rule_;
};

// ---- matching helpers

// The attribute `name` of a node, the op's default when absent.
std::optional<Attribute> nodeAttr(const Node& node, const std::string& name) {
  if (const Attribute* a = node.attrs.find(name)) return *a;
  const AttributeSpec* spec = OpRegistry::instance().get(node.op).findAttribute(name);
  if (spec && spec->defaultValue) return *spec->defaultValue;
  return std::nullopt;
}

// An operand as text of a canonical form, with the type of the other side
// for literals; nullopt when it has no value here.
std::optional<std::string> operandText(const Graph& g, const PatternMatch& m, const Operand& o,
                                       const Operand& other) {
  switch (o.kind) {
    case Operand::Kind::Attr: {
      auto a = nodeAttr(g.node(m.captures.at(o.capture)), o.attribute);
      if (!a) return std::nullopt;
      return attributeToString(*a);
    }
    case Operand::Kind::Rank:
      return std::to_string(g.value(m.valueCaptures.at(o.capture)).type.rank());
    case Operand::Kind::Literal: {
      if (other.kind == Operand::Kind::Attr) {
        const Node& n = g.node(m.captures.at(other.capture));
        const AttributeSpec* spec = OpRegistry::instance().get(n.op).findAttribute(other.attribute);
        auto a = spec ? literalAs(o.literal, spec->type) : std::nullopt;
        if (!a) return std::nullopt;
        return attributeToString(*a);
      }
      if (o.literal.kind != PatternLiteral::Kind::Int) return std::nullopt;
      return std::to_string(o.literal.intValue);
    }
  }
  return std::nullopt;
}

bool holds(const Graph& g, const PatternMatch& m, const Condition& c) {
  switch (c.kind) {
    case Condition::Kind::Const:
      return g.value(m.valueCaptures.at(c.variable)).isConstant();
    case Condition::Kind::SingleReader: {
      const Value& v = g.value(m.valueCaptures.at(c.variable));
      return v.consumers.size() == 1 && !v.isGraphOutput;
    }
    case Condition::Kind::Compare: {
      auto l = operandText(g, m, c.lhs, c.rhs), r = operandText(g, m, c.rhs, c.lhs);
      if (!l || !r) return false;
      return (*l == *r) == c.equal;
    }
  }
  return false;
}

}  // namespace

std::shared_ptr<const SpecSubstitution> SpecSubstitution::parse(const SubstitutionRuleText& text) {
  std::shared_ptr<SpecSubstitution> rule(new SpecSubstitution());
  rule->text_ = text;
  const std::string& file = text.file;
  const std::string& name = text.name;
  auto wrap = [&](const char* part, auto&& body) {
    try {
      body();
    } catch (const PatternError& e) {
      throw SpecError(file, e.line(), e.column(),
                      "rule '" + name + "': " + part + ": " + e.reason());
    }
  };
  SourceInfo info;
  wrap("source", [&] {
    Pattern parsed = parsePattern(text.source, text.sourcePos.line, text.sourcePos.column);
    PatternExpr root = parsed.root();
    if (root.kind != PatternExpr::Kind::Op)
      throw PatternError(root.pos.line, root.pos.column,
                         "a rule's source is an op applied to its inputs");
    rewriteSource(root, info, file, name);
    rule->source_ = Pattern(std::move(root), text.source);
    validatePattern(rule->source_);
  });
  rule->variables_.assign(info.variables.begin(), info.variables.end());
  wrap("target", [&] {
    TokenStream ts(lexRule(text.target, text.targetPos));
    TargetParser parser(ts, info, file, name);
    rule->target_ = parser.expr();
    if (ts.peek().kind != Tok::End)
      ts.fail(ts.peek(), "unexpected " + TokenStream::describe(ts.peek()) + " after the target");
  });
  ConditionParser conditions(info, file, name);
  for (size_t i = 0; i < text.conditions.size(); ++i) {
    const SourcePos pos = i < text.conditionPos.size() ? text.conditionPos[i] : SourcePos{};
    wrap("condition",
         [&] { rule->conditions_.push_back(conditions.parse(text.conditions[i], pos)); });
  }
  return rule;
}

std::string SpecSubstitution::origin() const {
  if (text_.namePos.line <= 0) return text_.file;
  return text_.file + ":" + std::to_string(text_.namePos.line) + ":" + std::to_string(text_.namePos.column);
}

std::string SpecSubstitution::describe() const {
  std::string d = text_.source + " -> " + text_.target;
  for (size_t i = 0; i < text_.conditions.size(); ++i)
    d += (i ? "; " : " if ") + text_.conditions[i];
  return d + " (" + (text_.file.empty() ? std::string("a spec file") : text_.file) + ")";
}

namespace {

bool isVariable(const TargetExpr& e) { return e.op.empty() && e.opFrom.empty(); }

// What the target needs from one match: the source's values and nodes.
struct Binding {
  const Graph& g;
  const PatternMatch& m;
};

Node targetNode(const Binding& b, const TargetExpr& e) {
  Node node;
  node.op = e.op;
  if (!e.opFrom.empty()) {
    const Node& from = b.g.node(b.m.captures.at(e.opFrom));
    node.op = from.op;
    node.attrs = from.attrs;
  }
  if (!e.copyFrom.empty()) node.attrs = b.g.node(b.m.captures.at(e.copyFrom)).attrs;
  for (const auto& a : e.attrs) {
    using K = SpecSubstitution::AttrValue::Kind;
    if (a.value.kind == K::All) {
      for (const auto& [k, v] : b.g.node(b.m.captures.at(a.value.capture)).attrs)
        node.attrs.set(k, v);
    } else if (a.value.kind == K::Literal) {
      node.attrs.set(a.name, a.value.literal);
    } else if (auto v = nodeAttr(b.g.node(b.m.captures.at(a.value.capture)), a.value.attribute)) {
      node.attrs.set(a.name, *v);
    } else {
      node.attrs.erase(a.name);  // absent there: absent here (the op's default)
    }
  }
  fillDefaults(node);
  return node;
}

// The type the target computes on this match (shape inference only); Error
// when it does not infer.
TensorType inferTarget(const Binding& b, const TargetExpr& e) {
  if (isVariable(e)) return b.g.value(b.m.valueCaptures.at(e.variable)).type;
  Node node = targetNode(b, e);
  std::vector<TensorType> types;
  for (const auto& in : e.inputs) types.push_back(inferTarget(b, in));
  node.inputs.assign(types.size(), 0);
  node.outputs = {0};
  return inferNode(node, types).at(0);
}

}  // namespace

bool SpecSubstitution::usable(const Graph& g, const PatternMatch& m) const {
  const Node& root = g.node(m.exit);
  if (root.outputs.empty() || root.outputs[0] == kNoValue) return false;
  for (size_t i = 1; i < root.outputs.size(); ++i)  // the root's other outputs must be unused
    if (root.outputs[i] != kNoValue &&
        (!g.value(root.outputs[i]).consumers.empty() || g.value(root.outputs[i]).isGraphOutput))
      return false;
  const ValueId y = root.outputs[0];
  if (isVariable(target_) && (g.value(y).isGraphOutput || readBySubgraphOwner(g, y))) return false;
  if (!std::all_of(conditions_.begin(), conditions_.end(),
                   [&](const Condition& c) { return holds(g, m, c); }))
    return false;
  try {
    return inferTarget({g, m}, target_) == g.value(y).type;
  } catch (const Error&) {
    return false;  // the target does not type on these shapes
  }
}

std::vector<SubstitutionSite> SpecSubstitution::find(const Graph& g) const {
  std::vector<SubstitutionSite> sites;
  std::set<std::vector<std::string>> seen;
  for (const PatternMatch& m : findMatches(source_, g)) {
    if (!usable(g, m)) continue;
    std::vector<std::string> names;
    for (NodeId n = 0; n < g.numNodes(); ++n)
      if (m.nodes.contains(n)) names.push_back(g.node(n).name);
    if (seen.insert(names).second) sites.push_back(SubstitutionSite{name(), names});
  }
  return sites;
}

RewriteEffect SpecSubstitution::apply(Graph& g, const SubstitutionSite& site) const {
  std::set<std::string> wanted(site.nodes.begin(), site.nodes.end());
  std::optional<PatternMatch> found;
  for (size_t i = 0; i < site.nodes.size() && !found; ++i) {
    const NodeId root = siteNode(g, site, i);
    for (const PatternMatch& m : matchesAt(source_, g, root)) {
      std::set<std::string> names;
      for (NodeId n = 0; n < g.numNodes(); ++n)
        if (m.nodes.contains(n)) names.insert(g.node(n).name);
      if (names != wanted || !usable(g, m)) continue;
      found = m;
      break;
    }
  }
  if (!found) throw Error(site.toString() + ": the rule's source does not match there");
  const PatternMatch m = *found;
  const NodeId rootId = m.exit;
  const ValueId y = g.node(rootId).outputs.at(0);
  const std::string yName = g.value(y).name;
  const std::string rootName = g.node(rootId).name;
  RewriteEffect effect;
  effect.removed = site.nodes;
  std::vector<bool> dead(static_cast<size_t>(g.numNodes()), false);
  for (NodeId n = 0; n < g.numNodes(); ++n)
    if (m.nodes.contains(n)) dead[static_cast<size_t>(n)] = true;

  if (isVariable(target_)) {  // an identity: the readers of y read the variable
    const ValueId x = m.valueCaptures.at(target_.variable);
    if (g.value(y).isGraphOutput || readBySubgraphOwner(g, y))
      throw Error(site.toString() + ": '" + yName + "' cannot be removed");
    replaceUses(g, y, x);
    effect.outputs.emplace_back(yName, g.value(x).name);
    g.removeNodes(dead);
    return effect;
  }

  // Build the target bottom-up, its nodes named after the source's root; the
  // root's node takes over y (the old root produces a value that dies with it).
  const Binding b{g, m};
  std::vector<std::pair<const TargetExpr*, Node>> pending;  // built after the inputs
  NodeId newRoot = kNoNode;
  std::function<ValueId(const TargetExpr&, bool)> build = [&](const TargetExpr& e,
                                                              bool isRoot) -> ValueId {
    if (isVariable(e)) return m.valueCaptures.at(e.variable);
    std::vector<ValueId> inputs;
    for (const auto& in : e.inputs) inputs.push_back(build(in, false));
    Node node = targetNode(b, e);
    node.name = uniqueNodeName(g, rootName + "/" + node.op);
    node.inputs = inputs;
    std::vector<TensorType> types;
    for (ValueId v : inputs) types.push_back(g.value(v).type);
    node.outputs = {0};
    const TensorType out = inferNode(node, types).at(0);
    node.outputs = {g.addValue(uniqueValueName(g, yName + "/" + node.op), out)};
    const ValueId v = node.outputs[0];
    effect.target.push_back(node.name);
    const NodeId id = g.addNode(std::move(node));
    if (isRoot) newRoot = id;
    return v;
  };
  const ValueId fresh = build(target_, true);
  // Swap: the new root writes y, the old root the fresh value (removed with it).
  g.mutableNode(newRoot).outputs[0] = y;
  g.mutableNode(rootId).outputs[0] = fresh;
  dead.resize(static_cast<size_t>(g.numNodes()), false);
  effect.outputs.emplace_back(yName, yName);
  g.removeNodes(dead);
  return effect;
}

}  // namespace collage
