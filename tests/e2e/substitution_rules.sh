#!/usr/bin/env bash
# Substitution rules in a user's spec file end to end (docs/substitutions.md,
# "Rules in a spec file"): spec --check accepts a good file and reports a bad
# one at FILE:LINE:COLUMN; optimize --substitution-rules with a rule forced
# writes a plan that carries the rule's text; run --verify replays it WITHOUT
# the file and matches the reference executor; explain lists it; a wrong rule
# forced is dropped by the equivalence check, never in the plan. With STORE
# (the model's warm store, tests/e2e/warm_store.sh) only the rewritten
# kernels are measured. Usage:
# substitution_rules.sh COLLAGE MODEL.onnx [STORE.sqlite]   (a model with Erf(x / constant), GELU: bert_small)
set -euo pipefail
collage=$1
model=$2
store=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db="$work/measurements.sqlite"
[[ -z $store ]] || cp "$store" "$db"

cat > "$work/my.toml" <<'TOML'
# erf(x / c) == erf(x * (1 / c)): GELU's scale as a multiply
[rules.erf-div-to-mul]
source = "Erf(Div(x, c=const))"
target = "Erf(Mul(x, Reciprocal(c)))"

# deliberately wrong: x / c is not x * c
[rules.wrong-div-to-mul]
source = "Div(x, c=const)"
target = "Mul(x, c)"
TOML

"$collage" spec --check "$work/my.toml" | tee "$work/check.txt"
grep -q "ok, 2 substitution rule(s) loaded" "$work/check.txt"

# A bad file: every rule's error at FILE:LINE:COLUMN, the good rule still loads, status 1.
cat > "$work/bad.toml" <<'TOML'
[rules.good]
source = "Neg(Neg(x))"
target = "x"

[rules.bad-op]
source = "Relu(Negg(x))"
target = "x"

[rules.bad-var]
source = "Relu(x)"
target = "Relu(y)"
TOML
if "$collage" spec --check "$work/bad.toml" > "$work/bad.txt" 2>&1; then
  echo "spec --check accepted a bad rule file"; exit 1
fi
cat "$work/bad.txt"
grep -q "bad.toml:6:16: rule 'bad-op': source: unknown op 'Negg'" "$work/bad.txt"
grep -q "bad.toml:11:16: rule 'bad-var': target: the source defines no variable 'y'" "$work/bad.txt"
grep -q "1 substitution rule(s) loaded, 2 not" "$work/bad.txt"

# The wrong rule forced first (so it meets its sites), then the good one: only
# the good one reaches the plan.
"$collage" optimize "$model" --db "$db" -o "$work/plan.json" --no-end-to-end --op-level \
  --substitution-rules "$work/my.toml" --substitute wrong-div-to-mul,erf-div-to-mul \
  --substitution-budget 10s | tee "$work/optimize.txt"
grep -q "^substitutions: " "$work/optimize.txt"
grep -q "wrong-div-to-mul at .*dropped, not equivalent" "$work/optimize.txt"
grep -q '"rule": *"erf-div-to-mul"' "$work/plan.json"
grep -q '"substitution_rules"' "$work/plan.json"
if grep -q '"rule": *"wrong-div-to-mul"' "$work/plan.json"; then
  echo "a wrong rule reached the plan"; exit 1
fi

# Replayed from the plan alone (the rule file is gone).
rm "$work/my.toml"
"$collage" run "$model" --plan "$work/plan.json" --verify | tee "$work/run.txt"
grep -q "verify: every output matches the reference executor" "$work/run.txt"
"$collage" explain "$work/plan.json" --db "$db" | tee "$work/explain.txt"
grep -q "erf-div-to-mul" "$work/explain.txt"
echo "substitution rules round trip ok: $model"
