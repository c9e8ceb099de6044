// The pattern language's tokens, shared by the patterns' parser
// (pattern_parser.h) and the substitution rules written in spec files
// (core/rewrite/spec_substitution.h), whose sources are patterns and whose
// targets use the same words: identifiers, numbers, quoted strings and
// punctuation, `#` comments to the end of the line, each token with its
// 1-based line and column in the file it came from.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/patterns/pattern.h"

namespace collage {

struct PatternToken {
  enum Kind { Ident, Int, Float, String, Punct, End };
  Kind kind = End;
  std::string text;  // identifier, string contents (escapes resolved), number text or punctuation
  SourcePos pos;
};

// The tokens of `text`, starting at (firstLine, firstColumn), ending with an
// End token. Punctuation: ... . == != <= >= ( ) [ ] , | * ? : = < > $.
// Throws PatternError at an unexpected character or an unterminated string.
std::vector<PatternToken> lexPattern(std::string_view text, int firstLine = 1, int firstColumn = 1);

}  // namespace collage
