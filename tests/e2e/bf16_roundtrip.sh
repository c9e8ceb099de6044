#!/usr/bin/env bash
# Reduced precision end to end: the default backend set keeps to float32;
# `optimize --allow-precision bf16` adds onednn_bf16; a plan using it
# verifies within the tolerance onednn_bf16 declares (and says so), and
# `explain` says which groups run in bf16 (docs/precision.md).
# Usage: bf16_roundtrip.sh COLLAGE MODEL.onnx
set -euo pipefail
collage=$1
model=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db="$work/measurements.sqlite"

if ! grep -q avx512_bf16 /proc/cpuinfo; then
  echo "skipped: this CPU has no AVX-512 BF16 (onednn_bf16 is unavailable)"
  exit 0
fi

"$collage" candidates "$model" | tee "$work/candidates.txt"
! grep -q "onednn_bf16" "$work/candidates.txt"

"$collage" optimize "$model" --db "$db" --backends native --allow-precision bf16 --op-level \
  --no-end-to-end -o "$work/plan.json" | tee "$work/optimize.txt"
grep -q "^onednn_bf16 " "$work/optimize.txt"

"$collage" run "$model" --plan "$work/plan.json" --verify | tee "$work/run.txt"
grep -q "verify: tolerance 0.25 of each output's largest value: the plan's loosest declared tolerance, for [0-9]* group(s) on onednn_bf16 in bf16" "$work/run.txt"
grep -q "verify: every output matches the reference executor .* within the declared reduced-precision tolerance" "$work/run.txt"

"$collage" explain "$work/plan.json" --db "$db" | tee "$work/explain.txt"
grep -q "^reduced precision: " "$work/explain.txt"
grep -q "  precision: runs in bf16" "$work/explain.txt"
echo "bf16 round trip ok: $model"
