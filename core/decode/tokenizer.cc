#include "core/decode/tokenizer.h"

#include <dlfcn.h>
#include <sentencepiece_processor.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/decode/tokenizer_precompiled.h"
#include "core/decode/tokenizer_unigram.h"
#include "core/decode/tokenizer_wordpiece.h"
#include "core/ir/error.h"

namespace collage {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string readWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The text with each ill-formed part replaced by U+FFFD, one for each
// maximal part that starts a character but does not finish it, else one per
// byte (Unicode's "maximal subpart" rule, as Rust's from_utf8_lossy and
// Python's decode(errors="replace") do): a decoder's output is printable.
std::string validUtf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = byte(i);
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF)
      n = 2;
    else if (c >= 0xE0 && c <= 0xEF)
      n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
      n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    size_t k = 1;
    while (n > 0 && k < n && i + k < s.size() && byte(i + k) >= (k == 1 ? lo : 0x80) &&
           byte(i + k) <= (k == 1 ? hi : 0xBF))
      ++k;
    if (n > 0 && k == n)
      out.append(s, i, n);
    else
      out += "\xEF\xBF\xBD";
    i += n > 0 ? k : 1;
  }
  return out;
}

// The UTF-8 code points of `s`, each as its bytes (s is valid UTF-8 or a
// byte-level string, which is).
std::vector<std::string> codePoints(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string utf8Of(uint32_t cp) {
  icu::UnicodeString u(static_cast<UChar32>(cp));
  std::string out;
  u.toUTF8String(out);
  return out;
}

void replaceAll(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// ---- SentencePiece ---------------------------------------------------------

// Debian's libsentencepiece0 (0.1.97) carries its own copy of protobuf-lite
// (3.14) and exports its symbols, while this program links the system's
// protobuf (3.21, for ONNX). Linked as usual, one copy's symbols serve the
// other's calls: protobuf's version check aborts at start-up, or a parse
// crashes (both link orders tried). So the library is opened at run time
// with RTLD_DEEPBIND (its own symbols first for its own calls, and none of
// them in the global scope) and called through SentencePieceProcessor's
// virtual functions; the three it needs that are not virtual (the
// constructor, util::Status's destructor and ToString) are looked up by
// their mangled names. The header is the same package's, so the class's
// layout and virtual table are the library's.
struct SentencePieceLibrary {
  void* handle = nullptr;
  void (*construct)(void* self) = nullptr;
  void (*destroyStatus)(sentencepiece::util::Status* self) = nullptr;
  std::string (*statusText)(const sentencepiece::util::Status* self) = nullptr;
  std::string error;  // why it is not there

  static const SentencePieceLibrary& get() {
    static const SentencePieceLibrary library = open();
    return library;
  }

 private:
  static SentencePieceLibrary open() {
    SentencePieceLibrary l;
#if defined(__SANITIZE_ADDRESS__)
    l.error =
        "this build runs under AddressSanitizer, which cannot open a library with RTLD_DEEPBIND";
    return l;
#else
    // The runtime package's name (libsentencepiece0), not the -dev link.
    l.handle = dlopen("libsentencepiece.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!l.handle) {
      const char* why = dlerror();
      l.error =
          std::string("libsentencepiece.so.0 cannot be opened (install libsentencepiece0): ") +
          (why ? why : "");
      return l;
    }
    l.construct = reinterpret_cast<void (*)(void*)>(
        dlsym(l.handle, "_ZN13sentencepiece22SentencePieceProcessorC1Ev"));
    l.destroyStatus = reinterpret_cast<void (*)(sentencepiece::util::Status*)>(
        dlsym(l.handle, "_ZN13sentencepiece4util6StatusD1Ev"));
    l.statusText = reinterpret_cast<std::string (*)(const sentencepiece::util::Status*)>(
        dlsym(l.handle, "_ZNK13sentencepiece4util6Status8ToStringB5cxx11Ev"));
    if (!l.construct || !l.destroyStatus || !l.statusText)
      l.error = "libsentencepiece.so.0 lacks the functions of the version this was built with";
    return l;
#endif
  }
};

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : Tokenizer(path) {
    const SentencePieceLibrary& lib = SentencePieceLibrary::get();
    if (!lib.error.empty())
      throw Error(path + ": a SentencePiece model cannot be read: " + lib.error);
    lib.construct(&held_.storage);
    held_.constructed = true;
    const std::string why = check([&] { return processor()->Load(path); });
    if (!why.empty())
      throw Error(path + ": not a SentencePiece model (the library says: " + why + ")");
    size_ = processor()->GetPieceSize();
  }
  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int> ids;
    const std::string why = check([&] { return processor()->Encode(text, &ids); });
    if (!why.empty()) throw Error(path() + ": cannot encode the text: " + why);
    return {ids.begin(), ids.end()};
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    checkIds(ids);
    const std::vector<int> small(ids.begin(), ids.end());
    std::string text;
    const std::string why = check([&] { return processor()->Decode(small, &text); });
    if (!why.empty()) throw Error(path() + ": cannot decode the ids: " + why);
    return validUtf8(text);
  }
  int64_t vocabularySize() const override { return size_; }
  std::string format() const override { return "SentencePiece"; }

 private:
  sentencepiece::SentencePieceProcessor* processor() const { return held_.get(); }
  // Runs a call that returns a util::Status; its text, "" when ok.
  template <class Call>
  static std::string check(Call call) {
    const SentencePieceLibrary& lib = SentencePieceLibrary::get();
    alignas(sentencepiece::util::Status) unsigned char room[sizeof(sentencepiece::util::Status)];
    auto* status = new (room) sentencepiece::util::Status(call());  // no copy: elided
    std::string why = status->ok() ? "" : lib.statusText(status);
    lib.destroyStatus(status);
    return why;
  }

  // The processor the library constructed in place, destroyed (through its
  // virtual destructor) with this member: also when the constructor throws.
  struct Held {
    alignas(sentencepiece::SentencePieceProcessor) unsigned char storage[sizeof(
        sentencepiece::SentencePieceProcessor)];
    bool constructed = false;
    sentencepiece::SentencePieceProcessor* get() const {
      return std::launder(reinterpret_cast<sentencepiece::SentencePieceProcessor*>(
          const_cast<unsigned char*>(storage)));
    }
    ~Held() {
      if (constructed) get()->~SentencePieceProcessor();
    }
  };
  Held held_;
  int64_t size_ = 0;
};

