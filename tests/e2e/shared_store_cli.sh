#!/usr/bin/env bash
# The shared measurement store from the command line (docs/shared-measurements.md):
# `collage db stats|push|pull --db postgresql://...` against a real PostgreSQL
# started here (scratch_postgres.sh: a temporary folder, a Unix socket only,
# stopped on exit); the messages for an unreachable server and for a store
# with a newer schema. Exits 77 (ctest: skipped) without the server package.
# Usage: shared_store_cli.sh COLLAGE
set -euo pipefail
collage=$1
source "$(dirname "$0")/scratch_postgres.sh"

# An unreachable server: named, without the password; nothing else happens.
if "$collage" db stats --db "postgresql://bob:hunter2@/collage?host=$work/none" >"$work/out.txt" 2>&1; then
  echo "FAIL: stats on an unreachable server succeeded"; exit 1
fi
cat "$work/out.txt"
grep -q "cannot reach the server" "$work/out.txt"
grep -q "postgresql://bob:\*\*\*@/collage" "$work/out.txt"
if grep -q hunter2 "$work/out.txt"; then echo "FAIL: the password was shown"; exit 1; fi

# The first client creates the schema; stats shows both halves.
"$collage" db stats --db "$url" --local-db "$work/a.sqlite" | tee "$work/stats.txt"
grep -q "^shared: .*0 rows, 0 kernels, 0 machine" "$work/stats.txt"
test "$(psql -XAtq "$url" -c 'select max(version) from collage_schema')" = 3

# A measurement appended as a machine would, then pulled into a new file and
# pushed back (nothing new: it came from the store).
psql -Xq "$url" -c "insert into collage_measurements (fingerprint_id, backend, backend_version,
  signature, machine, status, median_ns, samples) values ('fp', 'native', '1', 'sig', 'other-host', 'ok', 1000, 9)"
"$collage" db pull --db "$url" --local-db "$work/b.sqlite" | tee "$work/pull.txt"
grep -q "^pull: 1 rows copied to $work/b.sqlite, 0 already there" "$work/pull.txt"
pulled=$("$collage" db pull --db "$url" --local-db "$work/b.sqlite")
grep -q "0 rows copied .* 1 already there" <<<"$pulled"
"$collage" db push --db "$url" --local-db "$work/b.sqlite" | tee "$work/push.txt"
grep -q "^push: 0 rows copied from $work/b.sqlite, 0 already there" "$work/push.txt"
"$collage" db export --db "$work/b.sqlite" -o "$work/b.csv"
grep -q "^native,1," "$work/b.csv"

# A store with a newer schema is refused, with the reason.
psql -Xq "$url" -c "update collage_schema set version = 99"
if "$collage" db stats --db "$url" --local-db "$work/a.sqlite" >"$work/out.txt" 2>&1; then
  echo "FAIL: a store with a newer schema was used"; exit 1
fi
cat "$work/out.txt"
grep -q "has schema version 99, newer than this program's 3" "$work/out.txt"
echo "shared store command line ok"
