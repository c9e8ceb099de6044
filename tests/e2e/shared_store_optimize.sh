#!/usr/bin/env bash
# #27's "done when": two `collage optimize` processes with different local
# files, sharing one PostgreSQL (scratch_postgres.sh), started together,
# measure each kernel once between them; a third process with a third file
# then measures nothing. Exits 77 (ctest: skipped) without the server package.
# Usage: shared_store_optimize.sh COLLAGE MODEL.onnx
set -euo pipefail
collage=$1
model=$2
source "$(dirname "$0")/scratch_postgres.sh"

run() {  # run NAME: optimize with NAME.sqlite as the local file
  "$collage" optimize "$model" --op-level --db "$url" --local-db "$work/$1.sqlite" \
    -o "$work/$1.json" >"$work/$1.txt" 2>&1
}
run a & a=$!
run b & b=$!
wait $a && wait $b || { cat "$work/a.txt" "$work/b.txt"; exit 1; }
cat "$work/a.txt" "$work/b.txt"

# "measured N kernels in 8.2 s (M from the database, ...)", or "warm
# database: nothing measured, M distinct kernels from ...".
measured() { sed -n 's/^measured \([0-9]*\) kernels in.*/\1/p;T;q' "$work/$1.txt"; }
distinct() {
  sed -n -e 's/^measured \([0-9]*\) kernels in .* (\([0-9]*\) from the database.*/\1 \2/p' \
    -e 's/^warm database: nothing measured, \([0-9]*\) distinct.*/0 \1/p' "$work/$1.txt" |
    head -1 | awk '{print $1 + $2}'
}
na=$(measured a); nb=$(measured b); kernels=$(distinct a)
rows=$(psql -XAtq "$url" -c "select count(*) from collage_measurements")
machines=$(psql -XAtq "$url" -c "select count(distinct machine) from collage_measurements")
echo "kernels: $kernels; measured: a ${na:-0}, b ${nb:-0}; shared rows (copy costs too): $rows"
test "$kernels" -gt 0
test "$(distinct b)" = "$kernels"
test "$machines" = 1
# Each kernel measured once between them.
test $((${na:-0} + ${nb:-0})) = "$kernels"

run c
cat "$work/c.txt"
grep -q "warm database: nothing measured" "$work/c.txt"
echo "shared store optimize ok: two processes measured $kernels kernels once between them"
