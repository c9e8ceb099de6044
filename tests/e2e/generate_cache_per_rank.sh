#!/usr/bin/env bash
# End to end: a rank of a 2-rank cache-parallel or tensor-parallel run holds
# about half of the one-device KV cache (docs/decoding.md: each rank
# allocates its share only: CP its rows, TP its KV heads), and gives the
# one-device run's ids. On the tiny LLaMA-style decoder (2 KV heads), a
# 38-row cache (a prompt of 32 ids, 6 new): CP holds 20 of 39 rows a
# buffer (its 19 and the step's new one), TP one KV head of 2. Both after a
# prompt's pass and after --fill-rows. Exits 77 where mpirun is missing.
# Usage: generate_cache_per_rank.sh COLLAGE MODEL.onnx
set -euo pipefail
collage=$1
model=$2
source "$(dirname "$0")/mpi_ranks.sh"
mpi_setup generate_cache_per_rank
prompt=$(seq -s, 1 32)

"$collage" --threads 1 generate "$model" --prompt-ids "$prompt" --max-new-tokens 6 | tee one.out
whole=$(sed -n 's/^cache: 38 rows, \([0-9]*\) bytes preallocated.*/\1/p' one.out)
[[ -n "$whole" ]]

# The largest rank's share, in per cent of one device's, from the line
# "cache per rank: X MiB of Y MiB (P %; bytes: rank 0 A, rank 1 B, one device W)".
check() {
  local out=$1 low=$2 high=$3
  local line
  line=$(grep '^cache per rank: ' "$out")
  echo "$line"
  [[ "$line" =~ \(([0-9.]+)\ %\;\ bytes:\ rank\ 0\ ([0-9]+),\ rank\ 1\ ([0-9]+),\ one\ device\ ([0-9]+)\)$ ]]
  local share=${BASH_REMATCH[1]} r0=${BASH_REMATCH[2]} r1=${BASH_REMATCH[3]} one=${BASH_REMATCH[4]}
  [[ "$one" == "$whole" ]]
  awk -v s="$share" -v lo="$low" -v hi="$high" 'BEGIN { exit !(s >= lo && s <= hi) }'
  # Each rank's bytes, not only the largest's.
  awk -v a="$r0" -v b="$r1" -v w="$whole" -v hi="$high" \
    'BEGIN { exit !(100 * a / w <= hi && 100 * b / w <= hi) }'
  [[ "$(grep '^generated:' "$out")" == "$(grep '^generated:' one.out)" ]]
}

for split in cache-parallel tensor-parallel; do
  timeout 120 "${mpi[@]}" -n 2 "$collage" --threads 1 generate "$model" --prompt-ids "$prompt" \
    --max-new-tokens 6 --mpi-timeout 30 --no-db --$split | tee "$split.out"
done
check cache-parallel.out 50 52    # 20 of 39 rows: 51.3 %
check tensor-parallel.out 50 50   # 1 of 2 KV heads

# Filled rows: each rank fills its share only; the same ids on both splits.
for split in cache-parallel tensor-parallel; do
  timeout 120 "${mpi[@]}" -n 2 "$collage" --threads 1 generate "$model" --prompt-ids 5 \
    --fill-rows 60 --max-new-tokens 4 --mpi-timeout 30 --no-db --$split | tee "fill-$split.out"
  grep -q '^cache per rank: ' "fill-$split.out"
done
[[ "$(grep '^generated:' fill-cache-parallel.out)" == "$(grep '^generated:' fill-tensor-parallel.out)" ]]
echo "generate cache per rank: ok"
