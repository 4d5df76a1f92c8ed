"""The torch face of a CUDA cache (device only): zero-copy tensors, torch's current
stream, float64 reference on fresh random data."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
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
        with pytest.raises(locks.UnsupportedError):
            c.decode_step(0, [s], torch.randn(1, 2, 64, device="cuda"), selector="quest")
