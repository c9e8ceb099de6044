#!/usr/bin/python3
"""Writes the tiny tokenizers the tokenizer tests read (core/decode/tokenizer.h)
and the ids they must give, each computed by something other than the C++
code under test:

    /usr/bin/python3 tests/models/tokenizer/make_tokenizers.py

needs spm_train, spm_encode and spm_export_vocab (Debian's `sentencepiece`).
Beside this script it writes:

- tiny_sp.model: a SentencePiece BPE model, `spm_train` on corpus.txt
  (vocabulary 512 with the 256 byte pieces of byte fallback, the identity
  normalisation and spaces kept as written, as LLaMA's tokenizer.model).
- sp_bpe.tokenizer.json: that model as the SentencePiece-style BPE a
  LLaMA-2 tokenizer.json writes (vocab by id, merges ordered by the merged
  piece's score as Hugging Face's converter does; normalizer Prepend "▁" +
  Replace " " -> "▁", byte_fallback, the <s> template, the decoder
  Replace / ByteFallback / Fuse / Strip).
- byte_level.tokenizer.json: a GPT-2-style byte-level BPE: the 256 byte
  characters, 255 merges trained here on corpus.txt, <|endoftext|>;
  pre-tokenizer ByteLevel (GPT-2's pattern), merges as "a b" strings.
- split_byte_level.tokenizer.json: the same vocabulary (less its last
  merge) as LLaMA-3 writes it: a Split pre-tokenizer (LLaMA-3's pattern,
  Isolated) then ByteLevel without its pattern, ignore_merges, merges as
  [a, b] pairs, <|begin_of_text|> and <|end_of_text|>, the
  <|begin_of_text|> template.
- expected_ids.tsv: FILE <tab> the text (a JSON string) <tab> the ids:
  spm_encode's for tiny_sp.model; reference_bpe.py's (an independent
  Python reading of the format) for the tokenizer.json files, and for
  sp_bpe.tokenizer.json checked here against spm_encode's (less <s>).

The vocabularies have 512 ids, as the small committed decoders
(tests/models/decoder/{gpt2,llama}_style_tiny.onnx): every id such a
decoder generates decodes (e2e_generate_prompt_*).
"""
import collections
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from reference_bpe import GPT2_PATTERN, Reference, bytes_to_unicode, isolated_split  # noqa: E402

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# The strings whose ids are checked: words from the corpus and not, digits,
# punctuation, contractions, runs of spaces, a tab, and characters no
# vocabulary has (byte fallback). Those with a newline are not given to
# spm_encode (it reads a line at a time).
TEXTS = [
    "Hello world, the cache grows.",
    "The quick brown fox jumps over the lazy dog.",
    "Numbers: 12345 and 3.14!",
    "don't stop, it's   spaced\tout",
    "über 日本 🙂",
    "tokens\nand a new line",
    "  leading spaces",
]


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def spm(*args, stdin=None):
    return subprocess.run(args, input=stdin, capture_output=True, text=True, check=True).stdout


def sentencepiece_files():
    spm("spm_train", "--input=" + os.path.join(HERE, "corpus.txt"),
        "--model_prefix=" + os.path.join(HERE, "tiny_sp"), "--vocab_size=512", "--model_type=bpe",
        "--character_coverage=1.0", "--byte_fallback=true", "--normalization_rule_name=identity",
        "--remove_extra_whitespaces=false", "--num_threads=1", "--minloglevel=2")
    os.remove(os.path.join(HERE, "tiny_sp.vocab"))
    model = os.path.join(HERE, "tiny_sp.model")
    pieces = []
    for line in spm("spm_export_vocab", "--model=" + model).splitlines():
        piece, score = line.split("\t")
        pieces.append((piece, float(score)))
    vocab = {p: i for i, (p, _) in enumerate(pieces)}
    # Hugging Face's SentencePieceExtractor: every split of a piece into two
    # pieces is a merge, ranked by the whole piece's score (highest first).
    merges = []
    for piece, score in pieces:
        local = [(piece[:k], piece[k:], score) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        merges += sorted(local, key=lambda m: (vocab[m[0]], vocab[m[1]]))
    merges.sort(key=lambda m: m[2], reverse=True)
    special = [{"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i, (p, _) in enumerate(pieces[:3])]
    write_json(os.path.join(HERE, "sp_bpe.tokenizer.json"), {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                  "vocab": vocab, "merges": [a + " " + b for a, b, _ in merges]},
    })


def byte_level_files():
    b2u = bytes_to_unicode()
    with open(os.path.join(HERE, "corpus.txt"), encoding="utf-8") as f:
        corpus = f.read()
    words = collections.Counter(
        tuple(b2u[b] for b in piece.encode("utf-8")) for piece in isolated_split(GPT2_PATTERN, corpus))
    vocab = {c: i for i, c in enumerate(b2u[b] for b in sorted(b2u, key=lambda b: ord(b2u[b])))}
    merges = []
    for _ in range(255):
        pairs = collections.Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        vocab[best[0] + best[1]] = len(vocab)
        merged = collections.Counter()
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if word[i:i + 2] == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged

    def added(content, i):
        return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True}

    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
             "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False}
    eot = len(vocab)
    gpt2 = dict(model, vocab=dict(vocab, **{"<|endoftext|>": eot}), merges=[a + " " + b for a, b in merges])
    write_json(os.path.join(HERE, "byte_level.tokenizer.json"), {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [added("<|endoftext|>", eot)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": gpt2,
    })
    eot = len(vocab) - 1
    llama3 = dict(model, ignore_merges=True, vocab=dict(list(vocab.items())[:eot]),
                  merges=[[a, b] for a, b in merges[:-1]])
    write_json(os.path.join(HERE, "split_byte_level.tokenizer.json"), {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added("<|begin_of_text|>", eot), added("<|end_of_text|>", eot + 1)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [], "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [eot],
                                                                  "tokens": ["<|begin_of_text|>"]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": llama3,
    })


def main():
    sentencepiece_files()
    byte_level_files()
    rows = []
    model = os.path.join(HERE, "tiny_sp.model")
    for text in TEXTS:
        if "\n" in text:
            continue
        ids = [int(i) for i in spm("spm_encode", "--model=" + model, "--output_format=id", stdin=text + "\n").split()]
        rows.append(("tiny_sp.model", text, ids))
        # The converted file must agree with the library (its <s> apart).
        got = Reference(os.path.join(HERE, "sp_bpe.tokenizer.json")).encode(text)
        assert got == [1] + ids, (text, got, ids)
    extra = {"byte_level.tokenizer.json": ["a<|endoftext|>b"],
             "split_byte_level.tokenizer.json": ["<|begin_of_text|>It'S 1234567"]}
    for name in ["sp_bpe.tokenizer.json", "byte_level.tokenizer.json", "split_byte_level.tokenizer.json"]:
        reference = Reference(os.path.join(HERE, name))
        for text in TEXTS + extra.get(name, []):
            rows.append((name, text, reference.encode(text)))
    with open(os.path.join(HERE, "expected_ids.tsv"), "w", encoding="utf-8") as f:
        f.write("# written by make_tokenizers.py: file, text (JSON), ids\n")
        for name, text, ids in rows:
            f.write("%s\t%s\t%s\n" % (name, json.dumps(text, ensure_ascii=False), ",".join(map(str, ids))))


if __name__ == "__main__":
    main()
