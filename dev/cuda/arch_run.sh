#!/usr/bin/env bash
# arch_run.sh — the device calls of issue 38's "Gemma 3 and Qwen2/3 on the GPU" (branch
# gpu-arch, 2026-12-08), from the repository root on the device. Each stage is one `run`;
# the stages after 1 must follow while the machine is warm ($KEEP survives only that long).
#   dev/cuda/arch_run.sh 1 [PART]      build (sm_90, -Werror, 16 jobs) into $KEEP/build; keep a
#                                      Gemma part if given; test_arch; test_gpu_arch_ops (the
#                                      variants' kernels vs float64); test_gpu_arch (the tiny
#                                      random llama / qwen2 / qwen3 / gemma3 models, GPU vs CPU);
#                                      the Llama engine's own GPU tests without a model
#                                      (test_gpu_model_ops, test_gpu_verify_exact, test_gpu_batch,
#                                      test_gpu_ops): the regression check of the shared code
#   dev/cuda/arch_run.sh m [PART]      (after 1, warm) compute-sanitizer memcheck of
#                                      test_gpu_arch's gemma3 F32 and qwen2 Q8_0/Q4_0 runs
#   dev/cuda/arch_run.sh k PART        keep one more part of the Gemma GGUF
#   dev/cuda/arch_run.sh 2 PART [SHA]  keep the last part, join Gemma 3 270M (Q4_K_M) from
#                                      $KEEP/gemma.xz.part0?, check its sha256; test_gpu_gemma
#                                      (GPU vs CPU engine, 1024 + 1280 tokens, full and LOCKS;
#                                      again with fp16 as the 16-bit type, printed only);
#                                      `locks run` greedy, GPU beside CPU, and with --speculate 4
# Here (a call carries 64 MiB with the repository's ~15 MB; the GGUF is 253 MB):
#   mkdir -p .gpu-stage/arch
#   xz -6 -T2 -c ~/.cache/locks/gemma-3-270m-q4_k_m.gguf > .gpu-stage/arch/gemma.gguf.xz
#   split -b 45000000 -d .gpu-stage/arch/gemma.gguf.xz .gpu-stage/arch/gemma.xz.part
# then `run` stage 1 with .gpu-stage/arch/gemma.xz.part00 carried, `m` with part01, `k` with
# each middle part, `2` with the last (each call carrying its part: carry
# [".gpu-stage/arch/gemma.xz.partNN"]); 2's SHA defaults to the file's (below).
# Without the Gemma parts, stage 1 alone still checks the three architectures on the tiny
# models. Stage 1 also checks that the Llama path (SmolLM2 in q38_run.sh stage 2) was
# not disturbed only as far as the model-free tests reach.
set -uo pipefail
KEEP=${KEEP:-/root/keep}
OUT=${OUT:-/tmp/arch-out}
export KEEP OUT
stage=${1:-}
B=$KEEP/build
T0=$(date +%s)
W=$KEEP/logs$stage # the logs; $OUT gets them as one tarball
mkdir -p "$KEEP" "$OUT" "$W"
rc=0
. scripts/gpu-common.sh
GEMMA_SHA=${GEMMA_SHA:-a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818}

# run_test77 NAME TIMEOUT [ENV=VALUE...]: run_test, with exit 77 said as "skipped" (not a failure)
run_test77() {
  local t=$1 lim=$2; shift 2
  env "$@" timeout "$lim" "$B/$t" > "$W/$t.log" 2>&1; local r=$?
  if [ $r = 77 ]; then say "$t SKIPPED: $(tail -1 "$W/$t.log")"; return; fi
  say "$t exit $r: $(tail -1 "$W/$t.log")"
  [ $r = 0 ] || { rc=1; grep -m12 FAIL "$W/$t.log"; }
}

keep_part() { [ -n "${1:-}" ] && { cp "$1" "$KEEP/" || { echo "cannot keep $1"; exit 1; }; }; }

case "$stage" in
1)
  keep_part "${2:-}"
  { date -u; git log -1 --format='%h %s' 2>/dev/null | cut -c1-100; cat COMMIT 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1; } |
    tee "$W/env.log"
  say "build"
  if ! { cmake -S . -B "$B" -DLOCKS_CUDA=ON -DLOCKS_CUDA_ARCH=90 -DLOCKS_WERROR=ON -DCMAKE_BUILD_TYPE=Release &&
         cmake --build "$B" -j 16 --target locks_cli test_gpu_arch test_gpu_arch_ops test_gpu_gemma test_gpu_model_ops test_gpu_model \
           test_gpu_ops test_gpu_verify test_gpu_verify_exact test_gpu_batch test_arch; } > "$W/build.log" 2>&1; then
    grep -E "error" "$W/build.log" | head -30; say "BUILD FAILED"; exit 1
  fi
  say "built"
  run_test test_arch 60
  run_test77 test_gpu_arch_ops 120
  grep -E "FAIL|swa " "$W/test_gpu_arch_ops.log" | head -16
  run_test77 test_gpu_arch 240
  grep -E "^[a-z]|positions" "$W/test_gpu_arch.log" | head -40
  for t in test_gpu_model_ops test_gpu_verify_exact test_gpu_batch test_gpu_ops; do run_test "$t" 120; done
  ;;
