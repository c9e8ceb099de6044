#!/usr/bin/env bash
# A prompt whose attention scores cannot fit in this machine's memory
# (docs/decoding.md, "Long prompts"), planted small: with COLLAGE_MEMORY_LIMIT
# under the scores of a 1024-token prompt ([1,4,1024,1024] float32, 16 MiB a
# layer) and over everything else the prompt graph holds at once,
#  - `collage optimize` on the prompt graph refuses each candidate that would
#    write the scores, by name, before allocating it, and still writes a
#    plan: the attention on the native kernel that never writes them;
#  - `generate --prefill-plan` runs the prompt on it under the same limit
#    and gives the ids of a run without a plan (and without the limit);
#  - without a plan, the reference executor stops at the scores' MatMul,
#    named, instead of allocating them.
# Usage: generate_prefill_memory_limit.sh COLLAGE DECODER.onnx
set -euo pipefail
collage=$1
model=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

n=1024
rows=$((n + 16))
prompt=$(python3 -c "print(','.join(str(1 + i % 50) for i in range($n)))")
mapfile -t bindings < <("$collage" generate "$model" --prompt-ids "$prompt" --max-length $rows \
  --print-prefill-bindings | tr ' ' '\n')
"$collage" generate "$model" --prompt-ids "$prompt" --max-new-tokens 8 --max-length $rows \
  > "$work/reference.txt"
want=$(grep "^generated: " "$work/reference.txt")

export COLLAGE_MEMORY_LIMIT=12MiB
if ! "$collage" optimize "$model" "${bindings[@]}" --db "$work/measurements.sqlite" \
  --backends native -o "$work/prefill.json" --op-level --no-end-to-end > "$work/optimize.txt" 2>&1; then
  cat "$work/optimize.txt"; exit 1
fi
refusals=$(grep "do not fit in memory" "$work/optimize.txt" || true)
printf '%s\n' "${refusals:0:600}"
# Refused by name: the scores (an output of the MatMul, or an input of what
# reads them), their size and the budget.
grep -q "not measured: its tensors do not fit in memory: .*'[^']*' float32\[1x4x1024x1024\] is 16.0 MiB.* 12.0 MiB is available (\$COLLAGE_MEMORY_LIMIT)" \
  "$work/optimize.txt"
# The plan's attention: the native attention kernel's groups, one a layer.
python3 - "$work/prefill.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
fused = [g for g in plan["groups"] if g["backend"] == "native" and "attention" in g.get("pattern", "")]
assert len(fused) == 2, "not one attention kernel a layer: %s" % [g.get("pattern") for g in plan["groups"]]
PY

"$collage" generate "$model" --prompt-ids "$prompt" --max-new-tokens 8 --max-length $rows \
  --prefill-plan "$work/prefill.json" 2>&1 | tee "$work/plan.txt"
grep -q "^prefill: .* (one pass, plan $work/prefill.json: " "$work/plan.txt"
[ "$(grep "^generated: " "$work/plan.txt")" = "$want" ] || { echo "ids differ from the run without a plan: $want"; exit 1; }

# Without a plan the reference executor would write the scores: refused, named.
if "$collage" generate "$model" --prompt-ids "$prompt" --max-new-tokens 8 --max-length $rows \
  > "$work/noplan.txt" 2>&1; then
  echo "the reference executor ran a prompt whose scores do not fit"; exit 1
fi
cat "$work/noplan.txt"
grep -q "node '[^']*' (MatMul): output '[^']*' float32\[1x4x1024x1024\] is 16.0 MiB, and 12.0 MiB is available" \
  "$work/noplan.txt"
echo "a prompt whose scores do not fit runs on the attention kernel: ok"
