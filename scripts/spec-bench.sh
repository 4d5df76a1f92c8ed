#!/usr/bin/env bash
# spec-bench.sh — `locks run --speculate K --compare` on long prompts: greedy output of
# speculative decoding vs dense (`full`) decoding from one prefill, side by side in one
# process per prompt (identical? tok/s of each, acceptance rate).
#
# usage: scripts/spec-bench.sh [-k K] [-b BUDGET] [-n TOKENS] [-t THREADS] [-s SIZES] [-p KINDS] [-o LOG]
#   KINDS: comma-separated subset of prose,code,needle (default all three)
#   SIZES: comma-separated prompt sizes in KiB of text (default 4,8,16,32: ~1K-8K tokens)
# Prompts: the prose haystack (scripts/fetch-haystack.sh), the repo's C sources (code),
# and a pass-key needle in the prose. The exit status is non-zero if any output differs.
set -euo pipefail
cd "$(dirname "$0")/.."
K=4 B=256 N=64 T=2 SIZES=4,8,16,32 LOG=/dev/null KINDS="prose code needle"
while getopts "k:b:n:t:s:o:p:" o; do
    case $o in
    k) K=$OPTARG ;; b) B=$OPTARG ;; n) N=$OPTARG ;; t) T=$OPTARG ;; s) SIZES=$OPTARG ;; o) LOG=$OPTARG ;; p) KINDS=${OPTARG//,/ } ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
    esac
done
bin=${LOCKS_BIN:-build/locks}
prose=$(scripts/fetch-haystack.sh)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat src/*.c src/model/*.c src/eval/*.c > "$tmp/code.all" 2>/dev/null || true
status=0
echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD) host $(hostname); uptime: $(uptime)" | tee -a "$LOG"
for kib in ${SIZES//,/ }; do
    bytes=$((kib * 1024))
    head -c "$bytes" "$prose" > "$tmp/prose.txt"
    head -c "$bytes" "$tmp/code.all" > "$tmp/code.txt"
    { head -c $((bytes / 2)) "$prose"; printf '\nThe pass key is 48213. Remember it: 48213.\n';
      { tail -c +$((bytes / 2 + 1)) "$prose" || true; } | head -c $((bytes / 2)); printf '\nWhat is the pass key? The pass key is'; } > "$tmp/needle.txt"
    for kind in $KINDS; do
        line=$("$bin" run -f "$tmp/$kind.txt" -c 16384 -n "$N" --temp 0 -t "$T" --selector locks --budget "$B" \
            --speculate "$K" --compare 2>/dev/null) || status=1
        echo "$kind ${kib}KiB: $line" | tee -a "$LOG"
    done
done
echo "# done $(date -u +%FT%TZ); uptime: $(uptime)" | tee -a "$LOG"
exit $status
