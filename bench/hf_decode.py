"""Per-token decode of a Hugging Face transformers Llama: LOCKS (locks.hf) against
transformers' own static-cache SDPA decode, side by side in one process.

    python3 bench/hf_decode.py --layers 4 --contexts 32768,131072 --budget 2048

The model is LlamaForCausalLM from the Llama-3.1-8B config (hidden 4096, 32 query / 8 KV
heads, d=128, vocab 128256) with random bf16 weights, --layers decoder layers (32 is
the full model). Both caches are filled with the same random K/V (no prefill through
the model: timing only; random keys make attention near-uniform, the selector's worst
case), then each step runs model(next_token) for one sequence; the median of --steps
steps after --warmup is reported. Writes one JSON object per (context, method) line to
stdout and a Markdown table to --md.
"""
import argparse
import json
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

import locks
import locks.hf


def llama31_8b(layers: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=131072 + 4096,
                       rope_theta=500000.0, rms_norm_eps=1e-5, attn_implementation="sdpa")


def tiny(layers: int) -> LlamaConfig:
    """For a CPU smoke run of this script (--tiny): the same code path, small shapes."""
    return LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
                       num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=8192,
                       attn_implementation="sdpa")


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def time_steps(model, cache, ctx, steps, warmup, dev):
    tok = torch.randint(0, 500, (1, 1), device=dev)
    times = []
    for i in range(warmup + steps):
        pos = torch.tensor([ctx + i], device=dev)
        sync(dev)
        t0 = time.perf_counter()
        out = model(tok, past_key_values=cache, cache_position=pos, position_ids=pos[None], use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
        sync(dev)
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--contexts", default="32768,131072")
    ap.add_argument("--budget", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--md", default=None)
    ap.add_argument("--tiny", action="store_true", help="small CPU smoke run of this script")
    a = ap.parse_args()
    torch.manual_seed(0)
    cfg = tiny(a.layers) if a.tiny else llama31_8b(a.layers)
    dev = "cpu" if a.tiny else "cuda"
    with torch.device(dev):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    H, D, L = cfg.num_key_value_heads, cfg.head_dim, cfg.num_hidden_layers
    rows = []
    with torch.no_grad():
        for ctx in [int(x) for x in a.contexts.split(",")]:
            extra = a.warmup + a.steps + 16
            kv = [(torch.randn(1, H, ctx, D, device=dev, dtype=torch.bfloat16),
                   torch.randn(1, H, ctx, D, device=dev, dtype=torch.bfloat16)) for _ in range(L)]
            # transformers' static cache + SDPA
            model.set_attn_implementation("sdpa")
            sc = StaticCache(config=cfg, max_cache_len=ctx + extra)
            pos = torch.arange(ctx, device=dev)
            for layer, (k, v) in enumerate(kv):
                sc.update(k, v, layer, {"cache_position": pos})
            ms_sdpa = time_steps(model, sc, ctx, a.steps, a.warmup, dev)
            del sc
            if dev == "cuda":
                torch.cuda.empty_cache()
            # LOCKS: the same K/V written into a LocksCache (summaries built on the GPU)
            locks.hf.enable(model, budget=a.budget)
            lc = locks.hf.LocksCache(model, budget=a.budget, max_new_tokens=extra)
            for layer, (k, v) in enumerate(kv):
                lc.update(k, v, layer)
            lc._fresh.clear()
            ms_locks = time_steps(model, lc, ctx, a.steps, a.warmup, dev)
            locks.hf.disable(model)
            del lc, kv
            if dev == "cuda":
                torch.cuda.empty_cache()
            for name, ms in (("sdpa-static", ms_sdpa), (f"locks@{a.budget}", ms_locks)):
                r = {"context": ctx, "method": name, "layers": L, "ms_per_token": round(ms, 3)}
                rows.append(r)
                print(json.dumps(r), flush=True)
            print(json.dumps({"context": ctx, "speedup_locks_vs_sdpa": round(ms_sdpa / ms_locks, 3)}), flush=True)
    if a.md:
        with open(a.md, "w") as f:
            f.write(f"| context | layers | SDPA static cache ms/token | LOCKS@{a.budget} ms/token | ratio |\n")
            f.write("|---|---|---|---|---|\n")
            for i in range(0, len(rows), 2):
                s, lk = rows[i], rows[i + 1]
                f.write(f"| {s['context']} | {L} | {s['ms_per_token']} | {lk['ms_per_token']} | "
                        f"{s['ms_per_token'] / lk['ms_per_token']:.2f}x |\n")


if __name__ == "__main__":
    main()
