// The WordPiece model of a Hugging Face tokenizer.json (BERT's), run on one
// pre-token at a time (core/decode/tokenizer.h reads the file around it).
//
// The library's semantics (models/wordpiece): a word longer than
// max_input_chars_per_word characters is the unknown token; otherwise it is
// cut greedily, longest match first: from the start, the longest prefix in
// the vocabulary, then from where it ended the longest continuation whose
// text with continuing_subword_prefix ("##") before it is in the
// vocabulary, and so on. A word any part of which has no piece is the
// unknown token as a whole (one id), never partly spelled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace collage {

class WordPieceModel {
 public:
  // `unk`: the unknown token's text (it need not be in `vocab` until a word
  // needs it); `path` names the file in errors.
  WordPieceModel(std::unordered_map<std::string, int64_t> vocab, std::string unk,
                 std::string prefix, size_t maxCharsPerWord, std::string path);
  // Appends the word's ids. Throws Error naming the file when the word needs
  // the unknown token and the vocabulary lacks it.
  void encode(const std::string& word, std::vector<int64_t>& ids) const;

 private:
  int64_t unknown(const std::string& word) const;

  std::unordered_map<std::string, int64_t> vocab_;
  std::string unk_, prefix_, path_;
  size_t maxChars_;
};

}  // namespace collage
