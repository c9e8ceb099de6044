#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then runs the whole test suite:
# unit tests, the ONNX conformance suite and the end-to-end tests, one test
# per core at a time (CTEST_PARALLEL_LEVEL to change it). Timing is safe in
# parallel: whatever times kernels or plans takes the machine's timing lock
# (core/measure/machine_timing_lock.h), so timed work still runs alone; the
# rest (reference runs, checks, Python, servers starting) overlaps.
#   scripts/test.sh [ctest arguments, e.g. -L unit]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 900 -j "${CTEST_PARALLEL_LEVEL:-$(nproc)}" "$@"
