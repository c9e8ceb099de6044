#!/bin/bash
# Interleaved medians (A, B, C, A, B, C, ...) on the attention-only models of
# make_models.py at THREADS threads: collage's plan (the attention kernel's
# inner products on OpenBLAS, the default), the same plan with the AVX-512
# microkernel, an optional baseline
# plan (BASE_COLLAGE, BASE_SUFFIX: e.g. main's build and its plans), and
# ONNX Runtime. Every run holds the machine's timing lock, so it never
# overlaps another engineer's measurement: `collage run` takes it itself,
# ONNX Runtime's runs through flock.
# Usage: compare.sh COLLAGE MODELS_DIR PLAN_SUFFIX [THREADS] [ROUNDS]
#   plans are MODELS_DIR/<model>_<PLAN_SUFFIX>.json (from collage optimize -o).
set -euo pipefail
collage=$1 dir=$2 suffix=$3 threads=${4:-2} rounds=${5:-5}
here=$(cd "$(dirname "$0")" && pwd)
# The lock collage takes (core/measure/machine_timing_lock.h): COLLAGE_TIMING_LOCK,
# else in $XDG_RUNTIME_DIR, else in $TMPDIR/collage-<uid>/.
lock=${COLLAGE_TIMING_LOCK:-}
if [[ -z $lock ]]; then
  if [[ -n ${XDG_RUNTIME_DIR:-} && -d $XDG_RUNTIME_DIR && ! -L $XDG_RUNTIME_DIR && -O $XDG_RUNTIME_DIR ]]; then
    lock=$XDG_RUNTIME_DIR/collage-timing.lock
  else
    mkdir -p -m 700 "${TMPDIR:-/tmp}/collage-$(id -u)"
    lock=${TMPDIR:-/tmp}/collage-$(id -u)/collage-timing.lock
  fi
fi
time_plan() {  # COLLAGE MODEL PLAN [ENV...]
  local bin=$1 model=$2 plan=$3
  shift 3
  env "$@" "$bin" --threads "$threads" run "$model" --plan "$plan" --repeat 300 2>&1 |
    sed -n 's/^latency: median \([0-9.]*\) ms.*/\1/p'
}
for m in vit_b_16 bert_base gpt2; do
  model=$dir/${m}_attention.onnx
  if [[ $m == vit_b_16 ]]; then shape='[197,1,768]'; else shape='[1,128,768]'; fi
  main=() alt=() base=() ort=()
  for ((r = 0; r < rounds; ++r)); do
    main+=("$(time_plan "$collage" "$model" "$dir/${m}_${suffix}.json")")
    alt+=("$(time_plan "$collage" "$model" "$dir/${m}_${suffix}.json" COLLAGE_NATIVE_ATTENTION_GEMM=microkernel)")
    if [[ -n ${BASE_COLLAGE:-} ]]; then
      base+=("$(time_plan "$BASE_COLLAGE" "$model" "$dir/${m}_${BASE_SUFFIX}.json")")
    else
      base+=(nan)
    fi
    ort+=("$(SHAPE_q=$shape SHAPE_k=$shape SHAPE_v=$shape flock "$lock" node "$here/ort_time.js" "$model" "$threads" 300 |
            sed -n 's/^median_ms //p')")
  done
  python3 - "$m" "${main[*]}" "${alt[*]}" "${base[*]}" "${ort[*]}" <<'PY'
import math, statistics, sys
m = sys.argv[1]
runs = [[float(x) for x in a.split()] for a in sys.argv[2:]]
med = [statistics.median(r) for r in runs]
flops = {"vit_b_16": 4 * 12 * 197 * 197 * 64, "bert_base": 4 * 12 * 128 * 128 * 64, "gpt2": 4 * 12 * 128 * 128 * 64}[m]
names = ["openblas", "microkernel", "baseline", "onnxruntime"]
low = [min(r) for r in runs]
line = f"{m:10s} " + "  ".join(f"{n} {t:.3f} (min {l:.3f}) ms" for n, t, l in zip(names, med, low) if not math.isnan(t))
line += f"  | ort/collage {med[3] / med[0]:.2f}x, {flops / med[0] / 1e6:.0f} GFLOP/s"
if not math.isnan(med[2]):
    line += f", baseline/collage {med[2] / med[0]:.2f}x"
print(line)
ratios = sorted(b / a for a, b in zip(runs[0], runs[1]))
print(f"   microkernel/openblas paired by round: median {statistics.median(ratios):.3f}; rounds:", runs)
PY
done
