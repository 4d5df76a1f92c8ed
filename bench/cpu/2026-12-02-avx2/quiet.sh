#!/usr/bin/env bash
# quiet.sh CMD...: keep every process working under /work/wt (helpers' builds/tests) and
# /work/peer stopped while CMD runs (quiet_freezer.py), after waiting for the 1-minute load to
# fall to <= 1.0; then continue them all.
cnt=/tmp/quiet.$$.n
python3 /work/quiet_freezer.py "$cnt" & freezer=$!
thaw() { kill -TERM "$freezer" 2>/dev/null; wait "$freezer" 2>/dev/null; rm -f "$cnt"; }
trap thaw EXIT; trap "exit 143" TERM INT HUP
sleep 1
for i in $(seq 1 90); do
  l=$(cut -d' ' -f1 /proc/loadavg); awk -v l="$l" 'BEGIN{exit !(l <= 1.0)}' && break; sleep 5
done
echo "quiet.sh: $(cat $cnt) processes stopped; load $(cut -d' ' -f1-3 /proc/loadavg) at start $(date -u +%T)" >&2
"$@"
