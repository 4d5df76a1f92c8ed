#!/usr/bin/env bash
# s08_run.sh — the device calls of the session of 2026-12-08 (issue 38: the engine to 32
# sequences, Gemma 3 / Qwen2/3 layers, and the recheck of main after f9e9abc), from the
# repository root on the device. Each stage is one `run`; k, s and g must follow within the
# machine's 30 s warm window ($KEEP survives only that long).
#   dev/cuda/s08_run.sh t [FILE]   build every GPU test and locks_cli (sm_90, -Werror, 16
#                                  jobs) into $KEEP/build, keep FILE (a model part) in
#                                  $KEEP; run every GPU test that needs no model file
#                                  (test_gpu_arch and test_gpu_batch_wide under memcheck too)
#   dev/cuda/s08_run.sh k FILE     keep FILE in $KEEP
#   dev/cuda/s08_run.sh s FILE SHA SmolLM2 from $KEEP/smol2.xz.part0? (+ FILE): test_gpu_qgemv
#                                  on its tensors, test_gpu_model, test_gpu_verify, demo, run
#                                  beside the CPU, locks bench --gguf at batch 1..32
#   dev/cuda/s08_run.sh g FILE SHA Gemma 3 270M from $KEEP/gemma.xz.part0? (+ FILE): its GPU
#                                  test against the CPU engine, run beside the CPU
#   dev/cuda/batch_run.sh b        (after t, same warm machine) the batched benches
# The model parts, made here (a call carries 64 MiB with the repository's ~15 MB):
#   xz -6 -T2 -c ~/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf > .gpu-stage/q38/smollm2.gguf.xz
#   split -b 45300000 -d .gpu-stage/q38/smollm2.gguf.xz .gpu-stage/q38/smol2.xz.part
#   xz -6 -T2 -c ~/.cache/locks/gemma-3-270m-q4_k_m.gguf > .gpu-stage/q38/gemma.gguf.xz
#   split -b 48000000 -d .gpu-stage/q38/gemma.gguf.xz .gpu-stage/q38/gemma.xz.part
set -uo pipefail
KEEP=${KEEP:-/root/keep}
OUT=${OUT:-/tmp/s08-out}
export KEEP OUT
stage=${1:?stage t, k, s or g}
B=$KEEP/build
T0=$(date +%s)
W=$KEEP/logs$stage # the logs; $OUT gets them as one tarball (a call returns at most 8 files)
mkdir -p "$KEEP" "$OUT" "$W"
rc=0
. scripts/gpu-common.sh
keep() { [ -z "${1:-}" ] || cp "$1" "$KEEP/" || { echo "cannot keep $1"; exit 1; }; }
# join PREFIX FILE SHA: the model from $KEEP/PREFIX.xz.part0? into $KEEP/PREFIX.gguf, checked
join() {
  keep "$2"
  cat "$KEEP/$1".xz.part0? | xz -dc > "$KEEP/$1.gguf" || { echo "parts missing (cold machine?)"; exit 1; }
  echo "$3  $KEEP/$1.gguf" | sha256sum -c - || exit 1
}
late() { [ $(( $(date +%s) - T0 )) -gt "${CALL_S:-540}" ]; } # past this, skip what is left
case "$stage" in
t)
  keep "${2:-}"
  { date -u; git log -1 --format='%h %s' 2>/dev/null | cut -c1-100; cat COMMIT 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1; } |
    tee "$W/env.log"
  T="test_gpu_qgemv test_gpu_model_ops test_gpu_ops test_gpu_plan test_gpu_truncate test_gpu_fault test_gpu_ext_pages
     test_gpu_batch test_gpu_batch_wide test_gpu_serve_seqs test_gpu_verify_exact"
  grep -q "test_gpu_arch" CMakeLists.txt tests/CMakeLists.txt 2>/dev/null && T="test_gpu_arch $T"
  say "build"
  # shellcheck disable=SC2086
  if ! { cmake -S . -B "$B" -DLOCKS_CUDA=ON -DLOCKS_CUDA_ARCH=90 -DLOCKS_WERROR=ON -DCMAKE_BUILD_TYPE=Release &&
         cmake --build "$B" -j 16 --target locks_cli test_gpu_model test_gpu_verify $T; } > "$W/build.log" 2>&1; then
    grep -E "error" "$W/build.log" | head -30; say "BUILD FAILED"; tar czf "$OUT/logs$stage.tar.gz" -C "$W" .; exit 1
  fi
  say "built"
  for t in $T; do
    late && { say "skipped $t (late)"; rc=1; continue; }
    run_test "$t" 150
  done
  grep -E "positions|top-1" "$W/test_gpu_arch.log" 2>/dev/null | head -16
  # compute-sanitizer is slow: test_gpu_arch's gemma3 F32 model only, test_gpu_batch_wide --quick
  for t in test_gpu_arch test_gpu_batch_wide; do
    [ -x "$B/$t" ] || continue
    late && { say "skipped memcheck $t (late)"; continue; }
    LOCKS_TEST_GPU_ARCH_ONLY="gemma3 F32" timeout 150 compute-sanitizer --tool memcheck --leak-check no "$B/$t" \
      $([ $t = test_gpu_batch_wide ] && echo --quick) > "$W/memcheck_$t.log" 2>&1
    say "memcheck $t exit $?: $(grep -E 'ERROR SUMMARY' "$W/memcheck_$t.log")"
  done
  ;;
