#!/usr/bin/env bash
# dev/cuda/summ12_run.sh — summ12's device call (issue 12: the summary build). Binaries
# come prebuilt in bin.tar.xz beside the tree root (build-cuda's locks, test_gpu_ops,
# test_gpu_model_ops, test_gpu_fault for sm_90). The GPU tests with the new kernel
# (default) and test_gpu_ops with the others (LOCKS_CUDA_SUMMARY_OLD=1: the old kernel,
# =2: at commit 1ff7a9a only, where the default kept the keys 16-bit in shared memory and
# =2 selected the fp32 layout, the kernel src/cuda/summary.cu keeps now; a value the
# binary does not know runs its default); then, the variants one after
# the other in this call: the 128K-prefill summary build of `locks bench --backend cuda`
# (ranks 8 q, 15 q, 8 f32; SUMM12_VARIANTS, default "0 2 1") and the engine's mid-page /
# page-fill token times (SUMM12_MODELS, default "llama3-8b glm4-9b", context 32768, the
# new kernel and the old). Logs: $OUT/logs.tar.xz.
# The old kernel was deleted in issue 23 (LOCKS_CUDA_SUMMARY_OLD is read by nothing now):
# this script is the record of run summ12, at the commits it names.
set -uo pipefail
FOUT=${OUT:-/tmp/summ12}
L=/tmp/summ12w
B=/tmp/summ12b
mkdir -p "$L" "$FOUT" "$B"
tar xJf bin.tar.xz -C "$B" || exit 1
{ date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; } | tee "$L/env.log"
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
rc=0
for t in test_gpu_ops test_gpu_model_ops test_gpu_fault; do
  timeout 120 "$B/$t" > "$L/$t.log" 2>&1 || rc=1
  say "$t: $(tail -1 "$L/$t.log")"
  grep -m8 "FAIL" -B2 "$L/$t.log"
done
for v in 1 2; do
  LOCKS_CUDA_SUMMARY_OLD=$v timeout 120 "$B/test_gpu_ops" > "$L/test_gpu_ops_old$v.log" 2>&1 || rc=1
  say "test_gpu_ops (LOCKS_CUDA_SUMMARY_OLD=$v): $(tail -1 "$L/test_gpu_ops_old$v.log")"
done
for rep in 1 2; do
  for v in ${SUMM12_VARIANTS:-0 2 1}; do
    for cfg in "8 q" "15 q" "8 f32"; do
      set -- $cfg
      LOCKS_CUDA_SUMMARY_OLD=$v timeout 60 "$B/locks" bench --backend cuda --shape llama3-8b,glm4-9b --context 128k \
        --batch 1 --trials 3 --prefill 128k --rank "$1" --summary "$2" > "$L/build-old$v-r$1$2-$rep.log" 2>&1 || rc=1
      echo "old=$v rank $1 $2: $(grep "summary build" "$L/build-old$v-r$1$2-$rep.log" | sed -E 's/summary build, 131072-token prefill//' | tr '\n' ' ')"
    done
  done
done
for m in ${SUMM12_MODELS:-llama3-8b glm4-9b}; do
  for v in 0 1; do
    LOCKS_CUDA_SUMMARY_OLD=$v timeout 150 "$B/locks" bench --backend cuda --model $m --context 32768 --batch 1 --ttft 0 \
      --csv "$L/engine-$m-old$v.csv" > "$L/engine-$m-old$v.log" 2>&1 || rc=1
    say "engine $m old=$v"; grep -v "^ *(KV" "$L/engine-$m-old$v.log" | tail -6
  done
done
tar cJf "$FOUT/logs.tar.xz" -C "$L" .
exit $rc
