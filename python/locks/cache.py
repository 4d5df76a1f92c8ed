"""The LOCKS paged KV cache from Python (locks.h's locks_cache and decode step).

A CPU cache takes and returns numpy float32 arrays; a CUDA cache takes and returns
torch CUDA tensors, passed to the library by address (zero-copy when they are already
float32 and contiguous, else converted once) and worked on in torch's current stream
(locks_cache_set_stream, no host wait between torch's kernels and the library's). The
library's ordinary CUDA calls synchronise before they return (a NaN check, the host
bookkeeping); :meth:`Cache.plan` gives a :class:`StepPlan` whose per-step calls do not
(no host wait, no allocation, lengths read on the device), so they can run inside
``torch.cuda.graph`` capture.
Shapes (d = head_dim, Hkv = n_kv_heads, Hq = query heads, a multiple of Hkv):

    write:        k, v [n_tokens, Hkv, d]   (keys after RoPE)
    decode_step:  q [n_seqs, Hq, d] -> out [n_seqs, Hq, d]
    score:        q [Hq, d] -> mass [Hkv, n_full_pages]
    select:       mass -> pages [Hkv, max_pages] (logical page indices), n_pages [Hkv]
    attend:       q [Hq, d], pages, n_pages -> out [Hq, d], lse [Hq]

Arguments are checked before they reach the library: integers against their range
(:class:`locks.IntRangeError`, an ``OverflowError``, outside int32; ``InvalidArgError``
outside the documented range), arrays for their form (``TypeError`` for a list or a
complex array, ``InvalidArgError`` for a shape). Threads: one cache may be shared by
threads; the binding serialises the calls that change it (a lock per cache, held for
the whole call, the GIL released inside the library), while the read-only ones
(:meth:`Cache.seq_len`, :meth:`Cache.block_table`, :attr:`Cache.free_pages`,
:attr:`Cache.summary_bytes`, :meth:`PagedCache.physical`) share the lock and run side
by side (the library's own lock lets them, locks.h "Threads"); calls on different
caches run concurrently. A call on a closed cache raises :class:`locks.ClosedError`.
"""
from __future__ import annotations

import ctypes
import functools
import operator
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Tuple, TypeVar

import numpy as np

from . import _capi
from ._capi import LOCKS_PAGE, lib
from .errors import ClosedError, IntRangeError, InvalidArgError, LocksError, check

Array = Any  # numpy.ndarray (CPU cache) or torch.Tensor (CUDA cache)
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
MAX_RANK, MAX_HEAD_DIM, MAX_THREADS = 15, 256, 256  # locks.h LOCKS_MAX_*, cache.c's n_threads bound
F = TypeVar("F", bound=Callable[..., Any])


# ---- argument checks (before anything reaches the library) ------------------------
def _int(name: str, x: Any, lo: int = 0, hi: int = I32_MAX) -> int:
    """x as an int in [lo, hi]: TypeError for a non-integer (numpy integers are
    integers, bool and float are not), IntRangeError outside int32, InvalidArgError
    outside [lo, hi]."""
    if isinstance(x, (bool, np.bool_)) or not hasattr(x, "__index__"):
        raise TypeError(f"{name}: an integer, got {type(x).__name__} {x!r}")
    v = operator.index(x)
    if lo <= v <= hi:
        return v
    msg = f"{name} = {v}: expected an integer in [{lo}, {hi}]"
    raise (IntRangeError if not I32_MIN <= v <= I32_MAX else InvalidArgError)(1, "argument check", msg)


def _ids(name: str, xs: Any) -> list:
    """A list of int32 ids (sequence ids, page ids) from a list / tuple / 1-d integer array."""
    if isinstance(xs, (str, bytes)) or not hasattr(xs, "__len__") or getattr(xs, "ndim", 1) != 1:
        raise TypeError(f"{name}: a list (or 1-d integer array) of ids, got {type(xs).__name__}")
    return [_int(f"{name}[{i}]", x) for i, x in enumerate(xs)]


def _i32_array(name: str, xs: Any) -> np.ndarray:
    """A contiguous int32 copy of a list / 1-d array of ids, each in [0, 2**31 - 1]."""
    a = np.asarray(xs)
    if a.dtype.kind not in "iu" and not (a.size == 0 and a.dtype.kind == "f"):
        raise TypeError(f"{name}: integers, got dtype {a.dtype}")
    a = a.reshape(-1)
    if a.size and (int(a.min()) < 0 or int(a.max()) > I32_MAX):
        bad = int(a.min()) if int(a.min()) < 0 else int(a.max())
        raise (IntRangeError if not I32_MIN <= bad <= I32_MAX else InvalidArgError)(
            1, "argument check", f"{name}: {bad} is outside [0, {I32_MAX}]")
    return np.ascontiguousarray(a, dtype=np.int32)


def _choice(name: str, x: Any, table: dict) -> int:
    if not isinstance(x, str) or x not in table:
        raise InvalidArgError(1, "argument check", f"{name} {x!r}: one of {', '.join(map(repr, table))}")
    return table[x]


def _real(name: str, x: Any) -> float:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: a real number, got {type(x).__name__} {x!r}")
    return float(x)


