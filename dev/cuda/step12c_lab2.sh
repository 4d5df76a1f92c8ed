#!/usr/bin/env bash
# (The fused top-k and the LOCKS_CUDA_TOPK_* switches are not in src/cuda/: no clear win, see
# bench/RESULTS.md, branch step12c; apply dev/cuda/topk_fused.patch and build first.)
# step12c_lab2.sh — issue 12, second device call of branch step12c from prebuilt binaries
# (BIN, default bin/): the GPU tests (test_gpu_ops with the defaults, whose shapes cycle the
# top-k paths, then with 512- and 256-thread top-k blocks everywhere; test_gpu_plan,
# test_gpu_truncate, test_gpu_fault), then the step bench for the variants below back to back
# (same binaries, same machine): the old path (mass.cu + topk.cu) and the fused group mass +
# top-k, each with 1024-, 512- and 256-thread top-k blocks. Everything lands in one
# $OUT/step12c2.tar.gz (the device tool returns at most 8 files); a summary on stdout.
set -uo pipefail
OUT=${OUT:-/tmp/step12c2}
B=${BIN:-bin}
W=$(mktemp -d)
{ date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } > "$W/env.log" 2>&1
cat "$W/env.log"
trc=0
run_t() { # tag log env... binary
  local tag=$1 log=$2; shift 2
  env "$@" > "$W/$log" 2>&1 || trc=1
  echo "$tag: $(tail -1 "$W/$log")"
  grep -E "FAIL" -B3 -A3 "$W/$log" | head -12
}
run_t test_gpu_ops ops.log timeout 60 "$B/test_gpu_ops"
run_t "test_gpu_ops TOPK_THREADS=512" ops512.log LOCKS_CUDA_TOPK_THREADS=512 timeout 60 "$B/test_gpu_ops"
run_t "test_gpu_ops TOPK_THREADS=256" ops256.log LOCKS_CUDA_TOPK_THREADS=256 timeout 60 "$B/test_gpu_ops"
for t in test_gpu_plan test_gpu_truncate test_gpu_fault; do
  run_t "$t" "$t.log" timeout 60 "$B/$t"
done
VARIANTS=(
  "old:LOCKS_CUDA_TOPK_FUSE=0"
  "old512:LOCKS_CUDA_TOPK_FUSE=0 LOCKS_CUDA_TOPK_THREADS=512"
  "old256:LOCKS_CUDA_TOPK_FUSE=0 LOCKS_CUDA_TOPK_THREADS=256"
  "fused:LOCKS_CUDA_TOPK_FUSE=-1"
  "fused512:LOCKS_CUDA_TOPK_THREADS=512"
  "fused256:LOCKS_CUDA_TOPK_THREADS=256"
  "fused-ppc4k:LOCKS_CUDA_TOPK_PPC=4096"
  "old-again:LOCKS_CUDA_TOPK_FUSE=0"
)
for v in "${VARIANTS[@]}"; do
  name=${v%%:*}
  envs=${v#*:}
  # shellcheck disable=SC2086 # envs is a list of NAME=VALUE words
  env $envs timeout 60 "$B/locks" bench --backend cuda --shape glm4-9b,llama3-8b --context 32k,128k,256k,1024k \
    --batch 1,8 --trials 7 --csv "$W/bench-$name.csv" > "$W/bench-$name.log" 2>&1
  echo "== $name ($envs) rc $?"
  grep "ctx" "$W/bench-$name.log" | sed -E "s/ +/ /g; s/\| dense [^|]*//; s/MB\/step.*//" | cut -c1-110
done
tar -czf "$OUT/step12c2.tar.gz" -C "$W" .
exit $trc
