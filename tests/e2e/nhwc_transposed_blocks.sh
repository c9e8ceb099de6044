#!/usr/bin/env bash
# End to end on a net as tf2onnx writes an NHWC model (every conv block
# between Transpose(0,3,1,2) and Transpose(0,2,3,1), skip paths, a channel
# Pad, a spatial Pad and a Concat in NHWC between them:
# nhwc_transposed_blocks_models.py): a plain optimize (cancel-transposes is
# a canonical rewrite, applied by default), then the plan runs --verify
# against the reference executor on the model as given, and the placed
# graph keeps 2 of its 9 Transposes (the input's and the output's: the
# graph's input and output are NHWC), the only groups that are Transpose
# copies. The input's Transpose can run inside a oneDNN
# Conv (read as its nhwc source): that candidate is offered. With
# --no-canonical-rewrites the plan places the model as exported (no
# substitution, every Transpose of the model).
# Usage: nhwc_transposed_blocks.sh COLLAGE
set -euo pipefail
collage=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$here/nhwc_transposed_blocks_models.py" "$work"
cd "$work"
m=nhwc_transposed_blocks
"$collage" candidates "$m.onnx" --backends onednn native --node Transpose_2 | tee "$m.cand.txt"
grep -q "onednn pattern:transpose_conv_relu {Transpose_2 Transpose, Conv_6 Conv, Relu_8 Relu}" "$m.cand.txt"
"$collage" optimize "$m.onnx" --db "$work/db.sqlite" --backends onednn native --op-level \
  -o "$m.plan.json" | tee "$m.opt.txt"
grep -q "canonical rewrites: cancel-transposes" "$m.opt.txt"
"$collage" optimize "$m.onnx" --db "$work/db.sqlite" --backends onednn native --op-level \
  --no-canonical-rewrites -o "$m.asis.json" | tee "$m.asis.txt"
if grep -q "canonical rewrites" "$m.asis.txt"; then echo "rewrote with --no-canonical-rewrites"; exit 1; fi
"$collage" run "$m.onnx" --plan "$m.plan.json" --verify | tee "$m.run.txt"
grep -q "verify: every output matches the reference executor" "$m.run.txt"
/usr/bin/python3 - "$m.onnx" "$m.plan.json" "$m.asis.json" <<'PY'
import json, sys
import onnx
ops = {n.name: n.op_type for n in onnx.load(sys.argv[1]).graph.node}
plan = json.load(open(sys.argv[2]))
# The canonical rewrite only (the substitution search is off by default).
assert [s["rule"] for s in plan.get("substitutions", [])] == ["cancel-transposes"], plan.get("substitutions")
asis = json.load(open(sys.argv[3]))
assert not asis.get("substitutions"), asis.get("substitutions")
assert sum(ops.get(n) == "Transpose" for g in asis["groups"] for n in g["nodes"]) == \
    sum(o == "Transpose" for o in ops.values())
# Nodes the rewrite made are named after their producer (".../transpose").
op = lambda n: ops.get(n) or ("Transpose" if n.endswith("/transpose") else "?")
placed = [n for g in plan["groups"] for n in g["nodes"]]
transposes = [n for n in placed if op(n) == "Transpose"]
copies = [g["nodes"] for g in plan["groups"] if all(op(n) == "Transpose" for n in g["nodes"])]
print("Transposes placed:", transposes, "; groups that only transpose:", copies)
print("groups:", [(g["backend"], g["nodes"]) for g in plan["groups"]])
assert len(transposes) == 2, transposes
assert len(copies) <= 2, copies
PY
