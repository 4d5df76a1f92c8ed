# plot-common.sh — what scripts/plot-eval.sh and scripts/plot-fidelity.sh share (sourced,
# not run): gnuplot, installed from Debian's gnuplot-nox when missing (needs root or
# sudo, and apt), and one PNG of lines over a log2 x axis.

# need_gnuplot WHO: installs gnuplot-nox if there is no gnuplot (WHO names the script).
need_gnuplot() {
    command -v gnuplot > /dev/null 2>&1 && return 0
    echo "$1: installing gnuplot-nox" >&2
    local sudo=sudo
    [ "$(id -u)" = 0 ] && sudo=""
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq gnuplot-nox > /dev/null
}

# plot_png PNG TITLE XLABEL YLABEL SETTINGS PLOTS: PNG of the gnuplot plot list PLOTS,
# x on a log2 axis, the key outside; SETTINGS more gnuplot lines before the plot (or "").
plot_png() {
    gnuplot <<GP
set terminal pngcairo size 1000,560 enhanced font 'sans,11' noenhanced
set output '$1'
set title "$2"
set xlabel '$3'
set ylabel '$4'
set logscale x 2
set grid
set key outside right top
$5
plot $6
GP
}
