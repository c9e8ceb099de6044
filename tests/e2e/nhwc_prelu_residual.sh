#!/usr/bin/env bash
# End to end on small landmark nets as tf2onnx writes them (NHWC input,
# Conv + PRelu residual blocks, MaxPool and channel Pad on the skip path:
# nhwc_prelu_residual_models.py): optimize --baselines, then the written
# plan and every baseline plan run --verify against the reference executor,
# and the end-to-end check rejects none of them. Before oneDNN's pools took
# a post-op operand of their result's shape in their own layout, the
# "only onednn" and "priority" plans computed 1,402 of 1,404 outputs wrong.
# Usage: nhwc_prelu_residual.sh COLLAGE
set -euo pipefail
collage=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$here/nhwc_prelu_residual_models.py" "$work"
cd "$work"

for m in nhwc_prelu_residual nhwc_prelu_residual_nhwc_pad nhwc_prelu_residual_opset10; do
  "$collage" optimize "$m.onnx" --db "$work/db.sqlite" --backends onednn native --op-level \
    --baseline-plans "$m.baselines" -o "$m.plan.json" | tee "$m.opt.txt"
  # Every plan the end-to-end check ran was timed: none rejected.
  if grep -E "^  [a-z -]+: (rejected|cannot run)" "$m.opt.txt"; then
    echo "$m: the end-to-end check rejected a plan" >&2
    exit 1
  fi
  for plan in "$m.plan.json" "$m.baselines"/*.json; do
    "$collage" run "$m.onnx" --plan "$plan" --verify | tee "$m.run.txt"
    grep -q "verify: every output matches the reference executor" "$m.run.txt"
  done
done
