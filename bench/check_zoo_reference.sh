#!/usr/bin/env bash
# Checks the reference executor against PyTorch on the full model zoo: each
# model's saved input is run with `collage run --backend reference` and the
# output compared with PyTorch's (rtol 1e-3, atol 1e-5). Exports the zoo
# first if needed (needs scripts/setup.sh --bench for PyTorch).
#   bench/check_zoo_reference.sh [ZOO_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
zoo=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/collage-studio/zoo}
collage=${BUILD_DIR:-build}/app/collage
/usr/bin/python3 bench/models/export_zoo.py --out "$zoo"
status=0
for model in "$zoo"/*.onnx; do
  base=${model%.onnx}
  [[ -f $base.input_0.pb && -f $base.output_0.pb ]] || continue
  echo "== $(basename "$model")"
  if ! "$collage" run "$model" --backend reference --input "$base.input_0.pb" \
        --expect "$base.output_0.pb" | grep -E "^(latency|check)"; then
    status=1
  fi
done
exit $status
