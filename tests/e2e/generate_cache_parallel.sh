#!/usr/bin/env bash
# End to end: `collage generate --cache-parallel` under mpirun
# (docs/decoding.md): the KV cache split along the sequence across the
# ranks, each layer's decode attention over each rank's rows, the partials
# merged by log-sum-exp. Two parts (ctest runs each alone):
#  run:      on 2 and 3 ranks the ids equal the one-device run's (and
#            numpy's), and every step's logits are within the plan check's
#            float32 bound (1e-4 of the row's largest |logit|) of the
#            one-device run's; with the prompt a token a step (the
#            one-token export) the same ids;
#  refusals: a rank that fails (its model does not exist) stops the run
#            naming it; a rank killed is named (by mpirun) and the others
#            stopped; ranks given different prompts are refused, ranks at
#            different attentions too (one runs the prompt a token a step); a rank
#            that never answers fails the others' wait at --mpi-timeout,
#            naming it. No run hangs (each is under `timeout`).
# Exits 77 (ctest's SKIP_RETURN_CODE) where mpirun is missing. No timing is
# checked. Usage: generate_cache_parallel.sh COLLAGE DECODER_BASE run|refusals
# (DECODER_BASE.onnx and DECODER_BASE.greedy.txt, make_generate_model.py's).
set -euo pipefail
collage=$1
base=$2
part=$3
source "$(dirname "$0")/mpi_ranks.sh"
mpi_setup generate_cache_parallel
# The runs store themselves (decode_runs): in the work folder, not the user's database.
export XDG_CACHE_HOME=$PWD/cache
source "$(dirname "$0")/greedy_ids.sh"
read_greedy "$base.greedy.txt"
args=(generate "$base.onnx" --prompt-ids "$prompt" --max-new-tokens "$new")

if [[ $part == run ]]; then
"$collage" "${args[@]}" --logits-out one.txt | tee one.out
grep -q "^generated: $want$" one.out
for n in 2 3; do
  timeout 60 "${mpi[@]}" -n $n "$collage" "${args[@]}" --cache-parallel --mpi-timeout 20 \
    --logits-out cp$n.txt | tee cp$n.out
  grep -q "^cache parallel: $n rank(s), 2 decode attention kernel(s) split" cp$n.out
  grep -q "^generated: $want$" cp$n.out
  /usr/bin/python3 - one.txt cp$n.txt <<'PY'
import sys
import numpy as np
one, cp = (np.loadtxt(f, ndmin=2) for f in sys.argv[1:3])
assert one.shape == cp.shape, (one.shape, cp.shape)
for i, (a, b) in enumerate(zip(cp, one)):
    err, scale = np.abs(a - b).max(), np.abs(b).max()
    assert err <= 1e-4 * scale, f"token {i}: logits differ by {err} (largest {scale})"
print(f"{sys.argv[2]}: {len(one)} rows of logits within 1e-4 of the one-device run's")
PY
done
# The one-token export: the prompt runs a token a step, each step's
# attention split too; the same ids.
timeout 60 "${mpi[@]}" -n 2 "$collage" generate "${base}_one_token.onnx" --prompt-ids "$prompt" \
  --max-new-tokens "$new" --cache-parallel --mpi-timeout 20 | tee one_token.out
grep -q "^generated: $want$" one_token.out
grep -q "^prefill: .* (one step each: " one_token.out
echo "generate cache parallel run: ok"
exit 0
fi

# Rank 1's model does not exist: the run stops naming rank 1; no hang.
expect_failure "failing rank" fail.txt \
  timeout 60 "${mpi[@]}" -n 1 "$collage" "${args[@]}" --cache-parallel --mpi-timeout 20 \
  : -n 1 "$collage" generate nosuch.onnx --prompt-ids "$prompt" --max-new-tokens "$new" \
  --cache-parallel --mpi-timeout 20
grep -q "error: generate: rank 1: .*nosuch.onnx" fail.txt

# Rank 1 dies (killed): mpirun names it and stops rank 0, which would
# otherwise wait for its partials; no hang.
expect_failure "dying rank" died.txt \
  timeout 60 "${mpi[@]}" -n 1 "$collage" "${args[@]}" --cache-parallel --mpi-timeout 20 \
  : -n 1 sh -c 'sleep 0.2; kill -9 $$'
grep -q "process rank 1 .* exited on signal 9" died.txt

# Ranks given different prompts: refused before any step.
expect_failure "different prompts" differ.txt \
  timeout 60 "${mpi[@]}" -n 1 "$collage" "${args[@]}" --cache-parallel --mpi-timeout 20 \
  : -n 1 "$collage" generate "$base.onnx" --prompt-ids 1 --max-new-tokens "$new" \
  --cache-parallel --mpi-timeout 20
grep -q "cache parallel: the ranks were given different arguments" differ.txt

# Rank 1 runs the one-token export of the model (the same arguments, but
# its prompt runs a step a token): the first exchange finds the ranks at
# different attentions, and both say so before merging anything.
expect_failure "ranks apart" apart.txt \
  timeout 60 "${mpi[@]}" -n 1 "$collage" "${args[@]}" --cache-parallel --mpi-timeout 20 \
  : -n 1 "$collage" generate "${base}_one_token.onnx" --prompt-ids "$prompt" \
  --max-new-tokens "$new" --cache-parallel --mpi-timeout 20
grep -q "cache parallel: rank [01]: the attention partials of kernel 0 at row [03]: rank [01] sent those of kernel 0 at row [03]" apart.txt

# Rank 1 starts MPI and says nothing: rank 0's wait ends at the deadline
# naming rank 1, and the run stops.
if make_silent_rank; then
  expect_failure "silent rank" silent.txt \
    timeout 50 "${mpi[@]}" -n 1 "$collage" "${args[@]}" --cache-parallel --mpi-timeout 2 \
    : -n 1 ./silent
  grep -q "error: generate: cache parallel: rank 0: .*nothing from rank 1 within 2 s (--mpi-timeout)" silent.txt
fi
echo "generate cache parallel refusals: ok"
