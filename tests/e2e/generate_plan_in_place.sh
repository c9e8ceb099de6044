#!/usr/bin/env bash
# `collage generate --plan` on a decoder with a KV cache (docs/decoding.md):
# the plan `collage optimize` makes for the step graph fuses each cache
# Concat with the new K's or V's Reshape and Transpose; generate takes the
# Concats out of their groups, so that the steps append in place (the
# Concats write one row per present per step, not the whole cache), runs
# the prompt in one pass on the same plan, and gives numpy's greedy ids.
# Usage: generate_plan_in_place.sh COLLAGE DECODER_BASE (DECODER_BASE.onnx
# and DECODER_BASE.greedy.txt, make_generate_model.py's).
set -euo pipefail
collage=$1
base=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

source "$(dirname "$0")/greedy_ids.sh"
read_greedy "$base.greedy.txt"
rows=32

mapfile -t bindings < <("$collage" generate "$base.onnx" --prompt-ids "$prompt" \
  --max-length $rows --print-bindings | tr ' ' '\n')
"$collage" optimize "$base.onnx" "${bindings[@]}" --backends native \
  --db "$work/measurements.sqlite" -o "$work/plan.json" --budget 20s | tee "$work/optimize.txt"

"$collage" generate "$base.onnx" --prompt-ids "$prompt" --max-new-tokens "$new" \
  --plan "$work/plan.json" 2>&1 | tee "$work/generate.txt"
grep -q "^generated: $want$" "$work/generate.txt"
grep -q "^prefill: .* (one pass)$" "$work/generate.txt"
if grep -q "warning: the cache is copied" "$work/generate.txt"; then exit 1; fi
# Prefill, against an empty past: each present (1 x 2 heads x prompt x 8
# floats) once; then one row (2 heads x 8 floats) per present per decode step.
nprompt=$(echo "$prompt" | tr ',' '\n' | wc -l)
bytes=$(( 4 * 2 * nprompt * 8 * 4 + (new - 1) * 4 * 2 * 8 * 4 ))
grep -q "^cache concats: $bytes bytes written (in place)$" "$work/generate.txt"
echo "generate --plan in place ok: $base"
