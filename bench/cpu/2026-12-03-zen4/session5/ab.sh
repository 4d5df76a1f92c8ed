#!/usr/bin/env bash
# ab.sh — two builds side by side on this machine, interleaved, nothing else running
# (session 5 of 2026-12-03; kept as it ran). Refuses above a 1-minute load of 1.2.
#   OLD=/work/base/build NEW=build bench/cpu/2026-12-03-zen4/session5/ab.sh compare DOC [rounds]
#       `locks run --speculate 4 --budget 256 --compare --pairs 3` on DOC (a SmolLM2 prompt
#       of ~6.5K tokens, e.g. cpu-peer.sh's smollm2-doc-spec.txt), old then new, rounds times
#   OLD=... NEW=... ab.sh attn [rounds]
#       bench/cpu/2026-12-02-zen4/attn_dram.c linked against each build's liblocks.a:
#       dense and verify(5) over 30 layers x 6,480 tokens from DRAM, 1 and 2 threads
set -u
OLD=${OLD:?the old build directory}; NEW=${NEW:?the new build directory}
M=${M:-$HOME/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf}
load() { cut -d' ' -f1 /proc/loadavg; }
l=$(load)
awk -v l="$l" 'BEGIN { exit !(l > 1.2) }' && { echo "ab: 1-minute load $l > 1.2: not measuring" >&2; exit 1; }
echo "# ab $1 $(date -u +%FT%TZ); old $OLD, new $NEW; load before $l"
case "$1" in
compare)
    doc=$2; rounds=${3:-2}
    for r in $(seq "$rounds"); do
        for b in "$OLD" "$NEW"; do
            echo "== $b/locks (round $r, load $(load))"
            "$b/locks" run -m "$M" -f "$doc" -c 6588 -n 64 --temp 0 -t 2 --selector locks --budget 256 \
                --speculate 4 --compare --pairs 3 2>&1 | grep -E "^compare"
        done
    done ;;
attn)
    rounds=${2:-3}
    for b in "$OLD" "$NEW"; do
        gcc -O2 -Iinclude -Isrc bench/cpu/2026-12-02-zen4/attn_dram.c "$b/liblocks.a" -lm -lpthread \
            -o "/tmp/ab_attn_$(echo "$b" | tr / _)" || exit 1
    done
    for t in 1 2; do
        for r in $(seq "$rounds"); do
            for b in "$OLD" "$NEW"; do
                echo -n "$b threads $t: "
                "/tmp/ab_attn_$(echo "$b" | tr / _)" 6480 5 "$t" | tail -1
            done
        done
    done ;;
*) echo "ab: compare DOC [rounds] | attn [rounds]" >&2; exit 2 ;;
esac
echo "# load after $(load)"
