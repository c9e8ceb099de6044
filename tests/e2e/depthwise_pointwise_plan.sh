#!/usr/bin/env bash
# The native depthwise-pointwise blocks in a whole model, with no
# measurement: a plan that runs every block the native rule names as one
# kernel (the residual form where there is one) and every other node alone
# on native must run and match the reference executor (run --verify).
# Usage: depthwise_pointwise_plan.sh COLLAGE MODEL.onnx MIN_BLOCKS
set -euo pipefail
collage=$1
model=$2
min_blocks=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$collage" candidates "$model" --backends native --list > "$work/candidates.txt"
/usr/bin/python3 - "$model" "$work/candidates.txt" "$work/plan.json" "$min_blocks" <<'PY'
import hashlib, json, re, sys
import onnx
model, listing, out, min_blocks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
names = [n.name for n in onnx.load(model).graph.node if n.op_type != "Constant"]
blocks = {"depthwise_pointwise_residual": [], "depthwise_pointwise": []}
for line in open(listing):
    m = re.match(r"\s*native rule:(depthwise_pointwise(?:_residual)?) \{(.*)\}", line)
    if m:
        blocks[m.group(1)].append([p.rsplit(" ", 1)[0] for p in m.group(2).split(", ")])
used, groups = set(), []
for label in ["depthwise_pointwise_residual", "depthwise_pointwise"]:
    for b in blocks[label]:
        if used.isdisjoint(b):
            used.update(b)
            groups.append({"backend": "native", "pattern": "rule:" + label, "origin": "user", "nodes": b})
print(f"{len(groups)} blocks as one kernel, {len(names) - len(used)} single nodes")
if len(groups) < min_blocks:
    sys.exit(f"only {len(groups)} blocks named, {min_blocks} expected")
groups += [{"backend": "native", "origin": "user", "nodes": [n]} for n in names if n not in used]
json.dump({"format": "collage-plan", "version": 1,
           "model": {"path": model, "sha256": hashlib.sha256(open(model, "rb").read()).hexdigest()},
           "groups": groups}, open(out, "w"), indent=1)
PY
"$collage" run "$model" --plan "$work/plan.json" --verify | tee "$work/run.txt"
grep -q "^verify: every output matches the reference executor" "$work/run.txt"
