#include "core/decode/tokenizer_wordpiece.h"

#include <utility>

#include "core/ir/error.h"

namespace collage {

namespace {

// The byte length of the UTF-8 character that `lead` starts (1 for a byte
// that starts none, so that ill-formed text still advances).
size_t charLength(unsigned char lead) {
  return lead < 0x80           ? 1
         : (lead >> 5) == 0x6  ? 2
         : (lead >> 4) == 0xE  ? 3
         : (lead >> 3) == 0x1E ? 4
                               : 1;
}

// The start of the last character of s[0, end).
size_t lastCharStart(const std::string& s, size_t begin, size_t end) {
  size_t at = end - 1;
  while (at > begin && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) --at;
  return at;
}

}  // namespace

WordPieceModel::WordPieceModel(std::unordered_map<std::string, int64_t> vocab, std::string unk,
                               std::string prefix, size_t maxCharsPerWord, std::string path)
    : vocab_(std::move(vocab)),
      unk_(std::move(unk)),
      prefix_(std::move(prefix)),
      path_(std::move(path)),
      maxChars_(maxCharsPerWord) {}

int64_t WordPieceModel::unknown(const std::string& word) const {
  auto it = vocab_.find(unk_);
  if (it == vocab_.end())
    throw Error(path_ + ": the word \"" + word +
                "\" needs the unknown token, and model.unk_token \"" + unk_ +
                "\" is not in model.vocab");
  return it->second;
}

void WordPieceModel::encode(const std::string& word, std::vector<int64_t>& ids) const {
  if (word.empty()) return;
  size_t chars = 0;
  for (size_t i = 0; i < word.size(); i += charLength(static_cast<unsigned char>(word[i]))) ++chars;
  if (chars > maxChars_) {
    ids.push_back(unknown(word));
    return;
  }
  std::vector<int64_t> pieces;
  for (size_t start = 0; start < word.size();) {
    // The longest piece from `start`, shortening by one character.
    size_t end = word.size();
    int64_t found = -1;
    while (end > start) {
      std::string piece = word.substr(start, end - start);
      if (start > 0) piece = prefix_ + piece;
      auto it = vocab_.find(piece);
      if (it != vocab_.end()) {
        found = it->second;
        break;
      }
      end = lastCharStart(word, start, end);
    }
    if (found < 0) {
      ids.push_back(unknown(word));
      return;
    }
    pieces.push_back(found);
    start = end;
  }
  ids.insert(ids.end(), pieces.begin(), pieces.end());
}

}  // namespace collage
