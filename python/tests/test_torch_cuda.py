"""The torch face of a CUDA cache (device only): zero-copy tensors, torch's current
stream, float64 reference on fresh random data."""
import numpy as np
import pytest

try:  # a broken install (CUDA libraries missing, say) counts as none: skip, don't fail
    import torch
except Exception as e:  # noqa: BLE001
    pytest.skip(f"torch is not importable here: {e}", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import locks  # noqa: E402
from conftest import ref_attention, selected_tokens  # noqa: E402


def bf16(x):
    return torch.from_numpy(np.asarray(x, np.float32)).bfloat16().double().numpy()


@pytest.mark.parametrize("kv_dtype", ["bf16", "f16"])
def test_cuda_step_on_torch_stream(rng, kv_dtype):
    n, hkv, d, g = int(rng.integers(800, 3000)), 2, 128, 4
    k = rng.standard_normal((n, hkv, d)).astype(np.float32)
    v = rng.standard_normal((n, hkv, d)).astype(np.float32)
    q = rng.standard_normal((1, hkv * g, d)).astype(np.float32)
    rnd = bf16 if kv_dtype == "bf16" else (lambda x: np.asarray(x, np.float32).astype(np.float16).astype(np.float64))
    side = torch.cuda.Stream()
    with locks.Cache(1, hkv, d, n // 16 + 4, backend="cuda", kv_dtype=kv_dtype) as c, torch.cuda.stream(side):
        s = c.seq_add()
        c.append(s, n)
        # written by torch on the side stream, read by the library on the same stream
        kt = torch.from_numpy(k).cuda(non_blocking=True) * 1.0
        vt = torch.from_numpy(v).cuda(non_blocking=True) * 1.0
        c.write(s, 0, 0, kt, vt)
        qt = torch.from_numpy(q).cuda(non_blocking=True) * 1.0
        out = torch.empty_like(qt)
        ret = c.decode_step(0, [s], qt, budget=n + 16, out=out)
        assert ret is out  # the caller's buffer, filled in place
        dense = out.cpu().numpy()[0]
        out2, sel = c.decode_step(0, [s], qt, budget=512, return_selection=True)
        sparse = out2.cpu().numpy()[0]
    ref = ref_attention(q[0], rnd(k), rnd(v))
    assert np.max(np.abs(dense - ref)) / np.max(np.abs(ref)) < 5e-3
    ref_s = ref_attention(q[0], rnd(k), rnd(v), selected_tokens(sel.pages[0], sel.n_pages[0], n))
    assert np.max(np.abs(sparse - ref_s)) / np.max(np.abs(ref_s)) < 5e-3


def test_cuda_errors_and_types(rng):
    with locks.Cache(1, 1, 64, 8, backend="cuda", kv_dtype="bf16") as c:
        s = c.seq_add()
        c.append(s, 40)
        with pytest.raises(TypeError):
            c.write(s, 0, 0, np.zeros((40, 1, 64), np.float32), np.zeros((40, 1, 64), np.float32))
        k = torch.randn(40, 1, 64, device="cuda")
        k[3, 0, 5] = float("nan")
        with pytest.raises(locks.NonFiniteError):
            c.write(s, 0, 0, k, torch.randn(40, 1, 64, device="cuda"))
        with pytest.raises((locks.UnsupportedError, locks.NoMetaError)):
            c.decode_step(0, [s], torch.randn(1, 2, 64, device="cuda"), selector="quest")


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_paged_cuda_equals_owned(rng, layout, dtype):
    tdt = getattr(torch, dtype)
    n, hkv, d, g, L = int(rng.integers(500, 2000)), 4, 128, 4, 2
    n_pages = n // 16 + 7
    kv = [(torch.from_numpy(rng.standard_normal((n, hkv, d)).astype(np.float32)).cuda(),
           torch.from_numpy(rng.standard_normal((n, hkv, d)).astype(np.float32)).cuda()) for _ in range(L)]
    owned = locks.Cache(L, hkv, d, n_pages, backend="cuda", kv_dtype="bf16" if dtype == "bfloat16" else "f16")
    so = owned.seq_add()
    owned.extend(so, kv)
    perm = torch.from_numpy(rng.permutation(n_pages).astype(np.int64)).cuda()
    t = torch.arange(n, device="cuda")
    pools = []
    for k, v in kv:  # the caller's pages (vLLM would write them with reshape_and_cache)
        shape = (n_pages, hkv, 16, d) if layout == "HND" else (n_pages, 16, hkv, d)
        pk, pv = torch.randn(shape, device="cuda").to(tdt), torch.randn(shape, device="cuda").to(tdt)
        if layout == "HND":
            pk[perm[t // 16], :, t % 16], pv[perm[t // 16], :, t % 16] = k.to(tdt), v.to(tdt)
        else:
            pk[perm[t // 16], t % 16], pv[perm[t // 16], t % 16] = k.to(tdt), v.to(tdt)
        pools.append((pk, pv))
    pc = locks.PagedCache([p[0] for p in pools], [p[1] for p in pools], layout=layout)
    sp = pc.seq_add()
    bt = perm.cpu().numpy().astype(np.int32)
    pc.set_pages(sp, bt[: (n + 15) // 16], n)
    for layer in range(L):
        pc.pages_filled(layer, bt[: n // 16])
    with pytest.raises(locks.InvalidArgError):
        pc.pages_filled(1, bt[:1])
    q = torch.randn(1, hkv * g, d, device="cuda")
    for layer in range(L):
        o1, s1 = owned.decode_step(layer, [so], q, budget=256, return_selection=True)
        o2, s2 = pc.decode_step(layer, [sp], q, budget=256, return_selection=True)
        np.testing.assert_array_equal(s1.n_pages, s2.n_pages)
        for h in range(hkv):
            np.testing.assert_array_equal(s1.pages[0, h, : s1.n_pages[0, h]], s2.pages[0, h, : s2.n_pages[0, h]])
        assert (o1 - o2).abs().max().item() <= 1e-6


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_plan_in_torch_cuda_graph(rng, dtype):
    """A whole decode step over torch-owned pages (the token's K/V write with index_copy_,
    set_lens, pages_filled, decode for 2 layers) recorded once with torch.cuda.graph and
    replayed while the sequence grows across page boundaries: after every replay the
    outputs equal, bit for bit, the synchronous calls on a second cache over the same
    pages, the selection is the same, and the output matches float64 attention over it."""
    tdt = getattr(torch, dtype)
    hkv, g, d, L = 2, 4, 128, 2
    hq = hkv * g
    n0, steps = int(rng.integers(300, 700)), 40
    max_ctx = n0 + steps
    P = (max_ctx + 15) // 16
    n_pages = P + int(rng.integers(1, 6))
    perm = rng.permutation(n_pages).astype(np.int32)
    tok = np.arange(max_ctx)
    slots = torch.from_numpy((perm[tok // 16].astype(np.int64) * 16 + tok % 16)).cuda()
    table = torch.from_numpy(perm[:P].copy()).cuda()[None]  # [1, P] int32, device
    K = torch.randn(L, max_ctx, hkv, d, device="cuda").to(tdt)
    V = torch.randn(L, max_ctx, hkv, d, device="cuda").to(tdt)
    kp = [torch.randn(n_pages, 16, hkv, d, device="cuda").to(tdt) for _ in range(L)]  # junk past the context
    vp = [torch.randn(n_pages, 16, hkv, d, device="cuda").to(tdt) for _ in range(L)]
    for layer in range(L):  # the prompt's K/V
        kp[layer].view(-1, hkv, d).index_copy_(0, slots[:n0], K[layer, :n0])
        vp[layer].view(-1, hkv, d).index_copy_(0, slots[:n0], V[layer, :n0])
    A, B = locks.PagedCache(kp, vp, layout="NHD"), locks.PagedCache(kp, vp, layout="NHD")
    sa, sb = A.seq_add(), B.seq_add()
    for c, s in ((A, sa), (B, sb)):
        c.set_pages(s, perm[: (n0 + 15) // 16], n0)
        for layer in range(L):
            c.pages_filled(layer, perm[: n0 // 16])
    budget = 16 * int(rng.integers(8, 16))
    plan = A.plan([sa], hq, budget=budget, max_ctx=max_ctx)

    pos = torch.zeros(1, dtype=torch.int64, device="cuda")  # the new token's position
    lens = torch.zeros(1, dtype=torch.int32, device="cuda")
    q = torch.zeros(L, 1, hq, d, device="cuda")
    outs = [torch.empty(1, hq, d, device="cuda") for _ in range(L)]

    def step():
        lens.copy_((pos + 1).to(torch.int32))
        idx = slots.index_select(0, pos)
        for layer in range(L):
            kp[layer].view(-1, hkv, d).index_copy_(0, idx, K[layer].index_select(0, pos))
            vp[layer].view(-1, hkv, d).index_copy_(0, idx, V[layer].index_select(0, pos))
        plan.set_lens(lens, table)
        for layer in range(L):
            plan.pages_filled(layer, 1)
        for layer in range(L):
            plan.decode(layer, q[layer], outs[layer])

    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):  # global capture mode: a host sync in the library would fail it
        step()
    crossed = 0
    for t in range(n0, n0 + steps):
        pos.fill_(t)
        q.copy_(torch.randn(L, 1, hq, d, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        gsel = plan.selection()  # the last decode: layer L-1
        got = [o.clone() for o in outs]
        B.set_pages(sb, perm[: (t + 1 + 15) // 16], t + 1)
        if (t + 1) % 16 == 0:
            crossed += 1
            for layer in range(L):
                B.pages_filled(layer, [perm[t // 16]])
        for layer in range(L):
            ob, sel = B.decode_step(layer, [sb], q[layer], budget=budget, return_selection=True)
            assert torch.equal(got[layer], ob), f"step {t} layer {layer}: graph and synchronous outputs differ"
        np.testing.assert_array_equal(gsel.n_pages, sel.n_pages)
        for h in range(hkv):
            np.testing.assert_array_equal(gsel.pages[0, h, : sel.n_pages[0, h]], sel.pages[0, h, : sel.n_pages[0, h]])
        kd = K[L - 1, : t + 1].double().cpu().numpy()
        vd = V[L - 1, : t + 1].double().cpu().numpy()
        ref = ref_attention(q[L - 1, 0].cpu().numpy(), kd, vd, selected_tokens(sel.pages[0], sel.n_pages[0], t + 1))
        err = np.max(np.abs(got[L - 1][0].cpu().numpy() - ref)) / np.max(np.abs(ref))
        assert err < (2e-2 if dtype == "bfloat16" else 5e-3), f"step {t}: vs float64 {err:.3g}"
    assert crossed >= 2
    assert plan.status() == 0
    assert A.seq_len(sa) == n0 + steps  # the host caught up with the device
    o1 = A.decode_step(L - 1, [sa], q[L - 1], budget=budget)
    o2 = B.decode_step(L - 1, [sb], q[L - 1], budget=budget)
    assert torch.equal(o1, o2)
    q[0, 0, 0, 0] = float("nan")  # a device error is reported by check(), not by the step
    plan.decode(0, q[0], outs[0])
    with pytest.raises(locks.DeviceStatusError) as e:
        plan.check()
    assert e.value.names == ["NONFINITE"]
    plan.close()


def test_close_cache_with_live_plan(rng):
    """Cache.close() with a StepPlan alive closes the plan first: the plan's calls then
    raise ClosedError instead of reading the freed cache (issue 21)."""
    c = locks.Cache(1, 1, 64, 8, backend="cuda", kv_dtype="bf16")
    s = c.seq_add()
    c.extend(s, [(torch.randn(40, 1, 64, device="cuda"), torch.randn(40, 1, 64, device="cuda"))])
    plan = c.plan([s], 2, budget=64, max_ctx=128)
    q = torch.randn(1, 2, 64, device="cuda")
    plan.decode(0, q)
    c.close()
    assert plan._p is None
    with pytest.raises(locks.ClosedError, match="closed"):
        plan.decode(0, q)
    with pytest.raises(locks.ClosedError):
        plan.status()
    plan.close()  # and closing again is harmless
