#!/usr/bin/env bash
# The lead's quiet-machine run at the end of the session: nothing else may run meanwhile.
set -u
cd /work/main
L=/work/bench-final-logs; mkdir -p $L
wait_quiet() { # up to 4 min for the 1-minute load to fall to <= 1.0
  for _ in $(seq 48); do awk -v l="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN{exit !(l <= 1.0)}' && return 0; sleep 5; done
  echo "load still $(cut -d' ' -f1 /proc/loadavg)"; }
echo "start $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg) commit $(git rev-parse --short HEAD)" | tee $L/driver.log
wait_quiet | tee -a $L/driver.log
echo "serve-bench $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a $L/driver.log
scripts/serve-bench.sh --llama-server /work/peer/build-cpu/bin/llama-server -o $L/serve-bench.jsonl > $L/serve.log 2>&1
echo "serve-bench rc $? $(date -u +%T)" | tee -a $L/driver.log
wait_quiet | tee -a $L/driver.log
echo "issue 23 before/after $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a $L/driver.log
for i in 1 2; do
  for w in before after; do
    b=/work/wt/before/build/locks; [ $w = after ] && b=/work/main/build-cpu/locks
    $b bench --shape llama3-8b --context 131072 --budget 2048 > $L/bench-$w-$i.log 2>&1
    echo "bench $w $i rc $? $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a $L/driver.log
  done
done
for w in before after; do
  b=/work/wt/before/build/locks; [ $w = after ] && b=/work/main/build-cpu/locks
  $b demo > $L/demo-$w.log 2>&1
  echo "demo $w rc $? $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a $L/driver.log
done
wait_quiet | tee -a $L/driver.log
echo "cpu-peer $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a $L/driver.log
OUT=$L/cpu-peer scripts/cpu-peer.sh ${PEER_ARGS:-} > $L/peer.log 2>&1
echo "cpu-peer rc $? $(date -u +%T)" | tee -a $L/driver.log
echo "end $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a $L/driver.log
