// The tokenizers (core/decode/tokenizer.h) on the tiny files of
// tests/models/tokenizer/: known ids for known strings (spm_encode's for the
// SentencePiece model, reference_bpe.py's for the BPE tokenizer.json files:
// expected_ids.tsv, written by make_tokenizers.py; for the WordPiece and
// Unigram files reference_wordpiece_unigram.py's, and spm_encode's for the
// one converted from a SentencePiece model: expected_ids_wordpiece_unigram.tsv,
// written by make_wordpiece_unigram.py), text -> ids -> text, byte fallback
// and unknown characters, and clear refusals.
#include "core/decode/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../test_support.h"

namespace collage {
namespace {

namespace fs = std::filesystem;
using test_support::expectError;

const std::string kDir = std::string(COLLAGE_SOURCE_DIR) + "/tests/models/tokenizer/";

struct Row {
  std::string file, text;
  std::vector<int64_t> ids;
};

std::vector<Row> expectedRows(const std::string& file = "expected_ids.tsv") {
  std::ifstream in(kDir + file);
  std::vector<Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t a = line.find('\t'), b = line.rfind('\t');
    Row r;
    r.file = line.substr(0, a);
    r.text = nlohmann::json::parse(line.substr(a + 1, b - a - 1)).get<std::string>();
    std::istringstream ids(line.substr(b + 1));
    for (std::string id; std::getline(ids, id, ',');) r.ids.push_back(std::stoll(id));
    rows.push_back(r);
  }
  return rows;
}

const Tokenizer& tokenizer(const std::string& file) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto& t = loaded[file];
  if (!t) t = Tokenizer::load(kDir + file);
  return *t;
}

