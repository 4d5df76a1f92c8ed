# gpu-common.sh — what the GPU run scripts share (scripts/gpu-final.sh, gpu-recheck.sh,
# dev/cuda/gpu24_run.sh; sourced from the repository root, not run). The caller sets
# T0 (the start, date +%s), B (the folder of test binaries), W (the folder for their logs)
# and rc; run_test sets rc=1 when a test fails.

# say TEXT...: TEXT after the seconds since T0
say() { echo "[$(( $(date +%s) - T0 )) s] $*"; }

# run_test NAME TIMEOUT [ENV=VALUE...]: $B/NAME under timeout, its output in $W/NAME.log;
# says its exit status and last line, and on a failure its first FAIL lines
run_test() {
  local t=$1 lim=$2; shift 2
  env "$@" timeout "$lim" "$B/$t" > "$W/$t.log" 2>&1; local r=$?
  say "$t exit $r: $(tail -1 "$W/$t.log")"
  [ $r = 0 ] || { rc=1; grep -m8 FAIL "$W/$t.log"; }
}
