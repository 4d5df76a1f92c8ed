"""The package's contract under misuse (issue 21): integers checked against their range
before they reach the library (no wrap at int32), arrays of the wrong form refused with
the form expected, calls after close() refused, a failed extend leaving the sequence as
it was, and one cache shared by threads (the binding serialises the calls that change it;
the read-only calls share its lock)."""
import threading

import numpy as np
import pytest

import locks
from conftest import f16, ref_attention


def filled(rng, n=200, hkv=2, d=64, n_layers=2, **kw):
    c = locks.Cache(n_layers, hkv, d, 64, max_seqs=2, **kw)
    s = c.seq_add()
    kv = [tuple(rng.standard_normal((n, hkv, d)).astype(np.float32) for _ in range(2)) for _ in range(n_layers)]
    c.extend(s, kv)
    return c, s, kv


# ---- integers ---------------------------------------------------------------------
def test_ids_and_budgets_do_not_wrap_at_int32(rng):
    c, s, _ = filled(rng)
    assert s == 0
    q = rng.standard_normal((1, 4, 64)).astype(np.float32)
    # 2**32 used to reach the library as 0 (seq_len(2**32) gave 200), 2**32 + 64 as 64
    with pytest.raises(OverflowError, match=r"seq.*4294967296.*\[0, 2147483647\]"):
        c.seq_len(2**32)
    with pytest.raises(OverflowError, match=r"budget.*2147483647"):
        c.decode_step(0, [s], q, budget=2**32 + 64)
    with pytest.raises(OverflowError, match="seq_ids"):
        c.decode_step(0, [2**32], q)
    with pytest.raises(OverflowError, match="n_tokens"):
        c.append(s, 2**32 + 1)
    with pytest.raises(ValueError, match=r"layer = 2.*\[0, 1\]"):
        c.decode_step(2, [s], q)
    with pytest.raises(ValueError, match=r"seq = -1"):
        c.seq_len(-1)
    with pytest.raises(TypeError, match="budget.*integer.*float"):
        c.decode_step(0, [s], q, budget=64.5)
    assert c.seq_len(s) == 200  # nothing above changed the cache
    out = c.decode_step(0, [np.int64(s)], q, budget=np.int32(4096))  # numpy integers are integers
    assert out.shape == (1, 4, 64)


@pytest.mark.parametrize("kw,pattern", [
    ({"n_threads": 0}, r"n_threads = 0.*\[1, 256\]"),
    ({"n_threads": 1000}, r"n_threads = 1000.*\[1, 256\]"),
    ({"rank": 0}, r"rank = 0.*\[1, 15\]"),
    ({"rank": 100}, r"rank = 100.*\[1, 15\]"),
    ({"head_dim": 1024}, r"head_dim = 1024.*\[8, 256\]"),
    ({"n_pages": 2**31}, r"n_pages"),
    ({"max_seqs": 0}, r"max_seqs = 0"),
])
def test_cache_params_say_their_range(kw, pattern):
    args = dict(n_layers=1, n_kv_heads=1, head_dim=64, n_pages=8)
    args.update(kw)
    with pytest.raises(ValueError, match=pattern):
        locks.Cache(**args)


def test_names_and_strings_say_the_choices():
    with pytest.raises(ValueError, match=r"summary 'x': one of 'f32', 'q'"):
        locks.Cache(1, 1, 64, 8, summary="x")
    with pytest.raises(ValueError, match=r"kv_dtype 'f8'"):
        locks.Cache(1, 1, 64, 8, kv_dtype="f8")
    with pytest.raises(TypeError, match="selectors.*names"):
        locks.Cache(1, 1, 64, 8, selectors="locks")  # a string is not a list of names


# ---- arrays -----------------------------------------------------------------------
def test_arrays_of_the_wrong_form(rng):
    c, s, _ = filled(rng)
    q = rng.standard_normal((1, 4, 64)).astype(np.float32)
    with pytest.raises(TypeError, match=r"q: .*array.*list"):
        c.decode_step(0, [s], q.tolist())
    with pytest.raises(TypeError, match=r"q: .*real.*complex"):
        c.decode_step(0, [s], q.astype(np.complex64))
    with pytest.raises(TypeError, match=r"k: .*array.*list"):
        c.write(s, 0, 0, [[0.0]], [[0.0]])
    with pytest.raises(TypeError, match=r"q: .*real.*str|q: .*real.*<U"):
        c.decode_step(0, [s], np.full((1, 4, 64), "a"))
    with pytest.raises(ValueError, match=r"q: shape \(4, 64\), expected \[1, n_q_heads, 64\]"):
        c.decode_step(0, [s], q[0])
    with pytest.raises(TypeError, match="seq_ids"):
        c.decode_step(0, s, q)  # one id, not a list of them
    with pytest.raises(TypeError, match="layer_kv"):
        c.extend(s, rng.standard_normal((2, 2, 5, 2, 64)).astype(np.float32)[0])
    assert c.seq_len(s) == 200


