#!/usr/bin/env bash
# `collage optimize --target` against the stand-in Slurm commands
# (slurm_standin/: the tasks run here, in turn), so the job-array path is
# covered where Slurm's daemons cannot start. With a scratch PostgreSQL
# (scratch_postgres.sh; exits 77, ctest's skip, without the server package):
#   0. no shared store, or a feature no node has: a clear error;
#   1. a task dies before it starts: the message names the job and the task,
#      what the other tasks stored is kept, and no plan is made from too little
#      (or one is, from what the store has);
#   2. the same command again: only the kernels still missing are submitted,
#      and the plan runs (`collage run --verify`);
#   3. again: every kernel is in the store, no job at all;
#   4. Ctrl-C while a job waits: scancel runs, the command ends with 130.
# Usage: slurm_target_standin.sh COLLAGE MODEL.onnx
set -euo pipefail
collage=$1
model=$2
source "$(dirname "$0")/scratch_postgres.sh"

standin=$(cd "$(dirname "$0")/slurm_standin" && pwd)
export COLLAGE_SBATCH=$standin/sbatch COLLAGE_SQUEUE=$standin/squeue COLLAGE_SCANCEL=$standin/scancel
export SLURM_STANDIN_DIR=$work/standin
mkdir -p "$SLURM_STANDIN_DIR"
echo fastnode >"$SLURM_STANDIN_DIR/feature"
shared=$work/shared  # the folder the "nodes" share with this machine

optimize() {  # optimize NAME [options]: --target fastnode, output in NAME.txt, exit status in $rc
  local name=$1
  shift
  rc=0
  "$collage" optimize "$model" --target fastnode --db "$url" --local-db "$work/local.sqlite" \
    --slurm-work-dir "$shared" --batch-size 8 -o "$work/$name.json" "$@" >"$work/$name.txt" 2>&1 || rc=$?
  cat "$work/$name.txt"
}
submitted() { sed -n 's/^submitted \([0-9]*\) kernels to Slurm job.*/\1/p;T;q' "$work/$1.txt"; }

# 0. Without a shared store there is nowhere for the nodes to write.
rc=0
"$collage" optimize "$model" --target fastnode --db "$work/file.sqlite" -o "$work/nostore.json" \
  >"$work/nostore.txt" 2>&1 || rc=$?
cat "$work/nostore.txt"
test "$rc" != 0
grep -q "needs a team's shared store (--db postgresql://...)" "$work/nostore.txt"
# A constraint the cluster lacks: sbatch's own message.
rc=0
"$collage" optimize "$model" --target slownode --db "$url" --local-db "$work/local.sqlite" \
  --slurm-work-dir "$shared" -o "$work/nofeature.json" >"$work/nofeature.txt" 2>&1 || rc=$?
cat "$work/nofeature.txt"
test "$rc" != 0
grep -q "Invalid feature specification" "$work/nofeature.txt"

# 1. Task 1 dies before it starts.
echo 1 >"$SLURM_STANDIN_DIR/fail-tasks"
optimize first
rm "$SLURM_STANDIN_DIR/fail-tasks"
grep -q "Slurm job [0-9]* task 1 ended without starting its batch of 8 kernels" "$work/first.txt"
all=$(submitted first)
rows=$(psql -XAtq "$url" -c "select count(*) from collage_measurements")
echo "first job: $all kernels submitted, $rows rows stored by the tasks that ran"
test "$rows" -gt 0
test "$all" -gt 8
# The task's files are kept for reading.
ls "$shared"/run-*/task-1.log >/dev/null

# 2. Again: only what task 1 did not measure goes out; the plan runs.
optimize second
test "$rc" = 0
again=$(submitted second)
echo "second job: $again kernels submitted"
test "$again" = 8
grep -q "measured on --target fastnode" "$work/second.json"
"$collage" run "$model" --plan "$work/second.json" --verify

# 3. Again: nothing missing, no job.
optimize third
test "$rc" = 0
grep -q "nothing submitted to Slurm" "$work/third.txt"
cmp <(grep -v created_at "$work/second.json") <(grep -v created_at "$work/third.json") ||
  echo "(the third plan differs from the second only in what the file records)"

# 4. Ctrl-C while the job waits (held by the stand-in): scancel, exit 130.
psql -XAtq "$url" -c "delete from collage_measurements" >/dev/null
rm -rf "$shared/targets"  # a target not seen yet: everything is submitted
touch "$SLURM_STANDIN_DIR/hold"
"$collage" optimize "$model" --target fastnode --db "$url" --local-db "$work/local2.sqlite" \
  --slurm-work-dir "$shared" -o "$work/cancel.json" >"$work/cancel.txt" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -q "^submitted" "$work/cancel.txt" && break
  sleep 0.1
done
kill -INT $pid
rc=0
wait $pid || rc=$?
rm -f "$SLURM_STANDIN_DIR/hold"
cat "$work/cancel.txt"
test "$rc" = 130
grep -q "cancelled Slurm job [0-9]* (scancel)" "$work/cancel.txt"
ls "$SLURM_STANDIN_DIR"/*.cancelled >/dev/null
test ! -e "$work/cancel.json"
echo "slurm stand-in ok: a failed task named, only the missing kernels resubmitted, cancel ran scancel"
