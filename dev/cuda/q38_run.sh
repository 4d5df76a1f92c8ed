#!/usr/bin/env bash
# q38_run.sh — the device calls of issue 38's quantized-weights work (2026-12-07), from the
# repository root on the device. Each stage is one `run`; 2 and 3 must follow within the
# machine's 30 s warm window ($KEEP survives only that long).
#   dev/cuda/q38_run.sh 1 PART0     build (sm_90, -Werror, 16 jobs) into $KEEP/build; keep
#                                   SmolLM2's first part; test_gpu_qgemv (+ memcheck), the
#                                   GPU tests without a model; the 16-bit Llama-shape bench
#                                   (the regression check of the segmented products)
#   dev/cuda/q38_run.sh 2 PART1 SHA join SmolLM2 (Q4_1: now read by qgemv.cu); test_gpu_qgemv
#                                   on its real tensors, test_gpu_model (GPU vs CPU engine),
#                                   test_gpu_verify (speculation bit for bit), demo, run;
#                                   locks bench --gguf on it
#   dev/cuda/q38_run.sh 3 PEERDIR   the Q4_K_M comparison: bench/llamacpp-peer.sh with
#                                   QUANT=Q4_K_M (llama-quantize, llama-bench, ours --gguf)
#   dev/cuda/q38_run.sh p           build; test_gpu_qgemv and its --perf (the 8B layer's
#                                   products in Q4_K_M's types, GB/s); test_gpu_model_ops
# Here (a call carries 64 MiB with the repository's ~15 MB; the GGUF is 98 MB, 90 MB as xz):
#   xz -6 -T2 -c ~/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf > .gpu-stage/q38/smollm2.gguf.xz
#   split -b 30200000 -d .gpu-stage/q38/smollm2.gguf.xz .gpu-stage/q38/smollm2.xz.part
# The session's sequence (each call within the warm window of the last):
#   a .gpu-stage/peer .gpu-stage/q38/smollm2.xz.part00   (build, kernel tests, --perf, Q4_K_M peer)
#   k .gpu-stage/q38/smollm2.xz.part01                   (keep the second part)
#   2 .gpu-stage/q38/smollm2.xz.part02 SHA256            (the real-model tests)
set -uo pipefail
KEEP=${KEEP:-/root/keep}
OUT=${OUT:-/tmp/q38-out}
export KEEP OUT
stage=$1
B=$KEEP/build
T0=$(date +%s)
W=$KEEP/logs$stage # the logs; $OUT gets them as one tarball (a call returns at most 8 files)
mkdir -p "$KEEP" "$OUT" "$W"
rc=0
. scripts/gpu-common.sh
case "$stage" in
1)
  cp "$2" "$KEEP/" || { echo "cannot keep $2"; exit 1; }
  { date -u; git log -1 --format='%h %s' 2>/dev/null | cut -c1-100; cat COMMIT 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1; } |
    tee "$W/env.log"
  say "build"
  if ! { cmake -S . -B "$B" -DLOCKS_CUDA=ON -DLOCKS_CUDA_ARCH=90 -DLOCKS_WERROR=ON -DCMAKE_BUILD_TYPE=Release &&
         cmake --build "$B" -j 16 --target locks_cli test_gpu_qgemv test_gpu_model_ops test_gpu_model test_gpu_ops \
           test_gpu_verify test_gpu_verify_exact test_gpu_batch test_gpu_plan; } > "$W/build.log" 2>&1; then
    grep -E "error" "$W/build.log" | head -30; say "BUILD FAILED"; exit 1
  fi
  say "built"
  run_test test_gpu_qgemv 120
  grep -E "^(type|  |perf|skip)" "$W/test_gpu_qgemv.log" | head -40
  timeout 120 compute-sanitizer --tool memcheck --leak-check no "$B/test_gpu_qgemv" > "$W/memcheck_qgemv.log" 2>&1
  say "memcheck test_gpu_qgemv exit $?: $(grep -E 'ERROR SUMMARY' "$W/memcheck_qgemv.log")"
  for t in test_gpu_model_ops test_gpu_verify_exact test_gpu_verify test_gpu_batch test_gpu_plan test_gpu_ops; do run_test "$t" 150; done
  say "bench llama3-8b (random bf16, the 16-bit path)"
  timeout 150 "$B/locks" bench --backend cuda --model llama3-8b --context 32,128k --batch 1 --ttft 0 \
    --csv "$W/bench_llama16.csv" > "$W/bench_llama16.log" 2>&1 || rc=1
  grep -E "ms/token|tok/s" "$W/bench_llama16.log" | head -12
  ;;
