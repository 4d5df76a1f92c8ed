#!/usr/bin/env bash
# gpu24_run.sh — issue 24's device calls (branch gpu24), from binaries built on the CPU
# machine for sm_90 (-DLOCKS_WERROR=ON) and carried in .gpu-stage/gpu24/locks-bin.tar.xz.
#   here:   (cd build-cuda && tar cf - locks liblocks.so test_gpu_* | xz -6 > STAGE/locks-bin.tar.xz)
#           git rev-parse HEAD > STAGE/COMMIT; split -n 2 -d the GGUF: part00 in .gpu-stage/gpu24m0 (carried
#           with the binaries), part01 in .gpu-stage/gpu24m1 (the next call, on the still-warm machine)
#   call 1: dev/cuda/gpu24_run.sh tests     every GPU test that needs no model; compute-sanitizer
#                                           memcheck of test_gpu_ops and test_gpu_model_ops
#   call 1: dev/cuda/gpu24_run.sh profile   ncu: the kernels of one LOCKS mid-page token and one
#                                           page-fill token (llama3-8b, 128K), each kernel's
#                                           gpu__time_duration; the engine bench of both shapes
#                                           at 128K (page-fill prep / attention split)
#   call 1: dev/cuda/gpu24_run.sh step      the step of one layer vs cuDNN SDPA (gpu-check.sh's
#                                           bench + table, 128K and 1M, batch 1)
#   next:   dev/cuda/gpu24_run.sh roll      the page-fill token with and without LOCKS_CUDA_SUMMARY_ROLL=64
#                                           (binaries built with dev/cuda/summary_roll.patch applied: the
#                                           rolled build left the library in issue 23)
#   call N: dev/cuda/gpu24_run.sh model PART SHA256   SmolLM2's other part (the first waits in
#                                           $KEEP from an earlier call on the same warm machine)
# From a staged copy: ROOT=. bash .gpu-stage/gpu24/gpu24_run.sh STAGES (run in the repository root).
# Stages run in the order given: dev/cuda/gpu24_run.sh tests profile step. Everything a call
# writes lands in $OUT/gpu24-<stages>.tar.gz; the output itself is the summary.
set -uo pipefail
SD=$(cd "$(dirname "$0")" && pwd)  # this script's folder (dev/cuda, or its staged copy)
cd "${ROOT:-$SD/../..}"  # the repository root (ROOT=. when run from a staged copy)
export KEEP=${KEEP:-/root/keep}
FOUT=${OUT:-/tmp/locks-gpu24}
STAGE=${STAGE:-.gpu-stage/gpu24}
TAG=$(echo "$*" | tr ' ' '-' | tr -cd 'A-Za-z0-9-' | cut -c1-40)
W=$KEEP/gpu24-$TAG
B=$KEEP/bin
mkdir -p "$W" "$B" "$FOUT"
T0=$(date +%s)
END=$((T0 + ${CALL_S:-560}))  # the call's own deadline: memcheck takes what is left
rc=0
. scripts/gpu-common.sh  # say, run_test
if [ -f "$STAGE/locks-bin.tar.xz" ]; then
  rm -rf "${B:?}"/* && tar xJf "$STAGE/locks-bin.tar.xz" -C "$B" || { echo "cannot unpack the binaries"; exit 1; }
  cp "$STAGE/COMMIT" "$KEEP/COMMIT" 2>/dev/null
fi
[ -f .gpu-stage/gpu24m0/smollm2.part00 ] && cp .gpu-stage/gpu24m0/smollm2.part00 "$KEEP/"
[ -x "$B/locks" ] || { echo "no binaries in $B (cold machine?)"; exit 1; }
export LD_LIBRARY_PATH=$B:${LD_LIBRARY_PATH:-}
{ date -u; cat "$KEEP/COMMIT" 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; } | tee "$W/env.log"
while [ $# -gt 0 ]; do
  stage=$1; shift
  case $stage in
  tests)
    if [ "${TESTS_QUICK:-0}" = 1 ]; then  # the tests a summary-build change reaches
      for t in test_gpu_ops test_gpu_fault test_gpu_batch test_gpu_model_ops; do run_test $t 150; done
    else
      for t in test_gpu_ops test_gpu_truncate test_gpu_fault test_gpu_ext_pages test_gpu_plan test_gpu_batch test_gpu_model_ops; do
        run_test $t 150
      done
      run_test test_gpu_cp 60 LOCKS_CP_RANKS=1
      run_test test_gpu_verify 120        # without LOCKS_MODEL: the verify kernel against float64
      run_test test_gpu_verify_exact 150  # without LOCKS_MODEL: tiny random models
    fi
    # every summary build through the rolled basis loop (summary.cu, LOCKS_CUDA_SUMMARY_ROLL)
    for t in test_gpu_ops:1000000000 test_gpu_model_ops:64; do
      LOCKS_CUDA_SUMMARY_ROLL=${t#*:} timeout 150 "$B/${t%%:*}" > "$W/${t%%:*}_roll.log" 2>&1; r=$?
      say "${t%%:*} with LOCKS_CUDA_SUMMARY_ROLL=${t#*:} exit $r: $(tail -1 "$W/${t%%:*}_roll.log")"
      [ $r = 0 ] || { rc=1; grep -m8 FAIL "$W/${t%%:*}_roll.log"; }
    done
    for t in test_gpu_ops test_gpu_model_ops; do
      lim=$(( END - $(date +%s) )); [ "$lim" -gt "${MEMCHECK_S:-150}" ] && lim=${MEMCHECK_S:-150}
      [ "$lim" -lt 20 ] && { say "memcheck $t skipped: the call's time is up"; continue; }
      say "compute-sanitizer memcheck $t (limit $lim s)"
      timeout "$lim" compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 "$B/$t" \
        > "$W/memcheck_$t.log" 2>&1; r=$?
      say "memcheck $t exit $r (124: cut by the time limit): $(grep -m1 'ERROR SUMMARY' "$W/memcheck_$t.log"; tail -1 "$W/memcheck_$t.log")"
      [ $r = 0 ] || [ $r = 124 ] || rc=1
    done
    ;;
  profile)
    say "ncu: one LOCKS mid-page token, then one page-fill token (llama3-8b 128K)"
    timeout 240 ncu --clock-control none --profile-from-start off --graph-profiling node \
      --metrics gpu__time_duration.sum --csv --log-file "$W/ncu_tokens.csv" \
      "$B/locks" bench --backend cuda --model llama3-8b --context 128k --batch 1 --ttft 0 --trials 5 --profile \
      > "$W/ncu_bench.txt" 2>&1 || { rc=1; tail -5 "$W/ncu_bench.txt"; }
    python3 "$SD/gpu24_ncu.py" "$W/ncu_tokens.csv" 2>&1 | tee "$W/ncu_summary.txt"
    for m in llama3-8b glm4-9b; do
      say "engine bench $m 128K"
      timeout 120 "$B/locks" bench --backend cuda --model $m --context 128k --batch 1 --ttft 0 --trials 15 \
        --csv "$W/engine_$m.csv" > "$W/engine_$m.txt" 2>&1 || rc=1
      grep -E "ms/token|page-fill|phases" "$W/engine_$m.txt"
    done
    ;;
  stalls)
    say "ncu: the summary build, the last 2 of a mid-page token and the first 4 of a page-fill token (llama3-8b 128K): warp stalls"
    timeout 200 ncu --clock-control none --profile-from-start off --graph-profiling node -k regex:summary2 --launch-skip 30 -c 6 \
      --section SpeedOfLight --section WarpStateStats --section InstructionStats --section LaunchStats \
      --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
      "$B/locks" bench --backend cuda --model llama3-8b --context 128k --batch 1 --ttft 0 --trials 3 --profile \
      > "$W/ncu_stalls.txt" 2>&1 || rc=1
    grep -E "summary2_kernel|Duration|Warp Cycles Per Issued|Executed Instructions |Registers Per|Issue Slots Busy" "$W/ncu_stalls.txt" | head -24
    grep -E "stalled_" "$W/ncu_stalls.txt" | sort -k3 -rn | awk '$3 > 0.5' | head -30
    ;;
  sass)
    say "SASS of summary2_kernel<128, bf16, 8> with line info (code bytes per source line)"
    mkdir -p "$W/cubin" && ( cd "$W/cubin" && cuobjdump -xelf all "$B/liblocks.so" > /dev/null 2>&1 )
    for f in "$W"/cubin/*.cubin; do
      grep -q summary2_kernel "$f" || continue
      nvdisasm -gi "$f" 2>/dev/null | awk '/^\t*\.section\t*\.text\./{on = index($0, "_Z15summary2_kernelILi128E13__nv_bfloat16Li8E") > 0} on' \
        > "$W/summary2_128_bf16_8.sass"
    done
    rm -rf "$W/cubin"
    python3 - "$W/summary2_128_bf16_8.sass" <<'PY' | tee "$W/summary2_lines.txt"
import re, sys, collections
n = collections.Counter(); cur = None; tot = 0
for l in open(sys.argv[1]):
    m = re.search(r'line (\d+)', l)
    if m and ('//## File' in l or '.loc' in l): cur = int(m.group(1))
    if re.search(r'/\*[0-9a-f]{4,}\*/', l): n[cur] += 16; tot += 16
