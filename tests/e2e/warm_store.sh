#!/usr/bin/env bash
# A ctest fixture (FIXTURES_SETUP): measures a model cold, as a user's first
# `optimize --op-level --baselines` does, and keeps the database as STORE
# (build/test-stores/MODEL.sqlite). The tests that only need the model's
# costs (the graph-level search, substitutions, optimize's warm half, the
# example) copy it into their own folder and start warm, so each of the
# model's kernels is measured once per test run, not once per test. The
# cold run's checks are here: it measured kernels and ran no graph-level
# search (--op-level).
# Usage: warm_store.sh COLLAGE MODEL.onnx STORE.sqlite
set -euo pipefail
collage=$1
model=$2
store=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db="$work/measurements.sqlite"
rm -f "$store"  # a store from an earlier build is never read

"$collage" optimize "$model" --db "$db" -o "$work/plan.json" --baselines --op-level | tee "$work/cold.txt"
grep -q "^measured [1-9][0-9]* kernels" "$work/cold.txt"
! grep -q "^graph-level: " "$work/cold.txt"

# One self-contained file (SQLite's backup: the WAL folded in), written
# beside the store and renamed, so no reader ever sees half of it.
mkdir -p "$(dirname "$store")"
/usr/bin/python3 - "$db" "$store.part" <<'PY'
import sqlite3, sys
src = sqlite3.connect(sys.argv[1])
dst = sqlite3.connect(sys.argv[2])
src.backup(dst)
dst.execute("PRAGMA journal_mode=DELETE")
dst.close()
src.close()
PY
mv "$store.part" "$store"
test -s "$store"
echo "warm store ok: $store"
