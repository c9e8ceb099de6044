#include "core/decode/tokenizer_precompiled.h"

#include <unicode/brkiter.h>
#include <unicode/locid.h>
#include <unicode/unistr.h>

#include <cstring>
#include <memory>
#include <utility>

#include "core/ir/error.h"

namespace collage {

namespace {

// Standard base64 (padding optional, no line breaks); nullopt when it is not.
std::optional<std::string> fromBase64(const std::string& text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] != '='; ++i) {
    const int v = value(text[i]);
    if (v < 0) return std::nullopt;
    bits = (bits << 6) | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xFF);
    }
  }
  for (; i < text.size(); ++i)
    if (text[i] != '=') return std::nullopt;
  return out;
}

// A darts-clone unit's fields.
bool hasLeaf(uint32_t unit) { return (unit >> 8) & 1; }
uint32_t valueOf(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t labelOf(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
uint32_t offsetOf(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

}  // namespace

PrecompiledNormalizer::PrecompiledNormalizer(const std::string& base64, std::string where)
    : where_(std::move(where)) {
  if (base64.empty()) return;
  const std::optional<std::string> blob = fromBase64(base64);
  if (!blob) throw Error(where_ + ": precompiled_charsmap is not base64");
  uint32_t size = 0;
  if (blob->size() < 4)
    throw Error(where_ + ": precompiled_charsmap is too short to be a charsmap");
  for (int b = 3; b >= 0; --b) size = (size << 8) | static_cast<unsigned char>((*blob)[b]);
  if (size % 4 != 0 || size == 0 || size > blob->size() - 4)
    throw Error(where_ + ": precompiled_charsmap's trie size " + std::to_string(size) +
                " does not fit its " + std::to_string(blob->size()) + " bytes");
  trie_.resize(size / 4);
  for (size_t u = 0; u < trie_.size(); ++u) {
    uint32_t unit = 0;
    for (int b = 3; b >= 0; --b)
      unit = (unit << 8) | static_cast<unsigned char>((*blob)[4 + 4 * u + b]);
    trie_[u] = unit;
  }
  replacements_ = blob->substr(4 + size);
}

std::optional<std::string> PrecompiledNormalizer::transform(const std::string& chunk) const {
  if (trie_.empty()) return std::nullopt;
  // darts-clone's traversal: each byte moves by XOR with its label; a unit
  // whose label differs means no key goes on; a leaf below holds the value.
  size_t node = offsetOf(trie_[0]);
  for (unsigned char c : chunk) {
    if (c == 0) break;
    node ^= c;
    if (node >= trie_.size()) return std::nullopt;
    const uint32_t unit = trie_[node];
    if (labelOf(unit) != c) return std::nullopt;
    node ^= offsetOf(unit);
    if (node >= trie_.size()) return std::nullopt;
    if (hasLeaf(unit)) {
      const size_t at = valueOf(trie_[node]);
      if (at >= replacements_.size())
        throw Error(where_ + ": precompiled_charsmap points past its replacements (" +
                    std::to_string(at) + " of " + std::to_string(replacements_.size()) + " bytes)");
      return std::string(replacements_.c_str() + at,
                         strnlen(replacements_.c_str() + at, replacements_.size() - at));
    }
  }
  return std::nullopt;
}

std::string PrecompiledNormalizer::normalize(const std::string& text) const {
  if (trie_.empty()) return text;
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(text);
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::BreakIterator> graphemes(
      icu::BreakIterator::createCharacterInstance(icu::Locale::getRoot(), status));
  if (U_FAILURE(status)) throw Error(where_ + ": ICU has no grapheme break iterator");
  graphemes->setText(u);
  std::string out;
  for (int32_t b = graphemes->first(), e = graphemes->next(); e != icu::BreakIterator::DONE;
       b = e, e = graphemes->next()) {
    std::string cluster;
    u.tempSubStringBetween(b, e).toUTF8String(cluster);
    if (cluster.size() < 6)
      if (std::optional<std::string> whole = transform(cluster)) {
        out += *whole;
        continue;
      }
    for (int32_t i = b; i < e; i = u.moveIndex32(i, 1)) {
      std::string one;
      icu::UnicodeString(u.char32At(i)).toUTF8String(one);
      std::optional<std::string> replaced = transform(one);
      out += replaced ? *replaced : one;
    }
  }
  return out;
}

}  // namespace collage
