#!/usr/bin/env bash
# The graph-level search fanned out (`collage optimize --target C
# --target-graph-level`) against the stand-in Slurm commands
# (slurm_standin/: the tasks run here, one after another), with a scratch
# PostgreSQL (scratch_postgres.sh; exits 77, ctest's skip, without it):
#   1. each generation's plans go out as one job array, each task's paired
#      run lands in collage_plan_runs, the plan written runs (`collage run
#      --verify`);
#   2. a generation deadline shorter than its tasks: the plans still out keep
#      their estimate, the search says so, and still ends with a plan.
# Usage: slurm_graph_level_standin.sh COLLAGE MODEL.onnx
set -euo pipefail
collage=$1
model=$2
source "$(dirname "$0")/scratch_postgres.sh"

standin=$(cd "$(dirname "$0")/slurm_standin" && pwd)
export COLLAGE_SBATCH=$standin/sbatch COLLAGE_SQUEUE=$standin/squeue COLLAGE_SCANCEL=$standin/scancel
export SLURM_STANDIN_DIR=$work/standin
mkdir -p "$SLURM_STANDIN_DIR"
echo fastnode >"$SLURM_STANDIN_DIR/feature"
shared=$work/shared

optimize() {  # optimize NAME [options]
  local name=$1
  shift
  rc=0
  "$collage" optimize "$model" --target fastnode --target-graph-level --db "$url" \
    --local-db "$work/$name.sqlite" --slurm-work-dir "$shared" --batch-size 64 --saturation 1 \
    -o "$work/$name.json" "$@" >"$work/$name.txt" 2>&1 || rc=$?
  cat "$work/$name.txt"
}

# 1. Generations as job arrays.
optimize fanned --budget 90s --generation-deadline 120s
test "$rc" = 0
jobs=$(grep -c "^graph-level: [0-9]* plans to Slurm job" "$work/fanned.txt" || true)
rows=$(psql -XAtq "$url" -c "select count(*) from collage_plan_runs")
echo "graph-level: $jobs job arrays, $rows plan runs stored by the tasks"
test "$jobs" -ge 1
test "$rows" -ge 1
grep -q "graph-level: .*Slurm jobs" "$work/fanned.txt"
"$collage" run "$model" --plan "$work/fanned.json" --verify

# 2. A deadline no task meets: every plan keeps its estimate, none replaces
#    the starting plan, and the plan is still written.
psql -XAtq "$url" -c "delete from collage_plan_runs" >/dev/null
touch "$SLURM_STANDIN_DIR/hold"  # the stand-in's tasks wait while this exists
optimize late --budget 20s --generation-deadline 3s
rm -f "$SLURM_STANDIN_DIR/hold"
test "$rc" = 0
grep -q "plans still out at the generation's deadline (they keep their estimate)" "$work/late.txt"
grep -q "no plan ran faster than the starting plan" "$work/late.txt"
test -s "$work/late.json"
echo "slurm graph-level stand-in ok: generations as job arrays, plan runs in the shared store, late plans kept their estimate"
