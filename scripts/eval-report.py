#!/usr/bin/env python3
"""eval-report.py — turns the JSONL of `locks eval --tasks` into eval/RESULTS.md and PNGs.

usage: scripts/eval-report.py RESULTS.jsonl [--out eval/RESULTS.md] [--plots eval]
                              [--command "the command that made the JSONL"]

One JSONL record is one (sample, selector, budget) decode; see eval/README.md for the
fields. Accuracy is RULER's score (share of expected answers contained in the output,
case-insensitively) averaged over samples, with a 95% Wilson interval (for tasks with
several answers the per-sample score is fractional; the interval then treats the mean
as a binomial proportion over the samples, which is approximate). Carrier recall pools
the (step, layer, KV head, carrier page) events where the oracle selected a carrier page
and counts those the selector selected too; mass coverage is averaged per decode step.
Python 3 standard library only; plots need gnuplot (scripts/fetch-haystack.sh --gnuplot).
"""
import argparse
import collections
import datetime
import json
import math
import os
import shutil
import subprocess
import sys

SEL_ORDER = ["full", "oracle", "locks", "quest", "shadow", "rocket"]
TASK_ORDER = ["passkey", "niah_single", "niah_multikey", "niah_multivalue",
              "niah_multiquery", "vt", "fwe"]


def wilson(p, n, z=1.96):
    """95% Wilson score interval of a proportion p observed over n trials."""
    if n == 0:
        return (float("nan"), float("nan"))
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def order(keys, pref):
    return [k for k in pref if k in keys] + sorted(k for k in keys if k not in pref)


def load(path):
    recs = []
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError as e:
                print(f"eval-report: {path}:{ln}: skipped ({e})", file=sys.stderr)
    return recs


class Cell:
    """Aggregate of one (task, selector, budget) group."""

    def __init__(self):
        self.scores = []
        self.by_sample = {}
        self.carrier_events = 0
        self.carrier_hits = 0
        self.mass = []
        self.mass_rel = []
        self.decode_ms = 0.0
        self.gen_tokens = 0

    def add(self, r):
        self.scores.append(float(r["score"]))
        self.by_sample[(r["task"], r["context"], r["sample"])] = float(r["score"])
        self.carrier_events += int(r.get("carrier_events", 0))
        self.carrier_hits += int(r.get("carrier_hits", 0))
        if r.get("mass_cov") is not None:
            self.mass.append(float(r["mass_cov"]))
        if r.get("mass_cov_oracle"):
            self.mass_rel.append(float(r["mass_cov"]) / float(r["mass_cov_oracle"]))
        self.decode_ms += float(r.get("decode_ms", 0.0))
        self.gen_tokens += int(r.get("gen_tokens", 0))

    @property
    def n(self):
        return len(self.scores)

    @property
    def acc(self):
        return sum(self.scores) / len(self.scores) if self.scores else float("nan")

    def ci(self):
        return wilson(self.acc, self.n)

    @property
    def recall(self):
        return self.carrier_hits / self.carrier_events if self.carrier_events else float("nan")

    def recall_ci(self):
        return wilson(self.recall, self.carrier_events)


def sign_test(a, b):
    """Paired exact sign test (McNemar) of two cells over their common samples, a sample
    counting as solved when its score is >= 0.5. Returns (n_a_only, n_b_only, p)."""
    common = set(a.by_sample) & set(b.by_sample)
    na = sum(1 for k in common if a.by_sample[k] >= 0.5 > b.by_sample[k])
    nb = sum(1 for k in common if b.by_sample[k] >= 0.5 > a.by_sample[k])
    n = na + nb
    if n == 0:
        return na, nb, 1.0
    k = min(na, nb)
    p = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n * 2
    return na, nb, min(1.0, p)


def group(recs, keyf):
    cells = collections.defaultdict(Cell)
    for r in recs:
        cells[keyf(r)].add(r)
    return cells


def budget_label(b):
    return "dense" if b == 0 else str(b)


def fmt_acc(c):
    if c is None or c.n == 0:
        return "–"
    lo, hi = c.ci()
    return f"{100 * c.acc:.1f} [{100 * lo:.0f}–{100 * hi:.0f}] ({c.n})"


def fmt_recall(c):
    if c is None or c.carrier_events == 0:
        return "–"
    return f"{100 * c.recall:.1f} ({c.carrier_events})"


def fmt_mass(c):
    if c is None or not c.mass:
        return "–"
    rel = sum(c.mass_rel) / len(c.mass_rel) if c.mass_rel else float("nan")
    return f"{sum(c.mass) / len(c.mass):.3f} / {rel:.3f}"


