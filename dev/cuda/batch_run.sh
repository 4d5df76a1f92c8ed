#!/usr/bin/env bash
# batch_run.sh — the device calls of issue 38's "batched decode at scale" (the engine to 32
# sequences, branch gpu-batch), from the repository root on the device. Each stage is one
# `run` of ~400 s at most; b and 2 follow 1 within the machine's warm window ($KEEP
# survives only that long; a cold machine: run 1 again first).
#   dev/cuda/batch_run.sh 1          build (sm_90, -Werror, 16 jobs) into $KEEP/build;
#                                    test_gpu_batch_wide (16 and 32 sequences, every row bit
#                                    for bit its batch-1 decode: f16, bf16, Q8_0, Q4_0, Q4_K;
#                                    full and locks), its --quick under compute-sanitizer
#                                    memcheck, test_gpu_batch, test_gpu_serve_seqs,
#                                    test_gpu_verify_exact (the pieces of 8 kept the verify
#                                    exact)
#   dev/cuda/batch_run.sh b          locks bench --backend cuda (the build of 1): GLM-4-9B at
#                                    128K and 256K, batch 1, 8, 16, 32 (distinct pages: what
#                                    does not fit is printed "skipped"), the same with
#                                    --shared-prefix at batch 8, 16, 32, and the Llama-3.1-8B
#                                    shape at 128K batch 1, 8, 16 (distinct; past batch 1
#                                    skipped on either card: 16 GiB a sequence) and shared
#                                    at 128K and 256K batch 8, 16; then GLM-4-9B shared at
#                                    128K batch 8, 16, 32 with LOCKS_ENGINE_PAD=0 (one product
#                                    of n rows instead of pieces of 8: not batch invariant,
#                                    the A/B of what the pieces cost)
#   dev/cuda/batch_run.sh 2 PEERDIR  llama.cpp's llama-batched-bench beside ours in the same
#                                    call (bench/llamacpp-peer.sh batched glm4-9b: depth
#                                    128K, batch 1 and 8, -pps -no-kvu: each sequence its own
#                                    copy of the prompt's KV); PEERDIR as bench/llamacpp-
#                                    peer.sh pack leaves it (llama-bench.tar.xz holding
#                                    llama-batched-bench)
# From the CPU machine, the checkout of this branch (carry [".gpu-stage/peer"] for stage 2):
#   bench/llamacpp-peer.sh pack .gpu-stage/peer    (once; /work/peer/build-cuda/bin has
#                                                   llama-batched-bench)
#   run: dev/cuda/batch_run.sh 1                   (timeout_s 600)
#   run: dev/cuda/batch_run.sh b                   (timeout_s 600, within the warm window)
#   run: dev/cuda/batch_run.sh 2 .gpu-stage/peer   (timeout_s 600, within the warm window)
# What fits (bench's comment; the card decides, the bench prints "skipped" for the rest):
# GLM-4-9B distinct at 256K batch 8 needs ~88 GiB of KV beside 17.5 GiB of weights: an
# H200 (141 GB), not an H100 (80 GB), where --shared-prefix rows stand in for it.
# Results come back as $OUT/logsSTAGE.tar.gz (+ the CSVs and tables).
set -uo pipefail
KEEP=${KEEP:-/root/keep}
OUT=${OUT:-/tmp/batch-out}
export KEEP OUT
stage=${1:?stage 1, b or 2}
B=$KEEP/build
T0=$(date +%s)
W=$KEEP/logs$stage # the logs; $OUT gets them as one tarball (a call returns at most 8 files)
mkdir -p "$KEEP" "$OUT" "$W"
rc=0
. scripts/gpu-common.sh
case "$stage" in
1)
  { date -u; git log -1 --format='%h %s' 2>/dev/null | cut -c1-100; cat COMMIT 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1; } |
    tee "$W/env.log"
  say "build"
  if ! { cmake -S . -B "$B" -DLOCKS_CUDA=ON -DLOCKS_CUDA_ARCH=90 -DLOCKS_WERROR=ON -DCMAKE_BUILD_TYPE=Release &&
         cmake --build "$B" -j 16 --target locks_cli test_gpu_batch_wide test_gpu_batch test_gpu_serve_seqs \
           test_gpu_verify_exact; } > "$W/build.log" 2>&1; then
    grep -E "error" "$W/build.log" | head -30; say "BUILD FAILED"; tar czf "$OUT/logs$stage.tar.gz" -C "$W" .; exit 1
  fi
  say "built"
  run_test test_gpu_batch_wide 150
  grep -E "^  " "$W/test_gpu_batch_wide.log" | head -24
  timeout 150 compute-sanitizer --tool memcheck --leak-check no "$B/test_gpu_batch_wide" --quick \
    > "$W/memcheck_batch_wide.log" 2>&1
  say "memcheck test_gpu_batch_wide --quick exit $?: $(grep -E 'ERROR SUMMARY' "$W/memcheck_batch_wide.log")"
  for t in test_gpu_batch test_gpu_serve_seqs test_gpu_verify_exact; do run_test "$t" 90; done
  ;;
b)
  [ -x "$B/locks" ] || { echo "no $B/locks: run stage 1 first on this warm machine"; exit 1; }
  nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader | tee "$W/env.log"
  # the benches: each line a (model, batch, context); skipped ones print one line
  bench() { # bench TAG TIMEOUT ARGS...
    local tag=$1 lim=$2; shift 2
    say "bench $tag: $*"
    timeout "$lim" "$B/locks" bench --backend cuda "$@" --ttft 0 --csv "$W/bench_$tag.csv" > "$W/bench_$tag.log" 2>&1 ||
      { rc=1; tail -5 "$W/bench_$tag.log"; }
    grep -E "ms/token|skipped" "$W/bench_$tag.log" | cut -c1-150
  }
  bench glm 120 --model glm4-9b --context 128k,256k --batch 1,8,16,32
  bench glm_shared 100 --model glm4-9b --context 128k,256k --batch 8,16,32 --shared-prefix --trials 5
  bench llama 50 --model llama3-8b --context 128k --batch 1,8,16
  bench llama_shared 80 --model llama3-8b --context 128k,256k --batch 8,16 --shared-prefix --trials 5
  LOCKS_ENGINE_PAD=0 bench glm_pad0 50 --model glm4-9b --context 128k --batch 8,16,32 --shared-prefix --trials 5
  cp "$W"/bench_*.csv "$OUT/" 2>/dev/null
  ;;
2)
  export LOCKS=$B/locks DEADLINE=$(( T0 + ${CALL_S:-400} )) LOGS=$W/peer
  [ -x "$LOCKS" ] || { echo "no $LOCKS: run stage 1 first on this warm machine"; exit 1; }
  bench/llamacpp-peer.sh batched glm4-9b "${2:?PEERDIR}" || rc=1
  ;;
*) echo "stage 1, b or 2"; exit 2 ;;
esac
tar czf "$OUT/logs$stage.tar.gz" -C "$W" . 2>/dev/null
say "stage $stage done, rc $rc"
exit $rc
