#!/usr/bin/env bash
# step_lab.sh — A/B of the LOCKS step's lab switches (issue 12) on one existing build:
# programmatic dependent launch (LOCKS_CUDA_PDL), the int8 score kernel for G 9..16
# (LOCKS_CUDA_SCORE_I8G16), the fewest pages per attention split (LOCKS_CUDA_ATT_MIN_PPS),
# the page count from which the multi-block top-k runs (LOCKS_CUDA_TOPK_MB_MIN) and the
# pages per mass block (LOCKS_CUDA_MASS_PPB); the list below is run 20's minus its
# top-k key-cache variant (removed: no gain; bench/RESULTS.md has every run's, run 19
# tried ATT_MIN_PPS 8/16 and TOPK_MB_MIN 4096); then
# per-kernel device times of one step under ncu (kernels serialised, caches flushed
# before each: what each kernel costs alone, without launch gaps or overlap).
# Run on the GPU machine from the repository root after a build (scripts/gpu-check.sh
# makes build-gpu). Output under $OUT (or /tmp/step-lab); one line per (variant, shape,
# context, batch) on stdout.
set -uo pipefail
OUT=${OUT:-/tmp/step-lab}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
L="$BUILD/locks"
VARIANTS=(
  "old:LOCKS_CUDA_PDL=0 LOCKS_CUDA_SCORE_I8G16=0"
  "new:"
  "nopdl:LOCKS_CUDA_PDL=0"
  "fp16g16:LOCKS_CUDA_SCORE_I8G16=0"
  "mass256:LOCKS_CUDA_MASS_PPB=256"
  "mass1k:LOCKS_CUDA_MASS_PPB=1024"
)
for v in "${VARIANTS[@]}"; do
  name=${v%%:*}
  envs=${v#*:}
  # shellcheck disable=SC2086 # envs is a list of NAME=VALUE words
  env $envs "$L" bench --backend cuda --shape glm4-9b,llama3-8b --context 32k,128k,1024k --batch 1 \
    --trials 9 --prefill 16k > "$OUT/lab-$name.log" 2>&1
  grep "ctx" "$OUT/lab-$name.log" | sed -E "s/^/$name /; s/ +/ /g" | cut -c1-150
done
if command -v ncu > /dev/null; then
  ncu --clock-control none --cache-control all --metrics gpu__time_duration.sum --print-units base --csv \
    "$L" bench --backend cuda --shape glm4-9b,llama3-8b --context 128k --batch 1 --trials 3 --prefill 16k \
    > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
  python3 - "$OUT/ncu.csv" << 'EOF'
import csv, sys, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]
ki, vi = hdr.index("Kernel Name"), hdr.index("Metric Value")
seq = []
for r in rows[1:]:
    if r[hdr.index("Metric Name")] != "gpu__time_duration.sum":
        continue
    name = re.sub(r"[<(].*", "", r[ki]).strip().split()[-1]
    seq.append((name, float(r[vi].replace(",", "")) / 1e3))
print("ncu: kernel sequence (us), in launch order:")
print(" ".join(f"{n}={t:.1f}" for n, t in seq if "summary" not in n and "fill" not in n))
EOF
fi
