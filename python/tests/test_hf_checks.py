"""locks.hf's checks and cache routing without torch or transformers (issue 21): the
configs, generate() arguments and tensors are plain stand-ins (numpy inside), so these
run wherever the package does. test_hf.py runs the real thing when torch is there."""
import importlib
import sys
import types
from types import SimpleNamespace as NS

import numpy as np
import pytest

import locks
from conftest import f16, ref_attention
from locks import _hfcheck as hc


# ---- configs: sliding windows -------------------------------------------------------
def llama(**kw):
    base = dict(model_type="llama", num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                head_dim=64, hidden_size=256)
    base.update(kw)
    return NS(**base)


@pytest.mark.parametrize("cfg,window,layers", [
    (llama(), None, []),
    (llama(model_type="mistral", sliding_window=256), 256, [0, 1, 2, 3]),
    (llama(model_type="mistral", sliding_window=None), None, []),
    (llama(model_type="qwen2", sliding_window=4096, use_sliding_window=False, max_window_layers=2), None, []),
    (llama(model_type="qwen2", sliding_window=4096, use_sliding_window=True, max_window_layers=2), 4096, [2, 3]),
    (llama(model_type="qwen2", sliding_window=4096, use_sliding_window=True,
           layer_types=["full_attention"] * 2 + ["sliding_attention"] * 2), 4096, [2, 3]),
    (llama(model_type="gemma3_text", sliding_window=512,
           layer_types=["sliding_attention"] * 3 + ["full_attention"]), 512, [0, 1, 2]),
])
def test_window_layers(cfg, window, layers):
    assert hc.window_layers(cfg) == (window, layers)


def test_window_refused_past_it_only():
    cfg = llama(model_type="mistral", sliding_window=256)
    hc.check_window(cfg, 256)  # within the window LOCKS and the model attend the same tokens
    with pytest.raises(NotImplementedError, match=r"layers 0..3 of this mistral.*window 256.*257 positions"):
        hc.check_window(cfg, 257)
    hc.check_window(llama(), 10**6)


# ---- step parameters ---------------------------------------------------------------
def test_step_params_checked_at_once():
    with pytest.raises(ValueError, match=r"budget = 0.*\[1, "):
        hc.check_step_params(0)
    with pytest.raises(ValueError, match="smaller than the pages always attended"):
        hc.check_step_params(40, n_sink=1, n_recent=1)
    with pytest.raises(ValueError, match="rank = 16"):
        hc.check_step_params(256, rank=16)
    with pytest.raises(locks.InvalidArgError):
        hc.check_step_params(256, selector="nope")
    assert hc.check_step_params(256, selector="quest") == ["quest"]  # the cache keeps quest's metadata
    assert hc.check_step_params(256, selector="full") == []
    assert hc.check_step_params(256, selector="locks", selectors=["locks", "quest"]) == ["locks", "quest"]
    with pytest.raises(ValueError, match="add it to selectors"):
        hc.check_step_params(256, selector="quest", selectors=["locks"])


# ---- generate() arguments -----------------------------------------------------------
def test_generate_arguments():
    ids = np.zeros((1, 100), np.int64)
    gc = NS(num_beams=1, max_new_tokens=None, max_length=20)
    assert hc.check_generate((ids,), {"max_new_tokens": 8}, gc) == 8
    assert hc.check_generate((ids,), {"max_length": 150}, gc) == 50  # was sized from max_new_tokens only
    assert hc.check_generate((), {"input_ids": ids, "max_length": 150}, gc) == 50
    assert hc.check_generate((ids,), {"generation_config": NS(max_new_tokens=None, max_length=300)}, gc) == 200
    assert hc.check_generate((ids,), {}, NS(num_beams=1, max_new_tokens=12, max_length=20)) == 12
    with pytest.raises(NotImplementedError, match="beam search"):
        hc.check_generate((ids,), {"num_beams": 4}, gc)
    with pytest.raises(NotImplementedError, match="beam search"):
        hc.check_generate((ids,), {}, NS(num_beams=2, max_new_tokens=4, max_length=20))
    mask = np.ones((2, 100), np.int64)
    assert hc.check_generate((ids,), {"attention_mask": mask, "max_new_tokens": 4}, gc) == 4
    mask[1, :7] = 0  # left padding
    with pytest.raises(NotImplementedError, match="padded batch"):
        hc.check_generate((ids,), {"attention_mask": mask}, gc)