// A scratch folder of its own, removed at the end.
struct Scratch {
  fs::path dir;
  Scratch() {
    dir = fs::temp_directory_path() /
          ("collage_tokenizer_test_" +
           std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(dir / name, std::ios::binary) << content;
    return (dir / name).string();
  }
};

TEST(Tokenizer, GivesTheIdsTheReferencesGive) {
  const std::vector<Row> rows = expectedRows();
  std::map<std::string, int> perFile;
  for (const Row& r : rows) {
    ++perFile[r.file];
    EXPECT_EQ(tokenizer(r.file).encode(r.text), r.ids) << r.file << ": " << r.text;
  }
  // Every file, each with every text (spm_encode takes no newline).
  EXPECT_EQ(perFile["tiny_sp.model"], 6);
  EXPECT_EQ(perFile["sp_bpe.tokenizer.json"], 7);
  EXPECT_EQ(perFile["byte_level.tokenizer.json"], 8);
  EXPECT_EQ(perFile["split_byte_level.tokenizer.json"], 8);
  EXPECT_EQ(tokenizer("tiny_sp.model").format(), "SentencePiece");
  EXPECT_EQ(tokenizer("byte_level.tokenizer.json").format(), "tokenizer.json");
}

TEST(Tokenizer, TextToIdsToTextIsTheText) {
  // The template's BOS decodes to its own text; the rest is the text again.
  const std::map<std::string, size_t> bos = {{"sp_bpe.tokenizer.json", 1},
                                             {"split_byte_level.tokenizer.json", 1}};
  for (const Row& r : expectedRows()) {
    std::vector<int64_t> ids = tokenizer(r.file).encode(r.text);
    if (bos.count(r.file)) ids.erase(ids.begin(), ids.begin() + bos.at(r.file));
    EXPECT_EQ(tokenizer(r.file).decode(ids), r.text) << r.file;
  }
  std::vector<int64_t> hello = tokenizer("sp_bpe.tokenizer.json").encode("Hello");
  EXPECT_EQ(hello.front(), 1);  // <s>
  EXPECT_EQ(tokenizer("sp_bpe.tokenizer.json").decode(hello), "<s> Hello");
  EXPECT_EQ(tokenizer("byte_level.tokenizer.json").decode({64, 511, 65}), "a<|endoftext|>b");
}

TEST(Tokenizer, CharactersOutsideTheVocabularyFallBackToBytes) {
  // 🙂 is F0 9F 99 82; SentencePiece's byte pieces <0x00>.. are ids 3..258,
  // after <unk>, <s>, </s>; 458 is "▁" (the space before it).
  EXPECT_EQ(tokenizer("tiny_sp.model").encode("\xF0\x9F\x99\x82"),
            (std::vector<int64_t>{458, 3 + 0xF0, 3 + 0x9F, 3 + 0x99, 3 + 0x82}));
  EXPECT_EQ(tokenizer("sp_bpe.tokenizer.json").encode("\xF0\x9F\x99\x82"),
            (std::vector<int64_t>{1, 458, 3 + 0xF0, 3 + 0x9F, 3 + 0x99, 3 + 0x82}));
  // A byte-level vocabulary spells every byte. GPT-2's alphabet gives ids
  // 0..187 to the printable bytes 0x21..0x7E, 0xA1..0xAC, 0xAE..0xFF in order
  // and 188.. to the others (0x00..0x20, 0x7F..0xA0, 0xAD): 0xF0 is
  // 106 + 0xF0 - 0xAE = 172; 0x9F is 188 + 33 + 0x9F - 0x7F = 253, and so on.
  EXPECT_EQ(tokenizer("byte_level.tokenizer.json").encode("\xF0\x9F\x99\x82"),
            (std::vector<int64_t>{172, 253, 247, 224}));
  // Bytes that are not UTF-8 decode to U+FFFD: byte fallback's, one per
  // byte token (Hugging Face's ByteFallback); byte-level's, one per
  // unfinished character (E6 97 starts a three-byte one), as Python's
  // decode(errors="replace").
  EXPECT_EQ(tokenizer("sp_bpe.tokenizer.json").decode({3 + 0xE6, 3 + 0x97}),
            "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_NE(tokenizer("tiny_sp.model").decode({3 + 0xE6, 3 + 0x97}).find("\xEF\xBF\xBD"),
            std::string::npos);
  EXPECT_EQ(tokenizer("byte_level.tokenizer.json").decode({162, 245, 64}),
            "\xEF\xBF\xBD"
            "a");
}

TEST(Tokenizer, UnknownCharactersGetTheUnknownIdOrAClearError) {
  Scratch s;
  nlohmann::json j = {{"model",
                       {{"type", "BPE"},
                        {"vocab", {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"ab", 3}}},
                        {"merges", {"a b"}},
                        {"unk_token", "<unk>"},
                        {"fuse_unk", true}}}};
  EXPECT_EQ(Tokenizer::load(s.write("fused.json", j.dump()))->encode("abxyb"),
            (std::vector<int64_t>{3, 0, 2}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(Tokenizer::load(s.write("unfused.json", j.dump()))->encode("abxyb"),
            (std::vector<int64_t>{3, 0, 0, 2}));
  j["model"].erase("unk_token");
  const std::string none = s.write("none.json", j.dump());
  expectError([&] { Tokenizer::load(none)->encode("axb"); }, {none, "\"x\" has no token"});
  expectError([&] { Tokenizer::load(none)->decode({4}); },
              {none, "id 4 is outside the vocabulary (0..3)"});
  expectError([&] { tokenizer("tiny_sp.model").decode({512}); },
              {"tiny_sp.model", "id 512 is outside"});
}

TEST(Tokenizer, MetaspaceSpellsWhatSentencePieceDoes) {
  // LLaMA-2's newer tokenizer.json: no normalizer, a Metaspace pre-tokenizer
  // (prepend "▁" to the text's first piece only) and decoder (then byte
  // fallback): the same ids as the SentencePiece model, whose file it was
  // converted from, except for a text that starts with a space, to which
  // Hugging Face's Metaspace prepends no "▁" where SentencePiece does.
  Scratch s;
  std::ifstream in(kDir + "sp_bpe.tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\xE2\x96\x81"},
                        {"prepend_scheme", "first"},
                        {"split", false}};
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}}}}};
  j["post_processor"] = nullptr;
  const auto metaspace = Tokenizer::load(s.write("metaspace.json", j.dump()));
  int checked = 0;
  for (const Row& r : expectedRows()) {
    if (r.file != "tiny_sp.model") continue;
    if (r.text[0] == ' ') {
      std::vector<int64_t> one = r.ids;
      one.erase(one.begin());  // SentencePiece's "▁" before the text's own
      EXPECT_EQ(metaspace->encode(r.text), one) << r.text;
      ++checked;
      continue;
    }
    EXPECT_EQ(metaspace->encode(r.text), r.ids) << r.text;
    EXPECT_EQ(metaspace->decode(r.ids), r.text);
    ++checked;
  }
  EXPECT_EQ(checked, 6);
  // After an added token the text is not the first piece: "first" prepends
  // no "▁" there, "always" does.
  const std::vector<int64_t> first = metaspace->encode("<s>Hello");
  j["pre_tokenizer"]["prepend_scheme"] = "always";
  const std::vector<int64_t> always =
      Tokenizer::load(s.write("always.json", j.dump()))->encode("<s>Hello");
  std::vector<int64_t> expected = {1};
  for (int64_t id : tokenizer("tiny_sp.model").encode("Hello")) expected.push_back(id);
  EXPECT_EQ(always, expected);
  EXPECT_NE(first, always);
  EXPECT_EQ(metaspace->decode(first), "<s>Hello");
}

