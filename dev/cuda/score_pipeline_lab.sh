#!/usr/bin/env bash
# score_pipeline_lab.sh — builds locks with several score-kernel pipeline shapes
# (SCORE_STAGES / SCORE_WARPS / SCORE_BLOCKS_PER_SM, see src/cuda/score.cu) and runs the
# Llama-shaped benchmark for each; prints one line per (variant, context, batch).
# Run on the GPU machine from the repository root. Output under $OUT (or /tmp).
set -uo pipefail
OUT=${OUT:-/tmp/score-lab}
mkdir -p "$OUT"
VARIANTS=(
  "A_s2_w4_b4:"
  "B_s3_w4_b2:-DSCORE_STAGES=3 -DSCORE_BLOCKS_PER_SM=2"
  "C_s4_w4_b2:-DSCORE_STAGES=4 -DSCORE_BLOCKS_PER_SM=2"
)
for v in "${VARIANTS[@]}"; do
  name=${v%%:*}; flags=${v#*:}
  b=build-lab-$name
  if ! { cmake -S . -B "$b" -DLOCKS_CUDA=ON -DLOCKS_CUDA_ARCH=90 -DLOCKS_WERROR=ON -DCMAKE_BUILD_TYPE=Release \
           "-DCMAKE_CUDA_FLAGS=$flags" && cmake --build "$b" -j "$(nproc)" --target locks_cli; } > "$OUT/build-$name.log" 2>&1; then
    echo "$name: BUILD FAILED"; tail -5 "$OUT/build-$name.log"; continue
  fi
  "$b/locks" bench --backend cuda --shape llama3-8b --context 128k,1024k --batch 1,8 2>&1 | tee "$OUT/bench-$name.log" |
    grep "ctx" | sed "s/^/$name /"
done
