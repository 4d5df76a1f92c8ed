#!/usr/bin/env bash
# eval-table.sh — markdown tables from `locks eval --csv FILE` (rows with layer = all):
# mass coverage relative to the oracle, then absolute mass coverage, per budget (rows)
# and selector (columns), then bytes read per layer-step relative to dense.
# usage: scripts/eval-table.sh EVAL.csv
set -euo pipefail
csv=${1:?usage: eval-table.sh EVAL.csv}
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
$col["layer"] == "all" {
    s = $col["selector"]; b = $col["budget"]
    if (!(s in seen_s)) { seen_s[s] = 1; sel[++ns] = s }
    if (!(b in seen_b)) { seen_b[b] = 1; bud[++nb] = b }
    rel[s, b] = $col["coverage_rel"]; abs[s, b] = $col["coverage"]
    byt[s, b] = ($col["bytes_meta"] + $col["bytes_kv"]) / $col["bytes_dense"]
    rec[s, b] = $col["recall"]
}
function table(title, arr,   i, j, line) {
    printf "%s\n\n| budget |", title
    for (j = 1; j <= ns; j++) printf " %s |", sel[j]
    printf "\n|---:|"
    for (j = 1; j <= ns; j++) printf "---:|"
    printf "\n"
    for (i = 1; i <= nb; i++) {
        printf "| %s |", bud[i]
        for (j = 1; j <= ns; j++) printf " %.3f |", arr[sel[j], bud[i]]
        printf "\n"
    }
    printf "\n"
}
END {
    table("Mass coverage / oracle (M(S) / M(S_oracle)):", rel)
    table("Mass coverage M(S):", abs)
    table("Oracle recall (non-forced pages):", rec)
    table("Bytes read per layer-step / dense K+V bytes (metadata + attended K/V):", byt)
}' "$csv"
