#!/usr/bin/python3
"""A small, independent reference for the part of a Hugging Face
tokenizer.json that core/decode/tokenizer.cc reads: written from the format's
description, in Python's standard library only, so the ids it gives for the
committed files (make_tokenizers.py writes them to expected_ids.tsv) check
the C++ code rather than repeat it.

    /usr/bin/python3 reference_bpe.py FILE.json "text"     # prints the ids

What it covers: added tokens split out first (longest first), normalizers
Prepend / Replace (a String pattern) / Sequence, pre-tokenizers ByteLevel
(GPT-2's pattern) / Split (a Regex, behaviour Isolated) / Sequence, a BPE
model (merges by rank, ignore_merges, byte_fallback, unk_token with
fuse_unk), post-processor TemplateProcessing's `single`.

The Split and ByteLevel patterns use \\p{L} and \\p{N}, which Python's `re`
lacks: each is replaced by a class of the input's own characters of that
Unicode category (unicodedata), exact for that input.
"""
import json
import re
import sys
import unicodedata

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    """GPT-2's map from each byte to a printable character."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _category_class(text, prefix):
    return "".join(re.escape(c) for c in sorted(set(text)) if unicodedata.category(c).startswith(prefix))


def compile_for(pattern, text):
    """`pattern` with \\p{L} and \\p{N} spelled as the classes of `text`'s characters."""
    classes = {"L": _category_class(text, "L"), "N": _category_class(text, "N")}
    out, in_class, i = [], False, 0
    while i < len(pattern):
        if pattern.startswith("\\p{", i) and pattern[i + 4] == "}":
            chars = classes[pattern[i + 3]]
            out.append(chars if in_class else ("[" + chars + "]" if chars else r"[^\s\S]"))
            i += 5
            continue
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        out.append(c)
        i += 1
    return re.compile("".join(out))


def isolated_split(pattern, text):
    """The matches and the text between them, in order, none empty."""
    pieces, last = [], 0
    for m in compile_for(pattern, text).finditer(text):
        if m.start() > last:
            pieces.append(text[last:m.start()])
        if m.end() > m.start():
            pieces.append(m.group())
        last = m.end()
    if last < len(text):
        pieces.append(text[last:])
    return pieces


class Reference:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            self.j = json.load(f)
        model = self.j["model"]
        assert model["type"] == "BPE"
        self.vocab = model["vocab"]
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
        self.ranks = {m: r for r, m in enumerate(merges)}
        self.added = sorted((t["content"] for t in self.j.get("added_tokens", [])), key=len, reverse=True)
        self.added_ids = {t["content"]: t["id"] for t in self.j.get("added_tokens", [])}
        self.b2u = bytes_to_unicode()

    # -- the steps, in HF's order -------------------------------------------
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
        if t == "Prepend":
            return n["prepend"] + text if text else text
        if t == "Replace":
            return text.replace(n["pattern"]["String"], n["content"])
        raise ValueError("normalizer " + t)

    def pre_tokenize(self, p, pieces):
        if p is None:
            return pieces
        t = p["type"]
        if t == "Sequence":
            for q in p["pretokenizers"]:
                pieces = self.pre_tokenize(q, pieces)
            return pieces
        if t == "Split":
            assert p["behavior"] == "Isolated" and not p.get("invert", False)
            return [s for piece in pieces for s in isolated_split(p["pattern"]["Regex"], piece)]
        if t == "ByteLevel":
            out = []
            for piece in pieces:  # HF prefixes every piece, not the first only
                if p.get("add_prefix_space", False) and not piece.startswith(" "):
                    piece = " " + piece
                parts = isolated_split(GPT2_PATTERN, piece) if p.get("use_regex", True) else [piece]
                out += ["".join(self.b2u[b] for b in s.encode("utf-8")) for s in parts]
            return out
        raise ValueError("pre_tokenizer " + t)

    def bpe(self, word):
        model = self.j["model"]
        if model.get("ignore_merges", False) and word in self.vocab:
            return [self.vocab[word]]
        symbols = list(word)
        while len(symbols) > 1:
            pairs = [(self.ranks.get((a, b), None), i) for i, (a, b) in enumerate(zip(symbols, symbols[1:]))]
            pairs = [(r, i) for r, i in pairs if r is not None]
            if not pairs:
                break
            best = symbols[min(pairs)[1]], symbols[min(pairs)[1] + 1]
            merged, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    merged.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        ids, unk = [], model.get("unk_token")
        for s in symbols:
            if s in self.vocab:
                ids.append(self.vocab[s])
            elif model.get("byte_fallback", False) and all("<0x%02X>" % b in self.vocab for b in s.encode("utf-8")):
                ids += [self.vocab["<0x%02X>" % b] for b in s.encode("utf-8")]
            elif unk is not None:
                if not (model.get("fuse_unk", False) and ids and ids[-1] == self.vocab[unk]):
                    ids.append(self.vocab[unk])
            else:
                raise ValueError("no id for " + repr(s))
        return ids

    def encode(self, text):
        ids = []
        for special, segment in self.split_added(text):
            if special:
                ids.append(self.added_ids[segment])
                continue
            normalized = self.normalize(self.j.get("normalizer"), segment)
            for piece in self.pre_tokenize(self.j.get("pre_tokenizer"), [normalized]):
                ids += self.bpe(piece)
        return self.post_process(self.j.get("post_processor"), ids)

    def post_process(self, post, ids):
        if post is None or post["type"] == "ByteLevel":
            return ids
        if post["type"] == "Sequence":
            for q in post["processors"]:
                ids = self.post_process(q, ids)
            return ids
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
