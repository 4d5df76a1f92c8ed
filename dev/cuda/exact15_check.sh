#!/usr/bin/env bash
# exact15_check.sh — the device checks of the exact GPU verify, from prebuilt binaries in
# BIN (default build-cuda): test_gpu_verify_exact (tiny random models; with LOCKS_MODEL also
# SmolLM2), and the verify's speed and bit-for-bit line at the Llama-3.1-8B shape:
#   dev/cuda/exact15_check.sh [BIN]          (set LOCKS_MODEL for the SmolLM2 parts)
# The bench prints, per context: dense token, LOCKS draft token, verify of 5 tokens (ms,
# host-timed with the logits read back) and "verify == dense decode bit for bit: 5 of 5 rows".
set -uo pipefail
B=${1:-build-cuda}
rc=0
timeout 150 "$B/test_gpu_verify_exact" || rc=1
timeout 150 "$B/locks" bench --backend cuda --model llama3-8b --context 32k,256k --batch 1 --ttft 0 --speculate 4 |
  grep -E "ms/token|speculate K|bit for bit|from acceptance|not reached" || rc=1
exit $rc
