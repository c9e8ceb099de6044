#!/usr/bin/env bash
# The graph-level search end to end with a small budget: optimize
# --graph-level prints a line per generation and writes a plan that
# records the search and verifies against the reference; a second search
# with the same database reads the first one's plan runs; explain says what
# the search did. With STORE (the model's warm store, tests/e2e/warm_store.sh)
# the kernels' costs come from a copy of it and the budget goes to the search.
# Usage: graph_level_roundtrip.sh COLLAGE MODEL.onnx [STORE.sqlite]
set -euo pipefail
collage=$1
model=$2
store=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db="$work/measurements.sqlite"
[[ -z $store ]] || cp "$store" "$db"
# --no-end-to-end: the search starts from the op-level plan, which a warm
# database makes the same both times. Plan runs are stored per starting plan
# (their times are ratios to it), and the end-to-end check may pick another
# starting plan in a noisier minute when two plans are within a few percent.

"$collage" optimize "$model" --db "$db" -o "$work/plan.json" --no-end-to-end --graph-level --budget 20s --saturation 3 \
  | tee "$work/first.txt"
grep -q "^generation   0: best" "$work/first.txt"
grep -q "^graph-level: " "$work/first.txt"
grep -q '"graph_level"' "$work/plan.json"

"$collage" run "$model" --plan "$work/plan.json" --verify --repeat 3 | tee "$work/run.txt"
grep -q "verify: every output matches the reference executor" "$work/run.txt"

# The search is optimize's default: no flag asks for it.
"$collage" optimize "$model" --db "$db" -o "$work/plan2.json" --no-end-to-end --budget 10s --saturation 2 \
  | tee "$work/second.txt"
grep -q "plans run by an earlier search were read from the database" "$work/second.txt"

"$collage" explain "$work/plan.json" --db "$db" | tee "$work/explain.txt"
grep -q "^graph-level search: " "$work/explain.txt"
echo "graph-level round trip ok: $model"