m)
  keep_part "${2:-}"
  [ -x "$B/test_gpu_arch" ] || { echo "no $B/test_gpu_arch (stage 1 first, on a warm machine)"; exit 1; }
  for only in "gemma3 F32" "qwen2 Q8_0"; do
    tag=$(echo "$only" | tr ' /' '__')
    LOCKS_TEST_GPU_ARCH_ONLY="$only" timeout 270 compute-sanitizer --tool memcheck --leak-check no \
      "$B/test_gpu_arch" > "$W/memcheck_arch_$tag.log" 2>&1
    r=$?
    say "memcheck test_gpu_arch ($only) exit $r: $(grep -E 'ERROR SUMMARY' "$W/memcheck_arch_$tag.log")"
    [ $r = 0 ] || { rc=1; grep -m12 -E "FAIL|Invalid|out of bounds" "$W/memcheck_arch_$tag.log"; }
  done
  ;;
k)
  keep_part "${2:-}"
  ls -la "$KEEP"
  ;;
2)
  keep_part "${2:-}"
  M=$KEEP/gemma-3-270m-q4_k_m.gguf
  cat "$KEEP"/gemma.xz.part0? | xz -dc > "$M" || { echo "parts missing (cold machine?)"; exit 1; }
  echo "${3:-$GEMMA_SHA}  $M" | sha256sum -c - || exit 1
  export LOCKS_MODEL_GEMMA=$M
  run_test77 test_gpu_gemma 330
  grep -E "top-1|KL|dlogit|bit|ms/token|FAIL" "$W/test_gpu_gemma.log" | head -24
  # the A/B of the bf16 choice: fp16 as the 16-bit type, 400 decode steps (not a failure
  # of the stage: printed for the lead to weigh)
  mkdir -p "$W/f16"
  LOCKS_ENGINE_WTYPE=f16 LOCKS_TEST_GPU_GEMMA_DECODE=400 timeout 150 "$B/test_gpu_gemma" > "$W/f16/test_gpu_gemma.log" 2>&1
  say "test_gpu_gemma with LOCKS_ENGINE_WTYPE=f16 exit $?: $(tail -1 "$W/f16/test_gpu_gemma.log")"
  grep -E "top-1|KL|dlogit|nan|FAIL" "$W/f16/test_gpu_gemma.log" | head -12
  P="The three most important rules for writing reliable C code are"
  timeout 60 "$B/locks" run --backend cuda -m "$M" -p "$P" -n 32 --temp 0 > "$W/run_gpu.txt" 2> "$W/run_gpu.err"
  say "locks run --backend cuda exit $?"
  timeout 120 "$B/locks" run -m "$M" -p "$P" -n 32 --temp 0 -t 8 > "$W/run_cpu.txt" 2> "$W/run_cpu.err"
  say "locks run (CPU) exit $?"
  echo "--- GPU:"; cat "$W/run_gpu.txt"; echo; tail -3 "$W/run_gpu.err"
  echo "--- CPU:"; cat "$W/run_cpu.txt"; echo
  cmp -s "$W/run_gpu.txt" "$W/run_cpu.txt" && say "run: GPU and CPU greedy texts identical" || say "run: GPU and CPU texts differ"
  # exact speculation on the GPU (LOCKS drafts at 256, the verify pass, rollbacks through the
  # rings): greedy, so its text must be the GPU's dense (--selector full) one
  timeout 60 "$B/locks" run --backend cuda -m "$M" -p "$P" -n 32 --temp 0 --selector full \
    > "$W/run_gpu_full.txt" 2> "$W/run_gpu_full.err"
  timeout 60 "$B/locks" run --backend cuda -m "$M" -p "$P" -n 32 --temp 0 --speculate 4 --budget 256 \
    > "$W/run_gpu_spec.txt" 2> "$W/run_gpu_spec.err"
  say "locks run --backend cuda --speculate 4 exit $?"
  cmp -s "$W/run_gpu_spec.txt" "$W/run_gpu_full.txt" && say "run: GPU speculation = GPU dense (as it must)" ||
    { say "run: GPU speculation DIFFERS from GPU dense"; rc=1; tail -3 "$W/run_gpu_spec.err"; }
  LOCKS_ENGINE_WTYPE=f16 timeout 60 "$B/locks" run --backend cuda -m "$M" -p "$P" -n 32 --temp 0 > "$W/run_gpu_f16.txt" 2> "$W/run_gpu_f16.err"
  cmp -s "$W/run_gpu_f16.txt" "$W/run_cpu.txt" && say "run (GPU fp16): identical to the CPU's" || say "run (GPU fp16): differs from the CPU's"
  ;;
*) echo "stage 1, m, k or 2"; exit 2 ;;
esac
tar czf "$OUT/logs$stage.tar.gz" -C "$W" . 2>/dev/null
say "stage $stage done, rc $rc"
exit $rc
