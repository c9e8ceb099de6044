#!/usr/bin/env bash
# End to end: `collage generate --tensor-parallel` under mpirun
# (docs/decoding.md): the step split by heads across the ranks (the Q/K/V
# and MLP MatMuls by columns, the attention's and the MLP's output MatMuls
# by rows, each summed across the ranks). Two parts (ctest runs each alone):
#  run:      on the tiny GPT-2-style decoder (fused QKV, biases; 2 and 4
#            ranks) and the LLaMA-style one (grouped-query heads, rotary,
#            SwiGLU; 2 ranks) the ids equal the one-device run's (ONNX
#            Runtime's), and every step's logits are within the plan
#            check's float32 bound (1e-4 of the row's largest |logit|) of
#            the one-device run's;
#  plan:     the same on 2 ranks with --plan (the plan `collage optimize`
#            makes for the step graph on the native backend: its fused
#            groups that hold a sharded MatMul or an attention are split,
#            the others kept);
#  refusals: KV heads that do not divide by the ranks, named with both
#            numbers; --tensor-parallel with --cache-parallel; ranks given
#            different models; a rank that
#            never answers fails the other's wait at --mpi-timeout, naming
#            it. No run hangs (each is under `timeout`).
# Exits 77 (ctest's SKIP_RETURN_CODE) where mpirun is missing. No timing is
# checked. Usage: generate_tensor_parallel.sh COLLAGE MODELS_DIR run|plan|refusals
set -euo pipefail
collage=$1
dir=$2
part=$3
source "$(dirname "$0")/mpi_ranks.sh"
mpi_setup generate_tensor_parallel
source "$(dirname "$0")/greedy_ids.sh"

if [[ $part == run || $part == plan ]]; then
specs=(gpt2_style_tiny:2 gpt2_style_tiny:4 llama_style_tiny:2)
[[ $part == plan ]] && specs=(gpt2_style_tiny:2 llama_style_tiny:2)
for spec in "${specs[@]}"; do
  model=${spec%:*}
  n=${spec#*:}
  read_greedy "$dir/$model.ort_greedy.txt"
  args=(generate "$dir/$model.onnx" --prompt-ids "$prompt" --max-new-tokens "$new")
  plan=()
  if [[ $part == plan ]]; then
    nprompt=$(echo "$prompt" | tr ',' '\n' | wc -l)
    mapfile -t bindings < <("$collage" generate "$dir/$model.onnx" --prompt-ids "$prompt" \
      --max-length $((nprompt + new)) --print-bindings | tr ' ' '\n')
    "$collage" optimize "$dir/$model.onnx" "${bindings[@]}" --backends native \
      --db measurements.sqlite -o $model.plan.json --budget 10s > $model.optimize.txt
    plan=(--plan $model.plan.json)
  fi
  [[ -f $model.one.txt ]] || "$collage" "${args[@]}" --logits-out $model.one.txt | tee $model.one.out
  grep -q "^generated: $want$" $model.one.out
  timeout 120 "${mpi[@]}" -n $n "$collage" "${args[@]}" "${plan[@]}" --tensor-parallel \
    --mpi-timeout 30 --logits-out $model.tp$n.txt | tee $model.tp$n.out
  [[ $part == run ]] || grep -q "^decode step: .*, plan $model.plan.json ([0-9]* of its [0-9]* group(s) kept, the rest split), tensor parallel$" $model.tp$n.out
  grep -q "^tensor parallel: $n rank(s), 2 attention(s) split by heads, [0-9]* MatMul(s) sharded" $model.tp$n.out
  grep -q "^generated: $want$" $model.tp$n.out
  /usr/bin/python3 - $model.one.txt $model.tp$n.txt <<'PY'
import sys
import numpy as np
one, tp = (np.loadtxt(f, ndmin=2) for f in sys.argv[1:3])
assert one.shape == tp.shape, (one.shape, tp.shape)
for i, (a, b) in enumerate(zip(tp, one)):
    err, scale = np.abs(a - b).max(), np.abs(b).max()
    assert err <= 1e-4 * scale, f"token {i}: logits differ by {err} (largest {scale})"
print(f"{sys.argv[2]}: {len(one)} rows of logits within 1e-4 of the one-device run's")
PY
done
grep -q "^tensor parallel: 2 rank(s), 2 attention(s) split by heads, 14 MatMul(s) sharded (10 by columns, 4 by rows), 1 left whole; KV heads 0..0 (query heads 0..1) on rank 0, KV heads 1..1 (query heads 2..3) on rank 1$" llama_style_tiny.tp2.out
echo "generate tensor parallel $part: ok"
exit 0
fi

read_greedy "$dir/llama_style_tiny.ort_greedy.txt"
args=(generate "$dir/llama_style_tiny.onnx" --prompt-ids "$prompt" --max-new-tokens 4)

# 2 KV heads on 3 ranks: refused, naming both numbers.
expect_failure "heads not divisible" heads.txt \
  timeout 60 "${mpi[@]}" -n 3 "$collage" "${args[@]}" --tensor-parallel --mpi-timeout 20
grep -q "tensor parallel: attention 0 has 2 KV head(s), which do not split across 3 ranks" heads.txt

# The two splits at once: refused before MPI starts.
expect_failure "both splits" both.txt "$collage" "${args[@]}" --tensor-parallel --cache-parallel
grep -q "error: --cache-parallel, --data-parallel and --tensor-parallel are three ways to use the ranks" both.txt

# Rank 1 runs another model of the same sizes (the same arguments):
# refused before any step, as its sums would mix the two.
expect_failure "other model" other.txt \
  timeout 60 "${mpi[@]}" -n 1 "$collage" "${args[@]}" --tensor-parallel --mpi-timeout 20 \
  : -n 1 "$collage" generate "$dir/gpt2_style_tiny.onnx" --prompt-ids "$prompt" \
  --max-new-tokens 4 --tensor-parallel --mpi-timeout 20
grep -q "tensor parallel: the ranks were given different step graphs" other.txt

# Rank 1 starts MPI and says nothing: rank 0's wait ends at the deadline
# naming rank 1, and the run stops.
if make_silent_rank; then
  expect_failure "silent rank" silent.txt \
    timeout 50 "${mpi[@]}" -n 1 "$collage" "${args[@]}" --tensor-parallel --mpi-timeout 2 \
    : -n 1 ./silent
  grep -q "error: generate: tensor parallel: rank 0: .*nothing from rank 1 within 2 s (--mpi-timeout)" silent.txt
fi
echo "generate tensor parallel refusals: ok"
