#!/usr/bin/env bash
# End to end on small quantized models in each form (int8_models.py): optimize
# places the integer products on the oneDNN backend's int8 kernels (their
# reference kernels are orders of magnitude slower), and run --plan --verify
# matches the reference executor.
# Usage: int8_roundtrip.sh COLLAGE
set -euo pipefail
collage=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$here/int8_models.py" "$work"
cd "$work"

# model, then an op every plan must run in a oneDNN group
for case in "int8_dynamic ConvInteger" "int8_qdq DequantizeLinear" "int8_qoperator QLinearConv"; do
  set -- $case
  m=$1 op=$2
  "$collage" optimize "$m.onnx" --db "$work/db.sqlite" -o "$m.plan.json" --op-level | tee "$m.opt.txt"
  /usr/bin/python3 - "$m.plan.json" "$op" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
groups = [g for g in plan["groups"] if g["backend"] == "onednn" and any(n.startswith(sys.argv[2]) for n in g["nodes"])]
if not groups:
    sys.exit(f"no oneDNN group runs a {sys.argv[2]}: {plan['groups']}")
print(f"oneDNN runs {sys.argv[2]} in: {[g['nodes'] for g in groups]}")
PY
  "$collage" run "$m.onnx" --plan "$m.plan.json" --verify --repeat 3 | tee "$m.run.txt"
  grep -q "verify: every output matches the reference executor" "$m.run.txt"
done
