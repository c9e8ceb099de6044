#include "core/patterns/pattern.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

namespace collage {

PatternError::PatternError(int line, int column, const std::string& reason)
    : Error("line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + reason),
      line_(line),
      column_(column),
      reason_(reason) {}

PatternLiteral PatternLiteral::ofInt(int64_t v) {
  PatternLiteral l;
  l.kind = Kind::Int;
  l.intValue = v;
  return l;
}

PatternLiteral PatternLiteral::ofFloat(double v) {
  PatternLiteral l;
  l.kind = Kind::Float;
  l.floatValue = v;
  return l;
}

PatternLiteral PatternLiteral::ofName(std::string v) {
  PatternLiteral l;
  l.kind = Kind::Name;
  l.name = std::move(v);
  return l;
}

PatternLiteral PatternLiteral::ofList(std::vector<PatternLiteral> v) {
  PatternLiteral l;
  l.kind = Kind::List;
  l.list = std::move(v);
  return l;
}

namespace {

bool isPlainIdentifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Shortest text that reads back to the same double, and that still reads as a
// float (not an int) when the value is integral.
std::string floatText(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // 'n': inf/nan stay as is
  return s;
}

}  // namespace

std::string PatternLiteral::toString() const {
  switch (kind) {
    case Kind::Int: return std::to_string(intValue);
    case Kind::Float: return floatText(floatValue);
    case Kind::Name: return isPlainIdentifier(name) ? name : quoted(name);
    case Kind::List: {
      std::string s = "[";
      for (size_t i = 0; i < list.size(); ++i) s += (i ? ", " : "") + list[i].toString();
      return s + "]";
    }
  }
  return "?";
}

std::string_view compareOpName(CompareOp op) {
  switch (op) {
    case CompareOp::Eq: return "==";
    case CompareOp::Ne: return "!=";
    case CompareOp::Lt: return "<";
    case CompareOp::Le: return "<=";
    case CompareOp::Gt: return ">";
    case CompareOp::Ge: return ">=";
    case CompareOp::In: return "in";
  }
  return "?";
}

std::string AttrConstraint::toString() const {
  return attribute + " " + std::string(compareOpName(op)) + " " + value.toString();
}

std::string TypeConstraint::toString() const {
  std::string s;
  if (elementType != ElementType::Undefined) s = std::string(elementTypeName(elementType));
  if (hasShape) {
    s += "[";
    bool first = true;
    auto sep = [&] {
      if (!first) s += ",";
      first = false;
    };
    for (size_t i = 0; i <= dims.size(); ++i) {
      if (static_cast<int>(i) == ellipsisAt) {
        sep();
        s += "...";
      }
      if (i == dims.size()) break;
      sep();
      s += dims[i] == kAnyDim ? "*" : std::to_string(dims[i]);
    }
    s += "]";
  }
  return s;
}

std::string PatternExpr::toString() const {
  std::string s;
  if (!capture.empty()) s = capture + "=";
  switch (kind) {
    case Kind::Wildcard: s += "*"; break;
    case Kind::Const: s += "const"; break;
    case Kind::Ref: s += "$" + refName; break;
    case Kind::Optional: s += "?" + children.at(0).toString(); break;
    case Kind::Alternative:
      s += "(";
      for (size_t i = 0; i < children.size(); ++i) {
        const PatternExpr& c = children[i];
        // A bare name before another alternative would read back as one op
        // of several names ('|' between names binds tightest: A | b() is
        // (A|b)()), so it keeps parentheses of its own: ((A) | b()).
        const bool bareName = c.kind == Kind::Op && !c.hasArgs && c.attrs.empty() && !c.hasType &&
                              !c.optionalOp;
        const bool wrap = bareName && i + 1 < children.size();
        s += (i ? " | " : "") + (wrap ? "(" + c.toString() + ")" : c.toString());
      }
      s += ")";
      break;
    case Kind::Op:
      for (size_t i = 0; i < ops.size(); ++i) s += (i ? "|" : "") + ops[i];
      if (optionalOp) s += "?";
      if (!attrs.empty()) {
        s += "[";
        for (size_t i = 0; i < attrs.size(); ++i) s += (i ? ", " : "") + attrs[i].toString();
        s += "]";
      }
      if (hasArgs) {
        s += "(";
        for (size_t i = 0; i < children.size(); ++i) s += (i ? ", " : "") + children[i].toString();
        s += ")";
      }
      break;
  }
  if (hasType) s += ":" + type.toString();
  return s;
}

namespace {

void collectRootOps(const PatternExpr& e, std::set<std::string>& out) {
  if (e.kind == PatternExpr::Kind::Alternative) {
    for (const auto& c : e.children) collectRootOps(c, out);
  } else if (e.kind == PatternExpr::Kind::Op) {
    out.insert(e.ops.begin(), e.ops.end());
    // An absent optional wrapper hands the exit to its first argument.
    if (e.optionalOp && !e.children.empty()) collectRootOps(e.children[0], out);
  }
}

void collectCaptures(const PatternExpr& e, std::set<std::string>& out) {
  if (!e.capture.empty()) out.insert(e.capture);
  for (const auto& c : e.children) collectCaptures(c, out);
}

}  // namespace

Pattern::Pattern(PatternExpr root, std::string text) : root_(std::move(root)), text_(std::move(text)) {
  std::set<std::string> ops, captures;
  collectRootOps(root_, ops);
  collectCaptures(root_, captures);
  rootOps_.assign(ops.begin(), ops.end());
  captureNames_.assign(captures.begin(), captures.end());
}

}  // namespace collage
