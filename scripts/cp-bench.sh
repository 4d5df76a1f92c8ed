#!/usr/bin/env bash
# cp-bench.sh — context-parallel LOCKS benchmark (issue 7): `locks bench --backend cuda
# --ranks N`, one process per GPU, NCCL unique id handed over through a file.
#
#   scripts/cp-bench.sh [N ...]        default N: 1 2 4 8 (those <= the GPUs present)
#   env: CONTEXT (1M,2M,4M)  BUDGET (2048)  STEPS (20)  BUILD (build)  OUT ($OUT or /tmp/cp-bench)
#
# Builds with CUDA + NCCL; for each N (1 first, the baseline) runs test_gpu_cp on N GPUs,
# then the benchmark; prints a table
# last: per-step time, time in collectives, bytes per rank, and the strong-scaling
# efficiency T(1) / (N * T(N)) at each context. Full logs per rank under $OUT.
# What it measures today (docs/CONTEXT_PARALLEL.md): each rank computes on a CPU cache
# shard (the host-staged step; there is no device-side CP step yet) and the three
# all-gathers per step run through NCCL on its GPU. NVLink multicast stays off.
set -euo pipefail
export NCCL_NVLS_ENABLE=0          # required: no NVLink multicast (device README)
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/cp-bench}
CONTEXT=${CONTEXT:-1M,2M,4M}
BUDGET=${BUDGET:-2048}
STEPS=${STEPS:-20}
mkdir -p "$OUT"

cmake -S . -B "$BUILD" -DLOCKS_CUDA=ON -DLOCKS_WERROR=ON > "$OUT/cmake.log"
grep -q 'locks: NCCL .*nccl' "$OUT/cmake.log" || { echo "cp-bench: NCCL not found (see $OUT/cmake.log)"; exit 1; }
cmake --build "$BUILD" -j "$(nproc)" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }

ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$ngpu" -ge 1 ] || { echo "cp-bench: no GPU"; exit 1; }
ranks=("$@")
[ ${#ranks[@]} -gt 0 ] || ranks=(1 2 4 8)
[ "${ranks[0]}" = 1 ] || ranks=(1 "${ranks[@]}")   # the baseline for the efficiency

results="$OUT/results.txt"
: > "$results"
for N in "${ranks[@]}"; do
  if [ "$N" -gt "$ngpu" ]; then echo "cp-bench: skip N=$N (only $ngpu GPUs)"; continue; fi
  # validate first: the NCCL step against the single-cache step on N GPUs
  if ! LOCKS_CP_RANKS=$N "$BUILD/test_gpu_cp" > "$OUT/test_gpu_cp-N$N.log" 2>&1; then
    echo "cp-bench: test_gpu_cp failed on $N ranks:"; tail -20 "$OUT/test_gpu_cp-N$N.log"; exit 1
  fi
  tail -1 "$OUT/test_gpu_cp-N$N.log"
  id="$OUT/nccl-id-$N"
  rm -f "$id" "$id.tmp"
  threads=$(( $(nproc) / N )); [ "$threads" -ge 1 ] || threads=1
  pids=()
  for ((r = 0; r < N; r++)); do
    "$BUILD/locks" bench --backend cuda --ranks "$N" --cp-rank "$r" --nccl-id "$id" \
      --context "$CONTEXT" --budget "$BUDGET" --steps "$STEPS" --threads "$threads" \
      > "$OUT/cp-N$N-rank$r.log" 2>&1 &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ "$rc" != 0 ]; then echo "cp-bench: N=$N failed:"; tail -5 "$OUT"/cp-N"$N"-rank*.log; exit 1; fi
  grep -h '^cp ' "$OUT"/cp-N"$N"-rank*.log >> "$results"
done

echo
echo "context-parallel LOCKS step, llama3-8b layer (32 q / 8 kv, d=128), budget $BUDGET, $(date -u +%F) $(git rev-parse --short HEAD)"
echo "(rank 0's medians; bytes are per rank per step; efficiency = T(1) / (N * T(N)))"
awk '
  function kv(k,   i, a) { for (i = 1; i <= NF; i++) { split($i, a, "="); if (a[1] == k) return a[2] } return "" }
  /^cp / && kv("rank") == 0 {
    n = kv("ranks"); c = kv("ctx"); t = kv("step_ms")
    if (n == 1) base[c] = t
    rows[++nr] = sprintf("%s %s %s %s %s %s %s", c, n, t, kv("comm_ms"), kv("bytes_meta") + kv("bytes_kv"), kv("bytes_sent"), kv("tokens_on_rank"))
  }
  END {
    printf "%10s %5s %10s %10s %14s %12s %12s %10s\n", "context", "ranks", "step_ms", "comm_ms", "bytes_read", "bytes_sent", "tok/rank", "effic."
    for (i = 1; i <= nr; i++) {
      split(rows[i], f, " ")
      e = (f[1] in base && f[3] > 0) ? sprintf("%.2f", base[f[1]] / (f[2] * f[3])) : "n/a"
      printf "%10s %5s %10s %10s %14s %12s %12s %10s\n", f[1], f[2], f[3], f[4], f[5], f[6], f[7], e
    }
  }' "$results"
