#!/usr/bin/env python3
"""fidelity-table.py — Markdown tables from `locks eval --fidelity ... --csv FILE`.

usage: scripts/fidelity-table.py FIDELITY.csv
Per document: fixed budgets (rows) x selectors (columns), top-1 agreement with dense
attention in % and mean KL(dense || sparse) in nats; then the mass-target rows with
their mean tokens attended and bytes per step beside the fixed budgets'.
"""
import csv
import sys
from collections import OrderedDict


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    rows = [r for r in rows if r["layer"] == "-1"]
    docs = list(OrderedDict.fromkeys(r["document"] for r in rows))
    sels = list(OrderedDict.fromkeys(r["selector"] for r in rows))
    for doc in docs:
        dr = [r for r in rows if r["document"] == doc]
        fixed = [r for r in dr if float(r["mass"]) == 0]
        budgets = sorted({int(r["budget"]) for r in fixed})
        print(f"\n**{doc}** — top-1 agreement % / mean KL (nats); positions counted in brackets\n")
        print("| budget | " + " | ".join(sels) + " |")
        print("|---" * (len(sels) + 1) + "|")
        for b in budgets:
            cells = []
            for s in sels:
                r = next((r for r in fixed if r["selector"] == s and int(r["budget"]) == b), None)
                cells.append("" if r is None else
                             f"{100 * float(r['top1_agree']):.1f} / {float(r['mean_kl']):.4f} ({r['positions']})")
            print(f"| {b} | " + " | ".join(cells) + " |")
        mass = [r for r in dr if float(r["mass"]) > 0]
        if mass:
            print(f"\n**{doc}** — mass targets vs fixed budgets: mean tokens attended per (step, layer, KV head),"
                  " top-1 agreement %, mean KL, K/V + metadata bytes per step (all layers)\n")
            print("| selector | rule | mean tokens | top-1 % | mean KL | MB/step | positions |")
            print("|---|---|---|---|---|---|---|")
            for s in sels:
                for r in sorted([r for r in dr if r["selector"] == s], key=lambda r: float(r["mean_tokens"])):
                    rule = f"mass {float(r['mass']):g} (cap {r['budget']})" if float(r["mass"]) > 0 else f"budget {r['budget']}"
                    print(f"| {s} | {rule} | {float(r['mean_tokens']):.1f} | {100 * float(r['top1_agree']):.1f} |"
                          f" {float(r['mean_kl']):.4f} | {float(r['bytes_per_step']) / 1e6:.2f} | {r['positions']} |")


if __name__ == "__main__":
    main()
