#!/bin/sh
# model_dump_local.sh LOCKS_BINARY — `locks run --dump-kv` on Gemma 3 270M (label "model")
# dumps only the global layers (5, 11, 17 of 18): a local sliding-window layer attends
# its 512-token window exactly whatever the selector, so replaying it over the whole
# context in `locks eval --dump` scored attention the model never computes (the old
# dump held all 18 layers and eval reported 18 per-layer rows). Checks the run's line,
# then that `locks eval --dump --per-layer` reports exactly layers 0..2.
set -eu
LOCKS=$1
G=${LOCKS_GEMMA3_MODEL:-$(scripts/fetch-model.sh gemma3-270m)}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
P=$(awk 'BEGIN { for (i = 1; i < 12; i++) printf "Item %d is stored in box %d. ", i, (7 * i) % 13; printf "Item 5 is stored in box" }')
"$LOCKS" run -m "$G" -p "$P" -n 3 --temp 0 -t 1 --dump-kv "$TMP/kv" 2> "$TMP/run.log" > /dev/null
grep -q "3 of 18 layers: the global ones" "$TMP/run.log" || { cat "$TMP/run.log"; echo "FAIL: dump line"; exit 1; }
"$LOCKS" eval --dump "$TMP/kv" --budgets 64 --selectors oracle,locks --per-layer --csv "$TMP/e.csv" --threads 1 > /dev/null
layers=$(awk -F, 'NR > 1 && $3 != "all" { print $3 }' "$TMP/e.csv" | sort -u | tr '\n' ' ')
[ "$layers" = "0 1 2 " ] || { cat "$TMP/e.csv"; echo "FAIL: eval layers '$layers', want '0 1 2 '"; exit 1; }
echo "model_dump_local: dump of 3 global layers of 18, eval rows for layers $layers: ok"