class _RWLock:
    """A cache's lock in the binding: many readers or one writer. ``with lock:`` holds it
    exclusively; ``with lock.shared():`` shares it with other readers. A waiting writer
    goes first (new readers wait for it), so a stream of reads cannot starve a write.
    The writer may enter again, shared or exclusive (a write calling a read), and so may
    a reader, shared; a reader must not ask for it exclusively."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0  # shared entries held, nested ones included
        self._writers_waiting = 0
        self._writer: Optional[int] = None
        self._depth = 0  # the writer's nesting, its shared entries included
        self._mine = threading.local()  # .n: this thread's shared entries

    def __enter__(self) -> "_RWLock":
        me = threading.get_ident()
        with self._cond:
            if self._writer != me:
                self._writers_waiting += 1
                while self._writer is not None or self._readers:
                    self._cond.wait()
                self._writers_waiting -= 1
                self._writer = me
            self._depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._cond:
            self._depth -= 1
            if self._depth == 0:
                self._writer = None
                self._cond.notify_all()

    class _Shared:
        def __init__(self, lock: "_RWLock") -> None:
            self.lock = lock

        def __enter__(self) -> None:
            lk = self.lock
            with lk._cond:
                if lk._writer == threading.get_ident():
                    lk._depth += 1
                    return
                n = getattr(lk._mine, "n", 0)
                if n == 0:  # a nested entry must not wait for a writer waiting on it
                    while lk._writer is not None or lk._writers_waiting:
                        lk._cond.wait()
                lk._mine.n = n + 1
                lk._readers += 1

        def __exit__(self, *exc: Any) -> None:
            lk = self.lock
            with lk._cond:
                if lk._writer == threading.get_ident():
                    lk._depth -= 1
                    return
                lk._mine.n -= 1
                lk._readers -= 1
                if lk._readers == 0:
                    lk._cond.notify_all()

    def shared(self) -> "_RWLock._Shared":
        return _RWLock._Shared(self)


def _closed(self: Any, f: Callable[..., Any]) -> ClosedError:
    return ClosedError(f"{type(self).__name__}.{f.__name__}",
                       "cache" if isinstance(self, Cache) else "plan (or its cache)")


def _locked(f: F) -> F:
    """The method runs holding the cache's lock exclusively (the binding's thread
    contract: calls that change a cache are serialised) and refuses a closed cache."""
    @functools.wraps(f)
    def g(self: "Cache", *args: Any, **kw: Any) -> Any:
        with self._lock:
            if not self._c:
                raise _closed(self, f)
            return f(self, *args, **kw)
    return g  # type: ignore[return-value]


def _read_locked(f: F) -> F:
    """A read-only method: it shares the cache's lock with other readers (close() and
    the calls that change the cache wait for it) and refuses a closed cache."""
    @functools.wraps(f)
    def g(self: "Cache", *args: Any, **kw: Any) -> Any:
        with self._lock.shared():
            if not self._c:
                raise _closed(self, f)
            return f(self, *args, **kw)
    return g  # type: ignore[return-value]

# Frees asked for while torch was capturing a CUDA graph on the caller's stream: a cache or
# plan collected by Python's garbage collector can be freed in the middle of someone's
# capture (the collector runs wherever an allocation triggers it), and its free
# synchronises and releases device memory, which invalidates the capture (seen on the
# H200: python/tests/test_hf.py's LocksStaticCache graph, whose previous cache was
# collected inside the next capture). They run, oldest first (plans before their cache),
# at the next free or new cache outside a capture.
_deferred: list = []
_deferred_lock = threading.Lock()


def _capturing() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 (a torch without CUDA, or one shutting down)
        return False


def _release(free: Callable[[Any], None], handle: Any) -> None:
    """free(handle) now, or after the CUDA graph capture under way (see _deferred)."""
    if _capturing():
        with _deferred_lock:
            _deferred.append((free, handle))
        return
    _flush_deferred()
    free(handle)


def _flush_deferred() -> None:
    if not _deferred or _capturing():
        return
    with _deferred_lock:
        pending = _deferred[:]
        del _deferred[:]
    for free, handle in pending:
        free(handle)


_DTYPES = {"f32": 0, "f16": 1, "bf16": 2}
_CUDA_STREAM_LEGACY = 0x1  # cudaStreamLegacy
_PRECS = {"f32": 0, "q": 1}
_BACKENDS = {"cpu": 0, "cuda": 1}


def selector_id(name: str) -> int:
    """The locks_selector value of a selector name ("full", "oracle", "locks", "quest",
    "shadow", "rocket", "shadow-lm"); raises InvalidArgError for an unknown name."""
    if not isinstance(name, str):
        raise TypeError(f"selector: a name such as 'locks', got {type(name).__name__} {name!r}")
    out = ctypes.c_int()
    check(lib.locks_selector_parse(name.encode(), ctypes.byref(out)), "locks_selector_parse", name)
    return out.value


def selector_bits(names: Sequence[str]) -> int:
    """locks_cache_params.selectors for a list of selector names."""
    if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
        raise TypeError(f"selectors: a list of selector names, got {type(names).__name__} {names!r}")
    bits = 0
    for n in names:
        bits |= 1 << selector_id(n)
    return bits


@dataclass
class StepParams:
    """locks_step_params: selector, token budget per (sequence, KV head), forced sink and
    recent pages, softmax scale (0: 1/sqrt(head_dim)), mass target (0: off; in (0, 1):
    pages by estimated mass until it is covered, within the budget; locks.h)."""
    selector: str = "locks"
    budget: int = 2048
    n_sink: int = 1
    n_recent: int = 1
    scale: float = 0.0
    mass: float = 0.0

    def c(self) -> _capi.StepParams:
        """The C struct, every field checked (a budget <= 0 is the library's BudgetError)."""
        p = lib.locks_step_default_params()
        p.selector = selector_id(self.selector)
        p.budget = _int("budget", self.budget, I32_MIN)
        p.n_sink, p.n_recent = _int("n_sink", self.n_sink), _int("n_recent", self.n_recent)
        p.scale, p.mass = _real("scale", self.scale), _real("mass", self.mass)
        return p


@dataclass
class StepSelection:
    """What a decode step attended: ``pages[s, h, :n_pages[s, h]]`` are the logical page
    indices (ascending) of sequence s (its position in seq_ids) and KV head h."""
    pages: np.ndarray    # [n_seqs, Hkv, max_pages] int32
    n_pages: np.ndarray  # [n_seqs, Hkv] int32


@dataclass
class StepStats:
    """locks_step_stats: bytes read and phase times (ms) of one step."""
    bytes_meta: int
    bytes_kv: int
    bytes_dense: int
    score_ms: float
    select_ms: float
    attend_ms: float


def _torch():
    import torch  # only CUDA caches need it
    return torch


class Cache:
    """A LOCKS paged KV cache (locks_cache_init): a pool of ``n_pages`` 16-token pages
    shared by ``n_layers`` layers and up to ``max_seqs`` sequences, with a rank-``rank``
    summary per full page and KV head. ``backend`` is "cpu" (numpy arrays) or "cuda"
    (torch CUDA tensors on ``device``). ``kv_dtype`` "f16" (CPU; CUDA too) or "bf16"
    (CUDA); ``summary`` "q" (int8/int4, the default) or "f32" (CPU); ``selectors``:
    the selector names whose page metadata the cache keeps (default: the library's,
    "locks"; "full" and "oracle" need none). Use as a context manager or call close();
    errors raise :class:`locks.LocksError` subclasses.

    Threads: the object may be shared; its calls that change it are serialised by a
    lock of its own (held for the whole call, so a call sees no other thread's half-done
    work); the read-only ones (seq_len, block_table, free_pages, summary_bytes) share
    that lock and run side by side. close() waits for a running call, closes the cache's :class:`StepPlan` objects
    first, and every later call raises :class:`locks.ClosedError`."""

    def __new__(cls, *args: Any, **kw: Any) -> "Cache":
        _flush_deferred()
        self = super().__new__(cls)
        self._c, self._lock, self._plans = None, _RWLock(), weakref.WeakSet()
        return self

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, n_pages: int,
                 max_seqs: int = 1, rank: int = 8, summary: str = "q",
                 kv_dtype: Optional[str] = None, backend: str = "cpu", n_threads: int = 1,
                 device: int = 0, selectors: Optional[Sequence[str]] = None) -> None:
        p = lib.locks_cache_default_params()
        p.backend = _choice("backend", backend, _BACKENDS)
        p.summary_prec = _choice("summary", summary, _PRECS)
        p.kv_dtype = _choice("kv_dtype", kv_dtype or "f16", _DTYPES)
        p.n_layers, p.n_kv_heads = _int("n_layers", n_layers, 1), _int("n_kv_heads", n_kv_heads, 1)
        p.head_dim, p.n_pages = _int("head_dim", head_dim, 8, MAX_HEAD_DIM), _int("n_pages", n_pages, 1)
        p.max_seqs, p.rank = _int("max_seqs", max_seqs, 1), _int("rank", rank, 1, MAX_RANK)
        p.n_threads, p.device = _int("n_threads", n_threads, 1, MAX_THREADS), _int("device", device)
        if selectors is not None:
            p.selectors = selector_bits(selectors)
        self._init(p, backend, device)

    def _init(self, p: _capi.CacheParams, backend: str, device: int, ext: Any = None) -> None:
        self.backend, self.device = backend, device
        self.n_layers, self.n_kv_heads, self.head_dim = p.n_layers, p.n_kv_heads, p.head_dim
        self.n_pages, self.max_seqs = p.n_pages, p.max_seqs
        err = ctypes.c_int(0)
        if ext is None:
            self._c = lib.locks_cache_init(p, ctypes.byref(err))
            check(err.value, "locks_cache_init")
        else:
            self._c = lib.locks_cache_init_ext(p, ctypes.byref(ext), ctypes.byref(err))
            check(err.value, "locks_cache_init_ext")

    # ---- lifetime ---------------------------------------------------------------
    def close(self) -> None:
        """Frees the cache (also done when the object is collected), its plans first;
        waits for a call running in another thread. Closing twice is fine."""
        with self._lock:
            for plan in list(self._plans):
                plan.close()
            if self._c:
                _release(lib.locks_cache_free, self._c)
                self._c = None

    @property
    def closed(self) -> bool:
        return not self._c

    def __enter__(self) -> "Cache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_lock", None) is not None:
            self.close()

    # ---- arrays -----------------------------------------------------------------
    def _stream(self) -> None:
        if self.backend == "cuda":
            torch = _torch()
            # torch's default stream is CUDA's legacy default stream (handle 0), which
            # locks_cache_set_stream would read as "the cache's own stream": name it
            # cudaStreamLegacy (0x1) so the cache's work is ordered after torch's
            s = torch.cuda.current_stream(self.device).cuda_stream or _CUDA_STREAM_LEGACY
            check(lib.locks_cache_set_stream(self._c, ctypes.c_void_p(s)), "locks_cache_set_stream")

    def _in(self, x: Array, shape: Tuple[Any, ...], name: str, dtype: str = "f32") -> Array:
        """x as a contiguous array of the backend (float32 or int32), its form checked:
        ``shape`` lists each dimension's size, or a name (str) for a free one."""
        kinds = "fiu" if dtype == "f32" else "iu"
        what = "real (float or integer)" if dtype == "f32" else "integer"
        form = "[" + ", ".join(str(s) for s in shape) + "]"
        if self.backend == "cuda":
            torch = _torch()
            if not (isinstance(x, torch.Tensor) and x.is_cuda):
                raise TypeError(f"{name}: a CUDA cache takes torch CUDA tensors {form}, got {type(x).__name__}")
            if x.is_complex() or x.dtype == torch.bool or (dtype != "f32" and x.is_floating_point()):
                raise TypeError(f"{name}: a {what} tensor {form}, got {x.dtype}")
            x = x.to(torch.float32 if dtype == "f32" else torch.int32).contiguous()
        else:
            if type(x).__module__.startswith("torch"):
                x = x.detach().cpu().numpy()
            if not isinstance(x, np.ndarray):
                raise TypeError(f"{name}: a numpy array {form}, got {type(x).__name__}")
            if x.dtype.kind not in kinds:
                raise TypeError(f"{name}: a {what} array {form}, got dtype {x.dtype}")
            x = np.ascontiguousarray(x, dtype=np.float32 if dtype == "f32" else np.int32)
        if len(x.shape) != len(shape) or any(isinstance(e, int) and g != e for g, e in zip(x.shape, shape)):
            raise InvalidArgError(1, name, f"{name}: shape {tuple(x.shape)}, expected {form}")
        return x

    def _empty(self, shape: Tuple[int, ...], dtype: str = "f32", like: Optional[Array] = None) -> Array:
        if self.backend == "cuda":
            torch = _torch()
            dev = like.device if like is not None else torch.device("cuda", self.device)
            return torch.empty(shape, dtype=torch.float32 if dtype == "f32" else torch.int32, device=dev)
        return np.empty(shape, dtype=np.float32 if dtype == "f32" else np.int32)

    @staticmethod
    def _ptr(x: Optional[Array]) -> Optional[int]:
        if x is None:
            return None
        return x.data_ptr() if hasattr(x, "data_ptr") else x.ctypes.data

    def _layer(self, layer: Any) -> int:
        return _int("layer", layer, 0, self.n_layers - 1)

    # ---- sequences --------------------------------------------------------------
    @_locked
    def seq_add(self) -> int:
        """Adds an empty sequence; returns its id."""
        sid = ctypes.c_int32()
        check(lib.locks_cache_seq_add(self._c, ctypes.byref(sid)), "locks_cache_seq_add")
        return sid.value

    @_locked
    def seq_remove(self, seq: int) -> None:
        """Removes the sequence and frees its pages."""
        check(lib.locks_cache_seq_remove(self._c, _int("seq", seq)), "locks_cache_seq_remove")

    @_read_locked
    def seq_len(self, seq: int) -> int:
        """Tokens reserved in the sequence (NoSeqError for an unknown id)."""
        n = lib.locks_cache_seq_len(self._c, _int("seq", seq))
        if n < 0:
            check(6, "locks_cache_seq_len", f"seq {seq}")
        return n

    @_locked
    def append(self, seq: int, n_tokens: int) -> None:
        """Reserves n_tokens more positions at the end of the sequence (all layers)."""
        seq, n_tokens = _int("seq", seq), _int("n_tokens", n_tokens)
        self._stream()
        check(lib.locks_cache_append(self._c, seq, n_tokens), "locks_cache_append")

    @_locked
    def truncate(self, seq: int, length: int) -> None:
        """Shortens the sequence to its first ``length`` tokens."""
        seq, length = _int("seq", seq), _int("length", length)
        self._stream()
        check(lib.locks_cache_seq_truncate(self._c, seq, length), "locks_cache_seq_truncate")

    @_read_locked
    def block_table(self, seq: int) -> np.ndarray:
        """The sequence's block table (logical page -> physical page), a copy."""
        n = ctypes.c_int32()
        t = lib.locks_cache_block_table(self._c, _int("seq", seq), ctypes.byref(n))
        if not t:
            check(6, "locks_cache_block_table", f"seq {seq}")
        return np.ctypeslib.as_array(t, shape=(n.value,)).copy() if n.value else np.zeros(0, np.int32)

    @property
    @_read_locked
    def free_pages(self) -> int:
        """Free physical pages left in the pool."""
        return lib.locks_cache_free_pages(self._c)

    @property
    @_read_locked
    def summary_bytes(self) -> int:
        """Bytes of summaries stored per (page, KV head)."""
        return lib.locks_cache_summary_bytes(self._c)

    # ---- writes -----------------------------------------------------------------
    @_locked
    def write(self, seq: int, layer: int, pos: int, k: Array, v: Array) -> None:
        """Writes K/V [n, Hkv, d] of tokens [pos, pos + n) of one layer (reserved with
        append); the pages this fills get their summaries before it returns."""
        seq, layer, pos = _int("seq", seq), self._layer(layer), _int("pos", pos)
        k = self._in(k, ("n", self.n_kv_heads, self.head_dim), "k")
        v = self._in(v, (int(k.shape[0]), self.n_kv_heads, self.head_dim), "v")
        self._stream()
        check(lib.locks_cache_write(self._c, seq, layer, pos, int(k.shape[0]), self._ptr(k), self._ptr(v)),
              "locks_cache_write")

    @_locked
    def extend(self, seq: int, layer_kv: Sequence[Tuple[Array, Array]]) -> None:
        """Appends n tokens to the sequence and writes their K/V for every layer:
        ``layer_kv[l] = (k, v)``, each [n, Hkv, d]. All or nothing: every array is
        checked first, and if a write fails (NonFiniteError, say) the sequence is
        truncated back to its length before the call."""
        seq = _int("seq", seq)
        if not isinstance(layer_kv, (list, tuple)) or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 for p in layer_kv):
            raise TypeError(f"layer_kv: a list of (k, v) pairs, one per layer, got {type(layer_kv).__name__}")
        if len(layer_kv) != self.n_layers:
            raise InvalidArgError(1, "extend", f"{len(layer_kv)} layers, cache has {self.n_layers}")
        first = self._in(layer_kv[0][0], ("n", self.n_kv_heads, self.head_dim), "layer_kv[0][0]")
        shape = (int(first.shape[0]), self.n_kv_heads, self.head_dim)
        arrays = [(self._in(k, shape, f"layer_kv[{i}][0]"), self._in(v, shape, f"layer_kv[{i}][1]"))
                  for i, (k, v) in enumerate(layer_kv)]
        pos = self.seq_len(seq)
        self.append(seq, shape[0])
        try:
            for layer, (k, v) in enumerate(arrays):
                self.write(seq, layer, pos, k, v)
        except BaseException:
            self.truncate(seq, pos)  # the sequence as it was before the call
            raise

    # ---- decode -----------------------------------------------------------------
    @_locked
    def decode_step(self, layer: int, seq_ids: Sequence[int], q: Array, *, budget: int = 2048,
                    selector: str = "locks", n_sink: int = 1, n_recent: int = 1, scale: float = 0.0,
                    mass: float = 0.0, out: Optional[Array] = None, return_selection: bool = False,
                    return_stats: bool = False) -> Any:
        """One decode step of one layer for a batch: q [n_seqs, Hq, d] -> out (same
        shape). With return_selection / return_stats, returns a tuple (out, selection
        [, stats]) (reading the selection back synchronises a CUDA cache)."""
        layer, seq_ids = self._layer(layer), _ids("seq_ids", seq_ids)
        ns = len(seq_ids)
        if ns == 0:
            raise InvalidArgError(1, "decode_step", "seq_ids: at least one sequence")
        q = self._in(q, (ns, "n_q_heads", self.head_dim), "q")
        hq = int(q.shape[1])
        if out is None:
            out = self._empty((ns, hq, self.head_dim), like=q)
        elif tuple(out.shape) != (ns, hq, self.head_dim) or not _is_f32_contig(out):
            raise InvalidArgError(1, "decode_step", "out must be float32, contiguous, shaped like q")
        ids = (ctypes.c_int32 * ns)(*seq_ids)
        sp = StepParams(selector, budget, n_sink, n_recent, scale, mass).c()
        sel_c, sel = None, None
        if return_selection:
            maxp = max(1, max((self.seq_len(s) + LOCKS_PAGE - 1) // LOCKS_PAGE for s in seq_ids))
            sel = StepSelection(np.zeros((ns, self.n_kv_heads, maxp), np.int32),
                                np.zeros((ns, self.n_kv_heads), np.int32))
            sel_c = _capi.Selection(sel.pages.ctypes.data_as(_capi.c_int32_p),
                                    sel.n_pages.ctypes.data_as(_capi.c_int32_p), maxp)
        st_c = _capi.StepStats() if return_stats else None
        self._stream()
        check(lib.locks_decode_step(self._c, layer, ids, ns, self._ptr(q), hq, ctypes.byref(sp),
                                    self._ptr(out), ctypes.byref(sel_c) if sel_c else None,
                                    ctypes.byref(st_c) if st_c else None), "locks_decode_step")
        if not (return_selection or return_stats):
            return out
        res: Tuple[Any, ...] = (out,)
        if return_selection:
            res += (sel,)
        if return_stats:
            res += (StepStats(st_c.bytes_meta, st_c.bytes_kv, st_c.bytes_dense,
                              st_c.score_ms, st_c.select_ms, st_c.attend_ms),)
        return res

    @_locked
    def plan(self, seq_ids: Sequence[int], n_q_heads: int, *, budget: int = 2048, n_sink: int = 1,
             n_recent: int = 1, scale: float = 0.0, max_ctx: Optional[int] = None) -> "StepPlan":
        """A :class:`StepPlan` for decode steps of the batch ``seq_ids`` (CUDA cache; the
        LOCKS selector) with sequences of up to ``max_ctx`` tokens (default: the pool).
        Set-up call: validates, sizes the workspace and synchronises. The plan is
        closed with the cache."""
        return StepPlan(self, seq_ids, n_q_heads, budget=budget, n_sink=n_sink, n_recent=n_recent,
                        scale=scale, max_ctx=max_ctx)

    @_locked
    def score(self, layer: int, seq: int, q: Array, *, selector: str = "locks", budget: int = 2048,
              scale: float = 0.0) -> Array:
        """Group masses [Hkv, n_full] of the sequence's full pages (locks_score), q [Hq, d]."""
        layer, seq = self._layer(layer), _int("seq", seq)
        q = self._in(q, ("n_q_heads", self.head_dim), "q")
        hq = int(q.shape[0])
        mass = self._empty((self.n_kv_heads, self.seq_len(seq) // LOCKS_PAGE), like=q)
        sp = StepParams(selector, budget, 1, 1, scale).c()
        self._stream()
        check(lib.locks_score(self._c, layer, seq, self._ptr(q), hq, ctypes.byref(sp), self._ptr(mass)),
              "locks_score")
        return mass

    @_locked
    def select(self, seq: int, mass: Array, *, budget: int = 2048, n_sink: int = 1, n_recent: int = 1,
               max_pages: Optional[int] = None) -> Tuple[Array, Array]:
        """Pages [Hkv, max_pages] (logical, ascending) and counts [Hkv] from group masses."""
        seq = _int("seq", seq)
        n_full = self.seq_len(seq) // LOCKS_PAGE
        mass = self._in(mass, (self.n_kv_heads, n_full), "mass")
        maxp = (_int("max_pages", max_pages, 1) if max_pages is not None
                else max(1, (self.seq_len(seq) + LOCKS_PAGE - 1) // LOCKS_PAGE))
        pages = self._empty((self.n_kv_heads, maxp), "i32", like=mass)
        n_pages = self._empty((self.n_kv_heads,), "i32", like=mass)
        sp = StepParams("locks", budget, n_sink, n_recent).c()
        self._stream()
        check(lib.locks_select(self._c, seq, self._ptr(mass), ctypes.byref(sp), self._ptr(pages),
                               self._ptr(n_pages), maxp), "locks_select")
        return pages, n_pages

    @_locked
    def attend(self, layer: int, seq: int, q: Array, pages: Array, n_pages: Array,
               scale: float = 0.0) -> Tuple[Array, Array]:
        """Exact attention of q [Hq, d] over the listed pages: (out [Hq, d], lse [Hq])."""
        layer, seq, scale = self._layer(layer), _int("seq", seq), _real("scale", scale)
        q = self._in(q, ("n_q_heads", self.head_dim), "q")
        hq = int(q.shape[0])
        pages = self._in(pages, (self.n_kv_heads, "max_pages"), "pages", "i32")
        maxp = int(pages.shape[1])
        n_pages = self._in(n_pages, (self.n_kv_heads,), "n_pages", "i32")
        out = self._empty((hq, self.head_dim), like=q)
        lse = self._empty((hq,), like=q)
        self._stream()
        check(lib.locks_attend(self._c, layer, seq, self._ptr(q), hq, scale, self._ptr(pages),
                               self._ptr(n_pages), maxp, self._ptr(out), self._ptr(lse)), "locks_attend")
        return out, lse


def _is_f32_contig(x: Array) -> bool:
    if hasattr(x, "data_ptr"):
        return str(x.dtype) == "torch.float32" and x.is_contiguous()
    return x.dtype == np.float32 and x.flags.c_contiguous




_LAYOUTS = {"HND": 0, "NHD": 1}


class PagedCache(Cache):
    """A LOCKS cache over K/V pages the caller owns (locks_cache_init_ext): the library
    keeps only page summaries and selector metadata beside them.

    ``k_pages[l]`` / ``v_pages[l]`` are layer l's pages, shaped ``[n_pages, Hkv, 16, d]``
    (layout "HND") or ``[n_pages, 16, Hkv, d]`` ("NHD", vLLM's and FlashInfer's
    default): numpy float16 arrays for a CPU cache, torch CUDA float16/bfloat16 tensors
    for a CUDA cache; each page contiguous, pages any stride apart (views such as
    ``kv_cache[:, 0]`` of FlashInfer's ``[n_pages, 2, 16, Hkv, d]`` work). They are read in place (the object keeps references);
    the caller writes them. Per sequence: :meth:`set_pages` (its block table and length),
    :meth:`pages_filled` when pages become full, :meth:`release` when pages are freed;
    then :meth:`decode_step`, or :meth:`score` + :meth:`select` for the selection only
    (:meth:`physical` maps it to the caller's page ids)."""

    def __init__(self, k_pages: Sequence[Array], v_pages: Sequence[Array], layout: str = "NHD",
                 max_seqs: int = 1, rank: int = 8, n_threads: int = 1, device: int = 0,
                 selectors: Optional[Sequence[str]] = None) -> None:
        _choice("layout", layout, _LAYOUTS)
        if not all(isinstance(t, (list, tuple)) for t in (k_pages, v_pages)):
            raise TypeError("PagedCache: k_pages and v_pages are lists of page arrays, one per layer")
        k_pages, v_pages = list(k_pages), list(v_pages)
        if not k_pages or len(k_pages) != len(v_pages):
            raise InvalidArgError(1, "PagedCache", "one K and one V page array per layer")
        for t in k_pages + v_pages:
            if not (isinstance(t, np.ndarray) or hasattr(t, "data_ptr")):
                raise TypeError(f"PagedCache: page arrays are numpy arrays or torch tensors, got {type(t).__name__}")
        x = k_pages[0]
        if len(x.shape) != 4:
            raise InvalidArgError(1, "PagedCache", f"page arrays are 4-d, got shape {tuple(x.shape)}")
        n_pages, a, b, d = (int(s) for s in x.shape)
        hkv, tok = (a, b) if layout == "HND" else (b, a)
        if tok != LOCKS_PAGE:
            raise InvalidArgError(1, "PagedCache", f"16 tokens per page, got {tok}")
        is_torch = hasattr(x, "data_ptr")
        dtype = str(x.dtype).replace("torch.", "")
        if dtype not in ("float16", "bfloat16"):
            raise InvalidArgError(1, "PagedCache", f"pages are float16 or bfloat16, got {dtype}")
        def page_stride(t: Array) -> int:  # elements from page to page; pages themselves contiguous
            if is_torch:
                return int(t.stride(0)) if t[0].is_contiguous() else -1
            return t.strides[0] // t.itemsize if t[0].flags.c_contiguous else -1

        stride = page_stride(x)
        for t in k_pages + v_pages:
            ok = (tuple(t.shape) == tuple(x.shape) and str(t.dtype) == str(x.dtype) and
                  page_stride(t) == stride and stride >= hkv * LOCKS_PAGE * d)
            if not ok:
                raise InvalidArgError(1, "PagedCache", "every page array has layer 0's shape, dtype and page "
                                      "stride, each page contiguous")
        backend = "cuda" if is_torch and x.is_cuda else "cpu"
        if is_torch and backend == "cpu":
            raise TypeError("PagedCache: a CPU cache takes numpy arrays")
        self._keep = (k_pages, v_pages)  # the library reads them in place
        ptr = self._ptr
        kp = (ctypes.c_void_p * len(k_pages))(*[ptr(t) for t in k_pages])
        vp = (ctypes.c_void_p * len(v_pages))(*[ptr(t) for t in v_pages])
        ext = _capi.ExtKV(_LAYOUTS[layout], _DTYPES["bf16" if dtype == "bfloat16" else "f16"],
                          ctypes.cast(kp, ctypes.POINTER(ctypes.c_void_p)),
                          ctypes.cast(vp, ctypes.POINTER(ctypes.c_void_p)), stride)
        p = lib.locks_cache_default_params()
        p.n_layers, p.n_kv_heads, p.head_dim, p.n_pages = len(k_pages), hkv, d, n_pages
        p.max_seqs, p.rank = _int("max_seqs", max_seqs, 1), _int("rank", rank, 1, MAX_RANK)
        p.n_threads = _int("n_threads", n_threads, 1, MAX_THREADS)
        p.device = (x.device.index or 0) if backend == "cuda" else _int("device", device)
        p.backend = _BACKENDS[backend]
        if selectors is not None:
            p.selectors = selector_bits(selectors)
        self.layout = layout
        self._tables: dict = {}
        self._init(p, backend, p.device, ext)

    @_locked
    def set_pages(self, seq: int, block_table: Sequence[int], length: int) -> None:
        """The sequence's block table (physical page of each logical page, ceil(length /
        16) entries) and its length in tokens; call it whenever either changes."""
        seq, length = _int("seq", seq), _int("length", length)
        bt = _i32_array("block_table", block_table)
        check(lib.locks_cache_seq_set_pages(self._c, seq, bt.ctypes.data_as(_capi.c_int32_p), len(bt), length),
              "locks_cache_seq_set_pages", f"seq {seq}, {len(bt)} pages, {length} tokens")
        self._tables[seq] = bt

    @_locked
    def pages_filled(self, layer: int, pages: Sequence[int]) -> None:
        """All 16 slots of these physical pages of ``layer`` are written: builds their
        summaries. InvalidArgError for a page out of range or reported twice (nothing
        is built then)."""
        layer, pg = self._layer(layer), _i32_array("pages", pages)
        self._stream()
        check(lib.locks_cache_pages_filled(self._c, layer, pg.ctypes.data_as(_capi.c_int32_p), len(pg)),
              "locks_cache_pages_filled", f"layer {layer}")

    @_locked
    def release(self, pages: Sequence[int]) -> None:
        """These physical pages are freed or reused by the caller: their summaries go."""
        pg = _i32_array("pages", pages)
        check(lib.locks_cache_pages_release(self._c, pg.ctypes.data_as(_capi.c_int32_p), len(pg)),
              "locks_cache_pages_release")

    @_read_locked
    def physical(self, seq: int, pages: np.ndarray, n_pages: np.ndarray) -> list:
        """Per KV head h, the caller's physical page ids of ``pages[h, :n_pages[h]]``
        (logical indices, as select / decode_step return them)."""
        bt = self._tables[seq]
        pages, n_pages = np.asarray(pages), np.asarray(n_pages)
        return [bt[pages[h, : n_pages[h]]] for h in range(pages.shape[0])]


class DeviceStatusError(LocksError):
    """A plan's device status word had error bits (``bits``; ``names``: "NONFINITE",
    "BUDGET", "BAD_LEN", "EMPTY", locks.h's LOCKS_DEV_*)."""

    def __init__(self, bits: int) -> None:
        self.bits = bits
        self.names = [n for b, n in _capi.DEV_BITS.items() if bits & b]
        self.status, self.name, self.call = 0, "LOCKS_DEV_" + "|".join(self.names), "locks_step_plan_status"
        RuntimeError.__init__(self, f"device status {bits:#x}: {', '.join(self.names)}")


class StepPlan:
    """A capturable decode step (locks.h, "Capturable decode step") for a fixed batch of
    a CUDA cache: :meth:`set_lens` and :meth:`pages_filled` (caller-owned pages,
    :class:`PagedCache`) and :meth:`decode` only enqueue work on torch's current stream:
    no host synchronisation, no allocation by the library, nothing read back, so they
    can be recorded with ``torch.cuda.graph`` and replayed while the sequences grow
    (lengths and block tables are read from device tensors when the work runs).
    Errors found on the device collect in a status word: :meth:`check` (outside the
    step) raises :class:`DeviceStatusError` for them and brings the host's view of the
    lengths and filled pages up to date. Tensors handed to a captured call must stay
    alive (and at their address) while the graph is replayed. The plan's calls hold
    its cache's lock (see :class:`Cache`); closing the cache closes the plan first,
    after which its calls raise :class:`locks.ClosedError`."""

    _p: Any = None

    @staticmethod
    def _free(handle: Any) -> None:
        lib.locks_step_plan_free(handle)

    def __init__(self, cache: Cache, seq_ids: Sequence[int], n_q_heads: int, *, budget: int = 2048,
                 n_sink: int = 1, n_recent: int = 1, scale: float = 0.0, max_ctx: Optional[int] = None) -> None:
        with cache._lock:
            if not cache._c:
                raise ClosedError("StepPlan")
            if cache.backend != "cuda":
                check(7, "locks_step_plan_init", "a plan needs a CUDA cache")
            self.cache, self.seq_ids = cache, _ids("seq_ids", seq_ids)
            self.n_q_heads, self.n_seqs = _int("n_q_heads", n_q_heads, 1), len(self.seq_ids)
            self.max_ctx = _int("max_ctx", max_ctx, 1) if max_ctx is not None else cache.n_pages * LOCKS_PAGE
            ids = (ctypes.c_int32 * self.n_seqs)(*self.seq_ids)
            sp = StepParams("locks", budget, n_sink, n_recent, scale).c()
            err = ctypes.c_int(0)
            cache._stream()  # the cache's earlier work ordered before torch's stream
            p = lib.locks_step_plan_init(cache._c, ids, self.n_seqs, self.n_q_heads, ctypes.byref(sp),
                                         self.max_ctx, ctypes.byref(err))
            check(err.value, "locks_step_plan_init")
            self._p = p
            cache._plans.add(self)

    def close(self) -> None:
        """Frees the plan (also done when it is collected, and by its cache's close(),
        before the cache). Closing twice is fine."""
        if self._p:
            with self.cache._lock:
                if self._p:
                    _release(self._free, self._p)
                    self._p = None

    def __del__(self) -> None:
        self.close()

    def _cur(self) -> int:
        return _torch().cuda.current_stream(self.cache.device).cuda_stream

    @property
    def _lock(self) -> Any:  # for _locked: the cache's lock guards the plan too
        return self.cache._lock

    @property
    def _c(self) -> Any:  # for _locked: the handle a closed plan no longer has
        return self._p

    def _dev(self, x: Array, name: str, dtype: Any, shape: Optional[Tuple[int, ...]] = None) -> Array:
        torch = _torch()
        if not (isinstance(x, torch.Tensor) and x.is_cuda and x.dtype == dtype and x.is_contiguous()):
            raise TypeError(f"{name}: a contiguous {dtype} CUDA tensor")
        if shape is not None and tuple(x.shape) != tuple(shape):
            raise InvalidArgError(1, name, f"shape {tuple(x.shape)}, expected {tuple(shape)}")
        return x

    @_locked
    def set_lens(self, lens: Array, tables: Optional[Array] = None) -> None:
        """Capturable. Sequence i's length becomes ``lens[i]`` (int32 CUDA tensor
        [n_seqs]) and, with ``tables`` (int32 CUDA [n_seqs, stride]), its block table
        ``tables[i, :ceil(len / 16)]``; read when the work runs."""
        torch = _torch()
        lens = self._dev(lens, "lens", torch.int32, (self.n_seqs,))
        stride = 0
        if tables is not None:
            tables = self._dev(tables, "tables", torch.int32)
            if tables.ndim != 2 or tables.shape[0] != self.n_seqs:
                raise InvalidArgError(1, "tables", f"shape {tuple(tables.shape)}, expected [{self.n_seqs}, stride]")
            stride = int(tables.shape[1])
        check(lib.locks_step_plan_set_lens(self._p, lens.data_ptr(), tables.data_ptr() if tables is not None else None,
                                           stride, self._cur()), "locks_step_plan_set_lens")

    @_locked
    def pages_filled(self, layer: int, n_new: int = 1) -> None:
        """Capturable. Builds the summaries of the pages that the last ``n_new`` tokens
        of every sequence filled in ``layer`` (call it every step, every layer, after the
        layer's new K/V are in the pages and after :meth:`set_lens`)."""
        layer, n_new = _int("layer", layer, 0, self.cache.n_layers - 1), _int("n_new", n_new)
        check(lib.locks_step_plan_pages_filled(self._p, layer, n_new, self._cur()), "locks_step_plan_pages_filled")

    @_locked
    def decode(self, layer: int, q: Array, out: Optional[Array] = None) -> Array:
        """Capturable. The step's sparse attention for one layer: q [n_seqs, Hq, d]
        float32 CUDA -> out (same shape; a new tensor unless given)."""
        torch = _torch()
        shape = (self.n_seqs, self.n_q_heads, self.cache.head_dim)
        layer = _int("layer", layer, 0, self.cache.n_layers - 1)
        q = self._dev(q, "q", torch.float32, shape)
        if out is None:
            out = torch.empty(shape, dtype=torch.float32, device=q.device)
        out = self._dev(out, "out", torch.float32, shape)
        check(lib.locks_step_plan_decode(self._p, layer, q.data_ptr(), out.data_ptr(), self._cur()),
              "locks_step_plan_decode")
        return out

    @_locked
    def selection_tensors(self) -> Tuple[Array, Array]:
        """Zero-copy int32 CUDA views of the last decode's selection (the cache's step
        workspace, overwritten by the next step): pages [n_seqs, Hkv, stride] (logical
        pages, ascending, the first n_pages[s, h] valid) and n_pages [n_seqs, Hkv].
        Readable inside a captured step by the caller's own kernels."""
        torch = _torch()
        pp, pn, stride = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int32()
        check(lib.locks_step_plan_selection(self._p, ctypes.byref(pp), ctypes.byref(pn), ctypes.byref(stride)),
              "locks_step_plan_selection")
        hkv = self.cache.n_kv_heads
        dev = torch.device("cuda", self.cache.device)
        pages = torch.as_tensor(_DeviceArray(pp.value, (self.n_seqs, hkv, stride.value)), device=dev)
        n_pages = torch.as_tensor(_DeviceArray(pn.value, (self.n_seqs, hkv)), device=dev)
        return pages, n_pages

    def selection(self) -> StepSelection:
        """The last decode's selection copied to the host (synchronises: not inside a step)."""
        pages, n_pages = self.selection_tensors()
        n = n_pages.cpu().numpy()
        maxp = max(1, int(n.max()))
        return StepSelection(pages[:, :, :maxp].cpu().numpy().copy(), n.copy())

    @_locked
    def status(self) -> int:
        """Host call: waits for the plan's work, returns the LOCKS_DEV_* bits gathered
        since the last call (cleared) and refreshes the host's lengths and filled pages."""
        bits = ctypes.c_uint32(0)
        check(lib.locks_step_plan_status(self._p, ctypes.byref(bits)), "locks_step_plan_status")
        return bits.value

    def check(self) -> None:
        """:meth:`status`, raising :class:`DeviceStatusError` if any bit is set."""
        bits = self.status()
        if bits:
            raise DeviceStatusError(bits)


class _DeviceArray:
    """An int32 device array by address, for torch.as_tensor (__cuda_array_interface__)."""

    def __init__(self, ptr: int, shape: Tuple[int, ...]) -> None:
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": "<i4", "version": 2}
