#!/usr/bin/env bash
# step12_final.sh — issue 12's final device call from prebuilt binaries (BIN, default
# bin/): the GPU tests, `locks bench --backend cuda` for rank 15 quantized and rank 8
# fp32 at 128K, the full step table (what scripts/gpu-check.sh runs after its build:
# locks bench --backend cuda, bench/sdpa_baseline.py, bench/gpu_table.py) and the
# per-kernel device times of one 128K step under ncu (as dev/cuda/step_lab.sh).
# Output under $OUT; the test and ncu logs packed into logs.tar.gz. STEP12_NCU=0: no ncu.
set -uo pipefail
OUT=${OUT:-/tmp/step12}
B=${BIN:-bin}
L=$OUT/logs
mkdir -p "$L"
export PYTHONUNBUFFERED=1
{ date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; } > "$OUT/env.log" 2>&1
cat "$OUT/env.log"
trc=0
for t in test_gpu_ops test_gpu_truncate test_gpu_fault test_gpu_ext_pages; do
  "$B/$t" > "$L/$t.log" 2>&1 || trc=1
  echo "$t: $(tail -1 "$L/$t.log")"
done
grep -E "FAIL" -B2 -A3 "$L/test_gpu_ops.log" | head -30
STEP12_TESTS=0 STEP12_CFGS="15:q 8:f32" OUT=$L bash dev/cuda/step12_run.sh | grep -v "^[A-Z0-9a-f]*$" | tail -8
"$B/locks" bench --backend cuda --csv "$OUT/locks_bench.csv" > "$OUT/bench.log" 2>&1
grep ctx "$OUT/bench.log" | sed -E "s/ +/ /g" | cut -c1-150
python3 bench/sdpa_baseline.py --csv "$OUT/sdpa.csv" > "$L/sdpa.log" 2>&1
python3 bench/gpu_table.py "$OUT/locks_bench.csv" "$OUT/sdpa.csv" | tee "$OUT/table.md"
if [ "${STEP12_NCU:-1}" = 1 ] && command -v ncu > /dev/null; then
  ncu --clock-control none --cache-control all --metrics gpu__time_duration.sum,dram__bytes_read.sum --print-units base --csv \
    "$B/locks" bench --backend cuda --shape glm4-9b,llama3-8b --context 128k --batch 1 --trials 3 --prefill 16k \
    > "$L/ncu.csv" 2> "$L/ncu.err"
  python3 - "$L/ncu.csv" << 'PY' | tee "$OUT/ncu.txt"
import csv, sys, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]
ki, mi, vi = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value")
ids = hdr.index("ID")
by = {}
order = []
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
fi
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$L"
exit $trc
