#!/usr/bin/env bash
# `collage generate --prompt "text"` (docs/decoding.md, "Text in and out"):
# the prompt is encoded with the model's tokenizer (found beside the model,
# or --tokenizer) into the ids the tokenizer's reference gives
# (tests/models/tokenizer/expected_ids.tsv: spm_encode's, or
# reference_bpe.py's; expected_ids_wordpiece_unigram.tsv for WordPiece and
# Unigram files), the generated ids are those `--prompt-ids` with the
# same ids gives, and the text printed is the generated ids' (spm_decode's,
# where it is installed). Ids in work with or without a tokenizer; --prompt
# without one is refused saying where it looked; a corrupt tokenizer file is
# named.
# Usage: generate_prompt.sh COLLAGE DECODER.onnx (a decoder whose vocabulary
# covers the tiny tokenizers' 512 ids).
set -euo pipefail
collage=$1
model=$2
tokenizers=$(cd "$(dirname "$0")/../models/tokenizer" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
text="Hello world, the cache grows."
new=6

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
line() { sed -n "s/^$1: //p" "$2"; }
# The ids the reference gives FILE for the text.
expected() {
  awk -F '\t' -v f="$1" -v t="\"$text\"" '$1 == f && $2 == t { print $3 }' "$tokenizers/expected_ids.tsv"
}

# 1. A SentencePiece model beside the model, as tokenizer.model.
mkdir "$work/sp"
cp "$model" "$work/sp/model.onnx"
cp "$tokenizers/tiny_sp.model" "$work/sp/tokenizer.model"
"$collage" generate "$work/sp/model.onnx" --prompt "$text" --max-new-tokens $new > "$work/sp.txt"
cat "$work/sp.txt"
ids=$(line "prompt ids" "$work/sp.txt" | cut -d' ' -f1)
[ "$ids" = "$(expected tiny_sp.model)" ] || fail "prompt ids $ids, spm_encode gives $(expected tiny_sp.model)"
grep -q "^prompt ids: .* (SentencePiece $work/sp/tokenizer.model)$" "$work/sp.txt" || fail "the tokenizer is not named"
generated=$(line generated "$work/sp.txt")
[ "$(echo "$generated" | tr ',' '\n' | wc -l)" = $new ] || fail "not $new new ids: $generated"
got_text=$(line text "$work/sp.txt")
[ -n "$got_text" ] || fail "no text printed"
if command -v spm_decode > /dev/null; then
  want_text=$(echo "$generated" | tr ',' ' ' | spm_decode --model "$tokenizers/tiny_sp.model" --input_format=id)
  [ "$got_text" = "$want_text" ] || fail "text '$got_text', spm_decode gives '$want_text'"
fi
# The same ids in: the same ids out, and the same text (the tokenizer beside).
"$collage" generate "$work/sp/model.onnx" --prompt-ids "$ids" --max-new-tokens $new > "$work/sp_ids.txt"
[ "$(line generated "$work/sp_ids.txt")" = "$generated" ] || fail "--prompt-ids $ids gives other ids"
[ "$(line text "$work/sp_ids.txt")" = "$got_text" ] || fail "--prompt-ids gives other text"

# 2. A byte-level tokenizer.json given with --tokenizer; the model's own
#    folder has no tokenizer.
"$collage" generate "$model" --prompt "$text" --max-new-tokens $new \
  --tokenizer "$tokenizers/byte_level.tokenizer.json" > "$work/json.txt"
cat "$work/json.txt"
ids=$(line "prompt ids" "$work/json.txt" | cut -d' ' -f1)
[ "$ids" = "$(expected byte_level.tokenizer.json)" ] || fail "prompt ids $ids, reference_bpe.py gives $(expected byte_level.tokenizer.json)"
[ -n "$(line text "$work/json.txt")" ] || fail "no text printed"
"$collage" generate "$model" --prompt-ids "$ids" --max-new-tokens $new > "$work/json_ids.txt"
[ "$(line generated "$work/json_ids.txt")" = "$(line generated "$work/json.txt")" ] || fail "--prompt-ids $ids gives other ids"
# Ids in without a tokenizer: ids out, no text.
! grep -q "^text: " "$work/json_ids.txt" || fail "text without a tokenizer"

# 2b. WordPiece and Unigram tokenizer.json files (smaller vocabularies than
#     the model's: a generated id beyond them prints no text, ids out work).
for f in wordpiece.tokenizer.json unigram.tokenizer.json; do
  "$collage" generate "$model" --prompt "$text" --max-new-tokens 2 \
    --tokenizer "$tokenizers/$f" > "$work/$f.txt"
  want=$(awk -F '\t' -v f="$f" -v t="\"$text\"" '$1 == f && $2 == t { print $3 }' \
    "$tokenizers/expected_ids_wordpiece_unigram.tsv")
  got=$(line "prompt ids" "$work/$f.txt" | cut -d' ' -f1)
  [ -n "$want" ] && [ "$got" = "$want" ] || fail "$f: prompt ids $got, reference_wordpiece_unigram.py gives $want"
  grep -q "^text: " "$work/$f.txt" || fail "$f: no text line"
done

# 3. --prompt without a tokenizer: refused, saying where it looked.
if "$collage" generate "$model" --prompt "$text" --max-new-tokens 1 2> "$work/none.txt"; then
  fail "--prompt without a tokenizer ran"
fi
dir=$(dirname "$model")
grep -q "looked for $dir/tokenizer.json, $dir/tokenizer.model" "$work/none.txt" || fail "$(cat "$work/none.txt")"

# 4. A corrupt tokenizer beside the model: --prompt is refused naming it;
#    ids in still work, with a warning.
mkdir "$work/bad"
cp "$model" "$work/bad/model.onnx"
echo '{"model": {"type": "BPE", "vocab": ' > "$work/bad/tokenizer.json"
if "$collage" generate "$work/bad/model.onnx" --prompt "$text" --max-new-tokens 1 2> "$work/bad.txt"; then
  fail "--prompt with a corrupt tokenizer ran"
fi
grep -q "$work/bad/tokenizer.json: not a tokenizer.json" "$work/bad.txt" || fail "$(cat "$work/bad.txt")"
"$collage" generate "$work/bad/model.onnx" --prompt-ids "$ids" --max-new-tokens $new > "$work/bad_ids.txt" 2> "$work/bad_warn.txt"
[ "$(line generated "$work/bad_ids.txt")" = "$(line generated "$work/json.txt")" ] || fail "ids in failed beside a corrupt tokenizer"
grep -q "warning: no text out: $work/bad/tokenizer.json" "$work/bad_warn.txt" || fail "no warning: $(cat "$work/bad_warn.txt")"
echo "OK"
