#!/usr/bin/env bash
# plot-fidelity.sh — render `locks eval --fidelity ... --csv FILE` as a PNG: top-1
# agreement with dense attention vs mean tokens attended, one line per (document,
# selector) over the fixed budgets, mass-target rows as separate points (layer = -1
# rows, i.e. every layer sparse).
#
# usage: scripts/plot-fidelity.sh FIDELITY.csv OUT.png [TITLE]
# Installs Debian's gnuplot-nox if gnuplot is missing (needs root and apt).
set -euo pipefail
csv=${1:?usage: plot-fidelity.sh FIDELITY.csv OUT.png [TITLE]}
png=${2:?usage: plot-fidelity.sh FIDELITY.csv OUT.png [TITLE]}
title=${3:-"Teacher-forced top-1 agreement with dense attention"}

. "$(dirname "$0")/plot-common.sh"
need_gnuplot plot-fidelity

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# header: document,selector,budget,mass,layer,positions,top1_agree,mean_kl,mean_tokens,...
awk -F, -v dir="$tmp" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["layer"] == -1 && $col["document"] != "all" {
        kind = $col["mass"] > 0 ? "mass" : "budget"
        name = $col["document"] "_" $col["selector"] "_" kind
        f = dir "/" name ".dat"
        if (!(f in seen)) { seen[f] = 1; order[++n] = name }
        print $col["mean_tokens"], 100 * $col["top1_agree"] >> f
    }
    END { for (i = 1; i <= n; i++) print order[i] > (dir "/order") }' "$csv"
[ -s "$tmp/order" ] || { echo "plot-fidelity: no rows in $csv" >&2; exit 1; }

plots=""
while read -r name; do
    [ -n "$plots" ] && plots="$plots, "
    case "$name" in
    *_mass) style="points pt 9 ps 1.6" ;;
    *) style="linespoints lw 2 pt 7" ;;
    esac
    plots="$plots'$tmp/$name.dat' using 1:2 with $style title '${name//_/ }'"
done < "$tmp/order"

plot_png "$png" "$title" 'mean tokens attended per (step, layer, KV head)' 'top-1 agreement with dense (%)' "" "$plots"
echo "plot-fidelity: wrote $png"
