"""Per-token decode of a Hugging Face transformers Llama: LOCKS (locks.hf) against
transformers' own static-cache SDPA decode, side by side in one process.

    python3 bench/hf_decode.py --layers 32 --contexts 32768,131072 --budget 2048

The model is LlamaForCausalLM from the Llama-3.1-8B config (hidden 4096, 32 query / 8 KV
heads, d=128, vocab 128256) with random bf16 weights and --layers decoder layers (32,
the default, is the full model). Both caches are filled with the same random K/V (no
prefill through the model: timing only; random keys make attention near-uniform, the
selector's worst case), then each step is one model(next_token) for one sequence.
Two ways of running a step, both sides alike:
  eager: the forward called from Python, torch.cuda.synchronize() around each step;
  graph: the whole forward (embedding, 32 layers with their cache writes and
         attention, norm, LM head, argmax feeding the next token, position + 1)
         recorded once with torch.cuda.graph and replayed, synchronised around each.
SDPA side: transformers' StaticCache (its K/V write is index_copy_ at a device length)
and its SDPA attention. LOCKS side: locks.hf.LocksStaticCache (torch-owned bf16 pages,
the token's K/V by index_copy_, lengths / page summaries / sparse attention through a
locks.StepPlan: no host synchronisation, so the same capture works). The median of
--steps steps after --warmup is reported. One JSON object per (context, method) on
stdout, a Markdown table to --md.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM, StaticCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

import locks
import locks.hf


def llama31_8b(layers: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=layers,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=131072 + 4096,
                       rope_theta=500000.0, rms_norm_eps=1e-5, attn_implementation="sdpa")


def sdpa_gqa_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' SDPA call without its repeat_kv: with a mask (a static cache always
    passes one) transformers expands K/V to every query head before SDPA; this passes
    the static cache's K/V as they are with enable_gqa=True (the backend is chosen by
    --gqa-backends). Decode steps only; a prompt goes to transformers' own function."""
    if query.shape[2] > 1 or attention_mask is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register("sdpa_gqa", sdpa_gqa_forward)
AttentionMaskInterface.register("sdpa_gqa", sdpa_mask)
GQA_BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH}


def sync() -> None:
    torch.cuda.synchronize()


