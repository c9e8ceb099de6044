#!/usr/bin/env bash
# `collage generate` on a decoder exported with past/present KV gives ONNX
# Runtime's greedy ids (docs/decoding.md): BASE.ort_greedy.txt holds the
# prompt and the ids ONNX Runtime's own past/present loop generated
# (tests/models/decoder/make_llm_decoders.sh), so this test needs no node.
# Usage: generate_matches_ort.sh COLLAGE BASE reference|plan [IDS]
#   reference  the reference executor runs the steps;
#   plan       `collage optimize` makes a plan for the step graph (native
#              backend) and `generate --plan` runs it, the cache in place.
#   IDS        the ids file when not BASE.ort_greedy.txt (a merged decoder's
#              are its separate form's: the same weights).
set -euo pipefail
collage=$1
base=$2
mode=$3
ids=${4:-$base.ort_greedy.txt}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

source "$(dirname "$0")/greedy_ids.sh"
read_greedy "$ids"
plan=()
if [ "$mode" = plan ]; then
  nprompt=$(echo "$prompt" | tr ',' '\n' | wc -l)
  mapfile -t bindings < <("$collage" generate "$base.onnx" --prompt-ids "$prompt" \
    --max-length $((nprompt + new)) --print-bindings | tr ' ' '\n')
  "$collage" optimize "$base.onnx" "${bindings[@]}" --backends native \
    --db "$work/measurements.sqlite" -o "$work/plan.json" --budget 10s > "$work/optimize.txt"
  tail -1 "$work/optimize.txt"
  plan=(--plan "$work/plan.json")
fi
"$collage" generate "$base.onnx" --prompt-ids "$prompt" --max-new-tokens "$new" "${plan[@]}" 2>&1 |
  tee "$work/generate.txt"
got=$(sed -n 's/^generated: //p' "$work/generate.txt")
if [ "$got" != "$want" ]; then
  echo "FAIL: $base ($mode) differs from ONNX Runtime's greedy ids"
  echo "  onnxruntime: $want"
  echo "  collage:     $got"
  exit 1
fi
if [ "$mode" = plan ] && grep -q "warning: the cache is copied" "$work/generate.txt"; then
  echo "FAIL: the plan's steps copy the cache"
  exit 1
fi
echo "generate matches ONNX Runtime ($mode, $new new ids): $base"
