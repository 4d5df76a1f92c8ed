#!/usr/bin/env bash
# plot-eval.sh — render the selector sweep of `locks eval --csv FILE` as a PNG:
# mass coverage relative to the oracle vs token budget, one line per selector
# (the rows with layer = "all", i.e. averaged over layers and steps).
#
# usage: scripts/plot-eval.sh EVAL.csv OUT.png [TITLE]
# Installs Debian's gnuplot-nox if gnuplot is missing (needs root and apt).
set -euo pipefail
csv=${1:?usage: plot-eval.sh EVAL.csv OUT.png [TITLE]}
png=${2:?usage: plot-eval.sh EVAL.csv OUT.png [TITLE]}
title=${3:-"Mass coverage relative to the oracle"}

. "$(dirname "$0")/plot-common.sh"
need_gnuplot plot-eval

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# header: selector,budget,layer,coverage,coverage_rel,...; one file per selector
awk -F, -v dir="$tmp" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["layer"] == "all" && $col["selector"] != "full" {
        f = dir "/" $col["selector"] ".dat"
        if (!(f in seen)) { seen[f] = 1; order[++n] = $col["selector"] }
        print $col["budget"], $col["coverage_rel"], $col["coverage"] >> f
    }
    END { for (i = 1; i <= n; i++) print order[i] > (dir "/order") }' "$csv"
[ -s "$tmp/order" ] || { echo "plot-eval: no averaged rows in $csv" >&2; exit 1; }

plots=""
while read -r sel; do
    [ -n "$plots" ] && plots="$plots, "
    plots="$plots'$tmp/$sel.dat' using 1:2 with linespoints lw 2 pt 7 title '$sel'"
done < "$tmp/order"

plot_png "$png" "$title" 'token budget' 'mass coverage / oracle' 'set yrange [*:1.02]' "$plots"
echo "plot-eval: wrote $png"
