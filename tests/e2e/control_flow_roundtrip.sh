#!/usr/bin/env bash
# End to end on a small model with numpy's outputs (tests/models/control_flow,
# tests/models/decoder): the
# reference executor reproduces numpy's outputs, `collage optimize` places
# the model (the If/Loop/Scan and sequence nodes on native, the rest by the
# search), and the plan runs in a Session with --verify and numpy's outputs.
# Usage: control_flow_roundtrip.sh COLLAGE MODEL_BASE [--input-shape name=dims ...]
# (MODEL_BASE.onnx, MODEL_BASE.input_K.pb, ...); the bindings go to optimize.
set -euo pipefail
collage=$1
base=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

data=()
for f in "$base".input_*.pb; do data+=(--input "$f"); done
for f in "$base".output_*.pb; do data+=(--expect "$f"); done

"$collage" run "$base.onnx" --backend reference "${data[@]}" | tee "$work/reference.txt"

"$collage" optimize "$base.onnx" "$@" --db "$work/measurements.sqlite" -o "$work/plan.json" --budget 20s \
  | tee "$work/optimize.txt"
grep -q "^measured [1-9][0-9]* kernels" "$work/optimize.txt"

"$collage" run "$base.onnx" --plan "$work/plan.json" --verify "${data[@]}" | tee "$work/run.txt"
grep -q "verify: every output matches the reference executor" "$work/run.txt"
echo "control flow round trip ok: $base"
