"""Hugging Face transformers (5.x) decoding through LOCKS.

    import locks.hf
    locks.hf.enable(model, budget=2048)   # Llama / Qwen2 / Mistral-family causal LMs
    model.generate(input_ids, max_new_tokens=64)

What it does: ``enable`` registers the attention function "locks" through transformers'
``AttentionInterface`` (with the SDPA mask through ``AttentionMaskInterface``), switches
the model to it, and makes ``generate`` use a :class:`LocksCache` unless the call passes
its own ``past_key_values``. The prefill is dense (transformers' SDPA over the prompt's
K/V, which are also written into the LOCKS cache, where every full page gets its
summary); each decode step's attention runs in the library (score pages from their
summaries, keep the best within ``budget`` tokens per KV head, exact attention over them).
At a budget >= the context every page is attended: the same attention as SDPA up to
fp32 summation order. The cache follows the model's device: CPU backend (fp16 pages) for
a CPU model, CUDA backend (bf16 or fp16 pages, as the model) for a CUDA model.

:class:`LocksStaticCache` is the CUDA-graph form (like transformers' ``StaticCache``):
K/V pages owned by torch (bf16/fp16 tensors, :class:`locks.PagedCache`), the token's
K/V written with ``index_copy_`` at a device position, and each decode step's library
work through a :class:`locks.StepPlan` (no host synchronisation): a forward
``model(token, position_ids=pos, past_key_values=cache)`` of one token can be recorded
with ``torch.cuda.graph`` and replayed (bench/hf_decode.py, python/tests/test_hf.py).
The prompt comes first, in one forward (dense attention; it creates the plan).

Limits, each refused with an error before anything is written (the checks are in
:mod:`locks._hfcheck`): the prompt must come in one forward (no chunked prefill into a
LocksCache); a batch must be unpadded (equal prompt lengths, no left padding:
``attention_mask`` with zeros); no beam search (``num_beams > 1``); sliding-window
layers (Mistral ``sliding_window``, Qwen2 ``use_sliding_window``, Gemma 3's local
layers) stay transformers' own exact window attention in a :class:`LocksCache` (LOCKS
serves the full-attention layers), and are refused in a :class:`LocksStaticCache` when
``max_cache_len`` exceeds the window; a :class:`LocksStaticCache` holds at most
``max_cache_len`` tokens. ``output_attentions``
is not available for decode steps, and no gradient flows through them (a forward
outside ``torch.no_grad()`` works; the library's attention is not differentiable).
Several caches may serve one model in turn: each forward's attention reads the cache
that the same layer's update just wrote.
"""
from __future__ import annotations

import inspect
import math
import threading
from typing import Any, List, Optional, Sequence, Tuple

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicSlidingWindowLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from . import LOCKS_PAGE
from ._hfcheck import check_generate, check_step_params, check_window, text_config, window_layers
from .cache import Cache as LocksKV
from .cache import PagedCache, StepPlan

ATTN_NAME = "locks"

# The cache a decoder layer's attention call must read: set by the layer's update
# (cache, layer index, new tokens, the key tensor update returned), taken by
# locks_attention_forward right after, in the same module's forward, which passes that
# very key tensor on. Per thread, so two caches (or two models) never see each other's
# (the model is not told which cache is current).
_fresh = threading.local()


def _mark_fresh(cache: Any, layer: int, n_new: int, key: Any) -> None:
    _fresh.slot = (cache, layer, n_new, key)


def _take_fresh(layer: int, key: Any) -> Tuple[Any, int]:
    slot = getattr(_fresh, "slot", None)
    _fresh.slot = None
    if slot is None or slot[1] != layer or slot[3] is not key:
        return None, 0
    return slot[0], slot[2]


def _host(x: torch.Tensor) -> Any:
    """A float32 numpy copy (a tensor that requires grad is detached first)."""
    return x.detach().float().contiguous().cpu().numpy()