TEST(Tokenizer, ACorruptFileIsAnErrorNamingIt) {
  Scratch s;
  const std::string garbage = s.write("tokenizer.model", "this is not a protobuf \x01\x02\xff");
  expectError([&] { Tokenizer::load(garbage); }, {garbage, "not a SentencePiece model"});
  const std::string truncated =
      s.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0");
  expectError([&] { Tokenizer::load(truncated); },
              {truncated, "not a tokenizer.json", "parse error"});
  const std::string wordLevel =
      s.write("wl.json", R"({"model": {"type": "WordLevel", "vocab": {"a": 0}}})");
  expectError([&] { Tokenizer::load(wordLevel); },
              {wordLevel, "model: type \"WordLevel\"", "not supported"});
  // A step inside a Sequence is named by its JSON path.
  const std::string nmt = s.write("nmt.json", R"({"model": {"type": "Unigram", "unk_id": 0,
      "vocab": [["<unk>", 0.0]]}, "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "NFKC"}, {"type": "Nmt"}]}})");
  expectError([&] { Tokenizer::load(nmt); },
              {nmt, "normalizer.normalizers[1]", "\"Nmt\"", "not supported"});
  const std::string badCharsmap = s.write("pc.json", R"({"model": {"type": "Unigram", "unk_id": 0,
      "vocab": [["<unk>", 0.0]]}, "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Replace", "pattern": {"String": "a"}, "content": "b"},
      {"type": "Precompiled", "precompiled_charsmap": "AAAA"}]}})");
  expectError([&] { Tokenizer::load(badCharsmap); },
              {badCharsmap, "normalizer.normalizers[1]", "precompiled_charsmap is too short"});
  const std::string badMerge = s.write(
      "merge.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})");
  expectError([&] { Tokenizer::load(badMerge); },
              {badMerge, "model.merges[0] (a b): ab is not in model.vocab"});
  const std::string digits = s.write(
      "digits.json",
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Digits"}})");
  expectError([&] { Tokenizer::load(digits); },
              {digits, "pre_tokenizer", "\"Digits\"", "not supported"});
  const std::string badRegex =
      s.write("regex.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
          "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}})");
  expectError([&] { Tokenizer::load(badRegex); },
              {badRegex, "the regex (unclosed does not compile"});
  expectError([&] { Tokenizer::load((s.dir / "absent.json").string()); },
              {"absent.json", "no such tokenizer file"});
}

TEST(Tokenizer, WordPieceAndUnigramGiveTheReferenceIds) {
  std::map<std::string, int> perFile;
  for (const Row& r : expectedRows("expected_ids_wordpiece_unigram.tsv")) {
    ++perFile[r.file];
    EXPECT_EQ(tokenizer(r.file).encode(r.text), r.ids) << r.file << ": " << r.text;
  }
  EXPECT_EQ(perFile["wordpiece.tokenizer.json"], 10);
  EXPECT_EQ(perFile["unigram.tokenizer.json"], 9);
  EXPECT_EQ(perFile["unigram_bytes.tokenizer.json"], 9);
  // spm_encode's ids, for the model whose nmt_nfkc charsmap it carries.
  EXPECT_EQ(perFile["unigram_nfkc.tokenizer.json"], 6);
}

