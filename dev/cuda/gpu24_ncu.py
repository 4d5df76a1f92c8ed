#!/usr/bin/env python3
"""gpu24_ncu.py — the kernels of two profiled decode tokens (ncu --csv, metric
gpu__time_duration.sum, from `locks bench --model ... --profile`: one LOCKS mid-page token,
then one page-fill token: the same graph, so the same kernel list twice). Prints per kernel
name the count and the summed duration of each token, and the launches whose duration
differs most between them.

usage: python3 dev/cuda/gpu24_ncu.py NCU.csv
"""
import csv
import re
import sys

UNIT = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}


def short(name):
    name = re.sub(r"^void ", "", name)
    return re.split(r"[<(]", name, maxsplit=1)[0]


def main():
    rows = []
    with open(sys.argv[1], newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", "")) * UNIT.get(r["Metric Unit"], float("nan"))
        rows.append((int(r["ID"]), short(r["Kernel Name"]), v))
    rows.sort()
    n = len(rows)
    if n == 0 or n % 2:
        print(f"{n} kernels: expected two tokens of the same graph")
        if n == 0:
            return 1
    h = n // 2
    mid, fill = rows[:h], rows[h:2 * h]
    if [m[1] for m in mid] != [f[1] for f in fill]:
        print("warning: the two tokens' kernel lists differ")
    agg = {}
    for (_, k, a), (_, _, b) in zip(mid, fill):
        c = agg.setdefault(k, [0, 0.0, 0.0])
        c[0] += 1
        c[1] += a
        c[2] += b
    print(f"{h} kernels per token (each timed alone by ncu: no PDL overlap, no launch gaps)")
    print(f"{'kernel':44s} {'n':>4s} {'mid-page us':>12s} {'page-fill us':>13s} {'diff':>9s}")
    for k, (c, a, b) in sorted(agg.items(), key=lambda x: -x[1][2]):
        print(f"{k[:44]:44s} {c:4d} {a:12.1f} {b:13.1f} {b - a:9.1f}")
    ta, tb = sum(m[2] for m in mid), sum(f[2] for f in fill)
    print(f"{'sum':44s} {h:4d} {ta:12.1f} {tb:13.1f} {tb - ta:9.1f}")
    d = sorted(((f[2] - m[2], i, m[1], m[2], f[2]) for i, (m, f) in enumerate(zip(mid, fill))), reverse=True)
    print("largest differences (launch index, kernel, mid us, fill us):")
    for x in d[:12]:
        print(f"  {x[1]:4d} {x[2][:40]:40s} {x[3]:8.1f} {x[4]:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
