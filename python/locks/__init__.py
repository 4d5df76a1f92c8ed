"""locks: LOCKS sparse long-context decoding (page-local compact key summaries).

Python bindings over liblocks (ctypes). :class:`Cache` is the library's paged KV cache
(numpy arrays on the CPU backend, torch CUDA tensors on the CUDA backend);
:class:`PagedCache` puts summaries beside K/V pages the caller owns (vLLM-style);
:mod:`locks.hf` plugs LOCKS into Hugging Face transformers models. Every library status
other than LOCKS_OK is raised as the :class:`LocksError` subclass of that name; arguments
are checked first (:class:`IntRangeError` for an integer outside int32, ``TypeError`` for
an argument of the wrong form), a call on a closed cache raises :class:`ClosedError`, and
a cache may be shared by threads (the binding serialises the calls on one cache).
"""
from ._capi import LOCKS_PAGE
from .cache import Cache, DeviceStatusError, PagedCache, StepParams, StepPlan, StepSelection, StepStats, selector_id
from .errors import (BackendError, BudgetError, ClosedError, FormatError, IntRangeError, InvalidArgError, LocksError,
                     LocksIOError, NoMetaError, NoSeqError, NonFiniteError, OOMError, PoolFullError, UnsupportedError)

__all__ = [
    "LOCKS_PAGE", "Cache", "PagedCache", "StepPlan", "DeviceStatusError", "StepParams", "StepSelection", "StepStats", "selector_id",
    "LocksError", "InvalidArgError", "OOMError", "PoolFullError", "NonFiniteError", "BudgetError",
    "NoSeqError", "NoMetaError", "UnsupportedError", "LocksIOError", "FormatError", "BackendError",
    "ClosedError", "IntRangeError",
]
__version__ = "0.1.0"