def test_failed_extend_leaves_the_sequence(rng):
    c, s, kv = filled(rng)
    k, v = (rng.standard_normal((40, 2, 64)).astype(np.float32) for _ in range(2))
    bad = v.copy()
    bad[7, 1, 3] = np.nan
    with pytest.raises(locks.NonFiniteError):
        c.extend(s, [(k, v), (k, bad)])  # layer 1 fails after layer 0 was written
    assert c.seq_len(s) == 200
    with pytest.raises(ValueError, match="shape"):
        c.extend(s, [(k, v), (k[:39], v[:39])])  # layers of different lengths
    assert c.seq_len(s) == 200
    # and the cache still answers as if nothing had happened
    q = rng.standard_normal((1, 4, 64)).astype(np.float32)
    out = c.decode_step(1, [s], q, budget=4096)
    ref = ref_attention(q[0], f16(kv[1][0]), f16(kv[1][1]))
    assert np.max(np.abs(out[0] - ref)) / np.max(np.abs(ref)) < 2e-5


# ---- close ------------------------------------------------------------------------
def test_calls_after_close_say_closed(rng):
    c, s, _ = filled(rng)
    c.close()
    q = rng.standard_normal((1, 4, 64)).astype(np.float32)
    for call in (lambda: c.seq_len(s), lambda: c.seq_add(), lambda: c.decode_step(0, [s], q),
                 lambda: c.append(s, 1), lambda: c.free_pages, lambda: c.block_table(s),
                 lambda: c.score(0, s, q[0]), lambda: c.plan([s], 4)):
        with pytest.raises(locks.ClosedError, match="closed"):
            call()
    c.close()  # twice is fine


def test_close_with_a_live_plan_closes_the_plan():
    """Cache.close() closes the cache's StepPlans first; a closed plan refuses calls (no
    use of the freed cache). A fake plan object stands in where no GPU is present."""
    from locks.cache import StepPlan
    c = locks.Cache(1, 1, 64, 8)
    freed = []

    class FakePlan(StepPlan):
        def __init__(self, cache):  # what StepPlan.__init__ does, without a device
            self.cache, self.n_seqs, self._p = cache, 1, 1234
            cache._plans.add(self)

        @staticmethod
        def _free(handle):
            freed.append((handle, bool(c._c)))  # the cache must still be alive here

    p = FakePlan(c)
    c.close()
    assert freed == [(1234, True)]
    with pytest.raises(locks.ClosedError, match="closed"):
        p.status()


# ---- threads ----------------------------------------------------------------------
def run_threads(work, n):
    """work(t) on n threads at once; asserts none raised (the main thread reports)."""
    errors = []

    def guarded(t):
        try:
            work(t)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


