#!/usr/bin/env bash
# End to end on the small multi-branch models (tests/models/pipeline/, made by
# bench/models/make_multibranch.py): for each, plan a graph pipeline on two
# one-core devices, run it in process, and check that
#  - every output equals the whole model's Session (--verify), for the
#    pipeline and for both baselines (one device, data parallel);
#  - the run (pipeline or baseline) reports the simulator's throughput from
#    its measured stage times, and the weights and memory per device;
#  - `collage pipeline` simulates the four strategies on its topology, and
#    `--simulate` projects GPP, SPP and data parallel to more devices;
#  - over a near-free link, GPP and SPP (--strategy) split the model and
#    still match.
# No timing is checked. Usage: pipeline_multibranch.sh COLLAGE MODELS_DIR
set -euo pipefail
collage=$1
models=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cat > fast.json <<'JSON'
{"devices": [{"id": "cpu0", "kind": "cpu", "cores": 1}, {"id": "cpu1", "kind": "cpu", "cores": 1}],
 "default_link": {"bandwidth_bytes_per_s": 1e12, "latency_s": 0}}
JSON
for name in two_tower dlrm uno; do
  model="$models/${name}_small.onnx"
  echo "== $name"
  "$collage" pipeline "$model" --devices cpu:2 --batch 4 --micro-batch 1 --micro-batch 2 --measure in-process \
    --runs 2 --simulate 8,16,32 -o p.json | tee plan.txt
  grep -q "pipeline written to p.json" plan.txt
  grep -q "predicted: GPP .* ms per sample (search .* s), SPP" plan.txt
  for n in 8 16 32; do grep -q "^  $n devices: GPP .* SPP .* data parallel" plan.txt; done
  for s in GPP SPP "data parallel" "one device"; do
    grep -Eq "^  $s: ([0-9.]+ samples/s .* latency per sample median .* B in all|not simulated)" plan.txt
  done

  "$collage" run "$model" --pipeline p.json --batch 8 --verify | tee run.txt
  grep -q "samples/s, latency per sample" run.txt
  grep -q "from this run's stage costs.*(measured/simulated throughput" run.txt
  grep -q "^weights: .* B on the busiest device" run.txt
  grep -Eq "^memory per device: cpu[01] weights [0-9]+ B, activations [1-9][0-9]* B" run.txt
  grep -q "verify: every output of [0-9]* micro-batch(es) matches" run.txt

  for baseline in one-device data-parallel; do
    "$collage" run "$model" --pipeline p.json --batch 8 --baseline "$baseline" --verify | tee base.txt
    grep -q "^baseline $baseline: .* samples/s" base.txt
    grep -q "^weights: .* B per device (the whole model on each)" base.txt
    grep -q "^simulated from this run's costs: .* samples/s.*(measured/simulated throughput" base.txt
    grep -Eq "^memory per device: (all|cpu0) weights [0-9]+ B, activations [1-9][0-9]* B" base.txt
    grep -q "verify: every output of [0-9]* micro-batch(es) matches" base.txt
  done

  # A link priced near free: the planner splits the model over both devices
  # (a graph of stages, and the chain for SPP); each still matches.
  for strategy in gpp spp; do
    "$collage" pipeline "$model" --topology "$work/fast.json" --batch 4 --micro-batch 1 \
      --measure in-process --runs 2 --strategy $strategy -o $strategy.json | tee fast.txt
    grep -q "pipeline written to $strategy.json" fast.txt
    "$collage" run "$model" --pipeline $strategy.json --batch 4 --verify | tee fastrun.txt
    grep -q "verify: every output of 4 micro-batch(es) matches" fastrun.txt
  done
done
grep -q "replica 1 \[cpu1\]" base.txt  # data parallel: one replica per device

# Pins (--pin NODE=STAGE), on the last model over the near-free link: its
# last node pinned to stage 1 and the first node of gpp.json's last stage (if
# another) to stage 0. The file records the pins, the stages hold the nodes,
# the run still matches. A pin on a node the model lacks, or on a stage two
# devices cannot give, is refused naming it, before any node is profiled.
/usr/bin/python3 - <<'PY' > pins.txt
import json
stages = json.load(open("gpp.json"))["stages"]
last = stages[-1]["nodes"][-1]
pins = {last: 1}
if len(stages) > 1 and stages[-1]["nodes"][0] != last:
    pins[stages[-1]["nodes"][0]] = 0
print(" ".join("--pin %s=%d" % p for p in pins.items()))
print(json.dumps(pins))
PY
read -r -a pin_args < <(sed -n 1p pins.txt)
"$collage" pipeline "$model" --topology "$work/fast.json" --batch 4 --micro-batch 1 \
  --measure in-process --runs 1 "${pin_args[@]}" -o pinned.json | tee pinned.txt
/usr/bin/python3 - <<'PY'
import json
want = json.loads(open("pins.txt").read().splitlines()[1])
f = json.load(open("pinned.json"))
assert f["pins"] == want, (f["pins"], want)
for node, stage in want.items():
    assert node in f["stages"][stage]["nodes"], (node, stage, f["stages"])
PY
"$collage" run "$model" --pipeline pinned.json --batch 4 --verify | tee pinnedrun.txt
grep -q "verify: every output of 4 micro-batch(es) matches" pinnedrun.txt
if "$collage" pipeline "$model" --devices cpu:2 --no-db --pin "no_such_node=0" -o x.json > bad.txt 2>&1; then
  echo "a pin on a missing node was accepted"; exit 1
fi
grep -q "no_such_node=0: the model has no node named 'no_such_node'" bad.txt
node=$(/usr/bin/python3 -c 'import json; print(json.load(open("gpp.json"))["stages"][0]["nodes"][0])')
if "$collage" pipeline "$model" --devices cpu:2 --no-db --pin "$node=2" -o x.json > bad.txt 2>&1; then
  echo "a pin on stage 2 of two devices was accepted"; exit 1
fi
grep -qF "$node=2: stage 2 cannot be: 2 device(s) give at most 2 stage(s)" bad.txt
if grep -q "profiling\|measuring" bad.txt; then echo "profiled before refusing the pin"; exit 1; fi
echo "pipeline multi-branch: ok"
