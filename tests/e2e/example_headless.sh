#!/usr/bin/env bash
# The README's main command, run exactly as a user runs it on a machine
# without a display: scripts/example.sh --headless installs what is missing,
# builds (nothing to do here), optimizes the bundled example, explains the
# plan, runs it checked against the reference and writes the exports. It
# must run to the end: a step that dies half way (SIGPIPE under pipefail,
# as explain piped into head once did) fails here.
# The user's default database is the one under $XDG_CACHE_HOME: here a
# folder of the test's own (never the machine user's, which other runs write
# to), seeded with STORE when given (resnet50_small's warm store,
# tests/e2e/warm_store.sh), as a user's is after a first run.
# Usage: example_headless.sh SOURCE_DIR BUILD_DIR [STORE.sqlite]
set -euo pipefail
source_dir=$1
build_dir=$2
store=${3:-}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# ccache finds its cache under XDG_CACHE_HOME too: keep it where it was.
if command -v ccache >/dev/null && [[ -z ${CCACHE_DIR:-} ]]; then
  CCACHE_DIR=$(ccache -k cache_dir) && export CCACHE_DIR
fi
export XDG_CACHE_HOME="$out/cache"
mkdir -p "$XDG_CACHE_HOME/collage-studio"
[[ -z $store ]] || cp "$store" "$XDG_CACHE_HOME/collage-studio/measurements.sqlite"

status=0
BUILD_DIR=$build_dir COLLAGE_EXAMPLE_OUT=$out "$source_dir/scripts/example.sh" --headless \
  >"$out/example.log" 2>&1 || status=$?
cat "$out/example.log"
[[ $status == 0 ]] || { echo "FAIL: scripts/example.sh --headless exited $status"; exit 1; }

# Every step ran, in order, to the last line.
for step in "collage inspect" "collage optimize" "collage explain" "collage run" "outputs in"; do
  grep -q "^== $step" "$out/example.log" || { echo "FAIL: the step '$step' did not run"; exit 1; }
done
grep -q "verify: every output matches the reference executor" "$out/example.log" ||
  { echo "FAIL: the checked run did not verify"; exit 1; }
# The exports exist and are not empty; the plan and the explanation are whole.
for f in plan.json explain.txt trace.json node_data.json annotated.onnx; do
  [[ -s $out/$f ]] || { echo "FAIL: the export $f is missing or empty"; exit 1; }
done
/usr/bin/python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$out/plan.json"
/usr/bin/python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$out/trace.json"
/usr/bin/python3 -c 'import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]))' "$out/annotated.onnx"
# The explanation is whole: a paragraph for every group of the plan (its
# length is the plan's: a graph-level region can make it 3 groups, shorter
# than the part the example shows).
groups=$(/usr/bin/python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["groups"]))' "$out/plan.json")
explained=$(grep -c '^group [0-9]* (' "$out/explain.txt" || true)
[[ $explained == "$groups" ]] ||
  { echo "FAIL: explain.txt explains $explained of the plan's $groups groups"; exit 1; }
echo "example.sh --headless ran to the end; exports: plan.json explain.txt trace.json node_data.json annotated.onnx"
