#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then runs the whole test suite:
# unit tests, the ONNX conformance suite and the end-to-end tests, one test
# per core at a time (CTEST_PARALLEL_LEVEL to change it). The tests that
# time kernels or plans are RUN_SERIAL (tests/CMakeLists.txt): they run
# alone, as a user's optimisation does; the rest overlaps.
#   scripts/test.sh [ctest arguments, e.g. -L unit]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 900 -j "${CTEST_PARALLEL_LEVEL:-$(nproc)}" "$@"
