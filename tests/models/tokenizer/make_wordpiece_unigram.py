#!/usr/bin/python3
"""Writes the hand-made WordPiece and Unigram tokenizer.json files the
tokenizer tests read (core/decode/tokenizer_wordpiece.h, tokenizer_unigram.h)
and the ids they must give, computed by reference_wordpiece_unigram.py (an
independent Python reading of the format), not by the C++ code under test:

    /usr/bin/python3 tests/models/tokenizer/make_wordpiece_unigram.py

Beside this script it writes:

- wordpiece.tokenizer.json: a BERT-style (uncased) WordPiece: BertNormalizer
  (cleaning, CJK spacing, accents stripped as lowercase says), the
  BertPreTokenizer, "##" pieces, [UNK], the [CLS] $A [SEP] template and the
  WordPiece decoder.
- unigram.tokenizer.json: a T5-style Unigram: a Replace of runs of spaces,
  WhitespaceSplit then Metaspace ("▁" before every word), unk_id, the
  $A </s> template and the Metaspace decoder. Its scores make the best
  segmentation differ from the greedy longest match ("▁abcd": "▁ab" "cd",
  total -6, beats "▁abc" "d", -12).
- unigram_bytes.tokenizer.json: the same with byte_fallback and the 256
  <0xXX> pieces, the decoder ByteFallback then Metaspace.
- unigram_nfkc.tokenizer.json: a SentencePiece unigram model `spm_train`
  makes from corpus.txt with its default normalisation (nmt_nfkc), written
  as Hugging Face's converter writes such a model (the T5 and ALBERT
  files): its charsmap as a Precompiled normalizer, then a Replace of runs
  of spaces, Metaspace, unk_id 0; the model file itself is not kept. Its
  ids are spm_encode's (fullwidth letters, a ligature, a circled digit and
  an ideographic space, clusters the charsmap maps whole), checked here
  against the reference's.
- expected_ids_wordpiece_unigram.tsv: FILE <tab> the text (a JSON string)
  <tab> the ids.

needs spm_train, spm_encode and spm_export_vocab (Debian's `sentencepiece`)
for the last file.
"""
import base64
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from reference_wordpiece_unigram import Reference  # noqa: E402


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def special(content, i):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


WORDPIECE_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDPIECE_WORDS = [
    "the", "cache", "grow", "##s", "##es", "hello", "world", ",", ".", "!", "?", "'", "t", "don",
    "un", "##believ", "##able", "##ably", "##ab", "cafe", "naive", "日", "本", "x", "##y", "a", "b",
    "##c", "token", "##izer", "##i", "##zer", "tab", "$", "##b",
]

# The first of each is e2e_generate_prompt's.
WORDPIECE_TEXTS = [
    "Hello world, the cache grows.",
    "Hello, World!",
    "The cache grows.",
    "Unbelievably tokenizer",
    "xyz xy",
    "Café   naïve\tTAB",
    "日本 hello",
    "don't stop?",
    "the [MASK] grows",
    "a\x01b\u200bc $",
]

UNIGRAM_SPECIALS = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
UNIGRAM_PIECES = [
    ("▁", -2.5), ("▁abc", -3.0), ("▁ab", -4.0), ("cd", -2.0), ("d", -9.0), ("a", -5.5),
    ("b", -5.6), ("c", -5.7), ("▁the", -1.5), ("▁cache", -3.2), ("▁grow", -3.9), ("s", -2.2),
    ("▁gr", -6.1), ("ows", -4.4), ("▁hello", -3.3), ("▁world", -3.4), (",", -2.1), (".", -1.9),
    ("▁token", -4.8), ("izer", -5.1), ("▁tokeni", -4.9), ("zer", -7.2), ("e", -4.0), ("t", -4.1),
    ("o", -4.2), ("k", -4.3), ("n", -4.45), ("i", -4.5), ("z", -4.6), ("r", -4.7), ("h", -4.75),
    ("l", -4.8), ("w", -4.85), ("g", -4.9),
]

UNIGRAM_TEXTS = [
    "Hello world, the cache grows.",
    "abcd",
    "The cache grows.",
    "hello,  world",
    "tokenizer",
    "abc abcd",
    "ζζ the",
    "the ζ",
    "thethe",
]


def wordpiece_file():
    vocab = {t: i for i, t in enumerate(WORDPIECE_SPECIALS + WORDPIECE_WORDS)}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(t, i) for i, t in enumerate(WORDPIECE_SPECIALS)],
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                           "pair": [],
                           "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                              "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }


