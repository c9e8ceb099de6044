#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then runs the main job on the bundled
# example model (resources/models/resnet50_small.onnx): inspect it, find the
# fastest placement over oneDNN, OpenBLAS and the native backend (measuring
# on this machine; measurements are kept in the database, so a second run
# measures nothing), explain the plan, and run it checked against the
# reference executor.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
collage="$BUILD_DIR/app/collage"
model=resources/models/resnet50_small.onnx
out=${COLLAGE_EXAMPLE_OUT:-$BUILD_DIR/example}
mkdir -p "$out"
echo "== collage inspect $model"
"$collage" inspect "$model"
echo "== collage optimize $model --baselines -o $out/plan.json"
"$collage" optimize "$model" --baselines -o "$out/plan.json"
echo "== collage explain $out/plan.json (first groups)"
"$collage" explain "$out/plan.json" | head -n 24
echo "== collage run $model --plan $out/plan.json --verify"
"$collage" run "$model" --plan "$out/plan.json" --verify --repeat 50 \
  --input resources/models/resnet50_small.input_0.pb \
  --expect resources/models/resnet50_small.output_0.pb \
  --trace "$out/trace.json" --node-data "$out/node_data.json" --annotated-onnx "$out/annotated.onnx"
echo "== outputs in $out: plan.json, trace.json (Perfetto), node_data.json (Model Explorer), annotated.onnx (Netron)"
