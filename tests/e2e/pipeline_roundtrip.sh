#!/usr/bin/env bash
# End to end: plan a graph pipeline of a small multi-branch model on two
# one-core devices, run a batch through it in process, and check that
#  - every output equals the whole model's Session on the same kernels;
#  - the run reports throughput, latency and each stage's busy share;
#  - the pipeline file is refused for another model and another topology;
#  - a topology naming a device this machine lacks is refused, naming it.
# No timing is checked. Usage: pipeline_roundtrip.sh COLLAGE MODELS_DIR
set -euo pipefail
collage=$1
models=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
model="$models/inception_v3_small.onnx"

# Micro-batch 1: no stage can split it over both devices, so the pipeline
# has stages of its own on each core (or, if one core is best, one stage).
"$collage" pipeline "$model" --devices cpu:2 --batch 4 --micro-batch 1 --measure in-process -o p.json | tee plan.txt
grep -q "pipeline written to p.json" plan.txt
grep -q '"format": "collage-pipeline"' p.json

"$collage" run "$model" --pipeline p.json --batch 6 --verify | tee run.txt
grep -q "samples/s, latency per sample" run.txt
grep -q "^  stage 0 \[cpu" run.txt
grep -q "busy" run.txt
grep -q "verify: every output of 6 micro-batch(es) matches" run.txt

# With a plan: each stage runs the plan's groups restricted to it (Conv+Relu
# fused on oneDNN, the rest one native kernel per node); outputs equal the
# whole plan's Session.
/usr/bin/python3 - <<'PY'
import json
f = json.load(open("p.json"))
nodes = [n for s in f["stages"] for n in s["nodes"]]
groups, i = [], 0
while i < len(nodes):
    n = nodes[i]
    if n.endswith("/Conv") and i + 1 < len(nodes) and nodes[i + 1] == n.rsplit("/", 2)[0] + "/Relu":
        groups.append({"backend": "onednn", "pattern": "rule:fusion:post_ops", "origin": "op-level", "nodes": [n, nodes[i + 1]]})
        i += 2
    else:
        groups.append({"backend": "native", "pattern": "rule:op", "origin": "op-level", "nodes": [n]})
        i += 1
assert any(g["backend"] == "onednn" for g in groups)
json.dump({"format": "collage-plan", "version": 1, "model": f["model"], "backends": [], "groups": groups},
          open("plan.json", "w"))
PY
"$collage" run "$model" --pipeline p.json --plan plan.json --batch 4 --verify | tee planrun.txt
grep -q "verify: every output of 4 micro-batch(es) matches" planrun.txt

# Another model: refused, naming the file and the hashes.
if "$collage" run "$models/mobilenet_v2_small.onnx" --pipeline p.json 2> other.txt; then
  echo "a pipeline for another model was accepted" >&2
  exit 1
fi
grep -q "p.json was made for a model with sha256" other.txt

# Another topology: refused.
cat > three.json <<'JSON'
{"devices": [{"id": "cpu0", "kind": "cpu", "cores": 1}, {"id": "cpu1", "kind": "cpu", "cores": 1},
             {"id": "cpu2", "kind": "cpu", "cores": 1}],
 "default_link": {"bandwidth_bytes_per_s": 1e10, "latency_s": 1e-5}}
JSON
if "$collage" run "$model" --pipeline p.json --topology three.json 2> topo.txt; then
  echo "a pipeline for another topology was accepted" >&2
  exit 1
fi
grep -q "p.json was made for a topology with sha256" topo.txt

# A device this machine lacks.
cat > huge.json <<'JSON'
{"devices": [{"id": "cpu0", "kind": "cpu", "cores": 1}, {"id": "big", "kind": "cpu", "cores": 100000}],
 "default_link": {"bandwidth_bytes_per_s": 1e10, "latency_s": 1e-5}}
JSON
if "$collage" pipeline "$model" --topology huge.json --batch 2 -o q.json 2> huge.txt; then
  echo "a topology with more cores than the machine was accepted" >&2
  exit 1
fi
grep -q 'device "big" needs 100000 core(s)' huge.txt
echo "pipeline round trip: ok"
