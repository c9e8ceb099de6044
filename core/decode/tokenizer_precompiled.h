// The Precompiled normalizer of a Hugging Face tokenizer.json: the
// normalisation rules of a SentencePiece model (its precompiled_charsmap,
// e.g. nmt_nfkc's: NFKC with SentencePiece's own exceptions), as T5, ALBERT,
// XLNet and mBART files carry them (core/decode/tokenizer.h reads the file
// around it).
//
// The charsmap is base64 of: a little-endian u32, the byte size of a
// darts-clone double-array trie of 32-bit units; the trie; then the
// replacements, NUL-terminated UTF-8 strings, each trie key's value the
// offset of its replacement. The library's semantics (normalizers/
// precompiled, after SentencePiece's): the text is cut into grapheme
// clusters; a cluster under 6 bytes with a rule is replaced whole by the
// replacement of the first (shortest) key that is a prefix of it; any other
// cluster is taken a code point at a time, each replaced by its own rule's
// replacement or kept.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace collage {

class PrecompiledNormalizer {
 public:
  // `base64`: the precompiled_charsmap as the file writes it (empty: no
  // rules). `where` names the file and the step in errors. Throws Error
  // when it is not base64 or not a charsmap.
  PrecompiledNormalizer(const std::string& base64, std::string where);
  std::string normalize(const std::string& text) const;

 private:
  // The replacement of the shortest key that is a prefix of `chunk`.
  std::optional<std::string> transform(const std::string& chunk) const;

  std::vector<uint32_t> trie_;
  std::string replacements_;
  std::string where_;
};

}  // namespace collage
