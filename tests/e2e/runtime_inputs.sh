#!/usr/bin/env bash
# End to end with run-time parameter inputs and dynamic input dims, on small
# models built by runtime_inputs_models.py (numpy gives the expected values):
#  - the reference executor reproduces numpy where Clip's min/max, Pad's pads
#    and constant_value, Slice's starts/ends and Resize's scales/sizes are
#    run-time tensors (graph inputs or computed from the data);
#  - values contradicting a declared shape get a message naming node and tensor;
#  - optimize then run --plan --verify works where every input value is valid;
#  - a dynamic input gets an import note, and a shape error names its binding.
# Usage: runtime_inputs.sh COLLAGE
set -euo pipefail
collage=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$here/runtime_inputs_models.py" "$work"
cd "$work"

inputs() {  # --input flags for every MODEL.input_K.pb, in order
  local k=0
  while [ -f "$1.input_$k.pb" ]; do printf -- '--input %s ' "$1.input_$k.pb"; k=$((k + 1)); done
}
expects() {
  local k=0
  while [ -f "$1.output_$k.pb" ]; do printf -- '--expect %s ' "$1.output_$k.pb"; k=$((k + 1)); done
}

for m in clip_runtime pad_slice_resize_computed pad_slice_resize_inputs; do
  # shellcheck disable=SC2046
  "$collage" run "$m.onnx" --backend reference $(inputs "$m") $(expects "$m") | tee "$m.ref.txt"
  ! grep -q MISMATCH "$m.ref.txt"
  grep -q "^check .*: matches" "$m.ref.txt"
done

# Pads that give another shape than the declared one.
m=pad_slice_resize_inputs
if "$collage" run "$m.onnx" --backend reference --input "$m.input_0.pb" \
     --input "$m.bad_pads.pb" --input "$m.input_2.pb" --input "$m.input_3.pb" \
     --input "$m.input_4.pb" --input "$m.input_5.pb" 2> bad.txt; then
  echo "contradicting pads were accepted" >&2
  exit 1
fi
cat bad.txt
grep -q "node 'pad'" bad.txt
grep -q "output 'p'" bad.txt
grep -q "'pads'" bad.txt

for m in clip_runtime pad_slice_resize_computed; do
  "$collage" optimize "$m.onnx" --db "$work/db.sqlite" -o "$m.plan.json" --budget 20s | tee "$m.opt.txt"
  # shellcheck disable=SC2046
  "$collage" run "$m.onnx" --plan "$m.plan.json" --verify $(inputs "$m") $(expects "$m") \
    | tee "$m.run.txt"
  grep -q "verify: every output matches the reference executor" "$m.run.txt"
  ! grep -q MISMATCH "$m.run.txt"
done

# Dynamic dims: the default binding (1) is too short for the window.
if "$collage" inspect dynamic_conv.onnx > /dev/null 2> dyn.txt; then
  echo "a window longer than the default binding was accepted" >&2
  exit 1
fi
cat dyn.txt
grep -q "node 'frames'" dyn.txt
grep -qF "(input 'audio' had dynamic dims [batch, samples] bound by default to 1x1: bind them with --input-shape audio=batchx1xsamples)" dyn.txt
"$collage" inspect dynamic_conv.onnx --input-shape audio=2x1x64 > /dev/null 2> note.txt
cat note.txt
grep -qF "note: input 'audio' has dynamic dims [batch, samples]: bound to 2x64 by --input-shape" note.txt
echo "run-time inputs and dynamic-shape messages ok"