def _padding_in(mask: Optional[torch.Tensor]) -> bool:
    """Whether a prefill's 4-d attention mask hides some key from the last query (with
    causal attention over the prompt, the last query sees every key unless padded)."""
    if mask is None or not hasattr(mask, "dtype") or mask.dim() != 4:
        return False
    last = mask[..., -1, :]
    return bool((~last).any()) if last.dtype == torch.bool else bool((last < 0).any())


class LocksLayer(CacheLayerMixin):
    """One decoder layer's view of the shared LOCKS cache (K/V live in the library)."""

    is_sliding = False
    is_compileable = False

    def __init__(self, owner: "LocksCache", layer_idx: int, lib_layer: int) -> None:
        super().__init__()
        self.owner, self.layer_idx, self.lib_layer = owner, layer_idx, lib_layer  # model's, library cache's
        self.n_tokens = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        """Writes the new K/V [b, Hkv, s, d] into the LOCKS cache; returns them (a
        prefill's dense attention reads just these; a decode step reads the library)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        b, _, s, _ = key_states.shape
        if self.n_tokens > 0 and s > 1:
            raise NotImplementedError("LocksCache: prefill must come in one forward (no chunked prefill)")
        self.owner._write(self.lib_layer, self.n_tokens, key_states, value_states)
        self.n_tokens += s
        _mark_fresh(self.owner, self.layer_idx, s, key_states)  # the attention call that follows reads it
        return key_states, value_states

    def _no_beams(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("LocksCache: beam search and batch reordering are not supported "
                                  "(a LOCKS cache cannot reorder, repeat or crop its sequences)")

    reorder_cache = batch_repeat_interleave = batch_select_indices = crop = _no_beams

    def get_mask_sizes(self, query_length: int) -> Tuple[int, int]:
        return self.n_tokens + query_length, 0

    def get_seq_length(self) -> int:
        return self.n_tokens

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        self.n_tokens = 0


class LocksCache(Cache):
    """A transformers ``Cache`` whose K/V live in one LOCKS cache (all layers share its
    page pool). ``budget``: tokens attended per (sequence, KV head) in each decode step;
    ``max_new_tokens`` sizes the pool beyond the prompt; ``selector``, ``n_sink``,
    ``n_recent``, ``rank`` as in the C API (locks.h); ``selectors``: the selectors whose
    page metadata the cache keeps (default: ``selector``'s, so ``selector="quest"``
    works). The parameters are checked here, before anything is written.

    Sliding-window layers (Mistral ``sliding_window``, Qwen2 ``use_sliding_window``,
    Gemma 3's local layers: :func:`locks._hfcheck.window_layers`) keep transformers' own
    ``DynamicSlidingWindowLayer`` and its exact attention over the window; only the
    full-attention layers live in the LOCKS cache (``lib_layers``: their indices)."""

    def __init__(self, model: Any, budget: int = 2048, max_new_tokens: int = 256,
                 selector: str = "locks", n_sink: int = 1, n_recent: int = 1, rank: int = 8,
                 n_threads: int = 1, selectors: Optional[Sequence[str]] = None) -> None:
        self.selectors = check_step_params(budget, n_sink, n_recent, rank, selector, selectors)
        cfg = text_config(model.config)
        self.config = cfg
        self.n_layers = cfg.num_hidden_layers
        self.n_kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.budget, self.selector, self.n_sink, self.n_recent = budget, selector, n_sink, n_recent
        self.rank, self.n_threads, self.max_new_tokens = rank, n_threads, max_new_tokens
        self.kv: Optional[LocksKV] = None
        self.seqs: List[int] = []
        window, sliding = window_layers(cfg)
        self.lib_layers = [i for i in range(self.n_layers) if i not in sliding]
        self._lib = {i: j for j, i in enumerate(self.lib_layers)}  # model layer -> library layer
        super().__init__(layers=[DynamicSlidingWindowLayer(sliding_window=window) if i in sliding
                                 else LocksLayer(self, i, self._lib[i]) for i in range(self.n_layers)])

    # the pool is sized at the prefill, when the batch and the prompt length are known
    def _open(self, key_states: torch.Tensor) -> None:
        b, _, s, _ = key_states.shape
        dev = key_states.device
        pages = b * (math.ceil((s + self.max_new_tokens) / LOCKS_PAGE) + 1)
        if dev.type == "cuda":
            kv_dtype = "bf16" if key_states.dtype == torch.bfloat16 else "f16"
            self.kv = LocksKV(len(self.lib_layers), self.n_kv_heads, self.head_dim, pages, max_seqs=b,
                              rank=self.rank, kv_dtype=kv_dtype, backend="cuda",
                              device=dev.index or 0, selectors=self.selectors)
        else:
            self.kv = LocksKV(len(self.lib_layers), self.n_kv_heads, self.head_dim, pages, max_seqs=b,
                              rank=self.rank, n_threads=self.n_threads, selectors=self.selectors)
        self.seqs = [self.kv.seq_add() for _ in range(b)]

    def _write(self, layer: int, pos: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        if self.kv is None:
            self._open(key_states)
        kv = self.kv
        b, _, s, _ = key_states.shape
        if b != len(self.seqs):
            raise ValueError(f"LocksCache holds {len(self.seqs)} sequences, got a batch of {b}")
        if layer == 0:
            for seq in self.seqs:
                kv.append(seq, s)
        cuda = kv.backend == "cuda"
        for i, seq in enumerate(self.seqs):
            k, v = key_states[i].transpose(0, 1), value_states[i].transpose(0, 1)  # [s, Hkv, d]
            if cuda:
                k, v = k.detach().float().contiguous(), v.detach().float().contiguous()
            else:
                k, v = _host(k), _host(v)
            kv.write(seq, layer, pos, k, v)

    def decode(self, layer: int, query: torch.Tensor, scaling: float) -> torch.Tensor:
        """LOCKS attention of one decode step of model layer ``layer``: query [b, Hq, 1, d]
        -> [b, 1, Hq, d]."""
        b, hq, _, d = query.shape
        layer = self._lib[layer]
        q = query.detach().reshape(b, hq, d).float().contiguous()
        if self.kv.backend == "cuda":
            out = self.kv.decode_step(layer, self.seqs, q, budget=self.budget, selector=self.selector,
                                      n_sink=self.n_sink, n_recent=self.n_recent, scale=scaling)
        else:
            out = torch.from_numpy(self.kv.decode_step(layer, self.seqs, _host(q), budget=self.budget,
                                                       selector=self.selector, n_sink=self.n_sink,
                                                       n_recent=self.n_recent, scale=scaling))
        return out.to(device=query.device, dtype=query.dtype).reshape(b, 1, hq, d)

    def _no_beams(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("LocksCache: beam search and batch reordering are not supported "
                                  "(a LOCKS cache cannot reorder, repeat or crop its sequences)")

    reorder_cache = batch_repeat_interleave = batch_select_indices = crop = _no_beams

    def reset(self) -> None:
        super().reset()
        if self.kv is not None:
            for seq in self.seqs:
                self.kv.seq_remove(seq)
            self.seqs = [self.kv.seq_add() for _ in range(len(self.seqs))]


class LocksStaticLayer(CacheLayerMixin):
    """One decoder layer's view of a :class:`LocksStaticCache`."""

    is_sliding = False
    is_compileable = True  # transformers then builds the mask from tensors (no host check)

    def __init__(self, owner: "LocksStaticCache", layer_idx: int) -> None:
        super().__init__()
        self.owner, self.layer_idx = owner, layer_idx

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        return self.owner._update(self.layer_idx, key_states, value_states)

    def get_mask_sizes(self, query_length: int) -> Tuple[int, int]:
        # the prompt's dense attention sees only its own K/V; a decode step ignores the mask
        return (query_length, 0) if self.owner.plan is None else (self.owner.max_len, 0)

    def get_seq_length(self) -> Any:
        o = self.owner
        return o.length if o.length is not None else 0  # a device tensor, as StaticLayer's

    def get_max_length(self) -> int:
        return self.owner.max_len

    def reset(self) -> None:
        pass


class LocksStaticCache(Cache):
    """A transformers ``Cache`` for CUDA models whose decode steps can be captured in a
    CUDA graph: K/V pages are torch tensors ([pages, 16, Hkv, d] per layer, NHD, the
    model's dtype; sequence i owns pages [i P, (i + 1) P), P = max_cache_len / 16), the
    LOCKS cache is a :class:`locks.PagedCache` over them, and every per-token operation
    is a device operation: the K/V write (``index_copy_`` at the device length), the
    lengths and the summary of a page the token fills (:class:`locks.StepPlan`), the
    sparse attention. ``budget``, ``n_sink``, ``n_recent``, ``rank`` as in the C API.

    At most ``max_cache_len`` tokens: an eager forward past it raises before writing; a
    replayed CUDA graph cannot stop on the host, so a token past it is written into a
    spare page that no sequence reads (never into the next sequence's pages) and
    :meth:`check` raises :class:`locks.DeviceStatusError` (BAD_LEN)."""

    def __init__(self, model: Any, max_cache_len: int, batch_size: int = 1, budget: int = 2048,
                 n_sink: int = 1, n_recent: int = 1, rank: int = 8) -> None:
        check_step_params(budget, n_sink, n_recent, rank)
        cfg = text_config(model.config)
        self.n_layers = cfg.num_hidden_layers
        self.n_q_heads = cfg.num_attention_heads
        self.n_kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        if not isinstance(max_cache_len, int) or max_cache_len < 1:
            raise ValueError(f"LocksStaticCache: max_cache_len = {max_cache_len!r}, a positive integer")
        check_window(cfg, max_cache_len, "LocksStaticCache")
        self.pages_per_seq = math.ceil(max_cache_len / LOCKS_PAGE)
        self.max_len = self.pages_per_seq * LOCKS_PAGE
        self.n_host = 0  # tokens written by eager forwards (a graph replay is not counted)
        self.n_batch, self.budget, self.n_sink, self.n_recent, self.rank = batch_size, budget, n_sink, n_recent, rank
        self.kv: Optional[PagedCache] = None
        self.plan: Optional[StepPlan] = None
        self.length: Optional[torch.Tensor] = None  # tokens so far (int64 scalar, device)
        mods = _attention_modules(model)
        self.scaling = float(getattr(mods[0], "scaling", self.head_dim ** -0.5)) if mods else self.head_dim ** -0.5
        super().__init__(layers=[LocksStaticLayer(self, i) for i in range(self.n_layers)])

    def _open(self, key_states: torch.Tensor) -> None:
        dev, dt = key_states.device, key_states.dtype
        if dev.type != "cuda" or dt not in (torch.bfloat16, torch.float16):
            raise ValueError("LocksStaticCache: a CUDA model in bf16 or fp16")
        b, n = self.n_batch, self.n_batch * self.pages_per_seq
        # pages [i P, (i + 1) P) are sequence i's; page n is the spare one (see the class)
        shape = (n + 1, LOCKS_PAGE, self.n_kv_heads, self.head_dim)
        self.k_pages = [torch.zeros(shape, dtype=dt, device=dev) for _ in range(self.n_layers)]
        self.v_pages = [torch.zeros(shape, dtype=dt, device=dev) for _ in range(self.n_layers)]
        self.kv = PagedCache(self.k_pages, self.v_pages, layout="NHD", max_seqs=b, rank=self.rank)
        self.seqs = [self.kv.seq_add() for _ in range(b)]
        # sequence i's block table: its own pages, in order
        self.tables = torch.arange(n, dtype=torch.int32, device=dev).reshape(b, self.pages_per_seq)
        self.base = (torch.arange(b, device=dev) * self.max_len)[:, None]  # [b, 1] flat slot of token 0
        self.spare = n * LOCKS_PAGE  # flat slot of the spare page
        self.length = torch.zeros((), dtype=torch.int64, device=dev)
        self.lens32 = torch.zeros(b, dtype=torch.int32, device=dev)

    def _update(self, layer: int, key_states: torch.Tensor,
                value_states: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Writes K/V [b, Hkv, s, d] into the pages at the device length; a prefill (s > 1,
        the first forward) then reports the full pages (synchronous), a decode token the
        step's device work (capturable)."""
        if self.kv is None:
            self._open(key_states)
        b, _, s, d = key_states.shape
        if b != self.n_batch:
            raise ValueError(f"LocksStaticCache holds {self.n_batch} sequences, got a batch of {b}")
        if layer == 0 and self.n_host + s > self.max_len:
            raise ValueError(f"LocksStaticCache: {self.n_host} + {s} tokens exceed max_cache_len "
                             f"({self.max_len}); nothing was written")
        prefill = self.plan is None and s > 1
        if layer == 0:
            self.n_host += s
            self.length.add_(s)
            self.lens32.copy_(self.length.to(torch.int32).expand(b))
        # flat token slots (NHD pages viewed as [pages * 16, Hkv, d]) of the s new tokens;
        # a position past max_len (only a graph replay gets there) goes to the spare page
        pos = self.length - s + torch.arange(s, device=self.length.device)
        idx = torch.where(pos[None, :] < self.max_len, self.base + pos[None, :], self.spare).reshape(-1)
        kf = self.k_pages[layer].view(-1, self.n_kv_heads, d)
        vf = self.v_pages[layer].view(-1, self.n_kv_heads, d)
        kf.index_copy_(0, idx, key_states.transpose(1, 2).reshape(b * s, self.n_kv_heads, d))
        vf.index_copy_(0, idx, value_states.transpose(1, 2).reshape(b * s, self.n_kv_heads, d))
        if prefill:
            if layer == 0:
                for i, seq in enumerate(self.seqs):
                    self.kv.set_pages(seq, self.tables[i, : math.ceil(s / LOCKS_PAGE)].cpu().numpy(), s)
            full = self.tables[:, : s // LOCKS_PAGE].reshape(-1).cpu().numpy()
            self.kv.pages_filled(layer, full)
            if layer == self.n_layers - 1:  # set-up of the decode steps (synchronises once)
                self.plan = self.kv.plan(self.seqs, self.n_q_heads, budget=self.budget, n_sink=self.n_sink,
                                         n_recent=self.n_recent, scale=self.scaling, max_ctx=self.max_len)
        elif s == 1:
            if self.plan is None:
                raise NotImplementedError("LocksStaticCache: the first forward must be the prompt (s > 1)")
            if layer == 0:
                self.plan.set_lens(self.lens32, self.tables)
            self.plan.pages_filled(layer, 1)
            _mark_fresh(self, layer, 1, key_states)
        else:
            raise NotImplementedError("LocksStaticCache: one prompt forward, then one token per forward")
        return key_states, value_states

    def decode(self, layer: int, query: torch.Tensor, scaling: float) -> torch.Tensor:
        """The step's sparse attention: query [b, Hq, 1, d] -> [b, 1, Hq, d]."""
        b, hq, _, d = query.shape
        if abs(scaling - self.scaling) > 1e-6 * self.scaling:
            raise ValueError(f"LocksStaticCache: softmax scale {scaling}, the plan has {self.scaling}")
        q = query.detach().reshape(b, hq, d).float().contiguous()
        out = self.plan.decode(layer, q)
        return out.to(query.dtype).reshape(b, 1, hq, d)

    def check(self) -> None:
        """Raises locks.DeviceStatusError if a step found an error on the device."""
        if self.plan is not None:
            self.plan.check()

    def get_seq_length(self, layer_idx: int = 0) -> Any:
        return self.length if self.length is not None else 0

    def _no_beams(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("LocksStaticCache: beam search and batch reordering are not supported")

    reorder_cache = batch_repeat_interleave = batch_select_indices = crop = _no_beams


def locks_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                            value: torch.Tensor, attention_mask: Optional[torch.Tensor],
                            dropout: float = 0.0, scaling: Optional[float] = None,
                            **kwargs: Any) -> Tuple[torch.Tensor, None]:
    """The "locks" attention function: a decode step (one query token) with a LocksCache
    runs in the library; everything else (prefill, or another cache) is transformers'
    SDPA. Returns (attn_output [b, s, Hq, d], None) as transformers' functions do."""
    # only right after a LOCKS cache's own update of this layer (another cache: SDPA)
    cache, fresh = _take_fresh(module.layer_idx, key)
    if fresh == 1 and query.shape[2] == 1:
        d = query.shape[-1]
        return cache.decode(module.layer_idx, query, scaling or d ** -0.5), None
    if fresh > 1 and isinstance(cache, LocksCache) and _padding_in(attention_mask):
        raise NotImplementedError("LocksCache: a padded batch (the attention mask hides prompt tokens) is not "
                                  "supported: the LOCKS cache would attend the padding")
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                  scaling=scaling, **kwargs)


AttentionInterface.register(ATTN_NAME, locks_attention_forward)
AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)


def _attention_modules(model: torch.nn.Module) -> List[torch.nn.Module]:
    return [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "q_proj")]