def test_two_threads_one_cache(rng):
    """Two threads, one sequence each, looping extend + decode_step on one shared cache
    (1000 iterations in all); every output against float64 attention. Before the binding
    serialised its calls this crashed (SIGSEGV / SIGFPE) in most runs."""
    hkv, d, hq, iters = 2, 64, 4, 500
    c = locks.Cache(1, hkv, d, 2 * (iters * 3 // 16 + 2), max_seqs=2, n_threads=2)
    seeds = rng.integers(1 << 31, size=2)
    results = {}

    def work(t):
        r = np.random.default_rng(int(seeds[t]))
        s = c.seq_add()
        ks, vs, checks = [], [], []
        for i in range(iters):
            n = int(r.integers(1, 4))
            k, v = (r.standard_normal((n, hkv, d)).astype(np.float32) for _ in range(2))
            c.extend(s, [(k, v)])
            ks.append(k)
            vs.append(v)
            q = r.standard_normal((1, hq, d)).astype(np.float32)
            out = c.decode_step(0, [s], q, budget=1 << 20)
            if i % 25 == 24:  # keep q, out and the length for the float64 check
                checks.append((sum(len(x) for x in ks), q[0], out[0].copy()))
        results[t] = (np.concatenate(ks), np.concatenate(vs), checks)

    run_threads(work, 2)
    worst = 0.0
    for k, v, checks in results.values():
        for n, q, out in checks:
            ref = ref_attention(q, f16(k[:n]), f16(v[:n]))
            worst = max(worst, float(np.max(np.abs(out - ref)) / np.max(np.abs(ref))))
    assert worst < 2e-5, worst


def test_mass_target_reaches_the_library(rng):
    """StepParams.mass (locks_step_params.mass) is passed through: a mass target picks
    pages by estimated mass (a different selection from the fixed budget's), and a
    target outside [0, 1) is the library's InvalidArgError."""
    c, s, kv = filled(rng, n=1000)
    q = rng.standard_normal((1, 4, 64)).astype(np.float32)
    _, fixed = c.decode_step(0, [s], q, budget=1024, return_selection=True)
    out, sel = c.decode_step(0, [s], q, budget=1024, mass=0.3, return_selection=True)
    assert not np.array_equal(fixed.n_pages, sel.n_pages)
    toks = [np.concatenate([np.arange(p * 16, min(p * 16 + 16, 1000)) for p in sel.pages[0, h, : sel.n_pages[0, h]]])
            for h in range(2)]
    ref = ref_attention(q[0], f16(kv[0][0]), f16(kv[0][1]), toks)
    assert np.max(np.abs(out[0] - ref)) / np.max(np.abs(ref)) < 2e-5
    with pytest.raises(locks.InvalidArgError):
        c.decode_step(0, [s], q, budget=1024, mass=1.5)
    with pytest.raises(TypeError, match="mass"):
        c.decode_step(0, [s], q, mass="0.5")


def test_four_threads_one_sequence(rng):
    """Four threads decoding the same sequence at once (800 calls): every output equals
    float64 attention (before: wrong outputs in about a quarter of the calls)."""
    c, s, kv = filled(rng, n=300, n_threads=2)
    qs = rng.standard_normal((4, 200, 1, 4, 64)).astype(np.float32)
    outs = np.zeros_like(qs)

    def work(t):
        for i in range(200):
            outs[t, i] = c.decode_step(i % 2, [s], qs[t, i], budget=4096)

    run_threads(work, 4)
    for t in range(4):
        for i in range(0, 200, 7):
            layer = i % 2
            ref = ref_attention(qs[t, i, 0], f16(kv[layer][0]), f16(kv[layer][1]))
            assert np.max(np.abs(outs[t, i, 0] - ref)) / np.max(np.abs(ref)) < 2e-5, (t, i)


READS = {
    "seq_len": lambda c, s: c.seq_len(s),
    "block_table": lambda c, s: c.block_table(s),
    "free_pages": lambda c, s: c.free_pages,
    "summary_bytes": lambda c, s: c.summary_bytes,
}


def test_read_only_calls_share_the_lock(rng):
    """While one thread holds the cache's lock shared (as a read-only call does), another
    thread's read-only calls return and its append waits until the lock is let go
    (before: every call took the lock exclusively, so the reads waited too)."""
    c, s, _ = filled(rng, n=40)

    def side(call):
        done = threading.Event()
        th = threading.Thread(target=lambda: (call(), done.set()))
        th.start()
        return th, done

    for name, read in READS.items():
        with c._lock.shared():
            th, done = side(lambda: read(c, s))
            returned = done.wait(5)
        th.join()
        assert returned, f"{name} waited for another reader"
    with c._lock.shared():
        th, done = side(lambda: c.append(s, 1))
        early = done.wait(0.1)
    th.join(5)
    assert not early, "an append ran while a reader held the cache"
    assert done.is_set() and c.seq_len(s) == 41


def test_reads_beside_writes_and_close(rng):
    """Readers loop the read-only calls on a fixed sequence while a writer extends and
    decodes another one: every read gives what the fixed sequence holds; then close()
    under the readers: they get ClosedError, nothing else (no use after free)."""
    c = locks.Cache(1, 2, 64, 64, max_seqs=2, n_threads=2)
    s = c.seq_add()
    k, v = (rng.standard_normal((40, 2, 64)).astype(np.float32) for _ in range(2))
    c.extend(s, [(k, v)])
    table = c.block_table(s)
    stop, errors, rounds = threading.Event(), [], [0, 0]

    def reader(t):
        try:
            while not stop.is_set():
                assert c.seq_len(s) == 40
                assert np.array_equal(c.block_table(s), table)
                assert 0 <= c.free_pages <= 64 - len(table)
                rounds[t] += 1
        except locks.ClosedError:
            pass
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    readers = [threading.Thread(target=reader, args=(t,)) for t in range(2)]
    for th in readers:
        th.start()
    w = c.seq_add()
    r = np.random.default_rng(int(rng.integers(1 << 31)))
    for i in range(60):
        c.extend(w, [tuple(r.standard_normal((3, 2, 64)).astype(np.float32) for _ in range(2))])
        c.decode_step(0, [w], r.standard_normal((1, 4, 64)).astype(np.float32), budget=256)
        if i % 20 == 19:
            c.truncate(w, 0)
    c.close()
    stop.set()
    for th in readers:
        th.join()
    assert not errors, errors
    assert min(rounds) > 0, rounds
