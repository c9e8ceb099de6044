#!/usr/bin/env bash
# Fuzzes the formats the product reads from users (tests/fuzz/): the ONNX
# importer, the pattern language, backend spec files and plan JSON. Not a
# test: it runs for as long as it is told.
#
#   bench/fuzz.sh [--seconds N] [--jobs J] [target ...]
#
# Each target runs N seconds (default 600) under libFuzzer with the address
# and undefined-behaviour sanitizers, J targets at a time (default 1). The
# corpus grows across runs in ~/.cache/collage-studio/fuzz/<target>/corpus,
# seeded from the committed models, specs, plans and patterns; a crash or a
# hang is saved under .../<target>/found/ and the run says so. Every run is
# appended to .../ledger.tsv, and the totals per target are printed at the
# end: the hours fuzzed so far on this machine.
#
# The build (clang, COLLAGE_FUZZ=ON) goes to build-fuzz/ (BUILD_DIR to move it).
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$PWD

seconds=600
jobs=1
targets=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=(onnx_import pattern_parser backend_spec plan_json)
[[ ${#targets[@]} -eq 0 ]] && targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target '$t' (${all[*]})" >&2; exit 2; }
done

command -v clang++ >/dev/null || { echo "fuzz.sh: needs clang (apt-get install clang)" >&2; exit 1; }
build=${BUILD_DIR:-build-fuzz}
if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCOLLAGE_FUZZ=ON -DCOLLAGE_BUILD_GUI=OFF -DCOLLAGE_BUILD_PYTHON=OFF -DCOLLAGE_CUDA=OFF
fi
cmake --build "$build" --target "${targets[@]/%/_fuzzer}"

state=${XDG_CACHE_HOME:-$HOME/.cache}/collage-studio/fuzz
mkdir -p "$state"
ledger=$state/ledger.tsv
[[ -f $ledger ]] || printf 'finished\ttarget\tseconds\texecutions\tfound\n' >"$ledger"

# The committed inputs of each format; ONNX's own node tests add small
# models of every op when libonnx-testdata is installed.
seeds() {
  case $1 in
    onnx_import)
      echo "$source_dir/resources/models"
      [[ -d /usr/share/libonnx-testdata/data/node ]] && echo "$state/onnx_import/node-models"
      ;;
    pattern_parser) echo "$source_dir/tests/fuzz/seeds/pattern" ;;
    backend_spec) echo "$source_dir/resources/backends" ;;
    plan_json) echo "$source_dir/tests/fuzz/seeds/plan" ;;
  esac
}

fuzz_one() {
  local t=$1 dir=$state/$1
  mkdir -p "$dir/corpus" "$dir/found"
  if [[ $t == onnx_import && ! -d $dir/node-models ]]; then
    mkdir -p "$dir/node-models"
    for m in /usr/share/libonnx-testdata/data/node/*/model.onnx; do
      cp "$m" "$dir/node-models/$(basename "$(dirname "$m")").onnx"
    done
  fi
  local log=$dir/last.log before started
  before=$(find "$dir/found" -type f | wc -l)
  started=$(date +%s)
  # -timeout: an input that takes longer is a hang; -rss_limit_mb: one that
  # allocates more is a crash (a model may declare any size; the importer
  # must refuse it, not try).
  set +e
  "$build/tests/fuzz/${t}_fuzzer" "$dir/corpus" $(seeds "$t") -max_total_time="$seconds" \
    -timeout=20 -rss_limit_mb=4096 -max_len=2000000 -print_final_stats=1 \
    -artifact_prefix="$dir/found/" >"$log" 2>&1
  local rc=$?
  set -e
  # The ledger counts the seconds it really ran: a crash ends a run early.
  local execs found elapsed=$(($(date +%s) - started))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  found=$(($(find "$dir/found" -type f | wc -l) - before))
  printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$elapsed" "${execs:-0}" "$found" >>"$ledger"
  if [[ $rc -ne 0 || $found -gt 0 ]]; then
    echo "== $t: FOUND a crash or hang (exit $rc): $dir/found/ and $log"
    grep -m3 -E 'ERROR|runtime error|fuzz property' "$log" || tail -5 "$log"
  else
    echo "== $t: ${execs:-0} inputs in ${elapsed}s, nothing found"
  fi
}

running=0
for t in "${targets[@]}"; do
  fuzz_one "$t" &
  running=$((running + 1))
  if [[ $running -ge $jobs ]]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

echo
echo "fuzzed on this machine so far (${ledger}):"
awk -F'\t' 'NR > 1 { s[$2] += $3; e[$2] += $4; f[$2] += $5 }
  END { for (t in s) printf "  %-15s %6.2f h  %12d inputs  %d found\n", t, s[t] / 3600, e[t], f[t] }' \
  "$ledger" | sort
