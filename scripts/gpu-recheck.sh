#!/usr/bin/env bash
# gpu-recheck.sh — a short re-check of main on the H200 after a late merge, in two
# consecutive device calls (the second within the machine's 30 s warm window; binaries and
# SmolLM2's first part wait in $KEEP between them). Cheaper than gpu-final.sh: no peer, no
# benchmarks.
#   here:    (cd build-cuda && tar cf - locks liblocks.so test_gpu_* | xz --lzma2=preset=6,dict=256MiB \
#               > ../.gpu-stage/recheck/locks-bin.tar.xz); git rev-parse HEAD > .gpu-stage/recheck/COMMIT
#            cp smollm2.part00 .gpu-stage/recheck/ && cp smollm2.part01 .gpu-stage/recheck2/   (split -n 2 -d of the GGUF: part00 + the binaries fit the 64 MiB of a call)
#   call 1:  scripts/gpu-recheck.sh 1           carry .gpu-stage/recheck
#            the GPU op tests that need no model
#   call 2:  scripts/gpu-recheck.sh 2 SHA256    carry .gpu-stage/recheck2 (the rest of the GGUF)
#            SmolLM2 on the GPU: test_gpu_model, test_gpu_verify_exact, locks demo
# Logs: $OUT/recheck<N>.tar.gz and the output itself.
set -uo pipefail
cd "$(dirname "$0")/.."
KEEP=${KEEP:-/root/keep}
FOUT=${OUT:-/tmp/locks-recheck}
W=$KEEP/recheck$1
B=$KEEP/bin
mkdir -p "$W" "$B" "$FOUT"
T0=$(date +%s)
rc=0
. scripts/gpu-common.sh  # say, run_test
if [ "$1" = 1 ]; then
  S=.gpu-stage/recheck
  rm -rf "$B"/* && tar xJf "$S/locks-bin.tar.xz" -C "$B" || { echo "no binaries"; exit 1; }
  cp "$S/smollm2.part00" "$KEEP/" || { echo "no part 0"; exit 1; }
  { date -u; cat "$S/COMMIT"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$W/env.log"
  for t in test_gpu_ops test_gpu_model_ops test_gpu_fault test_gpu_plan test_gpu_verify_exact; do run_test $t 150; done
else
  cp .gpu-stage/recheck2/smollm2.part01 "$KEEP/" || { echo "no part 1"; exit 1; }
  M=$KEEP/SmolLM2-135M-Instruct.Q4_1.gguf
  cat "$KEEP/smollm2.part00" "$KEEP/smollm2.part01" > "$M"
  echo "${2:-none}  $M" | sha256sum -c - || { echo "SmolLM2 checksum differs"; exit 1; }
  run_test test_gpu_model 240 LOCKS_MODEL=$M
  grep -E "^  " "$W/test_gpu_model.log"
  run_test test_gpu_verify_exact 150 LOCKS_MODEL=$M
  timeout 120 "$B/locks" demo --backend cuda -m "$M" > "$W/demo.log" 2>&1 || rc=1
  grep -E "found|needle" "$W/demo.log"
fi
say "done (rc $rc)"
tar czf "$FOUT/recheck$1.tar.gz" -C "$KEEP" "recheck$1" 2>/dev/null
exit $rc
