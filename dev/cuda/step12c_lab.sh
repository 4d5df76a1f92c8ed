#!/usr/bin/env bash
# (The fused top-k and the LOCKS_CUDA_TOPK_* switches are not in src/cuda/: no clear win, see
# bench/RESULTS.md, branch step12c; apply dev/cuda/topk_fused.patch and build first.)
# step12c_lab.sh — issue 12, the group mass folded into the top-k (topk.cu's
# topk_fused_kernel, a thread block cluster per segment): one device call from prebuilt
# binaries (BIN, default bin/). The GPU tests with the defaults (test_gpu_ops cycles the
# top-k paths over its shapes), test_gpu_ops again on the old path everywhere
# (LOCKS_CUDA_TOPK_FUSE=0) and with clusters of 16 blocks, then the step bench for the
# variants below back to back (same binaries, same machine), then per-kernel device
# times of one 128K and one 1M step under ncu (default path). Output under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/step12c}
B=${BIN:-bin}
mkdir -p "$OUT"
{ date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } > "$OUT/env.log" 2>&1
cat "$OUT/env.log"
T=$OUT/tests.log
: > "$T"
trc=0
run_t() { # name env... -- binary
  local tag=$1; shift
  env "$@" > "$OUT/t.log" 2>&1 || trc=1
  echo "$tag: $(tail -1 "$OUT/t.log")" | tee -a "$T"
  grep -E "FAIL" -B3 -A3 "$OUT/t.log" | head -20 | tee -a "$T"
  grep -E "^shape" "$OUT/t.log" >> "$T"
}
run_t test_gpu_ops timeout 60 "$B/test_gpu_ops"
run_t "test_gpu_ops TOPK_FUSE=0" LOCKS_CUDA_TOPK_FUSE=0 timeout 60 "$B/test_gpu_ops"
run_t "test_gpu_ops TOPK_CLUSTER=16" LOCKS_CUDA_TOPK_CLUSTER=16 timeout 60 "$B/test_gpu_ops"
for t in test_gpu_plan test_gpu_truncate test_gpu_fault test_gpu_model_ops; do
  run_t "$t" timeout 60 "$B/$t"
done
VARIANTS=(
  "old:LOCKS_CUDA_TOPK_FUSE=0"
  "new:"
  "fuse1:LOCKS_CUDA_TOPK_FUSE=1"
  "ppc2k:LOCKS_CUDA_TOPK_PPC=2048"
  "ppc4k:LOCKS_CUDA_TOPK_PPC=4096"
  "ppc16k:LOCKS_CUDA_TOPK_PPC=16384"
  "cl16:LOCKS_CUDA_TOPK_CLUSTER=16"
  "old2:LOCKS_CUDA_TOPK_FUSE=0"
  "new2:"
)
for v in "${VARIANTS[@]}"; do
  name=${v%%:*}
  envs=${v#*:}
  # shellcheck disable=SC2086 # envs is a list of NAME=VALUE words
  env $envs timeout 60 "$B/locks" bench --backend cuda --shape glm4-9b,llama3-8b --context 32k,128k,256k,1024k \
    --batch 1,8 --trials 7 --csv "$OUT/bench-$name.csv" > "$OUT/bench-$name.log" 2>&1
  echo "== $name ($envs) rc $?"
  grep "ctx" "$OUT/bench-$name.log" | sed -E "s/ +/ /g" | cut -c1-150
done
if command -v ncu > /dev/null; then
  for ctx in 128k 1024k; do
    timeout 40 ncu --clock-control none --cache-control all --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      --print-units base --csv "$B/locks" bench --backend cuda --shape glm4-9b,llama3-8b --context $ctx --batch 1 \
      --trials 3 --prefill 16k > "$OUT/ncu-$ctx.csv" 2> "$OUT/ncu-$ctx.err"
    echo "== ncu $ctx rc $?"
    python3 - "$OUT/ncu-$ctx.csv" << 'PY'
import csv, sys, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]
ki, mi, vi, ids = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value"), hdr.index("ID")
by, order = {}, []
for r in rows[1:]:
    k = r[ids]
    if k not in by:
        by[k] = {"name": re.sub(r"[<(].*", "", r[ki]).strip().split()[-1]}
        order.append(k)
    by[k][r[mi]] = float(r[vi].replace(",", ""))
seq = [by[k] for k in order if "summary" not in by[k]["name"] and "fill" not in by[k]["name"]]
print("ncu: kernel (us, DRAM MB read), in launch order:")
print(" ".join(f"{x['name']}={x.get('gpu__time_duration.sum', 0) / 1e3:.1f}/{x.get('dram__bytes_read.sum', 0) / 1e6:.1f}" for x in seq))
PY
  done
fi
rm -f "$OUT/t.log"
exit $trc
