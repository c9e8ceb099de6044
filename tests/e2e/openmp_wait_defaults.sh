#!/usr/bin/env bash
# collage starts with libgomp's pool spinning kOpenMpSpinCount times before
# it sleeps (core/ir/threading.h), and a user's own setting wins.
# OMP_DISPLAY_ENV makes libgomp print what it read when it loaded.
# Usage: openmp_wait_defaults.sh COLLAGE
set -euo pipefail
collage=$1
spin_of() { grep -o "GOMP_SPINCOUNT = '[0-9]*'" | tail -n 1; }
got=$(env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose "$collage" --help 2>&1 | spin_of)
test "$got" = "GOMP_SPINCOUNT = '10000'" || { echo "default: $got" >&2; exit 1; }
got=$(env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=77 OMP_DISPLAY_ENV=verbose "$collage" --help 2>&1 | spin_of)
test "$got" = "GOMP_SPINCOUNT = '77'" || { echo "user's GOMP_SPINCOUNT: $got" >&2; exit 1; }
got=$(env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=passive OMP_DISPLAY_ENV=verbose "$collage" --help 2>&1 | spin_of)
test "$got" = "GOMP_SPINCOUNT = '0'" || { echo "user's OMP_WAIT_POLICY: $got" >&2; exit 1; }
echo "OpenMP wait defaults ok"
