#!/usr/bin/env bash
# Graph substitutions end to end: optimize --substitutions (with every rule
# forced, so the replay is exercised even where no rewrite pays) writes a
# plan that carries its substitutions; run --verify replays them on the
# original model and matches the reference executor; explain lists them;
# the plan on another model is refused. With STORE (the model's warm store,
# tests/e2e/warm_store.sh) only the rewritten graph's new kernels are
# measured. Usage:
# substitutions_roundtrip.sh COLLAGE MODEL.onnx OTHER_MODEL.onnx [STORE.sqlite]
set -euo pipefail
collage=$1
model=$2
other=$3
store=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db="$work/measurements.sqlite"
[[ -z $store ]] || cp "$store" "$db"

"$collage" optimize "$model" --db "$db" -o "$work/plan.json" --no-end-to-end --op-level \
  --substitute all \
  --substitution-budget 10s | tee "$work/optimize.txt"
grep -q "^substitutions: " "$work/optimize.txt"

"$collage" run "$model" --plan "$work/plan.json" --verify | tee "$work/run.txt"
grep -q "verify: every output matches the reference executor" "$work/run.txt"

"$collage" explain "$work/plan.json" --db "$db" | tee "$work/explain.txt"
if grep -q '"substitutions"' "$work/plan.json"; then
  grep -q "^substitutions applied to the model before placement" "$work/explain.txt"
  # Another model: refused (its nodes are not the plan's).
  if "$collage" run "$other" --plan "$work/plan.json" > "$work/other.txt" 2>&1; then
    echo "a plan for $model ran on $other"; exit 1
  fi
  grep -E -q "does not hold on this model|was made for a model" "$work/other.txt"
fi

# The search alone (nothing forced), on the warm database: quick.
"$collage" optimize "$model" --db "$db" -o "$work/plan2.json" --no-end-to-end --op-level --substitutions \
  --substitution-budget 10s | tee "$work/search.txt"
grep -q "^substitutions: " "$work/search.txt"
verified=$("$collage" run "$model" --plan "$work/plan2.json" --verify)
grep -q "verify: every output matches" <<<"$verified"
echo "substitutions round trip ok: $model"