def attach(model: torch.nn.Module, cache: Optional[LocksCache]) -> None:
    """Kept for older callers; does nothing: a forward's attention reads the cache that
    the same layer's update wrote, whichever model or cache that is."""


_CACHE_KW = set(inspect.signature(LocksCache.__init__).parameters) - {"self", "model", "budget", "max_new_tokens"}


def enable(model: Any, budget: int = 2048, **cache_kw: Any) -> None:
    """Makes ``model`` (a transformers 5.x causal LM of the Llama / Qwen2 / Mistral /
    Gemma 3 family) decode through LOCKS: attention implementation "locks", and
    ``generate`` creates a :class:`LocksCache` (``budget`` and ``cache_kw`` passed on:
    ``selector``, ``selectors``, ``n_sink``, ``n_recent``, ``rank``, ``n_threads``)
    unless given ``past_key_values``, its pool sized from the call's ``max_new_tokens``
    or ``max_length``. The parameters are checked here (``budget=0`` is refused), a
    ``generate`` call before it runs (beam search and padded batches: errors)."""
    unknown = set(cache_kw) - _CACHE_KW
    if unknown:
        raise TypeError(f"locks.hf.enable: unknown LocksCache arguments {sorted(unknown)}; "
                        f"known: {sorted(_CACHE_KW)}")
    check_step_params(budget, cache_kw.get("n_sink", 1), cache_kw.get("n_recent", 1), cache_kw.get("rank", 8),
                      cache_kw.get("selector", "locks"), cache_kw.get("selectors"))
    if not _attention_modules(model):
        raise ValueError("locks.hf.enable: no attention layers with q_proj/layer_idx in this model")
    model.set_attn_implementation(ATTN_NAME)
    if not hasattr(model, "_locks_generate"):
        model._locks_generate = model.generate
    orig = model._locks_generate

    def generate(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("past_key_values") is None:
            new = check_generate(args, kwargs, getattr(model, "generation_config", None))
            kwargs["past_key_values"] = LocksCache(model, budget=budget, max_new_tokens=new, **cache_kw)
        return orig(*args, **kwargs)

    model.generate = generate


def disable(model: Any, attn_implementation: str = "sdpa") -> None:
    """Undoes :func:`enable`."""
    if hasattr(model, "_locks_generate"):
        model.generate = model._locks_generate
        del model._locks_generate
    model.set_attn_implementation(attn_implementation)
