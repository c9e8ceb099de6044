#!/usr/bin/env bash
# #27's "done when": a Slurm job array measured a model's kernels and the plan
# was made from them. A real one-node cluster, started here and stopped on
# exit: munged with its own key and socket, slurmctld and slurmd on ports
# 16817/16818 with every path in a temporary folder, no cgroups (no
# cgroup.conf: Slurm 22.05 has no way to turn the plugin off in one), this
# machine as the node with the feature "collagetest". With a scratch
# PostgreSQL (scratch_postgres.sh), `collage optimize --target collagetest`
# submits the kernels as a job array, each task measures its batch on the
# node into the store, the plan is made from those rows and runs (`collage
# run --verify`). Exits 77 (ctest: skipped), saying why, where the packages
# are missing, it does not run as root (SlurmUser=root), or the daemons do
# not start. The stand-in twin: slurm_target_standin.sh.
# Usage: slurm_target_cluster.sh COLLAGE MODEL.onnx
set -euo pipefail
collage=$1
model=$2
skip() {
  echo "SKIP: $*"
  exit 77
}
for tool in munged slurmctld slurmd sbatch squeue scancel sinfo; do
  command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] ||
    skip "no $tool (the slurm-wlm and munge packages; scripts/setup.sh installs them)"
done
[[ $(id -u) == 0 ]] || skip "the one-node cluster runs its daemons as root (SlurmUser=root); run as root"
id munge >/dev/null 2>&1 || skip "no munge user (the munge package)"
source "$(dirname "$0")/scratch_postgres.sh"

# The cluster's folder: munged checks that every folder above its socket can
# be searched by all, so not inside $work.
cluster=$(mktemp -d /tmp/collage-slurm-e2e-XXXXXX)
chmod 755 "$cluster"
stop_cluster() {
  for pidfile in "$cluster/slurmd.pid" "$cluster/slurmctld.pid" "$cluster/munge/munged.pid"; do
    [[ -s "$pidfile" ]] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  rm -rf "$cluster"
}
trap 'stop_cluster; stop_scratch_postgres' EXIT
show_logs() {
  for log in "$cluster"/munge/munged.log "$cluster"/slurmctld.log "$cluster"/slurmd.log; do
    [[ -f "$log" ]] && { echo "--- $log"; tail -15 "$log"; }
  done
}

mkdir -p "$cluster/munge" "$cluster/state" "$cluster/spool"
chown munge:munge "$cluster/munge"
chmod 711 "$cluster/munge"
head -c 1024 /dev/urandom >"$cluster/munge/munge.key"
chown munge:munge "$cluster/munge/munge.key"
chmod 400 "$cluster/munge/munge.key"
runuser -u munge -- "$(command -v munged || echo /usr/sbin/munged)" \
  --key-file="$cluster/munge/munge.key" --socket="$cluster/munge/munge.socket" \
  --pid-file="$cluster/munge/munged.pid" --log-file="$cluster/munge/munged.log" \
  --seed-file="$cluster/munge/munged.seed" ||
  { show_logs; skip "munged did not start (its log above)"; }

node=$(hostname -s)
memory=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2))
cat >"$cluster/slurm.conf" <<CONF
ClusterName=collage-e2e
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$cluster/munge/munge.socket
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$cluster/state
SlurmdSpoolDir=$cluster/spool
SlurmctldPidFile=$cluster/slurmctld.pid
SlurmdPidFile=$cluster/slurmd.pid
SlurmctldLogFile=$cluster/slurmctld.log
SlurmdLogFile=$cluster/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=$node CPUs=$(nproc) RealMemory=$memory Feature=collagetest State=UNKNOWN
PartitionName=e2e Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$cluster/slurm.conf
"$(command -v slurmctld || echo /usr/sbin/slurmctld)" -f "$SLURM_CONF" ||
  { show_logs; skip "slurmctld did not start (its log above)"; }
"$(command -v slurmd || echo /usr/sbin/slurmd)" -f "$SLURM_CONF" ||
  { show_logs; skip "slurmd did not start (its log above)"; }
state=""
for _ in $(seq 150); do
  state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
  [[ "$state" == idle* ]] && break
  sleep 0.2
done
[[ "$state" == idle* ]] || { show_logs; skip "the node did not become idle in 30 s (sinfo: '${state:-nothing}')"; }
echo "one-node Slurm cluster up: $(sinfo -h -o '%P %N %T %f')"

rc=0
"$collage" optimize "$model" --target collagetest --db "$url" --local-db "$work/local.sqlite" \
  --slurm-work-dir "$work/shared" --batch-size 16 -o "$work/plan.json" >"$work/optimize.txt" 2>&1 || rc=$?
cat "$work/optimize.txt"
if [[ $rc != 0 ]]; then
  show_logs
  for log in "$work"/shared/run-*/task-*.log; do [[ -f "$log" ]] && { echo "--- $log"; cat "$log"; }; done
  exit 1
fi
grep -q "^submitted [0-9]* kernels to Slurm job [0-9]*" "$work/optimize.txt"
rows=$(psql -XAtq "$url" -c "select count(*) from collage_measurements")
machines=$(psql -XAtq "$url" -c "select string_agg(distinct machine, ',') from collage_measurements")
echo "the job's tasks stored $rows measurements (machine: $machines)"
test "$rows" -gt 0
test "$machines" = "$node"
grep -q "measured on --target collagetest" "$work/plan.json"
"$collage" run "$model" --plan "$work/plan.json" --verify

# The graph-level search fanned out: each generation one job array on the
# node (the kernels are in the store now: no kernel job), a short budget.
rc=0
"$collage" optimize "$model" --target collagetest --target-graph-level --db "$url" \
  --local-db "$work/local.sqlite" --slurm-work-dir "$work/shared" --budget 60s --saturation 1 \
  --generation-deadline 90s -o "$work/graph.json" >"$work/graph.txt" 2>&1 || rc=$?
cat "$work/graph.txt"
if [[ $rc != 0 ]]; then
  show_logs
  for log in "$work"/shared/plans-*/task-*.log; do [[ -f "$log" ]] && { echo "--- $log"; cat "$log"; }; done
  exit 1
fi
grep -q "^graph-level: [0-9]* plans to Slurm job [0-9]*" "$work/graph.txt"
runs=$(psql -XAtq "$url" -c "select count(*) from collage_plan_runs where machine = '$node'")
echo "the graph-level search's job arrays stored $runs plan runs"
test "$runs" -gt 0
"$collage" run "$model" --plan "$work/graph.json" --verify
echo "slurm cluster ok: a job array on a real one-node cluster measured the kernels the plan was made from, and a graph-level search ran its generations as job arrays"
