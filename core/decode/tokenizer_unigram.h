// The Unigram model of a Hugging Face tokenizer.json (SentencePiece's
// unigram language model, as T5, ALBERT, XLNet and mBART ship it), run on
// one pre-token at a time (core/decode/tokenizer.h reads the file around it).
//
// The library's semantics (models/unigram): each piece has a score, its
// log-probability; the pre-token's pieces are those of the segmentation
// whose scores sum highest (Viterbi over every way to spell it from the
// vocabulary), not the greedy longest match. A character no piece starts
// with is the unknown piece, scored the lowest score less 10; unknown
// characters in a row are one unknown (the library always fuses them).
// After the search, an unknown run becomes its bytes' <0xXX> pieces when
// byte_fallback is on and the vocabulary has them all, else unk_id.
// Ties keep the path found first (the earlier start of the last piece).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace collage {

class UnigramModel {
 public:
  // `pieces`: (text, score) by id; `unk`: the unknown piece's id, -1 for
  // none; `path` names the file in errors. Throws Error when unk is not an
  // id of `pieces`.
  UnigramModel(std::vector<std::pair<std::string, double>> pieces, int64_t unk, bool byteFallback,
               std::string path);
  // Appends the pre-token's ids. Throws Error naming the file for a
  // character the vocabulary cannot spell when there is no unk_id.
  void encode(const std::string& text, std::vector<int64_t>& ids) const;

 private:
  std::vector<std::pair<std::string, double>> pieces_;
  std::unordered_map<std::string, int64_t> ids_;
  int64_t unk_ = -1;
  bool byteFallback_ = false;
  std::string path_;
  size_t longest_ = 0;   // the longest piece, in bytes
  double unkScore_ = 0;  // the lowest score less 10
};

}  // namespace collage
