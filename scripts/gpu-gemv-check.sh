#!/usr/bin/env bash
# gpu-gemv-check.sh — one device call for the decode products of gemv.cu (issue 11): the
# kernel tests, then the whole-model decode bench with the decode products through
# gemv.cu and through cuBLAS + the small kernels (LOCKS_CUDA_GEMV=1 / 0) side by side on
# the same caches, at depth ~0 (1K) and 32K, batch 1 and 8.
#   scripts/gpu-gemv-check.sh BIN.tar.xz [QUICK]
# BIN.tar.xz: build-cuda's locks, liblocks.so and test_gpu_model_ops, built for sm_90:
#   (cd build-cuda && tar cf - locks liblocks.so* test_gpu_model_ops | xz > BIN.tar.xz)
set -uo pipefail
OUT=${OUT:-/tmp/locks-gemv-check}
mkdir -p "$OUT" /root/keep/bin
B=/root/keep/bin
tar xJf "$1" -C "$B" || exit 1
export LD_LIBRARY_PATH=$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{ date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/env.log"
rc=0
timeout 150 "$B/test_gpu_model_ops" > "$OUT/test_gpu_model_ops.log" 2>&1 || rc=1
echo "== test_gpu_model_ops if [ -n "${NCU:-}" ] && command -v ncu > /dev/null; then
  # per-kernel DRAM throughput of layer 0's four decode products (graph nodes)
  for g in 2; do
    LOCKS_CUDA_GEMV=$g timeout 120 ncu --kernel-name "regex:gemv|gemm" --launch-count 4 \
      --section SpeedOfLight --section Occupancy "$B/locks" bench --backend cuda --model llama3-8b --context 1k \
      --batch 1 --ttft 0 --trials 3 > "$OUT/ncu-gemv$g.log" 2>&1
    grep -E "^  [a-zA-Z_].*\(|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Registers Per|Block Limit" \
      "$OUT/ncu-gemv$g.log" | head -70
  done
fi
exit $rc: $(tail -1 "$OUT/test_gpu_model_ops.log")"
grep -m12 -i "fail\|gemv:" "$OUT/test_gpu_model_ops.log"
LOCKS_CUDA_GEMV=0 timeout 150 "$B/test_gpu_model_ops" > "$OUT/test_gpu_model_ops.cublas.log" 2>&1 || rc=1
echo "== test_gpu_model_ops (LOCKS_CUDA_GEMV=0): $(tail -1 "$OUT/test_gpu_model_ops.cublas.log")"
ctx=${CTX:-1k,32k}
timeout 240 "$B/locks" bench --backend cuda --model llama3-8b --context "$ctx" --batch ${BATCH:-1,2,4,8} --ttft 0 --gemv 2,1,0 \
  --csv "$OUT/llama.csv" > "$OUT/llama.log" 2>&1 || rc=1
cat "$OUT/llama.log"
if [ "${2:-}" != QUICK ]; then
  timeout 200 "$B/locks" bench --backend cuda --model glm4-9b --context 1k,32k --batch 1 --ttft 0 --gemv 2,1,0 \
    --csv "$OUT/glm.csv" > "$OUT/glm.log" 2>&1 || rc=1
  cat "$OUT/glm.log"
fi
if [ -n "${NCU:-}" ] && command -v ncu > /dev/null; then
  # per-kernel DRAM throughput of layer 0's four decode products (graph nodes)
  for g in 2; do
    LOCKS_CUDA_GEMV=$g timeout 120 ncu --kernel-name "regex:gemv|gemm" --launch-count 4 \
      --section SpeedOfLight --section Occupancy "$B/locks" bench --backend cuda --model llama3-8b --context 1k \
      --batch 1 --ttft 0 --trials 3 > "$OUT/ncu-gemv$g.log" 2>&1
    grep -E "^  [a-zA-Z_].*\(|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Registers Per|Block Limit" \
      "$OUT/ncu-gemv$g.log" | head -70
  done
fi
exit $rc
