#!/usr/bin/env bash
# End to end: a graph pipeline of a small multi-branch model (two towers and
# a fusion head) run as MPI ranks, one per stage (collage run --pipeline
# --mpi under mpirun, docs/pipeline.md). Two parts (ctest runs each alone):
#  run:      every output equals the whole model's Session within the
#            tolerance the in-process pipeline uses (--verify); the report
#            names both stages;
#  refusals: a rank count that is not the stage count is refused, naming
#            both; a rank that fails (its stage's backend does not exist)
#            stops the run, naming its stage and rank; ranks given different
#            batches are refused; a rank that never answers fails the others'
#            wait at --mpi-timeout. No run hangs (each is under `timeout`).
# Exits 77 (ctest's SKIP_RETURN_CODE) where mpirun is missing. No timing is
# checked. Usage: pipeline_mpi.sh COLLAGE MODELS_DIR run|refusals
set -euo pipefail
collage=$1
models=$2
part=$3
source "$(dirname "$0")/mpi_ranks.sh"
mpi_setup pipeline_mpi
model="$models/two_tower_small.onnx"

# Two stages on two one-core devices, linked near free so the planner
# splits the model (the towers apart). Should the profile on a busy machine
# keep it whole, the file's one stage is cut in two at the middle of its
# nodes (in the model's order), so the test never depends on timing.
cat > fast.json <<'JSON'
{"devices": [{"id": "cpu0", "kind": "cpu", "cores": 1}, {"id": "cpu1", "kind": "cpu", "cores": 1}],
 "default_link": {"bandwidth_bytes_per_s": 1e12, "latency_s": 0}}
JSON
"$collage" pipeline "$model" --topology fast.json --batch 4 --micro-batch 1 --measure in-process \
  --runs 2 -o p.json > plan.txt
/usr/bin/python3 - <<'PY'
import json
f = json.load(open("p.json"))
if len(f["stages"]) == 1:
    nodes, half = f["stages"][0]["nodes"], len(f["stages"][0]["nodes"]) // 2
    f["stages"] = [dict(f["stages"][0], nodes=nodes[:half], devices=["cpu0"]),
                   dict(f["stages"][0], nodes=nodes[half:], devices=["cpu1"])]
    f["edges"] = [[0, 1]]
    json.dump(f, open("p.json", "w"))
    print("the plan kept the model whole; cut in two at the middle")
assert len(f["stages"]) == 2, f"expected 2 stages, got {len(f['stages'])}"
assert [s["devices"] for s in f["stages"]] == [["cpu0"], ["cpu1"]], f["stages"]
PY

if [[ $part == run ]]; then
# Two ranks: the outputs (sent to rank 0) match the whole model's Session.
timeout 60 "${mpi[@]}" -n 2 "$collage" run "$model" --pipeline p.json --mpi --batch 6 --verify \
  | tee run.txt
grep -q "^MPI: 2 rank(s), one stage each" run.txt
grep -q "^  stage 0 \[cpu0\]" run.txt
grep -q "^  stage 1 \[cpu1\]" run.txt
grep -q "samples/s, latency per sample" run.txt
# Each rank's Session peak, gathered on rank 0, in the memory per device.
grep -Eq "^memory per device: cpu0 weights [0-9]+ B, activations [1-9][0-9]* B; cpu1 weights [0-9]+ B, activations [1-9][0-9]* B" run.txt
grep -q "verify: every output of 6 micro-batch(es) matches" run.txt
echo "pipeline mpi run: ok"
exit 0
fi


# Three ranks for two stages: refused, naming both counts; no hang.
expect_failure "three ranks" three.txt \
  timeout 60 "${mpi[@]}" -n 3 "$collage" run "$model" --pipeline p.json --mpi
grep -q "p.json has 2 stage(s), one per MPI rank, but the run has 3 rank(s): start it with mpirun -n 2" three.txt

# Rank 1 fails building its stage: the run stops, naming stage and rank.
expect_failure "failing rank" fail.txt \
  timeout 60 "${mpi[@]}" -n 1 "$collage" run "$model" --pipeline p.json --mpi --batch 4 \
  : -n 1 "$collage" run "$model" --pipeline p.json --mpi --batch 4 --pipeline-backend nosuch
grep -q "error: pipeline: stage 1 \[cpu1\] (rank 1): .*nosuch" fail.txt

# Ranks given different batches: refused before any rank waits on a
# micro-batch no one sends.
expect_failure "different batches" batches.txt \
  timeout 60 "${mpi[@]}" -n 1 "$collage" run "$model" --pipeline p.json --mpi --batch 4 \
  : -n 1 "$collage" run "$model" --pipeline p.json --mpi --batch 8
grep -q "the ranks were given different numbers of micro-batches (4 to 8)" batches.txt

# Rank 1 starts MPI and then says nothing: rank 0's wait ends at the
# deadline with a message naming its stage, and the run stops.
if make_silent_rank; then
  expect_failure "silent rank" silent.txt \
    timeout 50 "${mpi[@]}" -n 1 "$collage" run "$model" --pipeline p.json --mpi --mpi-timeout 2 \
    : -n 1 ./silent
  grep -q "error: pipeline: stage 0 \[cpu0\] (rank 0): .*nothing within 2 s (--mpi-timeout)" silent.txt
fi
echo "pipeline mpi refusals: ok"
