# Sourced by the MPI end-to-end tests (pipeline_mpi.sh, generate_cache_parallel.sh,
# link_mpi.sh): what each needs to start ranks on one machine, and to check
# that a bad run ends with an error rather than a hang. Not run on its own.
#
#   mpi_setup NAME      skip (exit 77, ctest's SKIP_RETURN_CODE) where mpirun
#                       is missing; make a work folder, removed on exit, and
#                       cd into it; let Open MPI run as root (containers, CI)
#                       over shared memory only (no network is probed); set
#                       the array mpi=(mpirun --oversubscribe): two ranks on
#                       a machine with fewer cores need it.
#   expect_failure LABEL OUT CMD...
#                       run CMD (give it its own `timeout`), its output to
#                       OUT, then print OUT; fail unless CMD failed, and not
#                       by the timeout (124: a hang).
#   make_silent_rank    compile ./silent, a rank that starts MPI and then says
#                       nothing for 60 s; false where mpicc is missing.

mpi_setup() {
  command -v mpirun >/dev/null || { echo "$1: no mpirun here, skipped"; exit 77; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cd "$work"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
  mpi=(mpirun --oversubscribe)
}

expect_failure() {
  local label=$1 out=$2 rc=0
  shift 2
  "$@" > "$out" 2>&1 || rc=$?
  cat "$out"
  [[ $rc -ne 0 && $rc -ne 124 ]] || { echo "$label: exit $rc" >&2; exit 1; }
}

make_silent_rank() {
  command -v mpicc >/dev/null || return 1
  cat > silent.c <<'C'
#include <mpi.h>
#include <unistd.h>
int main(int argc, char** argv) { MPI_Init(&argc, &argv); sleep(60); MPI_Finalize(); return 0; }
C
  mpicc -o silent silent.c
}
