#include "core/patterns/pattern_lexer.h"

#include <cctype>

#include "core/patterns/pattern.h"

namespace collage {
namespace {

// Punctuation, longest first so that "==" wins over "=".
constexpr std::string_view kPuncts[] = {"...", ".", "==", "!=", "<=", ">=", "(", ")", "[", "]", ",",
                                        "|",   "*",  "?",  ":",  "=",  "<", ">", "$"};

}  // namespace

std::vector<PatternToken> lexPattern(std::string_view text, int firstLine, int firstColumn) {
  std::vector<PatternToken> out;
  int line = firstLine, column = firstColumn;
  size_t i = 0;
  auto advance = [&](size_t n) {
    for (size_t k = 0; k < n && i < text.size(); ++k, ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
  };
  auto isDigit = [&](size_t at) {
    return at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]));
  };
  while (i < text.size()) {
    char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      advance(1);
      continue;
    }
    if (c == '#') {  // comment to the end of the line
      while (i < text.size() && text[i] != '\n') advance(1);
      continue;
    }
    PatternToken t;
    t.pos = {line, column};
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_'))
        ++j;
      t.kind = PatternToken::Ident;
      t.text = std::string(text.substr(i, j - i));
      advance(j - i);
    } else if (isDigit(i) || (c == '-' && (isDigit(i + 1) || (i + 2 < text.size() &&
                                                              text[i + 1] == '.' && isDigit(i + 2))))) {
      size_t j = i + 1;
      bool isFloat = false;
      while (isDigit(j)) ++j;
      if (j < text.size() && text[j] == '.' && isDigit(j + 1)) {
        isFloat = true;
        ++j;
        while (isDigit(j)) ++j;
      }
      if (j < text.size() && (text[j] == 'e' || text[j] == 'E')) {
        size_t k = j + 1;
        if (k < text.size() && (text[k] == '+' || text[k] == '-')) ++k;
        if (isDigit(k)) {
          isFloat = true;
          j = k;
          while (isDigit(j)) ++j;
        }
      }
      t.kind = isFloat ? PatternToken::Float : PatternToken::Int;
      t.text = std::string(text.substr(i, j - i));
      advance(j - i);
    } else if (c == '"' || c == '\'') {
      std::string value;
      size_t j = i + 1;
      // A string stays on one line, escaped or not, as its printed form
      // does (pattern.cc quotes it without escaping a newline).
      while (j < text.size() && text[j] != c && text[j] != '\n') {
        if (text[j] == '\\' && j + 1 < text.size() && text[j + 1] != '\n') ++j;
        value += text[j++];
      }
      if (j >= text.size() || text[j] != c)
        throw PatternError(line, column, "unterminated string");
      t.kind = PatternToken::String;
      t.text = std::move(value);
      advance(j + 1 - i);
    } else {
      for (std::string_view p : kPuncts) {
        if (text.substr(i, p.size()) == p) {
          t.kind = PatternToken::Punct;
          t.text = std::string(p);
          break;
        }
      }
      if (t.kind != PatternToken::Punct)
        throw PatternError(line, column, "unexpected character '" + std::string(1, c) + "'");
      advance(t.text.size());
    }
    out.push_back(std::move(t));
  }
  PatternToken end;
  end.pos = {line, column};
  out.push_back(end);
  return out;
}

}  // namespace collage
