#!/usr/bin/python3
"""A small, independent reference for the WordPiece and Unigram parts of a
Hugging Face tokenizer.json that core/decode/tokenizer.cc reads, written from
the library's documented semantics in Python's standard library only, so the
ids it gives for the committed files (make_wordpiece_unigram.py writes them to
expected_ids_wordpiece_unigram.tsv) check the C++ code rather than repeat it.
It works on code points (the C++ on UTF-8 bytes) and finds the best Unigram
segmentation by a plain dynamic programme over every (start, end) pair.

    /usr/bin/python3 reference_wordpiece_unigram.py FILE.json "text"   # prints the ids

What it covers: added tokens split out first (longest first); normalizers
BertNormalizer, Precompiled (a SentencePiece charsmap's darts-clone trie
read byte by byte; a grapheme cluster taken as a character and the marks
after it, enough for the test texts), Replace (a String or a Regex),
NFD/NFKD, StripAccents,
Lowercase, Sequence; pre-tokenizers BertPreTokenizer, WhitespaceSplit,
Metaspace (prepend_scheme always/first/never, split), Sequence; models
WordPiece (greedy longest match first, continuing_subword_prefix,
max_input_chars_per_word, unk_token) and Unigram (the highest total score,
unknown characters at the lowest score less 10 and fused, byte_fallback);
post-processors TemplateProcessing's `single` and BertProcessing.
"""
import base64
import json
import re
import struct
import string
import sys
import unicodedata


def is_whitespace(c):
    return c in "\t\n\r" or c.isspace()


def is_control(c):
    if c in "\t\n\r":
        return False
    return unicodedata.category(c) in ("Cc", "Cf", "Cn", "Co")


def is_cjk(c):
    o = ord(c)
    return any(a <= o <= b for a, b in [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF),
                                         (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF),
                                         (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)])


def is_punctuation(c):
    return c in string.punctuation or unicodedata.category(c).startswith("P")


def strip_marks(text):
    return "".join(c for c in text if unicodedata.category(c) != "Mn")


def lower_each(text):
    return "".join(c.lower() for c in text)


def split_chars(pieces, pred, keep_delimiters):
    """Each piece cut at every character `pred` holds for (one piece each, or dropped)."""
    out = []
    for piece in pieces:
        word = ""
        for c in piece:
            if pred(c):
                if word:
                    out.append(word)
                word = ""
                if keep_delimiters:
                    out.append(c)
            else:
                word += c
        if word:
            out.append(word)
    return out


