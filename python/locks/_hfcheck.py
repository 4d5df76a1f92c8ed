"""The checks :mod:`locks.hf` makes before any torch operation or any write: the model
(sliding-window layers), the step parameters, and a ``generate`` call (beam search,
padding, how many tokens it will add). No torch or transformers import here, so they
are testable with plain objects standing in for configs and tensors."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from ._capi import LOCKS_PAGE
from .cache import MAX_RANK, _int, selector_id

# selectors that keep per-page metadata beside the summaries' (the cache must be made
# with them in ``selectors``); "full" and "oracle" need none
_NO_META = ("full", "oracle")


def text_config(config: Any) -> Any:
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def window_layers(cfg: Any) -> Tuple[Optional[int], List[int]]:
    """(window, the layers attending only the last ``window`` tokens) of a transformers
    config: ``layer_types`` ("sliding_attention" / "chunked_attention") where the
    config has them (Gemma 3, Qwen2 and others in transformers 5); else Qwen2's
    ``use_sliding_window`` from ``max_window_layers`` on, or every layer when
    ``sliding_window`` is set (Mistral). (None, []) when no layer has a window."""
    window = getattr(cfg, "sliding_window", None) or getattr(cfg, "attention_chunk_size", None)
    n = int(cfg.num_hidden_layers)
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        layers = [i for i, t in enumerate(types) if t in ("sliding_attention", "chunked_attention")]
    elif not window:
        layers = []
    elif hasattr(cfg, "use_sliding_window"):
        layers = list(range(int(getattr(cfg, "max_window_layers", 0) or 0), n)) if cfg.use_sliding_window else []
    else:
        layers = list(range(n))
    return (int(window), layers) if window and layers else (None, [])


def check_window(cfg: Any, n_positions: int, who: str = "locks.hf") -> None:
    """Refuses a request of ``n_positions`` tokens (prompt + new) on a model whose
    sliding-window layers would, past their window, attend fewer tokens than LOCKS
    does (LOCKS attends the whole context): within the window both are the same.
    (LocksStaticCache's check: a LocksCache keeps those layers in transformers.)"""
    window, layers = window_layers(cfg)
    if window is None or n_positions <= window:
        return
    span = f"{layers[0]}..{layers[-1]}" if layers == list(range(layers[0], layers[-1] + 1)) else str(layers)
    raise NotImplementedError(
        f"{who}: layers {span} of this {getattr(cfg, 'model_type', 'model')} use sliding-window attention "
        f"(window {window} tokens) and this request needs {n_positions} positions; LOCKS attends the whole "
        f"context, so past the window its output would not be the model's. Keep prompt + new tokens <= "
        f"{window}, or use locks.hf.LocksCache (it keeps the window layers exact)")


def check_step_params(budget: Any, n_sink: Any = 1, n_recent: Any = 1, rank: Any = 8,
                      selector: Any = "locks", selectors: Optional[Sequence[str]] = None) -> List[str]:
    """Checks the LOCKS parameters of a transformers cache at once (not at the first
    decode step); returns the selectors the cache must keep metadata for (the given
    ``selectors``, else the step's selector when it needs metadata)."""
    budget, n_sink, n_recent = _int("budget", budget, 1), _int("n_sink", n_sink), _int("n_recent", n_recent)
    _int("rank", rank, 1, MAX_RANK)
    selector_id(selector)  # a known name
    forced = LOCKS_PAGE * (n_sink + n_recent + 1)
    if budget < forced:
        raise ValueError(f"locks.hf: budget = {budget} tokens is smaller than the pages always attended "
                         f"(n_sink {n_sink} + n_recent {n_recent} + the partial page: {forced} tokens)")
    if selectors is not None:
        if isinstance(selectors, str):
            raise TypeError(f"selectors: a list of selector names, got {selectors!r}")
        names = list(selectors)
        for s in names:
            selector_id(s)
        if selector not in _NO_META and selector not in names:
            raise ValueError(f"locks.hf: selector {selector!r} needs its metadata: add it to selectors {names}")
        return names
    return [] if selector in _NO_META else [selector]


def _input_len(args: Sequence[Any], kwargs: dict) -> Optional[int]:
    x = args[0] if args else kwargs.get("input_ids", kwargs.get("inputs"))
    if x is None and kwargs.get("inputs_embeds") is not None:
        return int(kwargs["inputs_embeds"].shape[1])
    return int(x.shape[-1]) if x is not None and hasattr(x, "shape") else None


def _setting(name: str, kwargs: dict, gen_config: Any) -> Any:
    if kwargs.get(name) is not None:
        return kwargs[name]
    cfg = kwargs.get("generation_config") or gen_config
    return getattr(cfg, name, None) if cfg is not None else None


def check_generate(args: Sequence[Any], kwargs: dict, gen_config: Any) -> int:
    """Checks a ``generate`` call before anything runs and returns how many tokens it
    may add (what the LOCKS pool must hold beyond the prompt): ``max_new_tokens``, or
    ``max_length`` minus the prompt, as transformers reads them (the call's keyword,
    then its ``generation_config``, then the model's). Beam search and padded batches
    are refused."""
    beams = _setting("num_beams", kwargs, gen_config) or 1
    if int(beams) > 1:
        raise NotImplementedError(f"locks.hf: beam search (num_beams={beams}) is not supported: a LOCKS cache "
                                  "cannot reorder its sequences; use greedy or sampling")
    mask = kwargs.get("attention_mask")
    if mask is not None and not bool((mask != 0).all()):
        raise NotImplementedError("locks.hf: a padded batch (attention_mask has zeros) is not supported: the "
                                  "LOCKS cache would attend the padding; generate each sequence on its own or "
                                  "batch prompts of equal length")
    n_in = _input_len(args, kwargs)
    if kwargs.get("max_new_tokens") is not None:
        return _int("max_new_tokens", kwargs["max_new_tokens"], 1)
    if kwargs.get("max_length") is not None:
        if n_in is None:
            raise ValueError("locks.hf: generate(max_length=...) without input_ids: pass max_new_tokens")
        return max(1, _int("max_length", kwargs["max_length"], 1) - n_in)
    new = _setting("max_new_tokens", kwargs, gen_config)
    if new is not None:
        return _int("max_new_tokens", new, 1)
    total = _setting("max_length", kwargs, gen_config)
    if total is not None and n_in is not None:
        return max(1, int(total) - n_in)
    return 256
