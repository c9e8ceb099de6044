#!/usr/bin/env bash
# Writes the small GPT-2-style and LLaMA-style decoders (random weights,
# bench/models/export_decoders.py) beside this script, and ONNX Runtime's
# greedy ids for each (bench/models/ort_greedy.js, onnxruntime-node from
# bench/node_modules: `cd bench && npm install --ignore-scripts`), which
# e2e_generate_ort_* compare `collage generate` with:
#   NAME.onnx, NAME.ort_greedy.txt ("prompt: ..." then "generated: ...")
# and gpt2_style_tiny_merged.onnx, the GPT-2-style one at the same weights in
# the merged form (an If on use_cache_branch, as Optimum writes it), which
# must generate the same ids.
# Usage: tests/models/decoder/make_llm_decoders.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
/usr/bin/python3 "$root/bench/models/export_decoders.py" gpt2_style_tiny llama_style_tiny --out "$here" --numpy 64
/usr/bin/python3 "$root/bench/models/export_decoders.py" gpt2_style_tiny --merged --out "$here"
for name in gpt2_style_tiny llama_style_tiny; do
  node "$root/bench/models/ort_greedy.js" "$here/$name.onnx" --prompt-ids 1,2,3,4,5,6,7,8 \
    --max-new-tokens 64 --out "$here/$name.ort_greedy.txt"
done
