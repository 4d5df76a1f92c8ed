#!/bin/sh
# model_compare_pairs.sh LOCKS_BINARY — `locks run --speculate K --compare --pairs N` (label
# "model", SmolLM2): N side-by-side pairs from one prefill. Each pair's line says the output
# is identical, every pair starts from the same prefix (greedy: the same context and the
# same acceptance count in every pair), the median line counts them, and --pairs without
# --compare is refused (exit 2).
set -eu
LOCKS=$1
M=${LOCKS_MODEL:-$(scripts/fetch-model.sh)}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
awk 'BEGIN { for (i = 1; i < 40; i++) printf "Item %d is stored in box %d, next to the %s crate. ", i, (7 * i) % 13, (i % 3 ? "red" : "blue") }' > "$TMP/doc.txt"
"$LOCKS" run -m "$M" -f "$TMP/doc.txt" -n 16 --temp 0 -t 1 --speculate 3 --budget 64 --compare --pairs 3 \
    > "$TMP/out.txt" 2> "$TMP/err.txt" || { cat "$TMP/out.txt" "$TMP/err.txt"; echo "FAIL: locks run --compare --pairs 3"; exit 1; }
awk '/^compare: / { n++; if ($0 !~ /output identical/) { print "FAIL: " $0; bad = 1 }
        ctx = $3; acc = $0; sub(/.*accepted /, "", acc); sub(/ drafts.*/, "", acc)
        if (n > 1 && (ctx != ctx1 || acc != acc1)) { print "FAIL: pair " n " is not from the same prefix: " $0; bad = 1 }
        if (n == 1) { ctx1 = ctx; acc1 = acc } }
    /^compare median: / { m++; if ($0 !~ /of 3 pairs/ || $0 !~ /identical in 3 of 3/) { print "FAIL: " $0; bad = 1 } }
    END { if (n != 3 || m != 1) { print "FAIL: want 3 pair lines and a median line, got " n " and " m; bad = 1 }
          exit bad }' "$TMP/out.txt" || { cat "$TMP/out.txt"; exit 1; }
if "$LOCKS" run -m "$M" -p "x" --pairs 2 > /dev/null 2>&1; then echo "FAIL: --pairs without --compare accepted"; exit 1; fi
echo "model_compare_pairs: 3 pairs from one prefix, identical output, the median line: ok"
