#!/usr/bin/env bash
# End to end: optimize a model with --op-level (cold database: the op-level
# plan alone), optimize it again as a user does by default (warm: measures no
# kernel, then runs the graph-level search), run both plans with --verify
# against the reference, explain them, and export everything; then the same
# with graph substitutions. With STORE (a warm store of the model that
# tests/e2e/warm_store.sh measured, with the cold run's checks), the first
# optimize starts from a copy of it and measures nothing.
# Usage: optimize_roundtrip.sh COLLAGE MODEL.onnx [STORE.sqlite]
set -euo pipefail
collage=$1
model=$2
store=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db="$work/measurements.sqlite"
[[ -z $store ]] || cp "$store" "$db"

"$collage" optimize "$model" --db "$db" -o "$work/plan.json" --baselines --op-level | tee "$work/cold.txt"
if [[ -z $store ]]; then
  grep -q "^measured [1-9][0-9]* kernels" "$work/cold.txt"
else
  grep -q "warm database: nothing measured" "$work/cold.txt"
fi
! grep -q "^graph-level: " "$work/cold.txt"

"$collage" optimize "$model" --db "$db" -o "$work/plan2.json" --budget 20s --saturation 2 | tee "$work/warm.txt"
grep -q "warm database: nothing measured" "$work/warm.txt"
grep -q "^graph-level: " "$work/warm.txt"
# 30 runs: enough for the median that "measured/predicted" reports (bench/README.md).
"$collage" run "$model" --plan "$work/plan2.json" --verify --repeat 30 | tee "$work/run2.txt"
grep -q "verify: every output matches the reference executor" "$work/run2.txt"

"$collage" run "$model" --plan "$work/plan.json" --verify --repeat 3 \
  --trace "$work/trace.json" --node-data "$work/nodes.json" --annotated-onnx "$work/annotated.onnx" \
  | tee "$work/run.txt"
grep -q "verify: every output matches the reference executor" "$work/run.txt"
test -s "$work/trace.json" && test -s "$work/nodes.json" && test -s "$work/annotated.onnx"
# The annotated model is still a model.
"$collage" inspect "$work/annotated.onnx" > /dev/null

"$collage" explain "$work/plan.json" --db "$db" | tee "$work/explain.txt"
grep -q "why:" "$work/explain.txt"

# Graph substitutions on the warm database, every rule forced (each site
# still checked equivalent): only the rewritten graph's new kernels are
# measured, and run --verify replays the plan's substitutions on the model.
"$collage" optimize "$model" --db "$db" -o "$work/plan_sub.json" --op-level --no-end-to-end \
  --substitute all --substitution-budget 10s | tee "$work/sub.txt"
grep -q "^substitutions: " "$work/sub.txt"
"$collage" run "$model" --plan "$work/plan_sub.json" --verify --repeat 1 | tee "$work/run_sub.txt"
grep -q "verify: every output matches the reference executor" "$work/run_sub.txt"

"$collage" db stats --db "$db"
"$collage" db export --db "$db" -o "$work/m.csv"
test "$(wc -l < "$work/m.csv")" -gt 1
echo "optimize round trip ok: $model"