class Charsmap:
    """A SentencePiece precompiled_charsmap: [u32 trie size][trie units][replacements]."""

    def __init__(self, b64):
        blob = base64.b64decode(b64)
        size = struct.unpack_from("<I", blob)[0]
        self.units = struct.unpack_from("<%dI" % (size // 4), blob, 4)
        self.replacements = blob[4 + size:]

    def first_prefix(self, key):
        """The replacement of the shortest key that starts `key` (bytes), or None."""
        def offset(u):
            return (u >> 10) << ((u & (1 << 9)) >> 6)
        node = offset(self.units[0])
        for c in key:
            node ^= c
            u = self.units[node]
            if u & ((1 << 31) | 0xFF) != c:
                return None
            node ^= offset(u)
            if (u >> 8) & 1:
                at = self.units[node] & ((1 << 31) - 1)
                return self.replacements[at:self.replacements.index(b"\0", at)].decode("utf-8")
        return None

    def normalize(self, text):
        clusters = []
        for c in text:
            if clusters and unicodedata.category(c).startswith("M"):
                clusters[-1] += c
            else:
                clusters.append(c)
        out = ""
        for g in clusters:
            whole = self.first_prefix(g.encode("utf-8")) if len(g.encode("utf-8")) < 6 else None
            if whole is not None:
                out += whole
                continue
            for c in g:
                r = self.first_prefix(c.encode("utf-8"))
                out += c if r is None else r
        return out


class Reference:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.j = json.load(f)
        self.model = self.j["model"]
        if self.model["type"] == "WordPiece":
            self.vocab = self.model["vocab"]
        else:
            assert self.model["type"] == "Unigram"
            self.vocab = {}
            for i, (piece, _) in enumerate(self.model["vocab"]):
                self.vocab[piece] = i  # the later of two equal pieces
            self.scores = [s for _, s in self.model["vocab"]]
        self.added = sorted((t["content"] for t in self.j.get("added_tokens", [])), key=len, reverse=True)
        self.added_ids = {t["content"]: t["id"] for t in self.j.get("added_tokens", [])}

    def split_added(self, text):
        out, i, start = [], 0, 0
        while i < len(text):
            hit = next((a for a in self.added if text.startswith(a, i)), None)
            if hit:
                if i > start:
                    out.append((False, text[start:i]))
                out.append((True, hit))
                i += len(hit)
                start = i
            else:
                i += 1
        if start < len(text):
            out.append((False, text[start:]))
        return out

    def normalize(self, n, text):
        if n is None:
            return text
        t = n["type"]
        if t == "Sequence":
            for m in n["normalizers"]:
                text = self.normalize(m, text)
            return text
        if t == "BertNormalizer":
            if n.get("clean_text", True):
                text = "".join(" " if is_whitespace(c) else c for c in text
                               if not (c in "\0\ufffd" or is_control(c)))
            if n.get("handle_chinese_chars", True):
                text = "".join(" " + c + " " if is_cjk(c) else c for c in text)
            lower = n.get("lowercase", True)
            strip = n.get("strip_accents")
            if strip is None:
                strip = lower
            if strip:
                text = strip_marks(unicodedata.normalize("NFD", text))
            return lower_each(text) if lower else text
        if t == "Replace":
            if "String" in n["pattern"]:
                return text.replace(n["pattern"]["String"], n["content"])
            return re.sub(n["pattern"]["Regex"], n["content"], text)
        if t in ("NFD", "NFKD", "NFC", "NFKC"):
            return unicodedata.normalize(t, text)
        if t == "Precompiled":
            return Charsmap(n["precompiled_charsmap"]).normalize(text)
        if t == "StripAccents":
            return strip_marks(text)
        if t == "Lowercase":
            return lower_each(text)
        raise ValueError("normalizer " + t)

    def pre_tokenize(self, p, pieces):
        """pieces: (text, starts the text) pairs."""
        if p is None:
            return pieces
        t = p["type"]
        if t == "Sequence":
            for q in p["pretokenizers"]:
                pieces = self.pre_tokenize(q, pieces)
            return pieces
        if t in ("BertPreTokenizer", "WhitespaceSplit"):
            out = []
            for text, first in pieces:
                words = split_chars([text], is_whitespace, False)
                if t == "BertPreTokenizer":
                    words = split_chars(words, is_punctuation, True)
                # only a word at offset 0 starts the text
                out += [(w, first and i == 0 and text.startswith(w)) for i, w in enumerate(words)]
            return out
        if t == "Metaspace":
            rep = p.get("replacement", "\u2581")
            scheme = p.get("prepend_scheme") or ("always" if p.get("add_prefix_space", True) else "never")
            out = []
            for text, first in pieces:
                text = text.replace(" ", rep)
                if (scheme == "always" or (scheme == "first" and first)) and not text.startswith(rep):
                    text = rep + text
                if not p.get("split", True):
                    out.append((text, first))
                    continue
                parts = [s for s in re.split("(?=" + re.escape(rep) + ")", text) if s]
                out += [(s, first and i == 0) for i, s in enumerate(parts)]
            return out
        raise ValueError("pre_tokenizer " + t)

    def wordpiece(self, word):
        m = self.model
        unk = m.get("unk_token", "[UNK]")
        prefix = m.get("continuing_subword_prefix", "##")
        if len(word) > m.get("max_input_chars_per_word", 100):
            return [self.vocab[unk]]
        ids, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = (prefix if start > 0 else "") + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    start = end
                    break
            else:
                return [self.vocab[unk]]
        return ids

    def unigram(self, text):
        unk = self.model.get("unk_id")
        unk_score = min(self.scores) - 10.0
        n = len(text)
        # best[i] = (score, start of the last piece, id); ties keep the earliest start
        best = [None] * (n + 1)
        best[0] = (0.0, None, None)
        for end in range(1, n + 1):
            for start in range(end):
                if best[start] is None:
                    continue
                piece = text[start:end]
                edges = []
                if piece in self.vocab:
                    edges.append(self.scores[self.vocab[piece]])
                # an unknown edge only over one character no single piece spells
                if end == start + 1 and piece not in self.vocab:
                    if unk is None:
                        raise ValueError("no piece for " + repr(piece))
                    edges.append(None)
                for score in edges:
                    total = best[start][0] + (unk_score if score is None else score)
                    if best[end] is None or total > best[end][0]:
                        best[end] = (total, start, unk if score is None else self.vocab[piece])
        pieces, end = [], n
        while end > 0:
            _, start, i = best[end]
            if i == unk and pieces and pieces[-1][1] == unk:
                pieces[-1] = (text[start:end] + pieces[-1][0], unk)
            else:
                pieces.append((text[start:end], i))
            end = start
        ids = []
        for piece, i in reversed(pieces):
            if piece in self.vocab:
                ids.append(self.vocab[piece])
            elif self.model.get("byte_fallback", False) and all(
                    "<0x%02X>" % b in self.vocab for b in piece.encode("utf-8")):
                ids += [self.vocab["<0x%02X>" % b] for b in piece.encode("utf-8")]
            else:
                ids.append(unk)
        return ids

    def encode(self, text):
        ids = []
        first = True
        for special, segment in self.split_added(text):
            if special:
                ids.append(self.added_ids[segment])
            else:
                normalized = self.normalize(self.j.get("normalizer"), segment)
                for piece, _ in self.pre_tokenize(self.j.get("pre_tokenizer"), [(normalized, first)]):
                    ids += self.wordpiece(piece) if self.model["type"] == "WordPiece" else self.unigram(piece)
            first = False
        return self.post_process(self.j.get("post_processor"), ids)

    def post_process(self, post, ids):
        if post is None:
            return ids
        if post["type"] == "BertProcessing":
            return [post["cls"][1]] + ids + [post["sep"][1]]
        assert post["type"] == "TemplateProcessing"
        out = []
        for item in post["single"]:
            if "SpecialToken" in item:
                out += post["special_tokens"][item["SpecialToken"]["id"]]["ids"]
            else:
                out += ids
        return out


if __name__ == "__main__":
    print(",".join(str(i) for i in Reference(sys.argv[1]).encode(sys.argv[2])))
