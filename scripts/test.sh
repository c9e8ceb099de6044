#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), then runs the whole test suite:
# unit tests, the ONNX conformance suite and the end-to-end tests.
#   scripts/test.sh [ctest arguments, e.g. -L unit]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 900 "$@"
