#!/usr/bin/env bash
# End to end: `collage link --mpi` under mpirun -n 2 ping-pongs 4 KiB to 16
# MiB between the two ranks, prints each size and the fit, and stores the
# link in the measurement database; `collage link` (in process) does the
# same between two core groups; a run of one rank is refused, naming what it
# needs. The link is then found by `collage run --pipeline --mpi`'s report
# ("simulated on the measured mpi link"). No timing is checked. Exits 77
# (ctest's SKIP_RETURN_CODE) where mpirun is missing.
# Usage: link_mpi.sh COLLAGE MODELS_DIR
set -euo pipefail
collage=$1
models=$2
source "$(dirname "$0")/mpi_ranks.sh"
mpi_setup link_mpi
export XDG_CACHE_HOME="$work/cache"  # the default database, for `run`'s lookup
db="$XDG_CACHE_HOME/collage-studio/measurements.sqlite"

timeout 60 "${mpi[@]}" -n 2 "$collage" link --mpi --db "$db" | tee mpi.txt
grep -q "^link mpi (.*|.*), pingpong-4K-16M-r30:" mpi.txt
for size in 4096 16384 65536 262144 1048576 4194304 16777216; do
  grep -Eq "^ +$size B: +[0-9.]+ us one way, fit +[0-9.]+ us" mpi.txt
done
grep -q "^fit: latency .* s, bandwidth .* B/s (largest error" mpi.txt
grep -q "^stored in $db" mpi.txt
if command -v sqlite3 >/dev/null; then
  test "$(sqlite3 "$db" "SELECT count(*) FROM links WHERE transport='mpi'")" = 1
fi

# In process, between the first two CPUs (needs two).
if [ "$(nproc)" -ge 2 ]; then
  timeout 60 "$collage" link --db "$db" | tee inproc.txt
  grep -q "^link in-process (cpus [0-9]*|[0-9]*)" inproc.txt
  grep -q "^stored in $db" inproc.txt
fi

# One rank: refused, naming what it needs; no hang.
if timeout 60 "${mpi[@]}" -n 1 "$collage" link --mpi --db "$db" > one.txt 2>&1; then
  echo "a one-rank link measurement should fail"; exit 1
fi
grep -q "needs two ranks (mpirun -n 2)" one.txt

# A pipeline run over MPI is simulated on the stored link.
cat > fast.json <<'JSON'
{"devices": [{"id": "cpu0", "kind": "cpu", "cores": 1}, {"id": "cpu1", "kind": "cpu", "cores": 1}],
 "default_link": {"bandwidth_bytes_per_s": 1e12, "latency_s": 0}}
JSON
"$collage" pipeline "$models/two_tower_small.onnx" --topology fast.json --batch 4 --micro-batch 1 \
  --measure in-process --runs 1 --no-db -o p.json > plan.txt
stages=$(grep -o '"in_flight"' p.json | wc -l)
timeout 120 "${mpi[@]}" -n "$stages" "$collage" run "$models/two_tower_small.onnx" --pipeline p.json \
  --mpi --batch 4 | tee run.txt
if [ "$stages" -ge 2 ]; then
  grep -q "simulated on the measured mpi link (" run.txt
fi
grep -q "from this run's stage costs" run.txt
echo "link_mpi: ok"
