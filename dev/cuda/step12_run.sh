#!/usr/bin/env bash
# step12_run.sh — one device call for issue 12's rank / precision work, from prebuilt
# binaries (BIN, default bin/: test_gpu_ops, test_gpu_truncate, test_gpu_fault,
# test_gpu_ext_pages, locks): the GPU tests, then `locks bench --backend cuda` at 128K,
# batch 1, for several ranks and both summary precisions (step time and the summary
# build of a 128K prefill). Output under $OUT (or /tmp/step12).
#   STEP12_TESTS=0  skip the tests;  STEP12_CFGS="8:q 15:f32"  the (rank:precision) list
set -uo pipefail
OUT=${OUT:-/tmp/step12}
B=${BIN:-bin}
mkdir -p "$OUT"
{ date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv; } > "$OUT/env.log" 2>&1
cat "$OUT/env.log"
if [ "${STEP12_TESTS:-1}" = 1 ]; then
  "$B/test_gpu_ops" > "$OUT/test_gpu_ops.log" 2>&1
  echo "test_gpu_ops rc=$? $(tail -1 "$OUT/test_gpu_ops.log")"
  grep -E "FAIL" -B2 -A3 "$OUT/test_gpu_ops.log" | head -40
  for t in test_gpu_truncate test_gpu_fault test_gpu_ext_pages; do
    "$B/$t" > "$OUT/$t.log" 2>&1
    echo "$t rc=$? $(tail -1 "$OUT/$t.log")"
  done
fi
for cfg in ${STEP12_CFGS:-8:q 1:q 4:q 15:q 8:f32 15:f32}; do
  r=${cfg%%:*}
  s=${cfg#*:}
  "$B/locks" bench --backend cuda --shape llama3-8b,glm4-9b --context 128k --batch 1 --trials 7 --prefill 128k \
    --rank "$r" --summary "$s" > "$OUT/bench-r$r-$s.log" 2>&1
  echo "rank $r $s rc=$?"
  grep -E "ctx|build" "$OUT/bench-r$r-$s.log" | sed -E "s/ +/ /g" | cut -c1-170
done
