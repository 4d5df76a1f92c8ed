"""Shared fixtures: a fresh random generator per test (its seed is printed, so a failure
can be replayed with LOCKS_SEED=...), and float64 reference attention."""
import os

import numpy as np
import pytest


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("LOCKS_SEED", 0)) or int.from_bytes(os.urandom(6), "little")
    print(f"\n{request.node.name}: LOCKS_SEED={seed}")
    return np.random.default_rng(seed)


def f16(x):
    """The values an fp16 K/V cache stores."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float64)


def ref_attention(q, k, v, tokens=None, scale=None):
    """float64 softmax attention of q [Hq, d] over k, v [n, Hkv, d] (GQA: query head h
    uses KV head h // (Hq / Hkv)); tokens: per KV head, the token indices attended
    (default all)."""
    q = np.asarray(q, np.float64)
    hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    scale = scale or 1.0 / np.sqrt(d)
    out = np.zeros((hq, d))
    for h in range(hq):
        kh = h // g
        idx = np.arange(k.shape[0]) if tokens is None else tokens[kh]
        s = (k[idx, kh] @ q[h]) * scale
        w = np.exp(s - s.max())
        out[h] = (w / w.sum()) @ v[idx, kh]
    return out


def selected_tokens(pages, n_pages, seq_len):
    """Token indices of the selected logical pages of each KV head."""
    res = []
    for h in range(pages.shape[0]):
        t = [np.arange(p * 16, min(p * 16 + 16, seq_len)) for p in pages[h, : n_pages[h]]]
        res.append(np.concatenate(t))
    return res
