#!/usr/bin/env bash
# ab_decode.sh — two builds' `locks run` decode rate on one prompt, interleaved, nothing
# else running (session 6 of 2026-12-03; kept as it ran). Refuses above a 1-minute load of 1.2.
#   OLD=/work/base/build NEW=build ab_decode.sh DOC ROUNDS [locks run options...]
set -u
OLD=${OLD:?the old build directory}; NEW=${NEW:?the new build directory}
M=${M:-$HOME/.cache/locks/SmolLM2-135M-Instruct.Q4_1.gguf}
doc=$1; rounds=$2; shift 2
load() { cut -d' ' -f1 /proc/loadavg; }
l=$(load)
awk -v l="$l" 'BEGIN { exit !(l > 1.2) }' && { echo "ab_decode: 1-minute load $l > 1.2: not measuring" >&2; exit 1; }
echo "# ab_decode $(date -u +%FT%TZ) $(git rev-parse --short HEAD); old $OLD, new $NEW; $* ; load before $l"
for r in $(seq "$rounds"); do
    for b in "$OLD" "$NEW"; do
        echo -n "$b (round $r, load $(load)): "
        "$b/locks" run -m "$M" -f "$doc" "$@" 2>&1 | grep -E "^decode:"
    done
done
echo "# load after $(load)"
