#!/usr/bin/env bash
# gpu-verify.sh — the whole GPU verification of main in two consecutive device calls,
# from binaries built elsewhere for sm_90 (a tarball of build-cuda's locks, liblocks.so
# and test_gpu_*), with SmolLM2's GGUF carried in two parts (a call carries <= 64 MiB):
#   scripts/gpu-verify.sh 1 BIN.tar.xz PART0   every gpu test, the step bench (128K, 1M),
#                                              gpu-model-check.sh stage 1 (engine bench)
#   scripts/gpu-verify.sh 2 PART1 SHA256       gpu-model-check.sh stage 2 (SmolLM2 on the
#                                              GPU vs the CPU engine, demo, run),
#                                              test_gpu_verify (speculation), then
#                                              gpu-python-check.sh (torch, transformers)
# Make the inputs here with:
#   (cd build-cuda && tar cf - locks liblocks.so test_gpu_* | xz > BIN.tar.xz)
#   split -b 52M -d ~/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf smollm2.part
set -uo pipefail
OUT=${OUT:-/tmp/locks-gpu-verify}
export KEEP=${KEEP:-/root/keep} OUT
mkdir -p "$OUT" "$KEEP/bin"
cd "$(dirname "$0")/.."
B=$KEEP/bin
rc=0
if [ "$1" = 1 ]; then
  tar xJf "$2" -C "$B" || exit 1
  { date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/env.log"
  for t in test_gpu_ops test_gpu_truncate test_gpu_fault test_gpu_ext_pages test_gpu_model_ops; do
    timeout 150 "$B/$t" > "$OUT/$t.log" 2>&1; r=$?
    echo "== $t exit $r: $(tail -1 "$OUT/$t.log")"
    [ $r = 0 ] || { rc=1; grep -m8 FAIL "$OUT/$t.log"; }
  done
  LOCKS_CP_RANKS=1 timeout 60 "$B/test_gpu_cp" > "$OUT/test_gpu_cp.log" 2>&1 || { rc=1; echo "test_gpu_cp FAILED"; }
  echo "== test_gpu_cp: $(tail -1 "$OUT/test_gpu_cp.log")"
  echo "== locks bench --backend cuda (step, batch 1)"
  timeout 120 "$B/locks" bench --backend cuda --context 128k,1024k --batch 1 --csv "$OUT/step.csv" > "$OUT/step.log" 2>&1 || rc=1
  tail -12 "$OUT/step.log"
  PREBUILT=$B scripts/gpu-model-check.sh 1 "$3" || rc=1
  exit $rc
fi
PREBUILT=$B scripts/gpu-model-check.sh 2 "$2" "$3" || rc=1
echo "== test_gpu_verify (speculation on the GPU: verify kernel vs float64; SmolLM2 greedy == dense)"
LOCKS_MODEL=$KEEP/SmolLM2-135M-Instruct.Q4_1.gguf timeout 180 "$B/test_gpu_verify" > "$OUT/test_gpu_verify.log" 2>&1 ||
  { rc=1; grep -m8 FAIL "$OUT/test_gpu_verify.log"; }
grep -E "^(verify vs|greedy, all|sampled)" "$OUT/test_gpu_verify.log"; tail -1 "$OUT/test_gpu_verify.log"
ln -sfn "$B" build-verify
OUT=$OUT/py scripts/gpu-python-check.sh build-verify || rc=1
exit $rc
