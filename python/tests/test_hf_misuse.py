"""locks.hf under issue 21's misuse, with real transformers models (tiny, random
weights, nothing downloaded): sliding-window models, two caches, generate(max_length),
a forward outside no_grad, beam search, padding, selector="quest", budget=0 and
LocksStaticCache past max_cache_len. Skipped without torch and transformers
(test_hf_checks.py covers the checks there)."""
import pytest

try:  # a broken install (CUDA libraries missing, say) counts as none: skip, don't fail
    import torch
    import transformers  # noqa: F401
except Exception as e:  # noqa: BLE001
    pytest.skip(f"torch / transformers not importable here: {e}", allow_module_level=True)

import locks  # noqa: E402
import locks.hf  # noqa: E402
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402

SMALL = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048)


def build(kind, seed, **kw):
    torch.manual_seed(seed)
    args = dict(SMALL, attn_implementation="sdpa")
    args.update(kw)
    if kind == "llama":
        cfg, cls = LlamaConfig(**args), LlamaForCausalLM
    elif kind == "mistral":
        from transformers import MistralConfig, MistralForCausalLM
        cfg, cls = MistralConfig(**args), MistralForCausalLM
    elif kind == "qwen2":
        from transformers import Qwen2Config, Qwen2ForCausalLM
        cfg, cls = Qwen2Config(**args), Qwen2ForCausalLM
    else:
        from transformers import Gemma3ForCausalLM, Gemma3TextConfig
        cfg, cls = Gemma3TextConfig(**args), Gemma3ForCausalLM
    return cls(cfg).float().eval()


def logits(model, ids, steps, cache):
    out = model(ids[:, :-steps], past_key_values=cache, use_cache=True)
    res = [out.logits[:, -1]]
    for i in range(steps):
        j = ids.shape[1] - steps + i
        res.append(model(ids[:, j:j + 1], past_key_values=cache, use_cache=True).logits[:, -1])
    return torch.stack(res).float()


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


WINDOWED = [
    ("mistral", dict(sliding_window=64)),
    ("qwen2", dict(use_sliding_window=True, sliding_window=64, max_window_layers=1)),
    ("gemma3", dict(sliding_window=64, layer_types=["sliding_attention", "full_attention"],
                    query_pre_attn_scalar=64)),
]


@pytest.mark.parametrize("kind,kw", WINDOWED)
def test_sliding_window_models(rng, kind, kw):
    """Past the window, LocksCache decodes as transformers does: window layers stay
    transformers' own, LOCKS serves the full-attention ones (before: every layer LOCKS,
    decode logits off by 0.86-1.23 relative even at budget 4096). LocksStaticCache
    refuses a max_cache_len past the window."""
    model = build(kind, int(rng.integers(1 << 30)), **kw)
    ids = torch.from_numpy(rng.integers(0, 256, size=(1, 150)))
    with torch.no_grad():
        ref = logits(model, ids, 6, DynamicCache(config=model.config))
        locks.hf.enable(model, budget=4096)
        cache = locks.hf.LocksCache(model, budget=4096, max_new_tokens=6)
        got = logits(model, ids, 6, cache)
        assert cache.lib_layers == ([] if kind == "mistral" else [0] if kind == "qwen2" else [1])
        assert rel(got, ref) < 2e-3, rel(got, ref)
        out = model.generate(ids, max_new_tokens=4, do_sample=False)
        assert out.shape == (1, 154)
        with pytest.raises(NotImplementedError, match="sliding-window"):
            locks.hf.LocksStaticCache(model, max_cache_len=128)
        locks.hf.disable(model)


def test_two_caches_one_model(rng):
    model = build("llama", int(rng.integers(1 << 30)))
    a = torch.from_numpy(rng.integers(0, 256, size=(1, 90)))
    b = torch.from_numpy(rng.integers(0, 256, size=(1, 50)))
    with torch.no_grad():
        ref = logits(model, a, 3, DynamicCache(config=model.config))
        locks.hf.enable(model, budget=4096)
        ca = locks.hf.LocksCache(model, budget=4096, max_new_tokens=3)
        out = model(a[:, :-3], past_key_values=ca, use_cache=True)
        got = [out.logits[:, -1]]
        cb = locks.hf.LocksCache(model, budget=4096, max_new_tokens=3)  # made and used in between
        model(b, past_key_values=cb, use_cache=True)
        for i in range(3):
            j = a.shape[1] - 3 + i
            got.append(model(a[:, j:j + 1], past_key_values=ca, use_cache=True).logits[:, -1])
        locks.hf.disable(model)
    assert rel(torch.stack(got).float(), ref) < 2e-3


