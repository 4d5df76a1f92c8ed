#!/usr/bin/env bash
# dev/cuda/rest11_run.sh MODE — rest11's device calls (issue 11: the decode token's small
# kernels and the page-fill summary build). Binaries come prebuilt in bin.tar.xz beside it
# (build-cuda's locks, test_gpu_model_ops, test_gpu_batch for sm_90).
#   MODE probe: the two tests, llama3-8b ctx 32,32768 b1 with LOCKS_ENGINE_REST=0 and 1,
#               nsys kernel traces of one ctx-32 bench with each (per-kernel times)
#   MODE final: the two tests, then llama3-8b 32,32768,131072 and glm4-9b 32,131072 b1,
#               LOCKS_ENGINE_REST=0 and 1 one after the other in this call
#   MODE ab:    the same benches without the tests (binaries the probe call tested)
set -uo pipefail
cd "$(dirname "$0")"
FOUT=${OUT:-/tmp/rest11}
OUT=/tmp/rest11w  # logs; what comes back: $FOUT/logs.tar.xz and the traces
B=/root/keep/rest11  # its own folder: other scripts keep binaries in /root/keep/bin
mkdir -p "$OUT" "$FOUT" "$B"
tar xJf bin.tar.xz -C "$B" || exit 1
{ date -u; cat COMMIT 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/env.log"
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
rc=0
for t in test_gpu_model_ops test_gpu_batch; do
  [ "$1" = ab ] && break
  timeout 150 "$B/$t" > "$OUT/$t.log" 2>&1 || rc=1
  say "$t: $(tail -1 "$OUT/$t.log")"
  grep -m10 -i "fail" "$OUT/$t.log"
done
bench() { # tag env model ctx
  env $2 timeout 200 "$B/locks" bench --backend cuda --model "$3" --context "$4" --batch 1 --ttft 0 \
    --csv "$OUT/$1.csv" > "$OUT/$1.log" 2>&1 || rc=1
  say "$1"; grep -v "^ *(KV" "$OUT/$1.log"
}
if [ "$1" = probe ]; then
  bench llama-rest0 LOCKS_ENGINE_REST=0 llama3-8b 32,32768
  bench llama-rest1 LOCKS_ENGINE_REST=1 llama3-8b 32,32768
  if command -v nsys > /dev/null; then
    for r in 0 1; do
      LOCKS_ENGINE_REST=$r timeout 120 nsys profile -t cuda --cuda-graph-trace=node -o /tmp/prof$r --force-overwrite true \
        "$B/locks" bench --backend cuda --model llama3-8b --context 32 --batch 1 --ttft 0 --trials 3 > /tmp/nsys$r.log 2>&1
      timeout 120 nsys stats -q -r cuda_gpu_trace -f csv -o /tmp/trace$r /tmp/prof$r.nsys-rep > /dev/null 2>&1
      ls /tmp/trace$r* ; xz -T8 -c /tmp/trace${r}_cuda_gpu_trace.csv > "$FOUT/trace$r.csv.xz"
      say "nsys $r done"
    done
  else
    say "no nsys"
  fi
else
  for r in 0 1; do bench llama-rest$r LOCKS_ENGINE_REST=$r llama3-8b 32,32768,131072; done
  for r in 0 1; do bench glm-rest$r LOCKS_ENGINE_REST=$r glm4-9b 32,131072; done
fi
tar cJf "$FOUT/logs.tar.xz" -C "$OUT" .
exit $rc
