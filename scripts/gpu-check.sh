#!/usr/bin/env bash
# gpu-check.sh — one command for the GPU machine: build for sm_90, run the GPU op tests
# (test_gpu_ops --perf), the CUDA benchmark (locks bench --backend cuda) and torch's
# cuDNN SDPA baseline, then print the joined table last. Full logs go under $OUT
# (the device tool's output folder; /tmp/locks-gpu-check otherwise).
#   GPU_CHECK_QUICK=1   fewer configurations (128K and 1M, batch 1) for a fast look
#   GPU_CHECK_SKIP_BENCH=1  tests only
#   SDPA_CSV=file       reuse that SDPA baseline CSV instead of running torch again
#   GPU_CHECK_NCU=1     also profile the main kernels with ncu (Llama 1M, one launch each)
#   GPU_CHECK_PREBUILT=1  use the binaries already in $BUILD (built elsewhere for sm_90)
#   GPU_CHECK_SKIP_TESTS=1  the benchmark and the table only
set -uo pipefail
OUT=${OUT:-/tmp/locks-gpu-check}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
export PYTHONUNBUFFERED=1
{
  date -u
  cat COMMIT 2>/dev/null || git log -1 --format='commit %H' 2>/dev/null || echo 'commit unknown'
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -2
} > "$OUT/env.log" 2>&1
cat "$OUT/env.log"

echo "== build"
if [ "${GPU_CHECK_PREBUILT:-0}" = 1 ]; then
  [ -x "$BUILD/locks" ] || { echo "GPU_CHECK_PREBUILT=1 but no $BUILD/locks"; exit 1; }
  echo "prebuilt binaries in $BUILD"
elif ! { cmake -S . -B "$BUILD" -DLOCKS_CUDA=ON -DLOCKS_CUDA_ARCH=90 -DLOCKS_WERROR=ON -DCMAKE_BUILD_TYPE=Release &&
       cmake --build "$BUILD" -j "$(nproc)" --target locks_cli test_gpu_ops test_gpu_model_ops test_gpu_truncate test_gpu_fault test_gpu_ext_pages test_gpu_plan; } > "$OUT/build.log" 2>&1; then
  grep -E "error|Error" "$OUT/build.log" | head -40
  echo "BUILD FAILED (log: $OUT/build.log)"
  exit 1
fi

trc=0
if [ "${GPU_CHECK_SKIP_TESTS:-0}" != 1 ]; then
echo "== test_gpu_ops --perf"
"$BUILD/test_gpu_ops" --perf > "$OUT/test_gpu_ops.log" 2>&1
trc=$?
grep -E "FAIL|shape|perf:|checks|  [a-z]" "$OUT/test_gpu_ops.log" | grep -vE "^  (summary|score|attend|step|graph|select)" | head -60
grep -E "FAIL" -A4 "$OUT/test_gpu_ops.log" | head -40
tail -1 "$OUT/test_gpu_ops.log"

echo "== test_gpu_model_ops (the forward pass's kernels, the decode graph; the real-model check is scripts/gpu-model-check.sh)"
"$BUILD/test_gpu_model_ops" > "$OUT/test_gpu_model_ops.log" 2>&1 || trc=1
grep -E "FAIL|checks" "$OUT/test_gpu_model_ops.log" | head -20
for t in test_gpu_truncate test_gpu_fault test_gpu_ext_pages test_gpu_plan; do  # issue 10 / 13 GPU tests
  "$BUILD/$t" > "$OUT/$t.log" 2>&1 || trc=1
  echo "== $t: $(tail -1 "$OUT/$t.log")"
done
fi

if [ "${GPU_CHECK_NCU:-0}" = 1 ]; then  # hardware counters of the main kernels (Firecracker machines)
  for k in ${GPU_CHECK_NCU_KERNELS:-score_kernel topk_kernel summary_kernel attend_kernel}; do
    ncu --clock-control none -k "regex:$k" -c 1 --section SpeedOfLight --section WarpStateStats \
        --section Occupancy --section SchedulerStats \
        "$BUILD/locks" bench --backend cuda --shape llama3-8b --context 1024k --batch 1 --trials 3 \
        > "$OUT/ncu_$k.txt" 2>&1
    echo "-- ncu $k"
    grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per|Stall|Block Limit" "$OUT/ncu_$k.txt" | head -24
  done
fi

if [ "${GPU_CHECK_SKIP_BENCH:-0}" = 1 ]; then exit $trc; fi
ARGS=()
if [ "${GPU_CHECK_QUICK:-0}" = 1 ]; then ARGS=(--context 128k,1024k --batch 1); fi
echo "== locks bench --backend cuda ${ARGS[*]}"
"$BUILD/locks" bench --backend cuda "${ARGS[@]}" --csv "$OUT/locks_bench.csv" 2>&1 | tee "$OUT/bench.log"
SARGS=()
if [ "${GPU_CHECK_QUICK:-0}" = 1 ]; then SARGS=(--context 128k,1024k --batch 1); fi
if [ -n "${SDPA_CSV:-}" ]; then  # reuse an earlier baseline run (saves device time)
  cp "$SDPA_CSV" "$OUT/sdpa.csv"
else
  echo "== torch SDPA baseline"
  python3 bench/sdpa_baseline.py --csv "$OUT/sdpa.csv" "${SARGS[@]}" 2>&1 | grep -v Warning | tee "$OUT/sdpa.log"
fi

echo "== table (test_gpu_ops exit $trc)"
python3 bench/gpu_table.py "$OUT/locks_bench.csv" "$OUT/sdpa.csv" | tee "$OUT/table.md"
exit $trc
