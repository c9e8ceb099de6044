#!/usr/bin/env bash
# The main job on the bundled example model (resources/models/resnet50_small.onnx).
# Sets everything up (scripts/setup.sh), then:
#  - with a display: opens Collage Studio on the model, ready to optimise
#    (toolbar Optimize; File > Export for the plan and the exports);
#  - without one (or with --headless): says how to run the app under Xvfb,
#    then runs the same job on the command line: inspect, find the fastest
#    placement over oneDNN, OpenBLAS and the native backend (measuring on this
#    machine; measurements are kept in the database, so a second run measures
#    nothing), explain the plan, and run it checked against the reference.
set -euo pipefail
cd "$(dirname "$0")/.."
headless=0
for arg in "$@"; do
  case "$arg" in
    --headless) headless=1 ;;
    *) echo "usage: scripts/example.sh [--headless]" >&2; exit 2 ;;
  esac
done
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
collage="$BUILD_DIR/app/collage"
studio="$BUILD_DIR/app/collage-studio"
model=resources/models/resnet50_small.onnx

if [[ $headless == 0 && ( -n "${DISPLAY:-}" || -n "${WAYLAND_DISPLAY:-}" ) && -x "$studio" ]]; then
  echo "== collage-studio $model"
  exec "$studio" "$model"
fi

if [[ $headless == 0 ]]; then
  cat <<MSG
== No display here, so the desktop app cannot open a window.
   To use the app on this machine, run it under a virtual X server:
       apt-get install -y xvfb x11vnc     # once
       xvfb-run -s '-screen 0 1600x1000x24' $studio $model
   (and view it with x11vnc -display :99 and a VNC client), or forward X
   over ssh (ssh -X) and run $studio $model.
   The headless equivalent of the app's work follows: the same optimisation,
   explanation, checked run and exports, on the command line.

MSG
fi

out=${COLLAGE_EXAMPLE_OUT:-$BUILD_DIR/example}
mkdir -p "$out"
echo "== collage inspect $model"
"$collage" inspect "$model"
echo "== collage optimize $model --baselines -o $out/plan.json"
"$collage" optimize "$model" --baselines -o "$out/plan.json"
echo "== collage explain $out/plan.json (first groups; all of it in $out/explain.txt)"
# Written whole, then shown in part: a pipe into `head` would kill explain
# with SIGPIPE once its output outgrows the pipe, and pipefail stop the job.
"$collage" explain "$out/plan.json" >"$out/explain.txt"
sed -n 1,24p "$out/explain.txt"
echo "== collage run $model --plan $out/plan.json --verify"
"$collage" run "$model" --plan "$out/plan.json" --verify --repeat 50 \
  --input resources/models/resnet50_small.input_0.pb \
  --expect resources/models/resnet50_small.output_0.pb \
  --trace "$out/trace.json" --node-data "$out/node_data.json" --annotated-onnx "$out/annotated.onnx"
echo "== outputs in $out: plan.json, explain.txt, trace.json (Perfetto), node_data.json (Model Explorer), annotated.onnx (Netron)"
