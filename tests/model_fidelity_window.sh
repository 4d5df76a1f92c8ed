#!/bin/sh
# model_fidelity_window.sh LOCKS_BINARY — `locks eval --fidelity --window W --at L1,L2`
# (label "model", SmolLM2): one forward prefill, a window of evaluated positions ending at
# each length. Checks the rows (one per length, W / stride positions, the lengths in the
# CSV, the last one at L - 1), that `full` reproduces the dense pass exactly (top-1 1, KL 0: dense logits and
# decode agree bit for bit), and that a sparse row at a budget below the context is live
# (tokens attended below the context).
set -eu
LOCKS=$1
M=${LOCKS_MODEL:-$(scripts/fetch-model.sh)}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
awk 'BEGIN { for (i = 1; i < 60; i++) printf "Item %d is stored in box %d, next to the %s crate. ", i, (7 * i) % 13, (i % 3 ? "red" : "blue") }' > "$TMP/doc.txt"
"$LOCKS" eval --fidelity "$TMP/doc.txt" -m "$M" --selectors full,locks --budgets 64 --window 16 --stride 4 \
    --at 200,400 --max-tokens 400 -t 1 --csv "$TMP/f.csv" > "$TMP/out.txt" 2> "$TMP/err.txt" ||
    { cat "$TMP/err.txt"; echo "FAIL: locks eval --fidelity"; exit 1; }
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    $c["document"] == "all" { next }
    { n++; len[$c["length"]]++
      if ($c["positions"] != 4) { print "FAIL: positions " $c["positions"] " in " $0; bad = 1 }
      if ($c["selector"] == "full" && ($c["top1_agree"] != 1 || $c["mean_kl"] != 0)) { print "FAIL: full not dense: " $0; bad = 1 }
      if ($c["selector"] == "locks" && !($c["mean_tokens"] < $c["length"] - 16)) { print "FAIL: locks attends all: " $0; bad = 1 }
      # positions L - 13, L - 9, L - 5, L - 1 (the window ends at L - 1): full attends t + 1
      if ($c["selector"] == "full" && $c["mean_tokens"] != $c["length"] - 6) { print "FAIL: full attends " $c["mean_tokens"] " on average, want " $c["length"] - 6 " (positions L - 13 .. L - 1): " $0; bad = 1 } }
    END { if (n != 4 || len[200] != 2 || len[400] != 2) { print "FAIL: want 2 rows at 200 and 2 at 400, got " n; bad = 1 }
          exit bad }' "$TMP/f.csv" || { cat "$TMP/f.csv"; exit 1; }
echo "model_fidelity_window: rows at 200 and 400, full == dense, locks sparse: ok"