def time_eager(model, cache, pos0, steps, warmup):
    """Median ms of model(next_token) called from Python; the cache grows by warmup + steps."""
    tok = torch.randint(0, 500, (1, 1), device="cuda")
    times = []
    for i in range(warmup + steps):
        pos = torch.tensor([[pos0 + i]], device="cuda")
        sync()
        t0 = time.perf_counter()
        out = model(tok, past_key_values=cache, position_ids=pos, use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
        sync()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def time_graph(model, cache, pos0, steps, warmup):
    """Median ms of one replay of the captured forward (greedy token and position advance
    inside the graph); the cache grows by warmup + steps."""
    tok = torch.randint(0, 500, (1, 1), device="cuda")
    pos = torch.tensor([[pos0]], device="cuda")
    graph = torch.cuda.CUDAGraph()
    sync()
    with torch.cuda.graph(graph):
        out = model(tok, past_key_values=cache, position_ids=pos, use_cache=True)
        tok.copy_(out.logits[:, -1:].argmax(-1))
        pos.add_(1)
    times = []
    for i in range(warmup + steps):
        sync()
        t0 = time.perf_counter()
        graph.replay()
        sync()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    del graph
    return statistics.median(times)


def attempt(fn, *args):
    """fn(*args), or NaN with the error printed (the other columns still get measured)."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"error": f"{fn.__name__}: {type(e).__name__}: {e}"[:500]}), flush=True)
        sync()
        return float("nan")


def check_gqa() -> None:
    """sdpa_gqa_forward against transformers' SDPA path on the CPU (float32, a small
    Llama, StaticCache): prefill 30 tokens, 10 decode steps; prints the max logit difference."""
    cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096,
                      attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 512, (1, 40))
    logits = {}
    with torch.no_grad():
        for impl in ("sdpa", "sdpa_gqa"):
            model.set_attn_implementation(impl)
            sc = StaticCache(config=cfg, max_cache_len=64)
            model(ids[:, :30], past_key_values=sc, use_cache=True)
            logits[impl] = torch.stack([model(ids[:, i:i + 1], past_key_values=sc, position_ids=torch.tensor([[i]]),
                                              use_cache=True).logits[:, -1] for i in range(30, 40)])
    d = (logits["sdpa"] - logits["sdpa_gqa"]).abs().max().item()
    print(json.dumps({"check_gqa_max_abs_diff": d, "max_abs_logit": logits["sdpa"].abs().max().item()}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--contexts", default="32768,131072")
    ap.add_argument("--budget", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--md", default=None)
    ap.add_argument("--gqa-backends", default="cudnn,efficient",
                    help="also time the static cache with sdpa_gqa_forward under these SDPA backends (graph)")
    ap.add_argument("--check-gqa", action="store_true", help="only check sdpa_gqa_forward on the CPU")
    a = ap.parse_args()
    if a.check_gqa:
        return check_gqa()
    torch.manual_seed(0)
    cfg = llama31_8b(a.layers)
    t0 = time.perf_counter()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).eval()
    torch.set_default_dtype(torch.float32)
    sync()
    print(json.dumps({"model_build_s": round(time.perf_counter() - t0, 1),
                      "params_b": round(sum(p.numel() for p in model.parameters()) / 1e9, 2)}), flush=True)
    H, D, L = cfg.num_key_value_heads, cfg.head_dim, cfg.num_hidden_layers
    rows = []
    with torch.no_grad():
        for ctx in [int(x) for x in a.contexts.split(",")]:
            extra = 2 * (a.warmup + a.steps) + 16
            kv = [(torch.randn(1, H, ctx, D, device="cuda", dtype=torch.bfloat16),
                   torch.randn(1, H, ctx, D, device="cuda", dtype=torch.bfloat16)) for _ in range(L)]
            res = {}
            # transformers' static cache + SDPA
            model.set_attn_implementation("sdpa")
            sc = StaticCache(config=cfg, max_cache_len=ctx + extra)
            for layer, (k, v) in enumerate(kv):
                sc.update(k, v, layer)
            res["sdpa-eager"] = time_eager(model, sc, ctx, a.steps, a.warmup)
            res["sdpa-graph"] = attempt(time_graph, model, sc, ctx + a.warmup + a.steps, a.steps, a.warmup)
            del sc
            gqa = {}
            for name in [x for x in a.gqa_backends.split(",") if x]:
                model.set_attn_implementation("sdpa_gqa")
                sc = StaticCache(config=cfg, max_cache_len=ctx + extra)
                for layer, (k, v) in enumerate(kv):
                    sc.update(k, v, layer)
                with sdpa_kernel([GQA_BACKENDS[name]]):
                    gqa[f"sdpa-gqa-{name}-graph"] = attempt(time_graph, model, sc, ctx, a.steps, a.warmup)
                del sc
                torch.cuda.empty_cache()
            model.set_attn_implementation("sdpa")
            torch.cuda.empty_cache()
            # LOCKS: the same K/V in torch-owned pages (summaries built on the GPU at "prefill")
            locks.hf.enable(model, budget=a.budget)
            lc = locks.hf.LocksStaticCache(model, max_cache_len=ctx + extra, budget=a.budget)
            t1 = time.perf_counter()
            for layer, (k, v) in enumerate(kv):
                lc.update(k, v, layer)
            sync()
            fill_s = time.perf_counter() - t1
            res[f"locks{a.budget}-eager"] = attempt(time_eager, model, lc, ctx, a.steps, a.warmup)
            res[f"locks{a.budget}-graph"] = attempt(time_graph, model, lc, ctx + a.warmup + a.steps, a.steps,
                                                    a.warmup)
            try:
                lc.check()  # no device error in any step
            except locks.DeviceStatusError as e:
                print(json.dumps({"error": f"device status: {e}"}), flush=True)
            locks.hf.disable(model)
            del lc, kv
            torch.cuda.empty_cache()
            res.update(gqa)
            for name, ms in res.items():
                r = {"context": ctx, "method": name, "layers": L, "ms_per_token": round(ms, 3)}
                rows.append(r)
                print(json.dumps(r), flush=True)
            e, g = res["sdpa-eager"] / res[f"locks{a.budget}-eager"], res["sdpa-graph"] / res[f"locks{a.budget}-graph"]
            print(json.dumps({"context": ctx, "speedup_eager": round(e, 3), "speedup_graph": round(g, 3),
                              "locks_fill_s": round(fill_s, 2)}), flush=True)
    if a.md:
        with open(a.md, "w") as f:
            f.write(f"| context | layers | SDPA eager | LOCKS@{a.budget} eager | ratio | SDPA graph | "
                    f"LOCKS@{a.budget} graph | ratio |\n|---|---|---|---|---|---|---|---|\n")
            by = {}
            for r in rows:
                by.setdefault(r["context"], {})[r["method"]] = r["ms_per_token"]
            for ctx, m in by.items():
                se, sg = m["sdpa-eager"], m["sdpa-graph"]
                le, lg = m[f"locks{a.budget}-eager"], m[f"locks{a.budget}-graph"]
                f.write(f"| {ctx} | {L} | {se} | {le} | {se / le:.2f}x | {sg} | {lg} | {sg / lg:.2f}x |\n")
            extra_rows = [(ctx, k, v) for ctx, m in by.items() for k, v in m.items() if k.startswith("sdpa-gqa")]
            if extra_rows:
                f.write(f"\n| context | dense baseline (graph) | ms/token | LOCKS@{a.budget} graph ratio |\n|---|---|---|---|\n")
                for ctx, k, v in extra_rows:
                    f.write(f"| {ctx} | {k} | {v} | {v / by[ctx][f'locks{a.budget}-graph']:.2f}x |\n")


if __name__ == "__main__":
    main()