print(f"summary2_kernel<128, bf16, 8>: {tot} bytes of SASS")
for k, v in sorted(n.items(), key=lambda x: -x[1])[:40]: print(f"  line {k}: {v} bytes")
PY
    ;;
  roll)
    for m in llama3-8b glm4-9b; do for v in 0 64 0 64; do  # A/B twice, interleaved
      say "engine bench $m 128K, LOCKS_CUDA_SUMMARY_ROLL=$v"
      LOCKS_CUDA_SUMMARY_ROLL=$v timeout 120 "$B/locks" bench --backend cuda --model $m --context 128k --batch 1 --ttft 0 \
        --trials 15 > "$W/roll_${m}_$v.txt" 2>&1 || rc=1
      grep -E "locks .*ms/token|page-fill" "$W/roll_${m}_$v.txt" | grep -A1 " locks "
    done; done
    ;;
  targets)
    for m in llama3-8b:32k,256k glm4-9b:32k,256k,1024k; do
      say "engine bench ${m%%:*} ${m#*:}"
      timeout 150 "$B/locks" bench --backend cuda --model ${m%%:*} --context ${m#*:} --batch 1 --ttft 0 --trials 15 \
        --csv "$W/targets_${m%%:*}.csv" > "$W/targets_${m%%:*}.txt" 2>&1 || rc=1
      grep -E "ms/token|page-fill|phases" "$W/targets_${m%%:*}.txt"
    done
    ;;
  step)
    say "the step of one layer vs cuDNN SDPA"
    ( OUT=$W/step BUILD=$B GPU_CHECK_PREBUILT=1 GPU_CHECK_SKIP_TESTS=1 GPU_CHECK_QUICK=${QUICK:-1} timeout 240 scripts/gpu-check.sh ) \
      > "$W/step.txt" 2>&1 || rc=1
    sed -n '/== table/,$p' "$W/step.txt"
    grep -E "step|score|select|attend" "$W/step/bench.log" | head -30
    ;;
  model)
    part=$1 sha=$2; shift 2
    cp "$part" "$KEEP/" || { echo "no $part"; exit 1; }
    M=$KEEP/SmolLM2-135M-Instruct.Q4_1.gguf
    cat "$KEEP/smollm2.part00" "$KEEP/smollm2.part01" > "$M" || { echo "parts missing"; exit 1; }
    echo "$sha  $M" | sha256sum -c - || { echo "SmolLM2 checksum differs"; exit 1; }
    run_test test_gpu_model 240 LOCKS_MODEL=$M
    grep -E "^  " "$W/test_gpu_model.log"
    run_test test_gpu_verify 180 LOCKS_MODEL=$M
    run_test test_gpu_verify_exact 150 LOCKS_MODEL=$M
    timeout 60 "$B/locks" demo --backend cuda -m "$M" > "$W/demo.log" 2>&1 || rc=1
    say "demo: $(grep -c 'found the needle' "$W/demo.log") of 2 answers found the needle"
    ;;
  *) echo "unknown stage $stage"; rc=1 ;;
  esac
  tar czf "$FOUT/gpu24-$TAG.tar.gz" -C "$KEEP" "gpu24-$TAG" 2>/dev/null  # after every stage
done
say "done (rc $rc)"
tar czf "$FOUT/gpu24-$TAG.tar.gz" -C "$KEEP" "gpu24-$TAG" 2>/dev/null
exit $rc
