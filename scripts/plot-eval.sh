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

if ! command -v gnuplot >/dev/null 2>&1; then
    echo "plot-eval: installing gnuplot-nox" >&2
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq gnuplot-nox >/dev/null
fi

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

gnuplot <<GP
set terminal pngcairo size 1000,560 enhanced font 'sans,11' noenhanced
set output '$png'
set title "$title"
set xlabel 'token budget'
set ylabel 'mass coverage / oracle'
set logscale x 2
set grid
set key outside right top
set yrange [*:1.02]
plot $plots
GP
echo "plot-eval: wrote $png"
