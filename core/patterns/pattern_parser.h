// Reads the pattern language (grammar and examples: docs/patterns.md).
//
// Two steps, so that the editor can check syntax on every keystroke without
// the op registry and a spec file loader can check everything:
//   parsePattern     syntax only: any op name is accepted;
//   validatePattern  op names, attribute names and arities against the op
//                    registry, and literal types against attribute types.
// Both throw PatternError with a 1-based line and column.
#pragma once

#include <string_view>

#include "core/ops/op_registry.h"
#include "core/patterns/pattern.h"

namespace collage {

// Parses one pattern. `firstLine` and `firstColumn` are where `text` starts in
// its file, so that errors point into the file (a spec file passes the line
// and column where the pattern begins; the column offset applies to the text's
// first line only).
Pattern parsePattern(std::string_view text, int firstLine = 1, int firstColumn = 1);

// Throws PatternError at the offending op or attribute: "unknown op 'Convv'",
// "op Conv has no attribute 'kernal_shape'", "Relu takes at most 1 input, the
// pattern gives 2", "attribute 'auto_pad' of Conv has type string: compare it with
// == != or in".
void validatePattern(const Pattern& pattern,
                     const OpRegistry& registry = OpRegistry::instance());

// parsePattern + validatePattern.
Pattern parseValidPattern(std::string_view text, int firstLine = 1, int firstColumn = 1);

}  // namespace collage