def test_generate_arguments_and_grad(rng):
    model = build("llama", int(rng.integers(1 << 30)))
    ids = torch.from_numpy(rng.integers(0, 256, size=(1, 100)))
    with torch.no_grad():
        locks.hf.enable(model, budget=96)
        out = model.generate(ids, max_length=140, min_length=140, do_sample=False)  # was PoolFullError
        assert out.shape == (1, 140)
        with pytest.raises(NotImplementedError, match="beam search"):
            model.generate(ids, max_new_tokens=4, num_beams=2, do_sample=False)
        two = torch.from_numpy(rng.integers(0, 256, size=(2, 100)))
        mask = torch.ones_like(two)
        mask[1, :10] = 0
        with pytest.raises(NotImplementedError, match="padded batch"):
            model.generate(two, attention_mask=mask, max_new_tokens=4, do_sample=False)
        with pytest.raises(NotImplementedError, match="padded batch"):
            model(two, attention_mask=mask, past_key_values=locks.hf.LocksCache(model, budget=96), use_cache=True)
        q = model.generate(ids, max_new_tokens=4, do_sample=False, past_key_values=locks.hf.LocksCache(
            model, budget=64, selector="quest", max_new_tokens=4))  # was NoMetaError
        assert q.shape == (1, 104)
    # a forward outside no_grad (was: "Can't call numpy() on Tensor that requires grad")
    cache = locks.hf.LocksCache(model, budget=96, max_new_tokens=2)
    model(ids, past_key_values=cache, use_cache=True)
    step = model(ids[:, -1:], past_key_values=cache, use_cache=True)
    assert torch.isfinite(step.logits).all()
    with pytest.raises(ValueError, match="budget = 0"):
        locks.hf.enable(model, budget=0)
    locks.hf.disable(model)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_static_cache_past_max_cache_len(rng):
    """Eager: refused before writing. Replayed graph: the next sequence's pages are not
    touched and check() reports BAD_LEN (before: written into sequence 1's pages)."""
    torch.manual_seed(int(rng.integers(1 << 30)))
    model = LlamaForCausalLM(LlamaConfig(**dict(SMALL, attn_implementation="sdpa"))).cuda().bfloat16().eval()
    n = 30
    ids = torch.from_numpy(rng.integers(0, 256, size=(2, n))).cuda()
    with torch.no_grad():
        locks.hf.enable(model, budget=4096)
        cache = locks.hf.LocksStaticCache(model, max_cache_len=32, batch_size=2, budget=4096)
        assert cache.max_len == 32
        model(ids, past_key_values=cache, use_cache=True)
        tok = ids[:, -1:].clone()
        pos = torch.tensor([[n]], device="cuda")
        model(tok, past_key_values=cache, position_ids=pos, use_cache=True)  # 31
        g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(g):  # the capture counts as token 32 on the host
            model(tok, past_key_values=cache, position_ids=pos + 1, use_cache=True)
        with pytest.raises(ValueError, match="exceed max_cache_len"):
            model(tok, past_key_values=cache, position_ids=pos + 2, use_cache=True)
        seq1 = [k[2:4].clone() for k in cache.k_pages]  # sequence 1's pages (P = 2)
        g.replay()  # token 32
        cache.check()
        g.replay()  # token 33: past the end
        torch.cuda.synchronize()
        with pytest.raises(locks.DeviceStatusError, match="BAD_LEN"):
            cache.check()
        for before, k in zip(seq1, cache.k_pages):
            assert torch.equal(k[2], before[0])  # sequence 0's token 32 did not land in sequence 1's page
            assert torch.equal(k[3, :15], before[1, :15])  # sequence 1's page 3 gained only its slot 15
        locks.hf.disable(model)


@pytest.mark.parametrize("code", ["import locks; import torch; import locks.hf",
                                  "import torch; import locks; import locks.hf"])
def test_import_orders(code):
    """locks.hf imports whether liblocks or torch is loaded first (issue 21: a CUDA
    liblocks linked to the system NCCL shadowed torch's: undefined ncclCommResume)."""
    import os
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