// ---- tokenizer.json --------------------------------------------------------

// GPT-2's map from each byte to a printable character (a byte-level
// vocabulary's alphabet), as UTF-8.
const std::array<std::string, 256>& byteToChar() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = utf8Of(printable ? b : 256 + extra++);
    }
    return t;
  }();
  return table;
}

const std::unordered_map<std::string, unsigned char>& charToByte() {
  static const std::unordered_map<std::string, unsigned char> table = [] {
    std::unordered_map<std::string, unsigned char> t;
    for (int b = 0; b < 256; ++b) t[byteToChar()[b]] = static_cast<unsigned char>(b);
    return t;
  }();
  return table;
}

// GPT-2's pre-tokenisation pattern, which ByteLevel applies when use_regex.
const char* const kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// An ICU regex, compiled once; each use makes its own matcher.
std::shared_ptr<icu::RegexPattern> compileRegex(const std::string& pattern,
                                                const std::string& where) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError parse{};
  std::shared_ptr<icu::RegexPattern> p(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(pattern), 0, parse, status));
  if (U_FAILURE(status))
    throw Error(where + ": the regex " + pattern + " does not compile (" + u_errorName(status) +
                " at offset " + std::to_string(parse.offset) + ")");
  return p;
}

// A piece of text between pre-tokenisation steps; `first`: it starts the
// text (Metaspace's prepend_scheme "first").
struct Piece {
  std::string text;
  bool first = false;
};

// How a Split keeps its matches (Hugging Face's SplitDelimiterBehavior).
enum class Behaviour { Isolated, Removed, MergedWithPrevious, MergedWithNext };

// A piece's parts: spans [begin, end) in UTF-16 units of `text` that cover
// it in order, each a delimiter (`match`) or not, folded as Hugging Face's
// SplitDelimiterBehavior says: a delimiter is its own piece, dropped, or
// joins the piece before it (after it) unless that one is a delimiter too.
std::vector<Piece> foldSpans(const icu::UnicodeString& text,
                             std::vector<std::tuple<int32_t, int32_t, bool>> spans,
                             Behaviour behaviour, bool first) {
  std::vector<std::pair<int32_t, int32_t>> kept;
  bool previousMatch = false;
  if (behaviour == Behaviour::MergedWithNext) std::reverse(spans.begin(), spans.end());
  for (const auto& [b, e, match] : spans) {
    if (behaviour == Behaviour::Removed && match) continue;
    const bool merge =
        match && !previousMatch && !kept.empty() &&
        (behaviour == Behaviour::MergedWithPrevious || behaviour == Behaviour::MergedWithNext);
    if (merge && behaviour == Behaviour::MergedWithPrevious)
      kept.back().second = e;
    else if (merge)
      kept.back().first = b;
    else
      kept.emplace_back(b, e);
    previousMatch = match;
  }
  if (behaviour == Behaviour::MergedWithNext) std::reverse(kept.begin(), kept.end());
  std::vector<Piece> out;
  for (const auto& [b, e] : kept) {
    std::string s;
    text.tempSubStringBetween(b, e).toUTF8String(s);
    out.push_back({s, first && b == 0});
  }
  return out;
}

// Splits by a regex's matches (`invert`: the text between them is the
// delimiter, as Hugging Face's Invert pattern).
std::vector<Piece> splitBy(const icu::RegexPattern& pattern, const Piece& piece,
                           Behaviour behaviour, bool invert = false) {
  const icu::UnicodeString text = icu::UnicodeString::fromUTF8(piece.text);
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> m(pattern.matcher(text, status));
  // [begin, end) in UTF-16 units, and whether it is a match.
  std::vector<std::tuple<int32_t, int32_t, bool>> spans;
  int32_t last = 0;
  while (U_SUCCESS(status) && m->find(status)) {
    const int32_t b = m->start(status), e = m->end(status);
    if (e == b) continue;
    if (b > last) spans.emplace_back(last, b, invert);
    spans.emplace_back(b, e, !invert);
    last = e;
  }
  if (last < text.length()) spans.emplace_back(last, text.length(), invert);
  return foldSpans(text, std::move(spans), behaviour, piece.first);
}

// Splits at each character `isDelimiter` holds for (each one its own
// delimiter, as a Hugging Face pattern that is a function of a char).
std::vector<Piece> splitAtChars(const Piece& piece, const std::function<bool(UChar32)>& isDelimiter,
                                Behaviour behaviour) {
  const icu::UnicodeString text = icu::UnicodeString::fromUTF8(piece.text);
  std::vector<std::tuple<int32_t, int32_t, bool>> spans;
  int32_t last = 0;
  for (int32_t i = 0; i < text.length();) {
    const UChar32 c = text.char32At(i);
    const int32_t next = text.moveIndex32(i, 1);
    if (isDelimiter(c)) {
      if (i > last) spans.emplace_back(last, i, false);
      spans.emplace_back(i, next, true);
      last = next;
    }
    i = next;
  }
  if (last < text.length()) spans.emplace_back(last, text.length(), false);
  return foldSpans(text, std::move(spans), behaviour, piece.first);
}

