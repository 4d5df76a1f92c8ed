#!/usr/bin/env bash
# gpu-model-check.sh — the GPU inference engine on the device, in two consecutive device
# calls (a call carries at most 64 MiB; SmolLM2's GGUF is 93.8 MiB, so it travels in two
# parts, each copied out of the tree to $KEEP, which a call within the machine's 30 s warm
# window still finds):
#   scripts/gpu-model-check.sh 1 PART1
#       keeps part 1; builds (sm_90, -Werror) into $KEEP; test_gpu_model_ops (every new
#       kernel against its CPU twin, graph == uncaptured on a random model); the whole-model
#       decode benchmark, Llama-3.1-8B shape, and its TTFT.
#   scripts/gpu-model-check.sh 2 PART2 SHA256
#       joins the parts (checks the sha256); test_gpu_model (SmolLM2 GPU vs CPU engine,
#       teacher-forced over 2304 tokens, full and LOCKS; graph == uncaptured); `locks demo
#       --backend cuda` (full and LOCKS@256 must both find the needle); `locks run --backend
#       cuda` with and without the graph (same greedy text); the GLM-4-9B shape benchmark.
# Logs go under $OUT. PREBUILT=DIR: use the binaries (locks, test_gpu_model_ops,
# test_gpu_model, built for sm_90 elsewhere) in DIR instead of building. QUICK=1: stage 1
# runs the op tests and only Llama's 32K decode and 128K TTFT; stage 2 skips the GLM bench.
# Split the model here with:
#   split -b 50M -d ~/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf smollm2.part
set -uo pipefail
OUT=${OUT:-/tmp/locks-gpu-model}
KEEP=${KEEP:-/root/keep}
mkdir -p "$OUT" "$KEEP"
cd "$(dirname "$0")/.."
BUILD=${PREBUILT:-$KEEP/build}
QUICK=${QUICK:-0}
stage=$1
cp "$2" "$KEEP/" || { echo "cannot keep $2"; exit 1; }
MODEL=$KEEP/SmolLM2-135M-Instruct.Q4_1.gguf
rc=0
if [ "$stage" = 1 ]; then
  { date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -1; } | tee "$OUT/env.log"
  echo "== build"
  if [ -n "${PREBUILT:-}" ]; then echo "prebuilt binaries in $BUILD"; elif ! { cmake -S . -B "$BUILD" -DLOCKS_CUDA=ON -DLOCKS_CUDA_ARCH=90 -DLOCKS_WERROR=ON -DCMAKE_BUILD_TYPE=Release &&
         cmake --build "$BUILD" -j "$(nproc)" --target locks_cli test_gpu_model_ops test_gpu_model; } > "$OUT/build.log" 2>&1; then
    grep -E "error" "$OUT/build.log" | head -30; echo "BUILD FAILED"; exit 1
  fi
  echo "== test_gpu_model_ops"
  timeout 120 "$BUILD/test_gpu_model_ops" 2>&1 | tee "$OUT/test_gpu_model_ops.log" | grep -vE "^  (rmsnorm|rope)" | head -60
  rc=${PIPESTATUS[0]}
  if [ "$QUICK" = 1 ]; then
    timeout 100 "$BUILD/locks" bench --backend cuda --model llama3-8b --context 32k --batch 1 --ttft 128k \
      --csv "$OUT/bench_llama_ttft.csv" 2>&1 | tee "$OUT/bench_llama_ttft.log"
    exit $rc
  fi
  echo "== bench llama3-8b"
  timeout 200 "$BUILD/locks" bench --backend cuda --model llama3-8b --context 32k,128k,256k,512k --batch 1 --ttft 32k \
    --csv "$OUT/bench_llama_b1.csv" 2>&1 | tee "$OUT/bench_llama.log"
  timeout 90 "$BUILD/locks" bench --backend cuda --model llama3-8b --context 32k,64k --batch 8 --ttft 0 \
    --csv "$OUT/bench_llama_b8.csv" 2>&1 | tee -a "$OUT/bench_llama.log"
  exit $rc
fi
# stage 2
cat "$KEEP"/smollm2.part00 "$KEEP"/smollm2.part01 > "$MODEL" || { echo "parts missing (cold machine?)"; exit 1; }
echo "$3  $MODEL" | sha256sum -c - || exit 1
export LOCKS_MODEL=$MODEL
echo "== test_gpu_model"
timeout 240 "$BUILD/test_gpu_model" 2>&1 | tee "$OUT/test_gpu_model.log"
rc=${PIPESTATUS[0]}
echo "== locks demo --backend cuda"
timeout 60 "$BUILD/locks" demo --backend cuda -m "$MODEL" 2>&1 | tee "$OUT/demo.log"
n=$(grep -c "found the needle" "$OUT/demo.log"); echo "needle found in $n of 2 answers"
[ "$n" -eq 2 ] || rc=1
echo "== locks run --backend cuda (graph, then kernel by kernel)"
P="The three most important rules for writing reliable C code are"
timeout 30 "$BUILD/locks" run --backend cuda -m "$MODEL" -p "$P" -n 48 --temp 0 > "$OUT/run_graph.txt" 2> "$OUT/run_graph.err"
timeout 30 "$BUILD/locks" run --backend cuda --no-graph -m "$MODEL" -p "$P" -n 48 --temp 0 > "$OUT/run_eager.txt" 2> "$OUT/run_eager.err"
cat "$OUT/run_graph.txt"; tail -4 "$OUT/run_graph.err"; tail -2 "$OUT/run_eager.err"
cmp -s "$OUT/run_graph.txt" "$OUT/run_eager.txt" && echo "run: graph and kernel-by-kernel texts identical" || { echo "run: texts DIFFER"; rc=1; }
timeout 30 "$BUILD/locks" run --backend cuda -m "$MODEL" -p "$P" -n 48 --temp 0.8 -s 7 2>&1 | tail -6
[ "${PIPESTATUS[0]}" = 0 ] || { echo "run --temp 0.8 FAILED"; rc=1; }
[ "$QUICK" = 1 ] && exit $rc
echo "== bench glm4-9b"
timeout 200 "$BUILD/locks" bench --backend cuda --model glm4-9b --context 32k,128k,256k,1024k --batch 1 --ttft 32k \
  --csv "$OUT/bench_glm_b1.csv" 2>&1 | tee "$OUT/bench_glm.log"
timeout 60 "$BUILD/locks" bench --backend cuda --model glm4-9b --context 128k --batch 8 --ttft 0 \
  --csv "$OUT/bench_glm_b8.csv" 2>&1 | tee -a "$OUT/bench_glm.log"
exit $rc