2)
  cp "$2" "$KEEP/" || { echo "cannot keep $2"; exit 1; }
  M=$KEEP/SmolLM2-135M-Instruct.Q4_1.gguf
  cat "$KEEP"/smollm2.xz.part0? | xz -dc > "$M" || { echo "parts missing (cold machine?)"; exit 1; }
  echo "$3  $M" | sha256sum -c - || exit 1
  export LOCKS_MODEL=$M
  run_test test_gpu_qgemv 120
  grep -E "real|skip" "$W/test_gpu_qgemv.log" | head -20
  run_test test_gpu_model 240
  grep -E "top-1|KL|dlogit|bit" "$W/test_gpu_model.log" | head -20
  run_test test_gpu_verify 180
  grep -E "^(verify vs|greedy, all|sampled)" "$W/test_gpu_verify.log"
  say "demo"
  timeout 60 "$B/locks" demo --backend cuda -m "$M" > "$W/demo.log" 2>&1
  n=$(grep -c "found the needle" "$W/demo.log"); say "needle found in $n of 2 answers"; [ "$n" -eq 2 ] || rc=1
  P="The three most important rules for writing reliable C code are"
  timeout 30 "$B/locks" run --backend cuda -m "$M" -p "$P" -n 48 --temp 0 > "$W/run_gpu.txt" 2> "$W/run_gpu.err"
  timeout 60 "$B/locks" run -m "$M" -p "$P" -n 48 --temp 0 -t 8 > "$W/run_cpu.txt" 2> "$W/run_cpu.err"
  cat "$W/run_gpu.txt"; echo; tail -3 "$W/run_gpu.err"
  cmp -s "$W/run_gpu.txt" "$W/run_cpu.txt" && say "run: GPU and CPU greedy texts identical" || say "run: GPU and CPU texts differ"
  say "bench --gguf SmolLM2"
  timeout 120 "$B/locks" bench --backend cuda --gguf "$M" --context 32,8k --batch 1,8 --ttft 0 \
    --csv "$W/bench_smollm2.csv" > "$W/bench_smollm2.log" 2>&1 || rc=1
  grep -E "ms/token|tok/s" "$W/bench_smollm2.log" | head -12
  ;;
3)
  export LOCKS=$B/locks DEADLINE=$(( $(date +%s) + ${CALL_S:-560} ))
  QUANT=Q4_K_M bench/llamacpp-peer.sh device llama3-8b "$2" || rc=1
  ;;
a)
  # one cold call: build, the kernel tests and --perf, then the Q4_K_M peer (QUANT flow)
  [ -n "${3:-}" ] && { cp "$3" "$KEEP/" || { echo "cannot keep $3"; exit 1; }; }
  tar xJf "$2/llama-bench.tar.xz" -C "$KEEP" && (cd "$KEEP/llamacpp" && for l in lib*.so.*.*; do
    [ -e "$l" ] && ln -sf "$l" "${l%.*.*}"; done; ls -la)   # libgomp.so.1.0.0 -> libgomp.so.1
  "$0" p || rc=1
  export LOCKS=$B/locks DEADLINE=$(( T0 + ${CALL_S:-585} )) REPS=${REPS:-2} LOGS=$W/peer
  QUANT=Q4_K_M bench/llamacpp-peer.sh device llama3-8b "$2" || rc=1
  cp "$OUT"/*.json "$OUT"/*.csv "$OUT"/*.md "$W/" 2>/dev/null
  ;;
h)
  # the Q4_K_M peer alone on a cold machine (the H200 run): build locks_cli, then the QUANT flow
  tar xJf "$2/llama-bench.tar.xz" -C "$KEEP" && (cd "$KEEP/llamacpp" && for l in lib*.so.*.*; do
    [ -e "$l" ] && ln -sf "$l" "${l%.*.*}"; done)
  { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; } | tee "$W/env.log"
  L=$B/locks
  if [ -f "$2/locks-bin.tar.xz" ]; then # a locks built elsewhere for sm_90 (tools' sha256 in the log)
    mkdir -p "$KEEP/bin" && tar xJf "$2/locks-bin.tar.xz" -C "$KEEP/bin" && L=$KEEP/bin/locks
    sha256sum "$L" | tee -a "$W/env.log"
  else
    say "build"
    if ! { cmake -S . -B "$B" -DLOCKS_CUDA=ON -DLOCKS_CUDA_ARCH=90 -DLOCKS_WERROR=ON -DCMAKE_BUILD_TYPE=Release &&
           cmake --build "$B" -j 16 --target locks_cli; } > "$W/build.log" 2>&1; then
      grep -E "error" "$W/build.log" | head -30; say "BUILD FAILED"; exit 1
    fi
    say "built"
  fi
  export LOCKS=$L DEADLINE=$(( T0 + ${CALL_S:-400} )) REPS=${REPS:-2} LOGS=$W/peer
  QUANT=Q4_K_M bench/llamacpp-peer.sh device llama3-8b "$2" || rc=1
  cp "$OUT"/*.json "$OUT"/*.csv "$OUT"/*.md "$W/" 2>/dev/null
  ;;
k)
  cp "$2" "$KEEP/" || { echo "cannot keep $2"; exit 1; }
  ls -la "$KEEP"
  ;;
p)
  [ -n "${2:-}" ] && { cp "$2" "$KEEP/" || { echo "cannot keep $2"; exit 1; }; }
  { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; } | tee "$W/env.log"
  say "build"
  if ! { cmake -S . -B "$B" -DLOCKS_CUDA=ON -DLOCKS_CUDA_ARCH=90 -DLOCKS_WERROR=ON -DCMAKE_BUILD_TYPE=Release &&
         cmake --build "$B" -j 16 --target locks_cli test_gpu_qgemv test_gpu_model_ops test_gpu_model test_gpu_verify; } > "$W/build.log" 2>&1; then
    grep -E "error" "$W/build.log" | head -30; say "BUILD FAILED"; exit 1
  fi
  say "built"
  run_test test_gpu_qgemv 120
  timeout 120 "$B/test_gpu_qgemv" --perf 2>&1 | tee "$W/perf.log" | grep -E "^perf|FAIL"
  run_test test_gpu_model_ops 150
  ;;
*) echo "stage 1, 2, 3 or p"; exit 2 ;;
esac
tar czf "$OUT/logs$stage.tar.gz" -C "$W" . 2>/dev/null
say "stage $stage done, rc $rc"
exit $rc