// Rust's char::is_whitespace, which the library's splits and BERT's
// cleaning use: Unicode's White_Space property.
bool isWhiteSpace(UChar32 c) { return u_isUWhiteSpace(c); }

// BERT's punctuation: ASCII punctuation (also $, +, <, ... which Unicode
// calls symbols) or any Unicode punctuation (category P).
bool isBertPunctuation(UChar32 c) {
  return (c < 0x80 && std::ispunct(static_cast<int>(c))) || u_ispunct(c);
}

// The text's code points; a byte that is not UTF-8 is U+FFFD.
std::vector<UChar32> codePointsOf(const std::string& s) {
  std::vector<UChar32> out;
  const auto* bytes = reinterpret_cast<const uint8_t*>(s.data());
  const int32_t n = static_cast<int32_t>(s.size());
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT(bytes, i, n, c);
    out.push_back(c < 0 ? 0xFFFD : c);
  }
  return out;
}

std::string utf8OfAll(const std::vector<UChar32>& cps) {
  icu::UnicodeString u;
  for (UChar32 c : cps) u.append(c);
  std::string out;
  u.toUTF8String(out);
  return out;
}

// Each character lower-cased on its own (its full mapping, no context: the
// library's NormalizedString::lowercase maps char by char, so a final Σ is
// σ, not ς).
std::string lowercaseEach(const std::string& s) {
  std::string out;
  for (UChar32 c : codePointsOf(s))
    icu::UnicodeString(c).toLower(icu::Locale::getRoot()).toUTF8String(out);
  return out;
}

// The text without its non-spacing marks (category Mn): what is left of an
// accent after NFD.
std::string withoutMarks(const std::string& s) {
  std::vector<UChar32> kept;
  for (UChar32 c : codePointsOf(s))
    if (u_charType(c) != U_NON_SPACING_MARK) kept.push_back(c);
  return utf8OfAll(kept);
}

const icu::Normalizer2& nfd() {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* norm = icu::Normalizer2::getNFDInstance(status);
  if (U_FAILURE(status))
    throw Error(std::string("ICU has no NFD normaliser: ") + u_errorName(status));
  return *norm;
}

// What BERT's cleaning drops (Hugging Face's BertNormalizer, clean_text):
// control characters in its wide sense, categories Cc, Cf, Cn and Co, but
// not tab, newline and return (whitespace to it, made spaces).
bool isBertControl(UChar32 c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const int8_t type = u_charType(c);
  return type == U_CONTROL_CHAR || type == U_FORMAT_CHAR || type == U_UNASSIGNED ||
         type == U_PRIVATE_USE_CHAR;
}