# ---- locks.hf over stand-ins for torch and transformers -------------------------------
class T:
    """The few torch.Tensor operations locks.hf's CPU path uses, over a numpy array;
    numpy() refuses a tensor that requires grad, as torch does."""

    def __init__(self, a, requires_grad=False):
        self.a, self.requires_grad = np.asarray(a), requires_grad
        self.device, self.dtype = NS(type="cpu", index=None), "float32"

    shape = property(lambda self: self.a.shape)
    def dim(self): return self.a.ndim  # noqa: E704
    def detach(self): return T(self.a)  # noqa: E704
    def float(self): return T(self.a.astype(np.float32), self.requires_grad)  # noqa: E704
    def contiguous(self): return self  # noqa: E704
    def cpu(self): return self  # noqa: E704
    def transpose(self, i, j): return T(np.swapaxes(self.a, i, j), self.requires_grad)  # noqa: E704
    def reshape(self, *s): return T(self.a.reshape(*s), self.requires_grad)  # noqa: E704
    def to(self, device=None, dtype=None): return self  # noqa: E704
    def __getitem__(self, i): return T(self.a[i], self.requires_grad)  # noqa: E704

    def numpy(self):
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy()")
        return self.a


def fake_modules():
    torch = types.ModuleType("torch")
    torch.Tensor, torch.bfloat16, torch.float16, torch.bool = T, "bfloat16", "float16", "bool"
    torch.from_numpy = T
    torch.nn = NS(Module=object)
    tf = types.ModuleType("transformers")
    tf.AttentionInterface = NS(register=lambda name, fn: None)
    cu = types.ModuleType("transformers.cache_utils")

    class Cache:
        def __init__(self, layers):
            self.layers = layers

    class CacheLayerMixin:
        def __init__(self):
            self.is_initialized = False

    class DynamicSlidingWindowLayer:
        is_sliding = True

        def __init__(self, sliding_window):
            self.sliding_window, self.seen = sliding_window, 0

        def update(self, k, v, *args):
            self.seen += k.shape[2]
            return k, v

    cu.Cache, cu.CacheLayerMixin, cu.DynamicSlidingWindowLayer = Cache, CacheLayerMixin, DynamicSlidingWindowLayer
    sd = types.ModuleType("transformers.integrations.sdpa_attention")
    sd.sdpa_attention_forward = lambda *a, **k: ("sdpa", None)
    mu = types.ModuleType("transformers.masking_utils")
    mu.AttentionMaskInterface, mu.sdpa_mask = NS(register=lambda name, fn: None), None
    return {"torch": torch, "transformers": tf, "transformers.cache_utils": cu,
            "transformers.integrations": types.ModuleType("transformers.integrations"),
            "transformers.integrations.sdpa_attention": sd, "transformers.masking_utils": mu}


@pytest.fixture
def hf(monkeypatch):
    """locks.hf imported over the stand-ins; afterwards the real one (if any) is back,
    in sys.modules and as the package's attribute."""
    saved = sys.modules.pop("locks.hf", None), getattr(locks, "hf", None)
    with monkeypatch.context() as m:
        for name, mod in fake_modules().items():
            m.setitem(sys.modules, name, mod)
        yield importlib.import_module("locks.hf")
    sys.modules.pop("locks.hf", None)
    if saved[0] is not None:
        sys.modules["locks.hf"] = saved[0]
    if saved[1] is not None:
        locks.hf = saved[1]
    elif hasattr(locks, "hf"):
        del locks.hf


class FakeModel:
    def __init__(self, cfg):
        self.config = cfg
        self.attn = [NS(layer_idx=i, q_proj=None) for i in range(cfg.num_hidden_layers)]
        self.generation_config = NS(num_beams=1, max_new_tokens=None, max_length=20)
        self.calls = []

    def modules(self):
        return self.attn

    def set_attn_implementation(self, name):
        self.impl = name

    def generate(self, *args, **kwargs):
        self.calls.append(kwargs)
        return "generated"


def forward(hf, model, cache, k, v, q):
    """One layer-by-layer forward: each layer's cache update, then the attention call
    (k, v [b, Hkv, s, d], q [b, Hq, s, d]); returns the attention outputs."""
    outs = []
    for m in model.attn:
        ks, vs = cache.layers[m.layer_idx].update(k, v)
        outs.append(hf.locks_attention_forward(m, q, ks, vs, None, scaling=None)[0])
    return outs


