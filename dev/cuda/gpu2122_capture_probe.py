#!/usr/bin/env python3
"""Which call breaks python/tests/test_hf.py::test_static_cache_in_cuda_graph's capture
(cudaErrorStreamCaptureInvalidated on the device, 2026-12-02, main b121348)?

Replays that test's graph path (a tiny bf16 Llama, LocksStaticCache, prefill eagerly, then
one decode step under torch.cuda.graph) with every liblocks entry wrapped: after each call
it asks CUDA whether the capturing stream is still capturing and prints the first call
after which it is not, with its arguments. Run in the repository root with LOCKS_LIBRARY
pointing at a CUDA liblocks.so and PYTHONPATH=python:python/tests.
"""
import ctypes
import sys

import torch

import locks._capi as capi

state = {"capturing": False, "reported": False, "calls": []}
cudart = ctypes.CDLL("libcudart.so.13")
cudart.cudaStreamIsCapturing.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]


def status():
    s = ctypes.c_int(-1)
    cudart.cudaStreamIsCapturing(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), ctypes.byref(s))
    return s.value  # 0 none, 1 active, 2 invalidated


def wrap(name, fn):
    def w(*a):
        before = status() if state["capturing"] else None
        r = fn(*a)
        if state["capturing"]:
            after = status()
            state["calls"].append(name)
            if before == 1 and after != 1 and not state["reported"]:
                state["reported"] = True
                print(f"CAPTURE BROKEN by {name}{a!r} -> {r!r} (status {before} -> {after})", flush=True)
        return r
    return w


names = [n for n in capi.lib.__dict__ if n.startswith("locks_")]
for n in names:
    setattr(capi.lib, n, wrap(n, getattr(capi.lib, n)))
print(f"wrapped {len(names)} liblocks entries already looked up", flush=True)


class Lib:  # later lookups go through the wrapper too
    def __getattr__(self, n):
        f = getattr(capi._lib_raw, n)
        return wrap(n, f) if n.startswith("locks_") else f


capi._lib_raw = capi.lib
import locks.cache  # noqa: E402
import locks.errors  # noqa: E402
import locks.hf  # noqa: E402
for mod in (capi, locks.cache, locks.errors, locks.hf):
    if hasattr(mod, "lib"):
        mod.lib = Lib()

from test_hf import tiny_llama  # noqa: E402

torch.manual_seed(0)
model = tiny_llama("cuda", torch.bfloat16, 1234)
n, steps = 200, 4
ids = torch.randint(0, 512, (1, n + steps), device="cuda")
with torch.no_grad():
    locks.hf.enable(model, budget=4096)
    cache = locks.hf.LocksStaticCache(model, max_cache_len=n + steps + 8, budget=4096)
    out = model(ids[:, :n], past_key_values=cache, use_cache=True)
    tok = ids[:, n:n + 1].clone()
    pos = torch.tensor([[n]], device="cuda")
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    prev = {"where": None, "hit": False}

    def tracer(frame, event, arg):  # every executed line: the first after which capture is gone
        if event == "line" and not prev["hit"]:
            if status() != 1:
                prev["hit"] = True
                print(f"CAPTURE BROKEN by the line before: {prev['where']}", flush=True)
            prev["where"] = f"{frame.f_code.co_filename}:{frame.f_lineno} ({frame.f_code.co_name})"
        return tracer

    try:
        with torch.cuda.graph(g):
            state["capturing"] = True
            s0 = status()
            print(f"capture status at start: {s0}", flush=True)
            sys.settrace(tracer)
            step = model(tok, past_key_values=cache, position_ids=pos, use_cache=True)
            sys.settrace(None)
            print(f"capture status at the end of the forward: {status()}", flush=True)
            state["capturing"] = False
        print("capture OK", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"capture failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
    print("liblocks calls during the capture:", " ".join(state["calls"]), flush=True)
    if not state["reported"]:
        print("no liblocks call broke it: torch / transformers / locks.hf Python code did", flush=True)
sys.exit(0)
