#!/usr/bin/env bash
# A merged decoder's plans (docs/decoding.md, "Merged decoders"): generate
# runs each branch of the If on use_cache_branch inlined, so its plans are
# made for those graphs: `generate --print-bindings` (the steps) and
# `--print-prefill-bindings` (the prompt's pass) print the --input-shape
# bindings and the --input-value that fixes the flag, `collage optimize`
# takes them, and `generate --plan --prefill-plan` on the merged model gives
# ONNX Runtime's ids, as the separate form's plan does on the separate form.
# Refused, naming the mismatch: the separate form's plan (another model
# file), the step plan as the prefill plan (the other branch), a plan that
# lists the flag among its inputs (made with it unbound, the If kept).
# Usage: generate_merged_plan.sh COLLAGE DIR (DIR/gpt2_style_tiny.onnx, its
# merged form gpt2_style_tiny_merged.onnx at the same weights, and
# gpt2_style_tiny.ort_greedy.txt).
set -euo pipefail
collage=$1
merged=$2/gpt2_style_tiny_merged.onnx
separate=$2/gpt2_style_tiny.onnx
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

source "$(dirname "$0")/greedy_ids.sh"
read_greedy "$2/gpt2_style_tiny.ort_greedy.txt"
nprompt=$(echo "$prompt" | tr ',' '\n' | wc -l)
rows=$((nprompt + new))

# bindings MODEL FLAG: the words generate prints, one per line, into $work/b.txt.
bindings() {
  "$collage" generate "$1" --prompt-ids "$prompt" --max-length $rows "$2" | tr ' ' '\n' \
    > "$work/b.txt"
  mapfile -t words < "$work/b.txt"
}
# optimize MODEL PLAN WORDS...
optimize() {
  local model=$1 out=$2
  shift 2
  if ! "$collage" optimize "$model" "$@" --backends native --db "$work/measurements.sqlite" \
    -o "$out" --budget 5s > "$work/optimize.txt" 2>&1; then
    cat "$work/optimize.txt"
    exit 1
  fi
  tail -1 "$work/optimize.txt"
}
# refused WHAT PATTERN... -- ARGS: generate ARGS must fail, its message
# matching each PATTERN.
refused() {
  local what=$1
  shift
  local patterns=()
  while [ "$1" != -- ]; do patterns+=("$1"); shift; done
  shift
  if "$collage" generate "$@" > "$work/refused.txt" 2>&1; then
    echo "FAIL: $what was accepted"; cat "$work/refused.txt"; exit 1
  fi
  cat "$work/refused.txt"
  for p in "${patterns[@]}"; do
    if ! grep -q -- "$p" "$work/refused.txt"; then
      echo "FAIL: $what: the message does not say '$p'"; exit 1
    fi
  done
}

# The merged decoder's two plans, each for the branch its graph inlines.
bindings "$merged" --print-bindings
grep -qx "use_cache_branch=true" "$work/b.txt"
optimize "$merged" "$work/step.json" "${words[@]}"
shapes=()
for ((i = 0; i < ${#words[@]}; i += 2)); do
  [ "${words[i]}" = --input-shape ] && shapes+=("${words[i]}" "${words[i + 1]}")
done
bindings "$merged" --print-prefill-bindings
grep -qx "use_cache_branch=false" "$work/b.txt"
optimize "$merged" "$work/prefill.json" "${words[@]}"
groups=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['groups']))" \
  "$work/prefill.json")

"$collage" generate "$merged" --prompt-ids "$prompt" --max-new-tokens "$new" \
  --plan "$work/step.json" --prefill-plan "$work/prefill.json" 2>&1 | tee "$work/merged.txt"
got=$(sed -n 's/^generated: //p' "$work/merged.txt")
if [ "$got" != "$want" ]; then
  echo "FAIL: the merged decoder's plans differ from ONNX Runtime's greedy ids"
  echo "  onnxruntime: $want"
  echo "  collage:     $got"
  exit 1
fi
grep -q "^decode step: .* plan $work/step.json$" "$work/merged.txt"
grep -q "^prefill: .* (one pass, plan $work/prefill.json: $groups group(s), .* on native)$" \
  "$work/merged.txt"
if grep -q "warning: the cache is copied" "$work/merged.txt"; then
  echo "FAIL: the merged decoder's planned steps copy the cache"; exit 1
fi
grep -q "^cache concats: .* (in place)$" "$work/merged.txt"

# The separate form's plan on the separate form: the same ids.
bindings "$separate" --print-bindings
if grep -q -- "--input-value" "$work/b.txt"; then
  echo "FAIL: the separate form has no flag to bind"; exit 1
fi
optimize "$separate" "$work/separate.json" "${words[@]}"
"$collage" generate "$separate" --prompt-ids "$prompt" --max-new-tokens "$new" \
  --plan "$work/separate.json" > "$work/separate.txt" 2>&1
grep -q "^generated: $got$" "$work/separate.txt"

# Refusals, each naming the mismatch.
refused "the separate form's plan on the merged decoder" \
  "$work/separate.json was made for a model with sha256" "plan names model '$separate'" -- \
  "$merged" --prompt-ids "$prompt" --max-new-tokens "$new" --plan "$work/separate.json"
refused "the merged decoder's plan on the separate form" \
  "$work/step.json was made for a model with sha256" "plan names model '$merged'" -- \
  "$separate" --prompt-ids "$prompt" --max-new-tokens "$new" --plan "$work/step.json"
refused "the step plan as the prefill plan" \
  "$work/step.json was made for input" "--print-prefill-bindings" \
  "--input-value use_cache_branch=false" -- \
  "$merged" --prompt-ids "$prompt" --max-new-tokens "$new" --plan "$work/step.json" \
  --prefill-plan "$work/step.json"
# A plan that lists the flag among its inputs (made with it unbound: the If
# kept, both branches) is refused naming it. (Written from the step plan:
# optimizing the If itself is slow and is not what is checked here.)
python3 - "$work/step.json" "$work/if.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
plan["model"]["input_shapes"]["use_cache_branch"] = [1]
json.dump(plan, open(sys.argv[2], "w"))
PY
refused "a plan with the If kept" \
  "$work/if.json was made for $merged with its input 'use_cache_branch' unbound" \
  "optimize it with --input-value use_cache_branch=true" -- \
  "$merged" --prompt-ids "$prompt" --max-new-tokens "$new" --plan "$work/if.json"
refused "a plan with the If kept, as the prefill plan" \
  "$work/if.json was made for $merged with its input 'use_cache_branch' unbound" \
  "optimize it with --input-value use_cache_branch=false" -- \
  "$merged" --prompt-ids "$prompt" --max-new-tokens "$new" --max-length $rows \
  --prefill-plan "$work/if.json"
echo "merged decoder plans ok: $merged"
