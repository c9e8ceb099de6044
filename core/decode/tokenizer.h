// A tokenizer a decoder model ships: text to token ids and back, so that
// `collage generate --prompt "text"` and the Generator take text
// (docs/decoding.md, "Text in and out"). Ids in and out never need one.
//
// Two formats, told apart by the file's name (.json, .model) or else by its
// first byte ('{': JSON):
//  - a SentencePiece model (`tokenizer.model`, a protobuf), run by the
//    SentencePiece library itself (Debian's libsentencepiece-dev): encode
//    gives the pieces' ids as `spm_encode` does, no BOS added;
//  - a Hugging Face `tokenizer.json` whose model is BPE, WordPiece or
//    Unigram, read with nlohmann::json and run by our own code as the
//    Hugging Face library defines each step: the byte-level BPE of GPT-2
//    (pre-tokenizer ByteLevel with its pattern) and of LLaMA-3 (a Split by
//    a regex, then ByteLevel), the SentencePiece-style BPE of LLaMA-2
//    (normalizer Prepend "▁" + Replace " " -> "▁", byte fallback), the
//    WordPiece of BERT (BertNormalizer, BertPreTokenizer, "##" pieces;
//    tokenizer_wordpiece.h) and the Unigram of T5 or ALBERT (a SentencePiece
//    charsmap as the Precompiled normalizer, tokenizer_precompiled.h;
//    Metaspace; Viterbi over the pieces' scores, tokenizer_unigram.h).
//    Added tokens are split out of the text first; the post-processor's
//    template (a BOS, [CLS] ... [SEP]) is applied, as the library's encode
//    does by default. A step of the file this code does not implement (a
//    WordLevel model, a Digits pre-tokenizer, ...) is refused when loading,
//    naming the file and the step's JSON path, rather than encoded
//    differently; only an added token's single_word and normalized flags
//    are ignored (docs/decoding.md).
// A file that cannot be read, parsed or understood is an Error naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace collage {

class Tokenizer {
 public:
  // Reads a tokenizer file (above). Throws Error naming `path`.
  static std::unique_ptr<Tokenizer> load(const std::string& path);
  // The tokenizer files looked for beside a model, in that order:
  // tokenizer.json, then tokenizer.model, in the model file's folder.
  static std::vector<std::string> candidatesBeside(const std::string& modelPath);
  // The first of candidatesBeside() that exists, or "" when none does.
  static std::string findBeside(const std::string& modelPath);

  virtual ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  // The text's ids (UTF-8 in). Throws Error for text the vocabulary cannot
  // spell (no byte fallback nor unknown token), naming the file.
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  // The ids' text (UTF-8 out; bytes that are not UTF-8 become U+FFFD).
  // Throws Error for an id outside [0, vocabularySize()).
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  // One past the largest id.
  virtual int64_t vocabularySize() const = 0;
  // "SentencePiece" or "tokenizer.json".
  virtual std::string format() const = 0;
  const std::string& path() const { return path_; }

 protected:
  explicit Tokenizer(std::string path) : path_(std::move(path)) {}
  // Throws Error unless every id is in [0, vocabularySize()).
  void checkIds(const std::vector<int64_t>& ids) const;

 private:
  std::string path_;
};

}  // namespace collage