// What BertNormalizer's handle_chinese_chars puts spaces around, so that
// each is a word of its own: the CJK Unified Ideographs blocks, their
// extensions and compatibility blocks (not kana nor hangul, which are
// written with spaces).
bool isCjkIdeograph(UChar32 c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// The WordPiece decoder's cleanup, in the library's order: the spaces its
// joining put before punctuation and inside contractions.
const std::pair<const char*, const char*> kWordPieceCleanup[] = {
    {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
    {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
    {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};

class JsonTokenizer : public Tokenizer {
 public:
  JsonTokenizer(const std::string& path, const std::string& content) : Tokenizer(path) {
    json j;
    try {
      j = json::parse(content);
    } catch (const json::exception& e) {
      throw Error(path + ": not a tokenizer.json: " + e.what());
    }
    try {
      readModel(j);
      readAdded(j.value("added_tokens", json::array()));
      normalizer_ = readNormalizer(j.value("normalizer", json()), "normalizer");
      preTokenizer_ = readPreTokenizer(j.value("pre_tokenizer", json()), "pre_tokenizer");
      postProcessor_ = readPostProcessor(j.value("post_processor", json()), "post_processor");
      decoder_ = readDecoder(j.value("decoder", json()), "decoder");
    } catch (const json::exception& e) {
      throw Error(path + ": not a tokenizer.json this tool reads: " + e.what());
    }
  }

  std::vector<int64_t> encode(const std::string& text) const override {
    std::vector<int64_t> ids;
    bool first = true;
    for (const auto& [added, segment] : splitAdded(text)) {
      if (added >= 0) {
        ids.push_back(added);
      } else {
        std::vector<Piece> pieces = {{normalizer_ ? normalizer_(segment) : segment, first}};
        if (preTokenizer_) pieces = preTokenizer_(pieces);
        for (const Piece& p : pieces) model_(p.text, ids);
      }
      first = false;
    }
    return postProcessor_ ? postProcessor_(ids) : ids;
  }

  std::string decode(const std::vector<int64_t>& ids) const override {
    checkIds(ids);
    std::vector<std::string> tokens;
    for (int64_t id : ids) {
      if (tokens_[id].empty()) throw Error(path() + ": id " + std::to_string(id) + " has no token");
      tokens.push_back(tokens_[id]);
    }
    if (decoder_) tokens = decoder_(tokens);
    std::string text;
    for (const std::string& t : tokens) text += t;
    return validUtf8(text);
  }

  int64_t vocabularySize() const override { return static_cast<int64_t>(tokens_.size()); }
  std::string format() const override { return "tokenizer.json"; }

 private:
  using Tokens = std::vector<std::string>;
  [[noreturn]] void refuse(const std::string& where, const std::string& what) const {
    throw Error(path() + ": " + where + ": " + what +
                " is not supported (docs/decoding.md, \"Text in and out\")");
  }

  void setToken(int64_t id, const std::string& token, const std::string& where) {
    if (id < 0 || id > (int64_t{1} << 26))
      throw Error(path() + ": " + where + ": id " + std::to_string(id) + " is out of range");
    if (static_cast<size_t>(id) >= tokens_.size()) tokens_.resize(id + 1);
    tokens_[id] = token;
  }

  void readModel(const json& j) {
    if (!j.contains("model")) throw Error(path() + ": no \"model\": not a tokenizer.json");
    const json& m = j.at("model");
    const std::string type = m.value("type", m.contains("merges") ? "BPE" : "");
    if (type == "BPE") {
      readBpe(m);
      model_ = [this](const std::string& word, std::vector<int64_t>& ids) { bpe(word, ids); };
    } else if (type == "WordPiece") {
      readWordPiece(m);
    } else if (type == "Unigram") {
      readUnigram(m);
    } else {
      refuse("model", "type \"" + type + "\" (BPE, WordPiece and Unigram are)");
    }
  }

  // A string option that may be absent or null: `otherwise` then.
  static std::string optionalString(const json& m, const char* key, const std::string& otherwise) {
    return m.contains(key) && !m[key].is_null() ? m[key].get<std::string>() : otherwise;
  }

  void readWordPiece(const json& m) {
    std::unordered_map<std::string, int64_t> vocab;
    for (const auto& [token, id] : m.at("vocab").items()) {
      vocab[token] = id.get<int64_t>();
      setToken(id.get<int64_t>(), token, "model.vocab");
    }
    const int64_t most =
        m.contains("max_input_chars_per_word") && !m["max_input_chars_per_word"].is_null()
            ? m["max_input_chars_per_word"].get<int64_t>()
            : 100;
    if (most < 0) throw Error(path() + ": model.max_input_chars_per_word is negative");
    auto model = std::make_shared<WordPieceModel>(
        std::move(vocab), optionalString(m, "unk_token", "[UNK]"),
        optionalString(m, "continuing_subword_prefix", "##"), static_cast<size_t>(most), path());
    model_ = [model](const std::string& word, std::vector<int64_t>& ids) {
      model->encode(word, ids);
    };
  }

  void readUnigram(const json& m) {
    // The vocabulary is a list of [piece, score]: a piece's id is its place.
    std::vector<std::pair<std::string, double>> pieces;
    const json& vocab = m.at("vocab");
    if (!vocab.is_array()) throw Error(path() + ": model.vocab of a Unigram model is not a list");
    for (size_t i = 0; i < vocab.size(); ++i) {
      if (!vocab[i].is_array() || vocab[i].size() != 2 || !vocab[i][0].is_string() ||
          !vocab[i][1].is_number())
        throw Error(path() + ": model.vocab[" + std::to_string(i) +
                    "] is not a [piece, score] pair");
      pieces.emplace_back(vocab[i][0].get<std::string>(), vocab[i][1].get<double>());
      setToken(static_cast<int64_t>(i), pieces.back().first, "model.vocab");
    }
    const int64_t unk =
        m.contains("unk_id") && !m["unk_id"].is_null() ? m["unk_id"].get<int64_t>() : -1;
    if (m.contains("unk_id") && !m["unk_id"].is_null() && unk < 0)
      throw Error(path() + ": model.unk_id " + std::to_string(unk) + " is negative");
    auto model = std::make_shared<UnigramModel>(std::move(pieces), unk,
                                                m.value("byte_fallback", false), path());
    model_ = [model](const std::string& word, std::vector<int64_t>& ids) {
      model->encode(word, ids);
    };
  }

  void readBpe(const json& m) {
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(key) && !m[key].is_null() && !m[key].get<std::string>().empty())
        refuse("model", std::string(key) + " \"" + m[key].get<std::string>() + "\"");
    if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() > 0)
      refuse("model", "dropout (a training-time option)");
    for (const auto& [token, id] : m.at("vocab").items()) {
      const int64_t i = id.get<int64_t>();
      vocab_[token] = i;
      setToken(i, token, "model.vocab");
    }
    const json& merges = m.at("merges");
    for (size_t r = 0; r < merges.size(); ++r) {
      std::string a, b;
      if (merges[r].is_string()) {
        const std::string s = merges[r].get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          throw Error(path() + ": model.merges[" + std::to_string(r) + "] \"" + s +
                      "\" is not two tokens separated by one space");
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else {
        if (!merges[r].is_array() || merges[r].size() != 2)
          throw Error(path() + ": model.merges[" + std::to_string(r) + "] is not a pair of tokens");
        a = merges[r][0].get<std::string>();
        b = merges[r][1].get<std::string>();
      }
      if (!vocab_.count(a + b))
        throw Error(path() + ": model.merges[" + std::to_string(r) + "] (" + a + " " + b +
                    "): " + a + b + " is not in model.vocab");
      ranks_.emplace(std::make_pair(a, b), static_cast<int64_t>(r));
    }
    if (m.contains("unk_token") && !m["unk_token"].is_null()) {
      const std::string unk = m["unk_token"].get<std::string>();
      if (!vocab_.count(unk))
        throw Error(path() + ": model.unk_token \"" + unk + "\" is not in model.vocab");
      unk_ = vocab_.at(unk);
    }
    fuseUnk_ = m.value("fuse_unk", false);
    byteFallback_ = m.value("byte_fallback", false);
    ignoreMerges_ = m.value("ignore_merges", false);
  }

  void readAdded(const json& added) {
    // single_word and a non-special token's `normalized` (matched in the
    // normalised text) are not honoured: every added token is matched in
    // the text as written.
    for (const json& t : added) {
      Added a;
      a.content = t.at("content").get<std::string>();
      a.id = t.at("id").get<int64_t>();
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      if (a.content.empty()) continue;
      setToken(a.id, a.content, "added_tokens");
      added_.push_back(a);
    }
    std::stable_sort(added_.begin(), added_.end(), [](const Added& x, const Added& y) {
      return x.content.size() > y.content.size();
    });
  }

  std::function<std::string(const std::string&)> readNormalizer(const json& n,
                                                                const std::string& where) {
    if (n.is_null()) return nullptr;
    const std::string type = n.at("type").get<std::string>();
    if (type == "Sequence") {
      std::vector<std::function<std::string(const std::string&)>> steps;
      const json& list = n.at("normalizers");
      for (size_t i = 0; i < list.size(); ++i)
        if (auto f = readNormalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]"))
          steps.push_back(f);
      return [steps](const std::string& s) {
        std::string out = s;
        for (const auto& f : steps) out = f(out);
        return out;
      };
    }
    if (type == "Prepend") {
      const std::string prefix = n.at("prepend").get<std::string>();
      return [prefix](const std::string& s) { return s.empty() ? s : prefix + s; };
    }
    if (type == "Replace") {
      const std::string content = n.at("content").get<std::string>();
      const json& p = n.at("pattern");
      if (p.contains("String")) {
        const std::string from = p["String"].get<std::string>();
        return [from, content](const std::string& s) {
          std::string out = s;
          replaceAll(out, from, content);
          return out;
        };
      }
      auto regex = compileRegex(p.at("Regex").get<std::string>(), path() + ": " + where);
      // The content is literal; ICU's replacement text gives $ and \ a meaning.
      std::string literal;
      for (char c : content) {
        if (c == '$' || c == '\\') literal += '\\';
        literal += c;
      }
      return [regex, literal](const std::string& s) {
        UErrorCode status = U_ZERO_ERROR;
        // The matcher reads the text it is given in place: it must outlive it.
        const icu::UnicodeString text = icu::UnicodeString::fromUTF8(s);
        std::unique_ptr<icu::RegexMatcher> m(regex->matcher(text, status));
        std::string out;
        m->replaceAll(icu::UnicodeString::fromUTF8(literal), status).toUTF8String(out);
        return out;
      };
    }
    if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
      UErrorCode status = U_ZERO_ERROR;
      const bool compose = type == "NFC" || type == "NFKC", compat = type[2] == 'K';
      const icu::Normalizer2* norm = icu::Normalizer2::getInstance(
          nullptr, compat ? "nfkc" : "nfc", compose ? UNORM2_COMPOSE : UNORM2_DECOMPOSE, status);
      if (U_FAILURE(status))
        throw Error(path() + ": " + where + ": ICU has no " + type + " normaliser");
      return [norm](const std::string& s) {
        UErrorCode st = U_ZERO_ERROR;
        std::string out;
        norm->normalize(icu::UnicodeString::fromUTF8(s), st).toUTF8String(out);
        return out;
      };
    }
    if (type == "Lowercase") return lowercaseEach;
    if (type == "StripAccents") return withoutMarks;  // after an NFD, as files write it
    if (type == "Strip") {
      const bool left = n.value("strip_left", true), right = n.value("strip_right", true);
      return [left, right](const std::string& s) {
        std::vector<UChar32> cps = codePointsOf(s);
        size_t b = 0, e = cps.size();
        while (left && b < e && isWhiteSpace(cps[b])) ++b;
        while (right && e > b && isWhiteSpace(cps[e - 1])) --e;
        return utf8OfAll({cps.begin() + b, cps.begin() + e});
      };
    }
    if (type == "Precompiled") {
      const json& charsmap = n.value("precompiled_charsmap", json());
      auto rules = std::make_shared<PrecompiledNormalizer>(
          charsmap.is_null() ? std::string() : charsmap.get<std::string>(), path() + ": " + where);
      return [rules](const std::string& s) { return rules->normalize(s); };
    }
    if (type == "BertNormalizer") {
      const bool clean = n.value("clean_text", true), cjk = n.value("handle_chinese_chars", true),
                 lower = n.value("lowercase", true);
      // strip_accents null (or absent): as lowercase.
      const bool strip = n.contains("strip_accents") && !n["strip_accents"].is_null()
                             ? n["strip_accents"].get<bool>()
                             : lower;
      const icu::Normalizer2* decompose = strip ? &nfd() : nullptr;
      return [clean, cjk, strip, lower, decompose](const std::string& s) {
        std::vector<UChar32> cps;
        for (UChar32 c : codePointsOf(s)) {
          if (clean && (c == 0 || c == 0xFFFD || isBertControl(c))) continue;
          if (clean && (c == '\t' || c == '\n' || c == '\r' || isWhiteSpace(c))) c = ' ';
          const bool spaced = cjk && isCjkIdeograph(c);
          if (spaced) cps.push_back(' ');
          cps.push_back(c);
          if (spaced) cps.push_back(' ');
        }
        std::string out = utf8OfAll(cps);
        if (strip) {
          UErrorCode status = U_ZERO_ERROR;
          std::string decomposed;
          decompose->normalize(icu::UnicodeString::fromUTF8(out), status).toUTF8String(decomposed);
          out = withoutMarks(decomposed);
        }
        return lower ? lowercaseEach(out) : out;
      };
    }
    refuse(where, "the normalizer \"" + type + "\"");
  }

  using PreTokenizer = std::function<std::vector<Piece>(const std::vector<Piece>&)>;

  Behaviour readBehaviour(const std::string& b, const std::string& where) const {
    if (b == "Isolated") return Behaviour::Isolated;
    if (b == "Removed") return Behaviour::Removed;
    if (b == "MergedWithPrevious") return Behaviour::MergedWithPrevious;
    if (b == "MergedWithNext") return Behaviour::MergedWithNext;
    refuse(where, "the split behavior \"" + b + "\"");
  }

  PreTokenizer readPreTokenizer(const json& p, const std::string& where) {
    if (p.is_null()) return nullptr;
    const std::string type = p.at("type").get<std::string>();
    if (type == "Sequence") {
      std::vector<PreTokenizer> steps;
      const json& list = p.at("pretokenizers");
      for (size_t i = 0; i < list.size(); ++i)
        if (auto f = readPreTokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]"))
          steps.push_back(f);
      return [steps](const std::vector<Piece>& in) {
        std::vector<Piece> out = in;
        for (const auto& f : steps) out = f(out);
        return out;
      };
    }
    if (type == "ByteLevel") {
      // Every piece gets the prefix space (Hugging Face's ByteLevel does),
      // then GPT-2's pattern splits it, then each byte becomes its character.
      const bool prefix = p.value("add_prefix_space", false), regex = p.value("use_regex", true);
      std::shared_ptr<icu::RegexPattern> pattern;
      if (regex) pattern = compileRegex(kByteLevelPattern, path() + ": " + where);
      return [prefix, pattern](const std::vector<Piece>& in) {
        std::vector<Piece> out;
        for (Piece piece : in) {
          if (prefix && piece.text.rfind(' ', 0) != 0) piece.text = " " + piece.text;
          std::vector<Piece> parts =
              pattern ? splitBy(*pattern, piece, Behaviour::Isolated) : std::vector<Piece>{piece};
          for (Piece& part : parts) {
            std::string mapped;
            for (unsigned char c : part.text) mapped += byteToChar()[c];
            part.text = std::move(mapped);
            out.push_back(std::move(part));
          }
        }
        return out;
      };
    }
    if (type == "BertPreTokenizer" || type == "WhitespaceSplit") {
      // Words between whitespace; BERT's also cut each punctuation
      // character out as a word of its own.
      const bool bert = type == "BertPreTokenizer";
      return [bert](const std::vector<Piece>& in) {
        std::vector<Piece> out;
        for (const Piece& piece : in)
          for (Piece& word : splitAtChars(piece, isWhiteSpace, Behaviour::Removed)) {
            if (!bert) {
              out.push_back(std::move(word));
              continue;
            }
            for (Piece& part : splitAtChars(word, isBertPunctuation, Behaviour::Isolated))
              out.push_back(std::move(part));
          }
        return out;
      };
    }
    if (type == "Whitespace") {
      // Runs of word characters, and runs of what is neither those nor
      // whitespace; the whitespace between is dropped.
      auto words = compileRegex("\\w+|[^\\w\\s]+", path() + ": " + where);
      return [words](const std::vector<Piece>& in) {
        std::vector<Piece> out;
        for (const Piece& piece : in)
          for (Piece& part : splitBy(*words, piece, Behaviour::Removed, true))
            out.push_back(std::move(part));
        return out;
      };
    }
    if (type == "Punctuation") {
      const Behaviour behaviour =
          readBehaviour(p.value("behavior", std::string("Isolated")), where);
      return [behaviour](const std::vector<Piece>& in) {
        std::vector<Piece> out;
        for (const Piece& piece : in)
          for (Piece& part : splitAtChars(piece, isBertPunctuation, behaviour))
            out.push_back(std::move(part));
        return out;
      };
    }
    if (type == "Split") {
      // invert: the pattern's matches are what is kept, the text between
      // them the delimiters.
      const bool invert = p.value("invert", false);
      const Behaviour behaviour = readBehaviour(p.at("behavior").get<std::string>(), where);
      const json& pat = p.at("pattern");
      // A String pattern is literal: ICU's \Q...\E quotes it.
      const std::string regex = pat.contains("String")
                                    ? "\\Q" + pat["String"].get<std::string>() + "\\E"
                                    : pat.at("Regex").get<std::string>();
      auto compiled = compileRegex(regex, path() + ": " + where);
      return [compiled, behaviour, invert](const std::vector<Piece>& in) {
        std::vector<Piece> out;
        for (const Piece& piece : in)
          for (Piece& part : splitBy(*compiled, piece, behaviour, invert))
            out.push_back(std::move(part));
        return out;
      };
    }
    if (type == "Metaspace") {
      // Spaces become the replacement character; it is prepended (to every
      // piece, to the text's first, or never); with `split` each piece then
      // splits before each replacement character.
      const std::string replacement = p.value("replacement", std::string("\xE2\x96\x81"));
      std::string scheme = p.value("prepend_scheme", std::string());
      if (scheme.empty()) scheme = p.value("add_prefix_space", true) ? "always" : "never";
      if (scheme != "always" && scheme != "first" && scheme != "never")
        refuse(where, "Metaspace's prepend_scheme \"" + scheme + "\"");
      const bool split = p.value("split", true);
      auto at = compileRegex("\\Q" + replacement + "\\E", path() + ": " + where);
      return [replacement, scheme, split, at](const std::vector<Piece>& in) {
        std::vector<Piece> out;
        for (Piece piece : in) {
          replaceAll(piece.text, " ", replacement);
          if ((scheme == "always" || (scheme == "first" && piece.first)) &&
              piece.text.rfind(replacement, 0) != 0)
            piece.text = replacement + piece.text;
          if (!split) {
            out.push_back(piece);
            continue;
          }
          for (Piece& part : splitBy(*at, piece, Behaviour::MergedWithNext))
            out.push_back(std::move(part));
        }
        return out;
      };
    }
    refuse(where, "the pre_tokenizer \"" + type + "\"");
  }

  using PostProcessor = std::function<std::vector<int64_t>(const std::vector<int64_t>&)>;

  PostProcessor readPostProcessor(const json& p, const std::string& where) {
    if (p.is_null()) return nullptr;
    const std::string type = p.at("type").get<std::string>();
    if (type == "ByteLevel") return nullptr;  // offsets only: the ids are as they are
    if (type == "Sequence") {
      std::vector<PostProcessor> steps;
      const json& list = p.at("processors");
      for (size_t i = 0; i < list.size(); ++i)
        if (auto f = readPostProcessor(list[i], where + ".processors[" + std::to_string(i) + "]"))
          steps.push_back(f);
      return [steps](const std::vector<int64_t>& in) {
        std::vector<int64_t> out = in;
        for (const auto& f : steps) out = f(out);
        return out;
      };
    }
    if (type == "TemplateProcessing") {
      // The single-sequence template: special tokens' ids around the text's.
      std::vector<std::vector<int64_t>> parts;  // empty: the text's ids
      for (const json& item : p.at("single")) {
        if (item.contains("Sequence")) {
          parts.emplace_back();
          continue;
        }
        const std::string name = item.at("SpecialToken").at("id").get<std::string>();
        const json& special = p.at("special_tokens");
        if (!special.contains(name))
          throw Error(path() + ": " + where + ": the template's " + name +
                      " is not in special_tokens");
        parts.push_back(special[name].at("ids").get<std::vector<int64_t>>());
      }
      return [parts](const std::vector<int64_t>& in) {
        std::vector<int64_t> out;
        for (const auto& part : parts)
          out.insert(out.end(), part.empty() ? in.begin() : part.begin(),
                     part.empty() ? in.end() : part.end());
        return out;
      };
    }
    if (type == "RobertaProcessing" || type == "BertProcessing") {
      const int64_t cls = p.at("cls").at(1).get<int64_t>(), sep = p.at("sep").at(1).get<int64_t>();
      return [cls, sep](const std::vector<int64_t>& in) {
        std::vector<int64_t> out = {cls};
        out.insert(out.end(), in.begin(), in.end());
        out.push_back(sep);
        return out;
      };
    }
    refuse(where, "the post_processor \"" + type + "\"");
  }

  using Decoder = std::function<Tokens(const Tokens&)>;

  Decoder readDecoder(const json& d, const std::string& where) {
    if (d.is_null()) return nullptr;
    const std::string type = d.at("type").get<std::string>();
    if (type == "Sequence") {
      std::vector<Decoder> steps;
      const json& list = d.at("decoders");
      for (size_t i = 0; i < list.size(); ++i)
        if (auto f = readDecoder(list[i], where + ".decoders[" + std::to_string(i) + "]"))
          steps.push_back(f);
      return [steps](const Tokens& in) {
        Tokens out = in;
        for (const auto& f : steps) out = f(out);
        return out;
      };
    }
    if (type == "ByteLevel") {
      // Each token's characters back to bytes; a token with a character
      // outside the alphabet (an added token) keeps its own bytes.
      return [](const Tokens& in) {
        std::string bytes;
        for (const std::string& t : in) {
          std::string mine;
          bool all = true;
          for (const std::string& c : codePoints(t)) {
            auto it = charToByte().find(c);
            if (it == charToByte().end()) {
              all = false;
              break;
            }
            mine += static_cast<char>(it->second);
          }
          bytes += all ? mine : t;
        }
        return Tokens{validUtf8(bytes)};
      };
    }
    if (type == "Replace") {
      const std::string from = d.at("pattern").at("String").get<std::string>(),
                        to = d.at("content").get<std::string>();
      return [from, to](const Tokens& in) {
        Tokens out = in;
        for (std::string& t : out) replaceAll(t, from, to);
        return out;
      };
    }
    if (type == "ByteFallback") {
      // Runs of <0xXX> tokens become their bytes' text, or U+FFFD per byte
      // where they are not UTF-8.
      return [](const Tokens& in) {
        Tokens out;
        std::string run;
        size_t runLength = 0;
        auto flush = [&] {
          if (runLength == 0) return;
          if (validUtf8(run) == run)
            out.push_back(run);
          else
            for (size_t i = 0; i < runLength; ++i) out.push_back("\xEF\xBF\xBD");
          run.clear();
          runLength = 0;
        };
        for (const std::string& t : in) {
          unsigned byte = 0;
          if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t[5] == '>' &&
              std::sscanf(t.c_str() + 3, "%2x", &byte) == 1) {
            run += static_cast<char>(byte);
            ++runLength;
          } else {
            flush();
            out.push_back(t);
          }
        }
        flush();
        return out;
      };
    }
    if (type == "WordPiece") {
      // A token that starts with the prefix continues the word before it;
      // any other is a new word (a space before it); cleanup then undoes
      // the spaces tokenisation put before punctuation and contractions.
      const std::string prefix = d.value("prefix", std::string("##"));
      const bool cleanup = d.value("cleanup", true);
      return [prefix, cleanup](const Tokens& in) {
        Tokens out = in;
        for (size_t i = 0; i < out.size(); ++i) {
          std::string& t = out[i];
          if (i > 0) {
            if (t.rfind(prefix, 0) == 0)
              t.erase(0, prefix.size());
            else
              t = " " + t;
          }
          if (cleanup)
            for (const auto& [from, to] : kWordPieceCleanup) replaceAll(t, from, to);
        }
        return out;
      };
    }
    if (type == "Fuse")
      return [](const Tokens& in) {
        std::string all;
        for (const std::string& t : in) all += t;
        return Tokens{all};
      };
    if (type == "Strip") {
      const std::string content = d.at("content").get<std::string>();
      const size_t start = d.value("start", 0), stop = d.value("stop", 0);
      return [content, start, stop](const Tokens& in) {
        Tokens out = in;
        for (std::string& t : out) {
          for (size_t i = 0; i < start && t.rfind(content, 0) == 0 && !content.empty(); ++i)
            t.erase(0, content.size());
          for (size_t i = 0; i < stop && t.size() >= content.size() && !content.empty() &&
                             t.compare(t.size() - content.size(), content.size(), content) == 0;
               ++i)
            t.erase(t.size() - content.size());
        }
        return out;
      };
    }
    if (type == "Metaspace") {
      const std::string replacement = d.value("replacement", std::string("\xE2\x96\x81"));
      std::string scheme = d.value("prepend_scheme", std::string());
      if (scheme.empty()) scheme = d.value("add_prefix_space", true) ? "always" : "never";
      return [replacement, scheme](const Tokens& in) {
        Tokens out = in;
        for (size_t i = 0; i < out.size(); ++i) {
          replaceAll(out[i], replacement, " ");
          if (i == 0 && scheme != "never" && out[i].rfind(' ', 0) == 0) out[i].erase(0, 1);
        }
        return out;
      };
    }
    refuse(where, "the decoder \"" + type + "\"");
  }

  // The text cut at the added tokens, longest first at each position:
  // (the added token's id, its text) or (-1, the text between).
  std::vector<std::pair<int64_t, std::string>> splitAdded(const std::string& text) const {
    std::vector<std::pair<int64_t, std::string>> out;
    std::string plain;
    auto isSpace = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    for (size_t i = 0; i < text.size();) {
      const Added* hit = nullptr;
      for (const Added& a : added_)
        if (text.compare(i, a.content.size(), a.content) == 0) {
          hit = &a;
          break;
        }
      if (!hit) {
        plain += text[i++];
        continue;
      }
      if (hit->lstrip)
        while (!plain.empty() && isSpace(plain.back())) plain.pop_back();
      if (!plain.empty()) out.emplace_back(-1, std::move(plain));
      plain.clear();
      out.emplace_back(hit->id, hit->content);
      i += hit->content.size();
      if (hit->rstrip)
        while (i < text.size() && isSpace(text[i])) ++i;
    }
    if (!plain.empty()) out.emplace_back(-1, std::move(plain));
    return out;
  }

  // One pre-token's ids: merged by rank (the lowest-ranked adjacent pair,
  // every occurrence left to right, until none is a merge), then each
  // symbol's id, its bytes' <0xXX> ids (byte_fallback), or the unknown id.
  void bpe(const std::string& word, std::vector<int64_t>& ids) const {
    if (word.empty()) return;
    if (ignoreMerges_) {
      auto it = vocab_.find(word);
      if (it != vocab_.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    std::vector<std::string> symbols = codePoints(word);
    while (symbols.size() > 1) {
      int64_t best = -1;
      size_t at = 0;
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        auto it = ranks_.find({symbols[i], symbols[i + 1]});
        if (it != ranks_.end() && (best < 0 || it->second < best)) {
          best = it->second;
          at = i;
        }
      }
      if (best < 0) break;
      const std::string a = symbols[at], b = symbols[at + 1];
      std::vector<std::string> merged;
      for (size_t i = 0; i < symbols.size();) {
        if (i + 1 < symbols.size() && symbols[i] == a && symbols[i + 1] == b) {
          merged.push_back(a + b);
          i += 2;
        } else {
          merged.push_back(symbols[i++]);
        }
      }
      symbols = std::move(merged);
    }
    bool lastUnknown = false;
    for (const std::string& s : symbols) {
      auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        ids.push_back(it->second);
        lastUnknown = false;
        continue;
      }
      if (byteFallback_) {
        std::vector<int64_t> bytes;
        for (unsigned char c : s) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", c);
          auto b = vocab_.find(name);
          if (b == vocab_.end()) break;
          bytes.push_back(b->second);
        }
        if (bytes.size() == s.size()) {
          ids.insert(ids.end(), bytes.begin(), bytes.end());
          lastUnknown = false;
          continue;
        }
      }
      if (unk_ < 0)
        throw Error(path() + ": the text's \"" + validUtf8(s) +
                    "\" has no token (no byte fallback, no unk_token)");
      if (!(fuseUnk_ && lastUnknown)) ids.push_back(unk_);
      lastUnknown = true;
    }
  }

  struct Added {
    std::string content;
    int64_t id = 0;
    bool lstrip = false, rstrip = false;
  };

  std::unordered_map<std::string, int64_t> vocab_;
  std::map<std::pair<std::string, std::string>, int64_t> ranks_;
  std::vector<std::string> tokens_;  // by id; "" where no token has that id
  std::vector<Added> added_;         // longest first
  int64_t unk_ = -1;
  bool fuseUnk_ = false, byteFallback_ = false, ignoreMerges_ = false;
  // The model on one pre-token: appends its ids.
  std::function<void(const std::string&, std::vector<int64_t>&)> model_;
  std::function<std::string(const std::string&)> normalizer_;
  PreTokenizer preTokenizer_;
  PostProcessor postProcessor_;
  Decoder decoder_;
};

}  // namespace

