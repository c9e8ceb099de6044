#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then runs the main job on the bundled
# example model (resources/models/resnet50_small.onnx).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
model=resources/models/resnet50_small.onnx
echo "== collage inspect $model"
"$BUILD_DIR/app/collage" inspect "$model"
echo "== collage run $model --backend reference"
"$BUILD_DIR/app/collage" run "$model" --backend reference \
  --input "resources/models/resnet50_small.input_0.pb" \
  --expect "resources/models/resnet50_small.output_0.pb"
