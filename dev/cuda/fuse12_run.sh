#!/usr/bin/env bash
# (The fused merge is not in src/cuda/ on main, it lost: apply dev/cuda/fused_merge.patch first.)
# fuse12_run.sh — issue 12, the attention merge folded into the attention kernel: one
# device call from prebuilt binaries (BIN, default bin/). The GPU tests with the fused
# merge (LOCKS_CUDA_FUSED_MERGE=1; the default at 75fff94, where this ran; off since),
# test_gpu_ops once more with LOCKS_CUDA_FUSED_MERGE=0, then the
# step bench old path and fused path back to back (same binaries, same machine), then
# per-kernel times of one 128K step under ncu on the fused path (as run 25 of
# dev/cuda/step12_final.sh did for the old one).
# Output under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/fuse12}
B=${BIN:-bin}
mkdir -p "$OUT"
{ date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } > "$OUT/env.log" 2>&1
cat "$OUT/env.log"
trc=0
for t in test_gpu_ops test_gpu_model_ops test_gpu_fault test_gpu_truncate; do
  LOCKS_CUDA_FUSED_MERGE=1 timeout 60 "$B/$t" > "$OUT/$t.log" 2>&1 || trc=1
  echo "$t: $(tail -1 "$OUT/$t.log")"
done
LOCKS_CUDA_FUSED_MERGE=0 timeout 60 "$B/test_gpu_ops" > "$OUT/test_gpu_ops_merge0.log" 2>&1 || trc=1
echo "test_gpu_ops (LOCKS_CUDA_FUSED_MERGE=0): $(tail -1 "$OUT/test_gpu_ops_merge0.log")"
grep -E "FAIL" -B2 -A3 "$OUT"/test_gpu_*.log | head -30
for r in a; do
  for m in 0 1; do
    LOCKS_CUDA_FUSED_MERGE=$m timeout 60 "$B/locks" bench --backend cuda --context 32k,128k,1024k --batch 1,8 \
      --csv "$OUT/bench_m${m}_$r.csv" > "$OUT/bench_m${m}_$r.log" 2>&1
    echo "== bench LOCKS_CUDA_FUSED_MERGE=$m ($r) rc $?"
    grep ctx "$OUT/bench_m${m}_$r.log" | sed -E "s/ +/ /g" | cut -c1-150
  done
done
if command -v ncu > /dev/null; then
  for m in 1; do
    LOCKS_CUDA_FUSED_MERGE=$m timeout 30 ncu --clock-control none --cache-control all \
      --metrics gpu__time_duration.sum --print-units base --csv \
      "$B/locks" bench --backend cuda --shape glm4-9b,llama3-8b --context 128k --batch 1 --trials 3 --prefill 16k \
      > "$OUT/ncu_m$m.csv" 2> "$OUT/ncu_m$m.err"
    echo "== ncu LOCKS_CUDA_FUSED_MERGE=$m rc $?"
  done
fi
exit $trc
