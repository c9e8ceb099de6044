#!/usr/bin/env bash
# End to end: runs on 2 ranks stored and shown beside the simulation
# (docs/decoding.md, "Measured runs on N ranks"). On the tiny LLaMA-style
# decoder, with a database of its own:
#  - `mpirun -n 2 collage generate --cache-parallel` prints the attention's
#    part of the step and stores the run (CP, 2 ranks, the prompt's rows);
#  - `--data-parallel`: each rank the whole generation on its own, the same
#    ids; rank 0 prints each rank's median step and stores the run (DP);
#  - the same on 1 rank, against which decode-parallel gives the attention's gain;
#  - `--cache-parallel --fill-rows` (no prompt's pass) stores a run at the
#    filled rows; `--no-db` stores nothing;
#  - `collage decode-parallel --db` prints each stored run under its device
#    count and context, beside its simulation and the error.
# No time is checked. Exits 77 where mpirun is missing.
# Usage: generate_parallel_runs.sh COLLAGE MODEL.onnx
set -euo pipefail
collage=$1
model=$2
source "$(dirname "$0")/mpi_ranks.sh"
mpi_setup generate_parallel_runs
db=$PWD/runs.sqlite
prompt=$(seq -s, 1 32)
args=(generate "$model" --prompt-ids "$prompt" --max-new-tokens 6 --mpi-timeout 30 --db "$db")

timeout 120 "${mpi[@]}" -n 2 "$collage" --threads 1 "${args[@]}" --cache-parallel | tee cp.out
grep -q "^cache parallel: 2 rank(s)" cp.out
grep -Eq "^attention: median [0-9.]+ ms a step \(the decode attention kernels, their exchange included: [0-9.]+ ms\), rest [0-9.]+ ms; 1 thread\(s\) a rank$" cp.out
grep -q "^stored: CP, 2 rank(s), 32 rows, in $db$" cp.out

# The same on one rank: the attention's gain is read off against it.
timeout 120 "${mpi[@]}" -n 1 "$collage" --threads 1 "${args[@]}" --cache-parallel | tee cp1.out
grep -q "^stored: CP, 1 rank(s), 32 rows, in $db$" cp1.out

timeout 120 "${mpi[@]}" -n 2 "$collage" --threads 1 "${args[@]}" --data-parallel | tee dp.out
grep -Eq "^data parallel: 2 rank\(s\), each running the whole generation on its own \(median step per rank: rank 0 [0-9.]+ ms, rank 1 [0-9.]+ ms\); [0-9.]+ tokens/s over the ranks$" dp.out
grep -q "^stored: DP, 2 rank(s), 32 rows, in $db$" dp.out
# The same ids: data parallelism runs the same generation on each rank.
[[ "$(grep '^generated:' cp.out)" == "$(grep '^generated:' dp.out)" ]]

timeout 120 "${mpi[@]}" -n 2 "$collage" --threads 1 generate "$model" --prompt-ids 5 \
  --fill-rows 48 --max-new-tokens 4 --cache-parallel --mpi-timeout 30 --db "$db" | tee fill.out
grep -q "^prefill: none: 48 cache rows filled with seeded values (seed 1, each rank its rows)" fill.out
grep -q "^stored: CP, 2 rank(s), 48 rows, in $db$" fill.out

timeout 120 "${mpi[@]}" -n 2 "$collage" --threads 1 "${args[@]}" --cache-parallel --no-db \
  | tee nodb.out
! grep -q "^stored:" nodb.out

"$collage" --threads 1 decode-parallel "$model" --devices 1,2 --contexts 32,48 \
  --measure-contexts 16,64 --repeats 1 --db "$db" | tee sim.out
grep -Eq "^  measured CP, 2 rank\(s\) x 1 thread\(s\), 1 request\(s\) at 32 rows, 5 step\(s\): step [0-9.]+ ms \(simulated [0-9.]+ ms, [-+][0-9.]+ %\), attention [0-9.]+ ms, exchange [0-9.]+ ms \(simulated [0-9.]+ ms, measured, 2 run\(s\)\), [0-9.]+ tokens/s \(simulated [0-9.]+, [-+][0-9.]+ %\)$" sim.out
# The two CP runs on 2 ranks (32 and 48 rows) price CP's simulated exchange
# on 2 devices; the rest keeps the link.
grep -Eq "^exchanges: CP on 2 devices priced by 2 measured run\(s\): [0-9.]+ ms \+ [-0-9.e]+ ms a row an exchange \(one a layer\); other splits and device counts by the link$" sim.out
grep -Eq "^  measured DP, 2 rank\(s\) x 1 thread\(s\), 2 request\(s\) at 32 rows, 5 step\(s\): .*\(simulated [0-9.]+, [-+][0-9.]+ %\); median step per rank: rank 0 " sim.out
grep -Eq "^  measured CP, 2 rank\(s\) x 1 thread\(s\), 1 request\(s\) at 48 rows, 4 step\(s\)" sim.out
# The 1-rank CP run under the 1-device table, and the 2-rank run's gain on it.
[[ $(grep -c "^  measured " sim.out) == 4 ]]
[[ $(awk '/^context 32:/{c=1} c && /plan for 1 device/{q=1} c && /plan for 2 device/{q=0}
     c && /^  measured CP, 1 rank/{print q; exit}' sim.out) == 1 ]]
grep -q "^  measured CP, 1 rank(s) x 1 thread(s), 1 request(s) at 32 rows" sim.out
grep -Eq "^  CP attention on 2 ranks against 1: [0-9.]+x \([0-9.]+ ms against [0-9.]+ ms\)$" sim.out
# Under the 2-device table of its context, not the 1-device one.
[[ $(awk '/^context 32:/{c=1} /^context 48:/{c=0} c && /plan for 2 device/{p=1} c && /^  measured CP, 2 rank/{print p; exit}' sim.out) == 1 ]]

# Another database: no run.
"$collage" --threads 1 decode-parallel "$model" --devices 2 --contexts 32 \
  --measure-contexts 16,64 --repeats 1 --db "$PWD/empty.sqlite" | tee none.out
grep -q "^No run on ranks is stored for this model" none.out
! grep -q "^  measured " none.out
grep -q "^exchanges: priced by the link (no run on ranks with an exchange is stored)$" none.out
echo "generate parallel runs: ok"
