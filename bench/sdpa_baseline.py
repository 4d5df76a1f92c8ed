#!/usr/bin/env python3
"""sdpa_baseline.py — torch's scaled_dot_product_attention (cuDNN backend first) on the
decode shapes of `locks bench --backend cuda`: one query token per sequence, K/V
[B, Hkv, ctx, d] bf16, no mask; GQA both as q [B, Hq, 1, d] with enable_gqa=True and
folded (q [B, Hkv, G, d]); cuDNN, flash and mem-efficient backends; every launch after
an L2 flush, median of CUDA-event times; the fastest variant with error < 2e-2 against
an fp32 evaluation is the baseline (all are printed). Prints one line per
configuration and writes a CSV (kind=sdpa) for bench/gpu_table.py.

usage: python3 bench/sdpa_baseline.py [--csv FILE] [--shape llama3-8b,glm4-9b]
                                      [--context 32k,...] [--batch 1,8] [--trials 15]
"""
import argparse
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

SHAPES = {"llama3-8b": (32, 8, 128), "glm4-9b": (32, 2, 128), "smollm2": (9, 3, 64)}


def ints(s):
    out = []
    for x in s.split(","):
        x = x.strip().lower()
        out.append(int(x[:-1]) * 1024 if x.endswith("k") else int(x))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv")
    ap.add_argument("--shape", default="llama3-8b,glm4-9b")
    ap.add_argument("--context", default="32k,128k,256k,512k,1024k")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--trials", type=int, default=15)
    a = ap.parse_args()
    dev = torch.device("cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    rows = []
    print(f"torch {torch.__version__}, cudnn {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    for name in a.shape.split(","):
        hq, hkv, d = SHAPES[name]
        g = hq // hkv
        for b in ints(a.batch):
            for ctx in ints(a.context):
                torch.cuda.empty_cache()
                k = torch.randn(b, hkv, ctx, d, dtype=torch.bfloat16, device=dev)
                v = torch.randn(b, hkv, ctx, d, dtype=torch.bfloat16, device=dev)
                q1 = torch.randn(b, hq, 1, d, dtype=torch.bfloat16, device=dev)
                # two ways to express GQA decode: q [B, Hq, 1, d] with enable_gqa, or the
                # group folded into the query length, q [B, Hkv, G, d]; every backend that
                # runs is timed and the fastest correct one is the baseline
                variants = {"gqa": (q1, {"enable_gqa": True}), "fold": (q1.view(b, hkv, g, d), {})}
                ref = torch.softmax((q1[0, :g, 0].float() @ k[0, 0].float().T) / d ** 0.5, dim=-1) @ v[0, 0].float()
                best = None
                for vname, (q, kw) in variants.items():
                    for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                               SDPBackend.EFFICIENT_ATTENTION):
                        try:
                            with sdpa_kernel([be]):
                                o = F.scaled_dot_product_attention(q, k, v, **kw)
                            torch.cuda.synchronize()
                        except RuntimeError as e:
                            print(f"  {name} ctx {ctx} batch {b} {vname}/{be.name}: unavailable "
                                  f"({str(e).splitlines()[0][:70]})")
                            continue
                        og = o[0, :g, 0] if vname == "gqa" else o[0, 0]
                        err = ((og.float() - ref).norm() / ref.norm()).item()
                        ts = []
                        with sdpa_kernel([be]):
                            for _ in range(a.trials):
                                flush.zero_()
                                e0 = torch.cuda.Event(enable_timing=True)
                                e1 = torch.cuda.Event(enable_timing=True)
                                e0.record()
                                F.scaled_dot_product_attention(q, k, v, **kw)
                                e1.record()
                                e1.synchronize()
                                ts.append(e0.elapsed_time(e1))
                        ms = statistics.median(ts)
                        by = 2.0 * b * hkv * ctx * d * 2
                        print(f"  sdpa {name:9s} ctx {ctx:7d} batch {b} {vname:4s} {be.name:19s} {ms:8.3f} ms "
                              f"{by / ms / 1e9:5.2f} TB/s (err vs fp32 {err:.1e})", flush=True)
                        if err < 2e-2 and (best is None or ms < best[1]):
                            best = (f"{vname}/{be.name}", ms, by, err)
                        del o
                if best is None:
                    print(f"  {name} ctx {ctx} batch {b}: no SDPA variant ran")
                    continue
                used, ms, by, err = best
                print(f"sdpa {name:9s} ctx {ctx:7d} batch {b} best {used:26s} {ms:8.3f} ms {by / ms / 1e9:5.2f} TB/s",
                      flush=True)
                rows.append((name, ctx, b, used, ms, by, err))
                del q1, k, v
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("kind,shape,ctx,batch,backend,sdpa_ms,bytes,err\n")
            for r in rows:
                f.write("sdpa,%s,%d,%d,%s,%.6f,%.0f,%.2e\n" % r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