def test_second_cache_does_not_break_the_first(hf, rng):
    model = FakeModel(llama(num_hidden_layers=2))
    hf.enable(model, budget=4096)
    hkv, d, hq = 2, 64, 4
    kv = {}
    caches = {}
    for name, n in (("a", 40), ("b", 30)):
        caches[name] = hf.LocksCache(model, budget=4096, max_new_tokens=4)
        k, v = (rng.standard_normal((1, hkv, n, d)).astype(np.float32) for _ in range(2))
        assert forward(hf, model, caches[name], T(k), T(v), T(np.zeros((1, hq, n, d), np.float32)))[0] == "sdpa"
        kv[name] = (k, v)
    # a decode token through the first cache, after the second was made and filled;
    # outside torch.no_grad(): the tensors require grad
    k1, v1, q1 = (rng.standard_normal(s).astype(np.float32) for s in ((1, hkv, 1, d), (1, hkv, 1, d), (1, hq, 1, d)))
    outs = forward(hf, model, caches["a"], T(k1, True), T(v1, True), T(q1, True))
    k_all = np.concatenate([kv["a"][0], k1], axis=2)[0].transpose(1, 0, 2)  # [n, Hkv, d]
    v_all = np.concatenate([kv["a"][1], v1], axis=2)[0].transpose(1, 0, 2)
    ref = ref_attention(q1[0, :, 0], f16(k_all), f16(v_all))
    for out in outs:
        assert not isinstance(out, str), "the decode went to SDPA over the new token only"
        got = out.a.reshape(hq, d)
        assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 2e-5


def test_enable_and_generate_checks(hf):
    model = FakeModel(llama(num_hidden_layers=2))
    with pytest.raises(ValueError, match="budget = 0"):
        hf.enable(model, budget=0)
    with pytest.raises(TypeError, match="unknown LocksCache arguments"):
        hf.enable(model, budget=256, selecter="quest")
    hf.enable(model, budget=256, selector="quest")
    ids = T(np.zeros((1, 100), np.int64))
    assert model.generate(ids, max_length=150) == "generated"
    cache = model.calls[-1]["past_key_values"]
    assert cache.max_new_tokens == 50 and cache.selectors == ["quest"]
    with pytest.raises(NotImplementedError, match="beam search"):
        model.generate(ids, max_new_tokens=5, num_beams=3)
    with pytest.raises(NotImplementedError, match="beam search"):
        cache.reorder_cache(None)
    assert len(model.calls) == 1  # refused before transformers' generate ran
    # a Mistral-style model (every layer windowed): transformers' window layers, no LOCKS
    win = FakeModel(llama(model_type="mistral", num_hidden_layers=2, sliding_window=128))
    hf.enable(win, budget=256)
    win.generate(T(np.zeros((1, 100), np.int64)), max_new_tokens=50)
    cache = win.calls[-1]["past_key_values"]
    assert cache.lib_layers == [] and all(getattr(l, "is_sliding", False) for l in cache.layers)
    with pytest.raises(NotImplementedError, match="sliding-window"):
        hf.LocksStaticCache(win, max_cache_len=129)  # its window layers would be LOCKS': refused


def test_window_layers_stay_exact(hf, rng):
    """Gemma 3-style: layer 0 local (window 8), layer 1 global. Past the window, layer 0
    is transformers' window layer (SDPA, here the stand-in) and layer 1 LOCKS over every
    token; the library cache holds one layer (before: both layers LOCKS, the window
    ignored: 0.86-1.23 relative logit error)."""
    model = FakeModel(llama(model_type="gemma3_text", num_hidden_layers=2, sliding_window=8,
                            layer_types=["sliding_attention", "full_attention"]))
    hf.enable(model, budget=4096)
    cache = hf.LocksCache(model, budget=4096, max_new_tokens=4)
    assert cache.lib_layers == [1] and cache.layers[0].sliding_window == 8
    hkv, d, hq, n = 2, 64, 4, 30
    k, v = (rng.standard_normal((1, hkv, n, d)).astype(np.float32) for _ in range(2))
    forward(hf, model, cache, T(k), T(v), T(np.zeros((1, hq, n, d), np.float32)))
    assert cache.kv.n_layers == 1 and cache.kv.seq_len(cache.seqs[0]) == n
    k1, v1, q1 = (rng.standard_normal(s).astype(np.float32) for s in ((1, hkv, 1, d), (1, hkv, 1, d), (1, hq, 1, d)))
    local, full = forward(hf, model, cache, T(k1), T(v1), T(q1))
    assert local == "sdpa" and cache.layers[0].seen == n + 1
    k_all = np.concatenate([k, k1], axis=2)[0].transpose(1, 0, 2)
    v_all = np.concatenate([v, v1], axis=2)[0].transpose(1, 0, 2)
    ref = ref_attention(q1[0, :, 0], f16(k_all), f16(v_all))
    assert np.max(np.abs(full.a.reshape(hq, d) - ref)) / np.max(np.abs(ref)) < 2e-5
