"""locks.PagedCache over numpy fp16 pages the caller owns (vLLM-style NHD and HND):
the same selections and outputs as locks.Cache holding the same values."""
import numpy as np
import pytest

import locks
from conftest import f16, ref_attention, selected_tokens


def caller_pool(rng, kv, layout, n_pages, interleaved=False):
    """The caller's page pools per layer holding kv's values at shuffled page ids
    (interleaved: FlashInfer's [n_pages, 2, ...] with K and V of a page side by side)."""
    n, hkv, d = kv[0][0].shape
    perm = rng.permutation(n_pages).astype(np.int32)
    pools = []
    for k, v in kv:
        shape = (n_pages, hkv, 16, d) if layout == "HND" else (n_pages, 16, hkv, d)
        if interleaved:
            both = rng.standard_normal((n_pages, 2) + shape[1:]).astype(np.float16)
            pk, pv = both[:, 0], both[:, 1]
        else:
            pk = rng.standard_normal(shape).astype(np.float16)  # unused pages: garbage
            pv = rng.standard_normal(shape).astype(np.float16)
        for t in range(n):
            p, s = perm[t // 16], t % 16
            if layout == "HND":
                pk[p, :, s], pv[p, :, s] = k[t], v[t]
            else:
                pk[p, s], pv[p, s] = k[t], v[t]
        pools.append((pk, pv))
    return pools, perm


@pytest.mark.parametrize("layout,interleaved", [("NHD", False), ("HND", False), ("NHD", True)])
def test_paged_equals_owned(rng, layout, interleaved):
    n, hkv, d, g, L = int(rng.integers(200, 700)), 2, 64, 4, 2
    n_pages = n // 16 + 5
    kv = [(rng.standard_normal((n, hkv, d)).astype(np.float32),
           rng.standard_normal((n, hkv, d)).astype(np.float32)) for _ in range(L)]
    owned = locks.Cache(L, hkv, d, n_pages)
    so = owned.seq_add()
    owned.extend(so, kv)
    pools, perm = caller_pool(rng, kv, layout, n_pages, interleaved)
    pc = locks.PagedCache([p[0] for p in pools], [p[1] for p in pools], layout=layout)
    sp = pc.seq_add()
    n_log = (n + 15) // 16
    pc.set_pages(sp, perm[:n_log], n)
    for layer in range(L):
        pc.pages_filled(layer, perm[: n // 16])
    with pytest.raises(locks.InvalidArgError, match="LOCKS_ERR_INVALID_ARG"):
        pc.pages_filled(0, perm[:1])  # reported twice
    with pytest.raises(locks.InvalidArgError):
        pc.pages_filled(0, [n_pages])  # out of range
    q = rng.standard_normal((1, hkv * g, d)).astype(np.float32)
    for layer in range(L):
        o1, s1 = owned.decode_step(layer, [so], q, budget=192, return_selection=True)
        o2, s2 = pc.decode_step(layer, [sp], q, budget=192, return_selection=True)
        np.testing.assert_array_equal(s1.n_pages, s2.n_pages)
        for h in range(hkv):
            np.testing.assert_array_equal(s1.pages[0, h, : s1.n_pages[0, h]], s2.pages[0, h, : s2.n_pages[0, h]])
        assert np.max(np.abs(o1 - o2)) <= 1e-6
        ref = ref_attention(q[0], f16(kv[layer][0]), f16(kv[layer][1]),
                            selected_tokens(s2.pages[0], s2.n_pages[0], n))
        assert np.max(np.abs(o2[0] - ref)) / np.max(np.abs(ref)) < 2e-5
    # the selection as the caller's page ids, for its own attention kernel
    mass = pc.score(0, sp, q[0])
    pages, counts = pc.select(sp, mass, budget=192)
    phys = pc.physical(sp, pages, counts)
    assert all(set(ph.tolist()) <= set(perm[:n_log].tolist()) for ph in phys)
    # a released page must be reported again before a step reads it
    pc.release(perm[:1])
    with pytest.raises(locks.InvalidArgError):
        pc.decode_step(0, [sp], q)
    pc.pages_filled(0, perm[:1])
    pc.pages_filled(1, perm[:1])
    pc.decode_step(0, [sp], q)
    with pytest.raises(locks.UnsupportedError):
        pc.append(sp, 1)  # the caller owns its pages and block tables
