import os, signal, sys, time
# Stops (SIGSTOP) every process whose cwd is under /work/wt or /work/peer, rescanning every 0.5 s,
# until SIGTERM; then continues all it stopped.
stopped = set()
def scan():
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try: c = os.readlink('/proc/%s/cwd' % p)
        except OSError: continue
        if c.startswith('/work/wt/') or c.startswith('/work/peer'):
            try: os.kill(int(p), signal.SIGSTOP); stopped.add(int(p))
            except OSError: pass
run = True
def stop(*a):
    global run; run = False
signal.signal(signal.SIGTERM, stop)
while run:
    scan(); open(sys.argv[1], 'w').write(str(len(stopped)))
    time.sleep(0.5)
scan()
for p in stopped:
    try: os.kill(p, signal.SIGCONT)
    except OSError: pass
