// The tokenizers (core/decode/tokenizer.h) on the tiny files of
// tests/models/tokenizer/: known ids for known strings (spm_encode's for the
// SentencePiece model, reference_bpe.py's for the tokenizer.json files:
// expected_ids.tsv, written by make_tokenizers.py), text -> ids -> text,
// byte fallback and unknown characters, and clear refusals.
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

std::vector<Row> expectedRows() {
  std::ifstream in(kDir + "expected_ids.tsv");
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
  const std::string wordpiece =
      s.write("wp.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  expectError([&] { Tokenizer::load(wordpiece); },
              {wordpiece, "model: type \"WordPiece\"", "not supported"});
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
