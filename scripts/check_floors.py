#!/usr/bin/env python3
"""check_floors.py BUILD_DIR — the library's floors point one way (docs/DESIGN.md 4.1).

For every object file of the library, the engine, the evaluation code and the tools in
BUILD_DIR, `nm` lists the symbols the object defines and the ones it uses. An object that
uses a symbol defined by another object depends on it: an edge. The check fails
  - on an edge from an object to one on a higher floor (FLOORS below, lowest first), and
  - on a cycle among the library's objects (two objects of one floor that use each other).
Each failure names both files and one symbol. Prints the edges with --edges.

The backend is chosen once, when a cache is made (backend.c points the cache at a table of
operations); the public step entries call through that table, which nm does not see as an
edge, so a phase file holds its public entry and its CPU operation without pointing up.
"""
import fnmatch
import os
import subprocess
import sys

# Floors, lowest first. A file may use the files of its own floor and of the floors below.
FLOORS = [
    ("util", ["src/util.c", "src/status.c"]),
    ("math, pool, summaries", ["src/vmath.c", "src/pool.c", "src/summary.c"]),
    ("cache", ["src/cache.c"]),
    ("CPU attention kernels", ["src/attend.c"]),
    ("selectors", ["src/selectors/*.c", "src/selector.c"]),
    ("CPU step phases", ["src/score.c", "src/select.c", "src/attend_prefix.c", "src/step.c"]),
    ("backends", ["src/backend_cpu.c", "src/backend_cuda.c", "src/cuda/*.cu"]),
    ("cache calls, caller-owned pages, context parallelism",
     ["src/backend.c", "src/extkv.c", "src/cp.c", "src/abi.c"]),
    # the GPU engine, still in src/cuda/ (issue 23: it moves next to the CPU engine)
    ("model", ["src/model/*.c", "src/model/*.cu", "src/cuda/model_engine.cu"]),
    ("eval", ["src/eval/*.c"]),
    ("tools", ["tools/*.c", "tools/*/*.c"]),
]
LIBRARY_FLOORS = 8  # the first eight floors are liblocks: no cycles among their objects
TARGETS = ["locks", "locks_model", "locks_eval", "locks_cli", "locks_serve_request"]


# Files that count as one module for the cycle check: the CUDA backend's device files
# share the step's workspace helpers both ways (cache.cu, step.cu, topk_mb.cu); no edge
# of theirs may still point up.
UNITS = [("src/cuda/*.cu", "src/cuda/")]


def unit_of(src):
    for glob, name in UNITS:
        if fnmatch.fnmatch(src, glob) and floor_of(src) < LIBRARY_FLOORS:
            return name
    return src


def floor_of(src):
    """The floor that names the file itself, else the first whose pattern matches it."""
    for i, (_, globs) in enumerate(FLOORS):
        if src in globs:
            return i
    for i, (_, globs) in enumerate(FLOORS):
        if any(fnmatch.fnmatch(src, g) for g in globs):
            return i
    return None


def objects(build):
    """(source path relative to the repo, object path) of each object of TARGETS."""
    out = []
    for t in TARGETS:
        root = os.path.join(build, "CMakeFiles", t + ".dir")
        for d, _, files in os.walk(root):
            for f in files:
                if f.endswith((".c.o", ".cu.o")):
                    path = os.path.join(d, f)
                    out.append((os.path.relpath(path, root)[: -len(".o")], path))
    return sorted(set(out))


def symbols(obj):
    """(defined, used) external symbols of one object."""
    text = subprocess.run(["nm", "-P", obj], check=True, capture_output=True, text=True).stdout
    defined, used = set(), set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            used.add(name)
        elif kind in "TDBRVWCG":  # global text, data, bss, read-only, weak, common
            defined.add(name)
    return defined, used


def sccs(nodes, edges):
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    build = sys.argv[1]
    objs = objects(build)
    if not any(src == "src/cache.c" for src, _ in objs):
        print(f"check_floors: no library objects under {build}/CMakeFiles (build first)")
        return 1
    unplaced = [src for src, _ in objs if floor_of(src) is None]
    if unplaced:
        print("check_floors: files on no floor (add them to FLOORS):", " ".join(unplaced))
        return 1
    owner, used = {}, {}
    for src, path in objs:
        d, u = symbols(path)
        used[src] = u
        for s in d:
            owner.setdefault(s, src)
    edges, why = {}, {}
    for src, u in used.items():
        for s in sorted(u):
            dst = owner.get(s)
            if dst and dst != src:
                edges.setdefault(src, set()).add(dst)
                why.setdefault((src, dst), s)
    bad = 0
    for (src, dst), s in sorted(why.items()):
        fs, fd = floor_of(src), floor_of(dst)
        if "--edges" in sys.argv:
            print(f"  {src} -> {dst} ({s})")
        if fd > fs:
            print(f"UP: {src} [{FLOORS[fs][0]}] uses {s} from {dst} [{FLOORS[fd][0]}]")
            bad += 1
    lib = sorted({unit_of(src) for src, _ in objs if floor_of(src) < LIBRARY_FLOORS})
    lib_edges, lib_why = {}, {}
    for (a, b), sym in why.items():
        if floor_of(a) < LIBRARY_FLOORS and floor_of(b) < LIBRARY_FLOORS and unit_of(a) != unit_of(b):
            lib_edges.setdefault(unit_of(a), set()).add(unit_of(b))
            lib_why.setdefault((unit_of(a), unit_of(b)), f"{a} -> {b}: {sym}")
    for comp in sccs(lib, lib_edges):
        print("CYCLE: " + ", ".join(comp))
        for a in comp:
            for b in sorted(lib_edges.get(a, ())):
                if b in comp:
                    print(f"    {lib_why[(a, b)]}")
        bad += 1
    n_edges = sum(len(v) for v in edges.values())
    print(f"check_floors: {len(objs)} objects, {n_edges} edges, {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