Tokenizer::~Tokenizer() = default;

void Tokenizer::checkIds(const std::vector<int64_t>& ids) const {
  for (int64_t id : ids)
    if (id < 0 || id >= vocabularySize())
      throw Error(path() + ": id " + std::to_string(id) + " is outside the vocabulary (0.." +
                  std::to_string(vocabularySize() - 1) + ")");
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error(path + ": no such tokenizer file");
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".model") return std::make_unique<SentencePieceTokenizer>(path);
  const std::string content = readWhole(path);
  const size_t first = content.find_first_not_of(" \t\r\n");
  if (ext == ".json" || (first != std::string::npos && content[first] == '{'))
    return std::make_unique<JsonTokenizer>(path, content);
  return std::make_unique<SentencePieceTokenizer>(path);
}

std::vector<std::string> Tokenizer::candidatesBeside(const std::string& modelPath) {
  const fs::path folder = fs::path(modelPath).parent_path();
  return {(folder / "tokenizer.json").string(), (folder / "tokenizer.model").string()};
}

std::string Tokenizer::findBeside(const std::string& modelPath) {
  std::error_code ec;
  for (const std::string& c : candidatesBeside(modelPath))
    if (fs::is_regular_file(c, ec)) return c;
  return "";
}

}  // namespace collage