def unigram_file(byte_fallback):
    pieces = UNIGRAM_SPECIALS + UNIGRAM_PIECES
    if byte_fallback:
        pieces = pieces + [("<0x%02X>" % b, -20.0) for b in range(256)]
    decoder = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    if byte_fallback:
        decoder = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, decoder]}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(t, i) for i, (t, _) in enumerate(UNIGRAM_SPECIALS)],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"},
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                           "pair": [],
                           "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
        "decoder": decoder,
        "model": {"type": "Unigram", "unk_id": 2, "vocab": [[p, s] for p, s in pieces],
                  "byte_fallback": byte_fallback},
    }


NFKC_TEXTS = [
    "The cache grows.",
    "\uff28\uff45\uff4c\uff4c\uff4f \uff57\uff4f\uff52\uff4c\uff44",  # fullwidth "Hello world"
    "\ufb01ve tokens \u2460 by \u2461",  # the fi ligature, circled 1 and 2
    "hello\u3000again",  # an ideographic space
    "cafe\u0301 x\u00b2",  # e and a combining acute (one cluster, composed), a superscript 2
    "\uff76\uff9e",  # halfwidth ka and voiced mark: one cluster, mapped whole to ga
]


def spm(*args, stdin=None):
    return subprocess.run(args, input=stdin, capture_output=True, text=True, check=True).stdout


def proto_field(blob, wanted):
    """The bytes of the first length-delimited field `wanted` of a protobuf message."""
    i = 0
    while i < len(blob):
        key, i = varint(blob, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = varint(blob, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, i = varint(blob, i)
            if field == wanted:
                return blob[i:i + n]
            i += n
        else:
            raise ValueError("wire type %d" % wire)
    return None


def varint(blob, i):
    value, shift = 0, 0
    while True:
        b = blob[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def nfkc_unigram_file(folder):
    prefix = os.path.join(folder, "uni")
    spm("spm_train", "--input=" + os.path.join(HERE, "corpus.txt"), "--model_prefix=" + prefix,
        "--vocab_size=150", "--model_type=unigram", "--character_coverage=1.0",
        "--normalization_rule_name=nmt_nfkc", "--num_threads=1", "--minloglevel=2")
    with open(prefix + ".model", "rb") as f:
        model = f.read()
    # ModelProto.normalizer_spec (3) . precompiled_charsmap (2)
    charsmap = proto_field(proto_field(model, 3), 2)
    pieces = []
    for line in spm("spm_export_vocab", "--model=" + prefix + ".model").splitlines():
        piece, score = line.split("\t")
        pieces.append([piece, float(score)])
    assert pieces[0][0] == "<unk>"
    obj = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(p, i) for i, (p, _) in enumerate(pieces[:3])],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
        "post_processor": None,
        "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": 0, "vocab": pieces, "byte_fallback": False},
    }
    ids = {t: [int(i) for i in spm("spm_encode", "--model=" + prefix + ".model", "--output_format=id",
                                   stdin=t + "\n").split()] for t in NFKC_TEXTS}
    return obj, ids


def main():
    files = {"wordpiece.tokenizer.json": (wordpiece_file(), WORDPIECE_TEXTS),
             "unigram.tokenizer.json": (unigram_file(False), UNIGRAM_TEXTS),
             "unigram_bytes.tokenizer.json": (unigram_file(True), UNIGRAM_TEXTS)}
    rows = []
    for name, (obj, texts) in files.items():
        write_json(os.path.join(HERE, name), obj)
        reference = Reference(os.path.join(HERE, name))
        for text in texts:
            rows.append((name, text, reference.encode(text)))
    with tempfile.TemporaryDirectory() as folder:
        obj, spm_ids = nfkc_unigram_file(folder)
    name = "unigram_nfkc.tokenizer.json"
    write_json(os.path.join(HERE, name), obj)
    reference = Reference(os.path.join(HERE, name))
    for text in NFKC_TEXTS:
        # The converted file must agree with the library.
        assert reference.encode(text) == spm_ids[text], (text, reference.encode(text), spm_ids[text])
        rows.append((name, text, spm_ids[text]))
    with open(os.path.join(HERE, "expected_ids_wordpiece_unigram.tsv"), "w", encoding="utf-8") as f:
        f.write("# written by make_wordpiece_unigram.py: file, text (JSON), ids\n")
        for name, text, ids in rows:
            f.write("%s\t%s\t%s\n" % (name, json.dumps(text, ensure_ascii=False), ",".join(map(str, ids))))


if __name__ == "__main__":
    main()
