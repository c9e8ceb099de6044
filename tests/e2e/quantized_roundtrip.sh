#!/usr/bin/env bash
# End to end on a quantized model (bench/models/quantize_models.py: the
# dynamic, QDQ and QOperator forms): the reference executor reproduces ONNX
# Runtime's output (MODEL.output_0.pb, integer parts exactly, tolerance only on
# the float parts), then optimize (cold, --op-level), run the plan with
# --verify against the reference, explain it; then optimize again as a user
# does by default (warm database: the graph-level search) and run that plan
# with --verify. A plan may differ from the reference where a reordered float
# meets a quantizer's rounding tie; verify then checks every kernel alone
# (core/measure/plan_check.h) and says so.
# Usage: quantized_roundtrip.sh COLLAGE MODEL.onnx
set -euo pipefail
collage=$1
model=$2
base=${model%.onnx}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db="$work/measurements.sqlite"

"$collage" run "$model" --backend reference --input "$base.input_0.pb" --expect "$base.output_0.pb" \
  | tee "$work/reference.txt"
grep -q "^check .*: matches" "$work/reference.txt"
! grep -q "MISMATCH" "$work/reference.txt"

"$collage" optimize "$model" --db "$db" -o "$work/plan.json" --op-level | tee "$work/cold.txt"
grep -q "^measured [1-9][0-9]* kernels" "$work/cold.txt"
"$collage" run "$model" --plan "$work/plan.json" --verify --repeat 3 --input "$base.input_0.pb" \
  --trace "$work/trace.json" | tee "$work/run.txt"
grep -qE "^verify: (every output matches the reference executor|the plan computes the model's numbers)" "$work/run.txt"
! grep -q "MISMATCH" "$work/run.txt"
test -s "$work/trace.json"
"$collage" explain "$work/plan.json" --db "$db" | tee "$work/explain.txt"
grep -q "why:" "$work/explain.txt"

"$collage" optimize "$model" --db "$db" -o "$work/plan2.json" --budget 10s --saturation 1 | tee "$work/warm.txt"
grep -q "warm database: nothing measured" "$work/warm.txt"
"$collage" run "$model" --plan "$work/plan2.json" --verify --repeat 1 --input "$base.input_0.pb" \
  | tee "$work/run2.txt"
grep -qE "^verify: (every output matches the reference executor|the plan computes the model's numbers)" "$work/run2.txt"
! grep -q "MISMATCH" "$work/run2.txt"
echo "quantized round trip ok: $model"
