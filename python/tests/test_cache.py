"""The numpy (CPU) face of the package against float64 attention on fresh random data."""
import numpy as np
import pytest

import locks
from conftest import f16, ref_attention, selected_tokens


def make(rng, n_tokens, hkv=2, d=64, n_layers=2, n_pages=None, **kw):
    c = locks.Cache(n_layers, hkv, d, n_pages or (n_tokens // 16 + 8), n_threads=2, **kw)
    s = c.seq_add()
    kv = [(rng.standard_normal((n_tokens, hkv, d)).astype(np.float32),
           rng.standard_normal((n_tokens, hkv, d)).astype(np.float32)) for _ in range(n_layers)]
    c.extend(s, kv)
    return c, s, kv


def max_rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("d,hkv,g", [(64, 2, 4), (128, 1, 8)])
def test_dense_budget_equals_attention(rng, d, hkv, g):
    n = int(rng.integers(100, 400))
    c, s, kv = make(rng, n, hkv=hkv, d=d)
    q = rng.standard_normal((1, hkv * g, d)).astype(np.float32)
    for layer in range(2):
        out = c.decode_step(layer, [s], q, budget=n)  # budget >= context: every page
        ref = ref_attention(q[0], f16(kv[layer][0]), f16(kv[layer][1]))
        assert max_rel(out[0], ref) < 2e-5, (layer, max_rel(out[0], ref))


def test_sparse_step_attends_exactly_its_selection(rng):
    n, hkv, d, g, budget = 1000, 2, 64, 4, 256
    c, s, kv = make(rng, n, hkv=hkv, d=d)
    q = rng.standard_normal((1, hkv * g, d)).astype(np.float32)
    out, sel = c.decode_step(1, [s], q, budget=budget, return_selection=True)
    pages, n_pages = sel.pages[0], sel.n_pages[0]
    # the partial page (62), the sink (0) and the recent page (61) are always there
    for h in range(hkv):
        chosen = set(pages[h, : n_pages[h]].tolist())
        assert {0, 61, 62} <= chosen
        assert 16 * (n_pages[h] - 1) + n % 16 <= budget
    ref = ref_attention(q[0], f16(kv[1][0]), f16(kv[1][1]), selected_tokens(pages, n_pages, n))
    assert max_rel(out[0], ref) < 2e-5
    # and it is not the dense answer (so the test can tell the two apart)
    dense = ref_attention(q[0], f16(kv[1][0]), f16(kv[1][1]))
    assert max_rel(out[0], dense) > 1e-4


def test_pieces_equal_the_step(rng):
    n, hkv, d, g = 700, 2, 64, 2
    c, s, kv = make(rng, n, hkv=hkv, d=d)
    q = rng.standard_normal((hkv * g, d)).astype(np.float32)
    mass = c.score(0, s, q)
    assert mass.shape == (hkv, n // 16)
    np.testing.assert_allclose(mass.sum(axis=1), 1.0, rtol=1e-4)
    pages, n_pages = c.select(s, mass, budget=160)
    out, lse = c.attend(0, s, q, pages, n_pages)
    step, sel = c.decode_step(0, [s], q[None], budget=160, return_selection=True)
    np.testing.assert_array_equal(sel.n_pages[0], n_pages)
    for h in range(hkv):
        np.testing.assert_array_equal(sel.pages[0, h, : n_pages[h]], pages[h, : n_pages[h]])
    np.testing.assert_allclose(out, step[0], rtol=0, atol=1e-6)
    # lse is the natural-log normaliser of the attended logits
    toks = selected_tokens(pages, n_pages, n)
    k16 = f16(kv[0][0])
    for h in range(hkv * g):
        z = (k16[toks[h // g], h // g] @ q[h]) / np.sqrt(d)
        assert abs(lse[h] - (z.max() + np.log(np.exp(z - z.max()).sum()))) < 1e-4


def test_batch_of_sequences(rng):
    hkv, d = 2, 64
    c = locks.Cache(1, hkv, d, 64, max_seqs=3)
    lens = [int(x) for x in rng.integers(20, 300, size=3)]
    seqs, kvs = [], []
    for n in lens:
        s = c.seq_add()
        k = rng.standard_normal((n, hkv, d)).astype(np.float32)
        v = rng.standard_normal((n, hkv, d)).astype(np.float32)
        c.extend(s, [(k, v)])
        seqs.append(s)
        kvs.append((k, v))
    q = rng.standard_normal((3, 8, d)).astype(np.float32)
    out = c.decode_step(0, seqs, q, budget=4096)
    for i in range(3):
        ref = ref_attention(q[i], f16(kvs[i][0]), f16(kvs[i][1]))
        assert max_rel(out[i], ref) < 2e-5


def test_errors_carry_their_status_names(rng):
    c, s, _ = make(rng, 100, n_pages=8)
    q = rng.standard_normal((1, 4, 64)).astype(np.float32)
    with pytest.raises(locks.BudgetError) as e:
        c.decode_step(0, [s], q, budget=8)
    assert e.value.name == "LOCKS_ERR_BUDGET" and e.value.status == 5
    with pytest.raises(locks.NoSeqError, match="LOCKS_ERR_NO_SEQ"):
        c.decode_step(0, [s + 1], q)
    q_nan = q.copy()
    q_nan[0, 1, 3] = np.nan
    with pytest.raises(locks.NonFiniteError):
        c.decode_step(0, [s], q_nan)
    with pytest.raises(locks.PoolFullError):
        c.append(s, 16 * 8)
    assert c.seq_len(s) == 100  # a failed append changes nothing
    with pytest.raises(locks.InvalidArgError):
        c.decode_step(0, [s], q[:, :, :32])  # wrong head_dim, caught before the call
    with pytest.raises(locks.InvalidArgError):
        locks.Cache(1, 1, 64, 16, rank=16)  # rank is 1..15
    with pytest.raises(locks.InvalidArgError):
        locks.selector_id("nope")
    assert isinstance(e.value, locks.LocksError) and isinstance(e.value, ValueError)


def test_block_table_and_summary_bytes(rng):
    c, s, _ = make(rng, 50, d=128)
    bt = c.block_table(s)
    assert len(bt) == 4 and len(set(bt.tolist())) == 4
    assert c.summary_bytes == 802  # int8 mu, int4 basis, int8 coefficients at d=128, r=8
    c.truncate(s, 20)
    assert c.seq_len(s) == 20 and len(c.block_table(s)) == 2
    c.seq_remove(s)
    with pytest.raises(locks.NoSeqError):
        c.seq_len(s)


def test_struct_mirrors_match_the_library():
    """_capi's ctypes structs against the library's own sizeof/offsetof (checked at import
    too); a mirror that lacks a field, as StepParams once lacked ``mass``, is caught."""
    import ctypes

    from locks import _capi
    for cname, cls in _capi.MIRRORS.items():
        assert _capi.layout_mismatches(cname, cls) == [], cname

    class Short(ctypes.Structure):
        _fields_ = _capi.StepParams._fields_[:-1]

    class Swapped(ctypes.Structure):
        _fields_ = [_capi.StepParams._fields_[1], _capi.StepParams._fields_[0]] + _capi.StepParams._fields_[2:]

    assert any("sizeof" in m for m in _capi.layout_mismatches("locks_step_params", Short))
    assert any("fields" in m for m in _capi.layout_mismatches("locks_step_params", Short))
    assert any("selector" in m for m in _capi.layout_mismatches("locks_step_params", Swapped))
    assert _capi.layout_mismatches("locks_no_such_struct", Short) == ["locks_no_such_struct: unknown to the library"]


def test_step_plan_needs_cuda():
    """A capturable plan is a CUDA-backend object: a CPU cache says so (Python and C)."""
    import ctypes

    from locks import _capi
    with locks.Cache(1, 1, 64, 8) as c:
        s = c.seq_add()
        with pytest.raises(locks.UnsupportedError):
            c.plan([s], 2)
        err = ctypes.c_int(0)
        ids = (ctypes.c_int32 * 1)(s)
        sp = locks.StepParams().c()
        assert not _capi.lib.locks_step_plan_init(c._c, ids, 1, 2, ctypes.byref(sp), 64, ctypes.byref(err))
        assert err.value == 7  # LOCKS_ERR_UNSUPPORTED