def table(lines, title, rows, cols, cellf):
    lines.append(title)
    lines.append("")
    lines.append("| budget | " + " | ".join(cols) + " |")
    lines.append("|---|" + "---|" * len(cols))
    for b in rows:
        lines.append(f"| {budget_label(b)} | " + " | ".join(cellf(b, s) for s in cols) + " |")
    lines.append("")


def dense_cell(cells, key_prefix):
    """The `full` selector runs once per sample (budget 0 = dense); look it up."""
    return cells.get(key_prefix + ("full", 0))


def drop_budget(cells, task, sels, budgets):
    """For each selector: the largest budget (scanning down) where accuracy falls more
    than 5 points below full attention, with both cells, or None."""
    full = dense_cell(cells, (task,))
    out = {}
    if full is None:
        return out
    for s in sels:
        if s == "full":
            continue
        found = None
        for b in sorted(budgets, reverse=True):
            c = cells.get((task, s, b))
            if c and c.n and c.acc < full.acc - 0.05:
                found = (b, c)
                break
        out[s] = found
    return out


def plot(path_png, recs_cells, tasks, sels, budgets, metric, ylabel):
    """One panel per task: metric vs budget (log2), one line per selector; `full` as a
    flat line at its dense value."""
    gp = shutil.which("gnuplot")
    if not gp:
        print("eval-report: gnuplot not found, no plot " + path_png, file=sys.stderr)
        return False
    data_dir = os.path.dirname(path_png) or "."
    dat = os.path.join(data_dir, os.path.basename(path_png)[:-4] + ".dat")
    with open(dat, "w") as f:
        for ti, t in enumerate(tasks):
            for s in sels:
                f.write(f"# task {t} selector {s}\n")
                for b in budgets:
                    c = recs_cells.get((t, s, b)) if s != "full" else recs_cells.get((t, "full", 0))
                    if c is None or c.n == 0:
                        continue
                    v = c.acc if metric == "acc" else c.recall
                    if v != v:  # NaN
                        continue
                    if metric == "acc":
                        lo, hi = c.ci()
                    else:
                        lo, hi = c.recall_ci()
                    f.write(f"{b} {100 * v:.3f} {100 * lo:.3f} {100 * hi:.3f}\n")
                f.write("\n\n")
    ncol = min(3, len(tasks))
    nrow = (len(tasks) + ncol - 1) // ncol
    colors = {"full": "black", "oracle": "gray40", "locks": "red", "quest": "blue",
              "shadow": "dark-green", "rocket": "orange"}
    script = [
        f"set terminal pngcairo size {420 * ncol},{320 * nrow} font 'sans,9'",
        f"set output '{path_png}'",
        "set logscale x 2",
        f"set xrange [{min(budgets) / 1.4}:{max(budgets) * 1.4}]",
        "set yrange [-5:105]",
        "set grid", "set termoption noenhanced",
        "set key bottom right font 'sans,8'",
        f"set multiplot layout {nrow},{ncol}",
    ]
    for ti, t in enumerate(tasks):
        script.append(f"set title '{t}'")
        script.append("set xlabel 'token budget'")
        script.append(f"set ylabel '{ylabel}'")
        parts = []
        for si, s in enumerate(sels):
            idx = ti * len(sels) + si
            col = colors.get(s, "purple")
            parts.append(f"'{dat}' index {idx} using 1:2 with linespoints lw 2 "
                         f"lc rgb '{col}' title '{s}'")
        script.append("plot " + ", ".join(parts))
    script.append("unset multiplot")
    r = subprocess.run([gp], input="\n".join(script) + "\n", text=True,
                       capture_output=True)
    if r.returncode != 0:
        print("eval-report: gnuplot failed:\n" + r.stderr, file=sys.stderr)
        return False
    os.remove(dat)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("--out", default="eval/RESULTS.md")
    ap.add_argument("--plots", default="eval")
    ap.add_argument("--command", default="")
    ap.add_argument("--note", default="", help="a file whose text is put under the header")
    a = ap.parse_args()

    recs = []
    for path in a.jsonl:
        recs += load(path)
    if not recs:
        print("eval-report: no records", file=sys.stderr)
        return 1
    # A table per (task, context): label "task@2048".
    for r in recs:
        r["task_name"] = r["task"]
        r["task"] = f"{r['task']}@{r['context']}"
    tasks = sorted({r["task"] for r in recs},
                   key=lambda t: (TASK_ORDER.index(t.split("@")[0])
                                  if t.split("@")[0] in TASK_ORDER else 99, int(t.split("@")[1])))
    sels = order({r["selector"] for r in recs}, SEL_ORDER)
    budgets = sorted({int(r["budget"]) for r in recs if int(r["budget"]) > 0})
    contexts = sorted({int(r["context"]) for r in recs})
    samples = {(r["task"], r["context"], r["sample"]) for r in recs}

    cells = group(recs, lambda r: (r["task"], r["selector"], int(r["budget"])))
    ctx_cells = group(recs, lambda r: (r["context"], r["selector"], int(r["budget"])))
    all_cells = group(recs, lambda r: ("all", r["selector"], int(r["budget"])))

    meta = {}
    for k in ("model", "commit", "machine", "threads"):
        vals = sorted({str(r[k]) for r in recs if k in r})
        if vals:
            meta[k] = ", ".join(vals)
    L = []
    L.append("# Long-context tasks: accuracy and carrier recall per selector and budget")
    L.append("")
    L.append(f"Generated {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC by "
             f"`scripts/eval-report.py` from `{' '.join(os.path.basename(j) for j in a.jsonl)}` "
             f"({len(recs)} decodes, {len(samples)} samples).")
    L.append("")
    for k in ("model", "commit", "machine", "threads"):
        if k in meta:
            L.append(f"- {k}: `{meta[k]}`")
    L.append(f"- contexts (prompt tokens): {', '.join(str(c) for c in contexts)}; "
             f"budgets: {', '.join(str(b) for b in budgets)}; selectors: {', '.join(sels)}")
    if a.command:
        L.append(f"- command: `{a.command}`")
    L.append("")
    if a.note and os.path.exists(a.note):
        with open(a.note) as f:
            L.append(f.read().rstrip())
        L.append("")
    L.append("Accuracy: RULER's score in % (share of expected answers contained in the "
             "greedy answer, case-insensitive), `mean [95% Wilson interval] (samples)`. "
             "`full` is dense attention (it ignores the budget) and appears in every row. "
             "Carrier recall: % of the (decode step, layer, KV head, carrier page) events "
             "in which the oracle selected a page holding an answer needle and the selector "
             "selected it too `(events)`. Mass coverage: attention mass of the selected "
             "pages `absolute / relative to the oracle`, mean over decode steps.")
    L.append("")

    # ---- headline: where does each selector fall > 5 points below full ----------------
    L.append("## Where each selector falls more than 5 points below full attention")
    L.append("")
    L.append("Scanning budgets from the largest down, the first budget at which the "
             "selector's accuracy is more than 5 points below dense attention; "
             "in brackets the p-value of a paired exact sign test against dense attention "
             "on the same samples (solved = score >= 0.5); `none`: never more than 5 points "
             "below at the budgets run; `n/a`: dense attention itself fails the task. Oracle "
             "and LOCKS accuracy at that budget are shown beside it. `all` pools every task "
             "and context.")
    L.append("")
    L.append("| task | full | " + " | ".join(s for s in sels if s != "full") + " |")
    L.append("|---|---|" + "---|" * (len(sels) - 1))
    for t in tasks + ["all"]:
        src = all_cells if t == "all" else cells
        drops = drop_budget(src, t, sels, budgets)
        full = dense_cell(src, (t,))
        row = [t, f"{100 * full.acc:.1f} ({full.n})" if full else "–"]
        for s in sels:
            if s == "full":
                continue
            d = drops.get(s)
            if full is None or full.acc < 0.05:
                row.append("n/a")
                continue
            if d is None:
                row.append("none")
                continue
            b, c = d
            _, _, p = sign_test(full, c)
            sig = f" (p={p:.2g})" if p < 0.05 else f" (p={p:.1f})"
            extra = ""
            if s not in ("oracle", "locks"):
                o = src.get((t, "oracle", b))
                lk = src.get((t, "locks", b))
                if o and lk:
                    extra = f"; oracle {100 * o.acc:.0f}, locks {100 * lk.acc:.0f}"
            elif s == "locks":
                o = src.get((t, "oracle", b))
                if o:
                    extra = f"; oracle {100 * o.acc:.0f}"
                    lo_, or_, p_ = sign_test(c, o)
                    extra += f", locks-only {lo_} / oracle-only {or_}"
            row.append(f"{b}: {100 * c.acc:.1f}{sig}{extra}")
        L.append("| " + " | ".join(row) + " |")
    L.append("")

    L.append("Largest budget at which the selector is significantly below dense attention "
             "(paired sign test p < 0.05 and more than 5 points below): accuracy, and the "
             "oracle's and LOCKS' at that budget.")
    L.append("")
    L.append("| task | " + " | ".join(s for s in sels if s != "full") + " |")
    L.append("|---|" + "---|" * (len(sels) - 1))
    for t in tasks + ["all"]:
        src = all_cells if t == "all" else cells
        full = dense_cell(src, (t,))
        row = [t]
        for s in sels:
            if s == "full":
                continue
            if full is None or full.acc < 0.05:
                row.append("n/a")
                continue
            hit = None
            for b in sorted(budgets, reverse=True):
                c = src.get((t, s, b))
                if c and c.n and c.acc < full.acc - 0.05 and sign_test(full, c)[2] < 0.05:
                    hit = (b, c)
                    break
            if hit is None:
                row.append("none")
                continue
            b, c = hit
            o = src.get((t, "oracle", b))
            lk = src.get((t, "locks", b))
            row.append(f"{b}: {100 * c.acc:.0f} (p={sign_test(full, c)[2]:.2g}); "
                       f"oracle {100 * o.acc:.0f}, locks {100 * lk.acc:.0f}" if o and lk
                       else f"{b}: {100 * c.acc:.0f}")
        L.append("| " + " | ".join(row) + " |")
    L.append("")

    # ---- per-task tables -----------------------------------------------------------------
    def accf(src, t):
        return lambda b, s: fmt_acc(src.get((t, "full", 0)) if s == "full" else src.get((t, s, b)))

    def recf(src, t):
        return lambda b, s: fmt_recall(src.get((t, s, b)))

    def massf(src, t):
        return lambda b, s: fmt_mass(src.get((t, s, b)))

    L.append("## All tasks pooled")
    L.append("")
    table(L, "Accuracy (%)", budgets, sels, accf(all_cells, "all"))
    table(L, "Carrier recall (%)", budgets, [s for s in sels if s != "full"],
          recf(all_cells, "all"))
    table(L, "Mass coverage (absolute / relative to oracle)", budgets,
          [s for s in sels if s != "full"], massf(all_cells, "all"))
    for t in tasks:
        L.append(f"## {t}")
        L.append("")
        table(L, "Accuracy (%)", budgets, sels, accf(cells, t))
        if any(c.carrier_events for k, c in cells.items() if k[0] == t):
            table(L, "Carrier recall (%)", budgets, [s for s in sels if s != "full"],
                  recf(cells, t))
        table(L, "Mass coverage", budgets, [s for s in sels if s != "full"], massf(cells, t))
    if len(contexts) > 1:
        L.append("## By context length (all tasks pooled)")
        L.append("")
        for c in contexts:
            table(L, f"Accuracy (%) at {c} tokens", budgets, sels, accf(ctx_cells, c))

    # ---- wall time ------------------------------------------------------------------------
    L.append("## Wall time")
    L.append("")
    pre = collections.defaultdict(list)
    seen = set()
    for r in recs:
        k = (r["task"], r["context"], r["sample"])
        if k not in seen and "prefill_ms" in r:
            seen.add(k)
            pre[r["context"]].append(float(r["prefill_ms"]))
    L.append("| context | samples | prefill s (mean) | decode ms/token by selector |")
    L.append("|---|---|---|---|")
    for c in contexts:
        per = []
        for s in sels:
            ms = sum(float(r.get("decode_ms", 0)) for r in recs
                     if r["context"] == c and r["selector"] == s)
            tok = sum(int(r.get("gen_tokens", 0)) for r in recs
                      if r["context"] == c and r["selector"] == s)
            if tok:
                per.append(f"{s} {ms / tok:.0f}")
        p = pre.get(c, [])
        L.append(f"| {c} | {len(p)} | {sum(p) / len(p) / 1000:.1f} | {', '.join(per)} |"
                 if p else f"| {c} | 0 | – | {', '.join(per)} |")
    total_s = sum(float(r.get("decode_ms", 0)) for r in recs) / 1000 + \
        sum(sum(v) for v in pre.values()) / 1000
    L.append("")
    L.append(f"Total prefill + decode time in the records: {total_s / 60:.1f} min.")
    L.append("")

    # ---- plots ----------------------------------------------------------------------------
    os.makedirs(a.plots, exist_ok=True)
    pa = os.path.join(a.plots, "accuracy.png")
    pr = os.path.join(a.plots, "carrier_recall.png")
    ok1 = plot(pa, cells, tasks, sels, budgets, "acc", "accuracy (%)")
    rec_tasks = [t for t in tasks
                 if any(c.carrier_events for k, c in cells.items() if k[0] == t)]
    ok2 = rec_tasks and plot(pr, cells, rec_tasks, [s for s in sels if s != "full"], budgets,
                             "recall", "carrier recall (%)")
    rel = os.path.relpath(a.plots, os.path.dirname(a.out) or ".")
    if ok1:
        L.append(f"![accuracy vs budget]({rel}/accuracy.png)")
        L.append("")
    if ok2:
        L.append(f"![carrier recall vs budget]({rel}/carrier_recall.png)")
        L.append("")

    with open(a.out, "w") as f:
        f.write("\n".join(L).rstrip() + "\n")
    print(f"eval-report: wrote {a.out}" + (f", {pa}" if ok1 else "") + (f", {pr}" if ok2 else ""),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