TEST(Tokenizer, PrecompiledNormalizerMapsAsTheCharsmapSays) {
  // unigram_nfkc.tokenizer.json: spm_train's unigram model with its nmt_nfkc
  // charsmap (make_wordpiece_unigram.py); ▁ is 3, <unk> 0, A 130.
  const Tokenizer& nfkc = tokenizer("unigram_nfkc.tokenizer.json");
  EXPECT_EQ(nfkc.encode("\uff28\uff45\uff4c\uff4c\uff4f"), nfkc.encode("Hello"));  // fullwidth
  EXPECT_EQ(nfkc.encode("hello\u3000again"), nfkc.encode("hello again"));
  EXPECT_EQ(nfkc.decode(nfkc.encode("\ufb01ve \u2460")), "five 1");
  // A cluster under 6 bytes is replaced whole by its first key's mapping:
  // fullwidth A and a combining acute are "A" (Hugging Face's rule, which
  // the library keeps though SentencePiece itself gives "Á", <unk> here).
  EXPECT_EQ(nfkc.encode("\uff21\u0301"), (std::vector<int64_t>{3, 130}));
  // Without the charsmap the fullwidth letters are unknown.
  Scratch s;
  std::ifstream in(kDir + "unigram_nfkc.tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["normalizer"]["normalizers"][0]["precompiled_charsmap"] = nullptr;
  EXPECT_EQ(Tokenizer::load(s.write("none.json", j.dump()))->encode("\uff21"),
            (std::vector<int64_t>{3, 0}));
  j["normalizer"]["normalizers"][0]["precompiled_charsmap"] = "not base64!";
  const std::string bad = s.write("bad.json", j.dump());
  expectError([&] { Tokenizer::load(bad); },
              {bad, "normalizer.normalizers[0]", "precompiled_charsmap is not base64"});
}

// wordpiece.tokenizer.json's ids (make_wordpiece_unigram.py): [PAD] 0,
// [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, then the 35 tokens of WORDPIECE_WORDS
// in order: the 5, cache 6, grow 7, ##s 8, ##es 9, hello 10, world 11, , 12,
// . 13, ! 14, ? 15, ' 16, t 17, don 18, un 19, ##believ 20, ##able 21,
// ##ably 22, ##ab 23, cafe 24, naive 25, 日 26, 本 27, x 28, ##y 29, a 30,
// b 31, ##c 32, token 33, ##izer 34, ##i 35, ##zer 36, tab 37, $ 38, ##b 39.
TEST(Tokenizer, WordPieceCutsLongestFirstAndWholeWordsUnknown) {
  const Tokenizer& wp = tokenizer("wordpiece.tokenizer.json");
  EXPECT_EQ(wp.format(), "tokenizer.json");
  EXPECT_EQ(wp.vocabularySize(), 40);
  // The longest continuation each time: ##ably, not ##ab + ...; ##izer,
  // not ##i + ##zer.
  EXPECT_EQ(wp.encode("unbelievably"), (std::vector<int64_t>{2, 19, 20, 22, 3}));
  EXPECT_EQ(wp.encode("tokenizer"), (std::vector<int64_t>{2, 33, 34, 3}));
  // x ##y spell "xy", but "xyz" has no ##z: the whole word is [UNK].
  EXPECT_EQ(wp.encode("xy xyz"), (std::vector<int64_t>{2, 28, 29, 1, 3}));
  // A word never starts with a continuation: "grows" is grow ##s, "s" alone
  // ("##s" only) is [UNK].
  EXPECT_EQ(wp.encode("grows s"), (std::vector<int64_t>{2, 7, 8, 1, 3}));
  // Lower-cased, accents stripped (strip_accents null follows lowercase),
  // punctuation cut out, CJK ideographs words of their own.
  EXPECT_EQ(wp.encode("CAFÉ,NAÏVE!日本"), (std::vector<int64_t>{2, 24, 12, 25, 14, 26, 27, 3}));

  Scratch s;
  std::ifstream in(kDir + "wordpiece.tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in);
  // Accents kept (strip_accents false): "café" has no piece.
  j["normalizer"]["strip_accents"] = false;
  EXPECT_EQ(Tokenizer::load(s.write("accents.json", j.dump()))->encode("Café cafe"),
            (std::vector<int64_t>{2, 1, 24, 3}));
  // Case kept (lowercase false, so strip_accents null keeps accents too).
  j["normalizer"]["strip_accents"] = nullptr;
  j["normalizer"]["lowercase"] = false;
  EXPECT_EQ(Tokenizer::load(s.write("cased.json", j.dump()))->encode("Hello hello"),
            (std::vector<int64_t>{2, 1, 10, 3}));
  // A word longer than max_input_chars_per_word characters is [UNK].
  j["normalizer"]["lowercase"] = true;
  j["model"]["max_input_chars_per_word"] = 5;
  EXPECT_EQ(Tokenizer::load(s.write("short.json", j.dump()))->encode("grows unbelievably"),
            (std::vector<int64_t>{2, 7, 8, 1, 3}));
  // No [UNK] in the vocabulary: an error naming the file, when a word needs it.
  j["model"]["unk_token"] = "[NOPE]";
  const std::string noUnk = s.write("nounk.json", j.dump());
  EXPECT_EQ(Tokenizer::load(noUnk)->encode("grows"), (std::vector<int64_t>{2, 7, 8, 3}));
  expectError([&] { Tokenizer::load(noUnk)->encode("xyz"); },
              {noUnk, "\"xyz\" needs the unknown token", "\"[NOPE]\" is not in model.vocab"});
  // Whitespace (runs of word characters, runs of others) instead of BERT's
  // pre-tokenizer: ",." stays one word, which has no piece.
  j["model"]["unk_token"] = "[UNK]";
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_EQ(Tokenizer::load(s.write("ws.json", j.dump()))->encode("hello,. world!"),
            (std::vector<int64_t>{2, 10, 1, 11, 14, 3}));
}

TEST(Tokenizer, WordPieceDecodesWordsAndContinuations) {
  const Tokenizer& wp = tokenizer("wordpiece.tokenizer.json");
  // The template's [CLS] and [SEP] decode as themselves; ## joins a piece to
  // the word before; cleanup takes the space before punctuation away.
  EXPECT_EQ(wp.decode(wp.encode("Hello, World!")), "[CLS] hello, world! [SEP]");
  const std::vector<std::pair<std::string, std::string>> texts = {
      {"Hello, World!", "hello, world!"},
      {"The cache grows.", "the cache grows."},
      {"Unbelievably tokenizer", "unbelievably tokenizer"},
      {"Café   naïve\tTAB", "cafe naive tab"},
      {"日本 hello", "日 本 hello"}};
  for (const auto& [text, back] : texts) {
    std::vector<int64_t> ids = wp.encode(text);
    ASSERT_GE(ids.size(), 2u);
    EXPECT_EQ(ids.front(), 2);
    EXPECT_EQ(ids.back(), 3);
    EXPECT_EQ(wp.decode({ids.begin() + 1, ids.end() - 1}), back) << text;
  }
}

// unigram.tokenizer.json's ids: <pad> 0, </s> 1, <unk> 2, then
// UNIGRAM_PIECES in order: ▁ 3 (-2.5), ▁abc 4 (-3), ▁ab 5 (-4), cd 6 (-2),
// d 7 (-9), a 8, b 9, c 10, ▁the 11 (-1.5), ▁cache 12, ▁grow 13 (-3.9),
// s 14 (-2.2), ▁gr 15 (-6.1), ows 16 (-4.4), ▁hello 17, ▁world 18, , 19,
// . 20 (-1.9), ▁token 21 (-4.8), izer 22 (-5.1), ▁tokeni 23 (-4.9),
// zer 24 (-7.2), ...; unigram_bytes.tokenizer.json then has <0x00>.. at 37..
TEST(Tokenizer, UnigramTakesTheBestTotalScoreNotTheLongestMatch) {
  const Tokenizer& uni = tokenizer("unigram.tokenizer.json");
  EXPECT_EQ(uni.vocabularySize(), 37);
  // "▁abcd": ▁ab + cd = -4 - 2 = -6 beats the greedy ▁abc + d = -3 - 9 = -12;
  // "▁abc" alone is one piece (-3, against ▁ab + c = -9.7).
  EXPECT_EQ(uni.encode("abcd"), (std::vector<int64_t>{5, 6, 1}));
  EXPECT_EQ(uni.encode("abc"), (std::vector<int64_t>{4, 1}));
  // ▁tokeni is the longer first piece, but ▁token + izer (-9.9) beats
  // ▁tokeni + zer (-12.1); ▁grow + s + . (-8) beats ▁gr + ows + . (-12.4).
  EXPECT_EQ(uni.encode("tokenizer grows."), (std::vector<int64_t>{21, 22, 13, 14, 20, 1}));
  // Characters no piece spells are <unk>, two in a row one <unk>.
  EXPECT_EQ(uni.encode("ζζ"), (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(uni.encode("aζbζζ"), (std::vector<int64_t>{3, 8, 2, 9, 2, 1}));
  // With byte_fallback they are their UTF-8 bytes' pieces: ζ is CE B6.
  EXPECT_EQ(tokenizer("unigram_bytes.tokenizer.json").encode("ζζ"),
            (std::vector<int64_t>{3, 37 + 0xCE, 37 + 0xB6, 37 + 0xCE, 37 + 0xB6, 1}));

  Scratch s;
  std::ifstream in(kDir + "unigram.tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["model"]["unk_id"] = nullptr;
  const std::string noUnk = s.write("nounk.json", j.dump());
  EXPECT_EQ(Tokenizer::load(noUnk)->encode("abcd"), (std::vector<int64_t>{5, 6, 1}));
  expectError([&] { Tokenizer::load(noUnk)->encode("aζ"); },
              {noUnk, "\"ζ\" has no piece (no model.unk_id)"});
  j["model"]["unk_id"] = 37;
  const std::string badUnk = s.write("badunk.json", j.dump());
  expectError([&] { Tokenizer::load(badUnk); },
              {badUnk, "model.unk_id 37 is not an id of model.vocab"});
  j["model"]["unk_id"] = 2;
  j["model"]["vocab"][3] = nlohmann::json::array({"▁", "high"});
  const std::string badScore = s.write("badscore.json", j.dump());
  expectError([&] { Tokenizer::load(badScore); },
              {badScore, "model.vocab[3] is not a [piece, score] pair"});
}

TEST(Tokenizer, UnigramTextToIdsToTextIsTheText) {
  // The template's </s> decodes to itself; the rest is the text again, the
  // Metaspace decoder taking the "▁" it put first away.
  const Tokenizer& uni = tokenizer("unigram.tokenizer.json");
  const Tokenizer& bytes = tokenizer("unigram_bytes.tokenizer.json");
  EXPECT_EQ(uni.decode(uni.encode("hello, world")), "hello, world</s>");
  for (const std::string text : {"hello, world", "abc abcd", "tokenizer grows.", "the cache"}) {
    std::vector<int64_t> ids = uni.encode(text);
    ASSERT_EQ(ids.back(), 1);
    ids.pop_back();
    EXPECT_EQ(uni.decode(ids), text);
    EXPECT_EQ(bytes.decode(bytes.encode(text)), text + "</s>");
  }
  // Unknown characters come back as <unk>, or as themselves from their bytes.
  EXPECT_EQ(uni.decode({3, 2, 11}), "<unk> the");
  std::vector<int64_t> ids = bytes.encode("ζζ the");
  ids.pop_back();
  EXPECT_EQ(bytes.decode(ids), "ζζ the");
}

TEST(Tokenizer, IsFoundBesideTheModelJsonFirst) {
  Scratch s;
  const std::string model = s.write("model.onnx", "");
  EXPECT_EQ(Tokenizer::findBeside(model), "");
  EXPECT_EQ(Tokenizer::candidatesBeside(model),
            (std::vector<std::string>{(s.dir / "tokenizer.json").string(),
                                      (s.dir / "tokenizer.model").string()}));
  fs::copy_file(kDir + "tiny_sp.model", s.dir / "tokenizer.model");
  EXPECT_EQ(Tokenizer::findBeside(model), (s.dir / "tokenizer.model").string());
  EXPECT_EQ(Tokenizer::load(Tokenizer::findBeside(model))->format(), "SentencePiece");
  fs::copy_file(kDir + "byte_level.tokenizer.json", s.dir / "tokenizer.json");
  EXPECT_EQ(Tokenizer::findBeside(model), (s.dir / "tokenizer.json").string());
}

}  // namespace
}  // namespace collage
