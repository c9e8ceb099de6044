#!/usr/bin/env bash
# `collage generate --prefill-plan` (docs/decoding.md, "The prompt in one
# pass"): the prompt's pass runs a plan optimized for the prefill graph's
# shapes (--print-prefill-bindings), not the step plan's groups; its
# Session is the one the prefill line names, the ids are numpy's with it,
# with --plan or without, and a plan made for other shapes (the step
# graph's) is refused naming its file.
# Usage: generate_prefill_plan.sh COLLAGE DECODER_BASE (DECODER_BASE.onnx
# and DECODER_BASE.greedy.txt, make_generate_model.py's).
set -euo pipefail
collage=$1
base=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

source "$(dirname "$0")/greedy_ids.sh"
read_greedy "$base.greedy.txt"
rows=32

for graph in step prefill; do
  flag=--print-bindings
  [ $graph = prefill ] && flag=--print-prefill-bindings
  mapfile -t bindings < <("$collage" generate "$base.onnx" --prompt-ids "$prompt" \
    --max-length $rows $flag | tr ' ' '\n')
  "$collage" optimize "$base.onnx" "${bindings[@]}" --backends native \
    --db "$work/measurements.sqlite" -o "$work/$graph.json" --budget 10s > "$work/optimize.txt"
done
groups=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['groups']))" \
  "$work/prefill.json")
for steps in "--plan $work/step.json" ""; do
  # shellcheck disable=SC2086
  "$collage" generate "$base.onnx" --prompt-ids "$prompt" --max-new-tokens "$new" \
    --max-length $rows $steps --prefill-plan "$work/prefill.json" 2>&1 | tee "$work/generate.txt"
  grep -q "^generated: $want$" "$work/generate.txt"
  grep -q "^prefill: .* (one pass, plan $work/prefill.json: $groups group(s), .* on native)$" \
    "$work/generate.txt"
done

# A plan for other shapes (the step graph's) is refused, naming its file.
if "$collage" generate "$base.onnx" --prompt-ids "$prompt" --max-new-tokens "$new" \
  --max-length $rows --plan "$work/step.json" --prefill-plan "$work/step.json" \
  > "$work/wrong.txt" 2>&1; then
  echo "a step plan was accepted as the prefill plan"; exit 1
fi
cat "$work/wrong.txt"
grep -q "$work/step.json.* was made for input" "$work/wrong.txt"
grep -q "\-\-print-prefill-bindings" "$work/wrong.txt"
echo "generate --prefill-plan ok: $base"