k)
  keep "${2:?FILE}"
  ls -la "$KEEP"
  ;;
s)
  join smol2 "${2:?FILE}" "${3:?SHA}"
  M=$KEEP/smol2.gguf
  export LOCKS_MODEL=$M
  run_test test_gpu_qgemv 120
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
  cat "$W/run_gpu.txt"; echo
  cmp -s "$W/run_gpu.txt" "$W/run_cpu.txt" && say "run: GPU and CPU greedy texts identical" || say "run: GPU and CPU texts differ"
  late || { say "bench --gguf SmolLM2"
    timeout 120 "$B/locks" bench --backend cuda --gguf "$M" --context 8k --batch 1,8,16,32 --ttft 0 \
      --csv "$W/bench_smollm2.csv" > "$W/bench_smollm2.log" 2>&1 || rc=1
    grep -E "ms/token|skipped" "$W/bench_smollm2.log" | cut -c1-150; }
  ;;
g)
  join gemma "${2:?FILE}" "${3:?SHA}"
  M=$KEEP/gemma.gguf
  export LOCKS_MODEL_GEMMA=$M
  run_test test_gpu_gemma 420
  grep -E "top-1|KL|dlogit" "$W"/test_gpu_gemma.log 2>/dev/null | head -20
  P="The capital of France is"
  timeout 60 "$B/locks" run --backend cuda -m "$M" -p "$P" -n 32 --temp 0 > "$W/run_gpu.txt" 2> "$W/run_gpu.err"
  timeout 120 "$B/locks" run -m "$M" -p "$P" -n 32 --temp 0 -t 8 > "$W/run_cpu.txt" 2> "$W/run_cpu.err"
  cat "$W/run_gpu.txt"; echo; tail -3 "$W/run_gpu.err"
  cmp -s "$W/run_gpu.txt" "$W/run_cpu.txt" && say "run: GPU and CPU greedy texts identical" || say "run: GPU and CPU texts differ"
  late || { timeout 120 "$B/locks" bench --backend cuda --gguf "$M" --context 8k,32k --batch 1,8 --ttft 0 \
      --csv "$W/bench_gemma.csv" > "$W/bench_gemma.log" 2>&1 || rc=1
    grep -E "ms/token|skipped" "$W/bench_gemma.log" | cut -c1-150; }
  ;;
*) echo "stage t, k, s or g"; exit 2 ;;
esac
tar czf "$OUT/logs$stage.tar.gz" -C "$W" . 2>/dev/null
say "stage $stage done, rc $rc"
exit $rc
