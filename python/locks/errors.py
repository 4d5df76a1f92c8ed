"""Library statuses as Python exceptions: every failing call raises the subclass of
:class:`LocksError` named after its status (``LOCKS_ERR_BUDGET`` -> :class:`BudgetError`)."""
from __future__ import annotations

from typing import Dict, Type

from ._capi import lib

STATUS_NAMES = [
    "LOCKS_OK", "LOCKS_ERR_INVALID_ARG", "LOCKS_ERR_OOM", "LOCKS_ERR_POOL_FULL",
    "LOCKS_ERR_NONFINITE", "LOCKS_ERR_BUDGET", "LOCKS_ERR_NO_SEQ", "LOCKS_ERR_UNSUPPORTED",
    "LOCKS_ERR_IO", "LOCKS_ERR_FORMAT", "LOCKS_ERR_BACKEND", "LOCKS_ERR_NO_META",
]


class LocksError(RuntimeError):
    """A call into liblocks failed. ``status`` is the locks_status value, ``name`` its
    enum name (``"LOCKS_ERR_BUDGET"``), ``call`` the C function that returned it."""

    status: int = -1
    name: str = "LOCKS_ERR_?"

    def __init__(self, status: int, call: str, detail: str = "", reason: str = "") -> None:
        self.status = status
        self.name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else f"status {status}"
        self.call = call
        #: the library's own words for why the call failed (locks_last_error), or ""
        self.reason = reason
        text = lib.locks_status_str(status).decode()
        short = reason[len(call) + 2:] if reason.startswith(call + ": ") else reason
        why = f": {short}" if short else ""
        super().__init__(f"{self.name} from {call}: {text}{why}" + (f" ({detail})" if detail else ""))


class InvalidArgError(LocksError, ValueError):
    """LOCKS_ERR_INVALID_ARG: a parameter is out of range."""


class OOMError(LocksError, MemoryError):
    """LOCKS_ERR_OOM: a host or device allocation failed."""


class PoolFullError(LocksError):
    """LOCKS_ERR_POOL_FULL: the page pool has no free page (nothing was changed)."""


class NonFiniteError(LocksError, ValueError):
    """LOCKS_ERR_NONFINITE: NaN or Inf in a query, key or value (nothing was changed)."""


class BudgetError(LocksError, ValueError):
    """LOCKS_ERR_BUDGET: budget <= 0 or smaller than the forced pages."""


class NoSeqError(LocksError, KeyError):
    """LOCKS_ERR_NO_SEQ: unknown or removed sequence id."""


class UnsupportedError(LocksError, NotImplementedError):
    """LOCKS_ERR_UNSUPPORTED: valid request this build or backend cannot do."""


class LocksIOError(LocksError, OSError):
    """LOCKS_ERR_IO: file open/read/write failed."""


class FormatError(LocksError, ValueError):
    """LOCKS_ERR_FORMAT: malformed file."""


class BackendError(LocksError):
    """LOCKS_ERR_BACKEND: the CUDA runtime reported an error."""


class NoMetaError(LocksError):
    """LOCKS_ERR_NO_META: the cache keeps no metadata for this selector (create it with
    that selector in ``selectors``)."""


class IntRangeError(InvalidArgError, OverflowError):
    """An integer argument outside int32 (it would wrap on the way into the library): both
    an :class:`InvalidArgError` and an ``OverflowError``; the message gives the range."""


class ClosedError(LocksError, ValueError):
    """A call on a closed :class:`locks.Cache` (or a :class:`locks.StepPlan` of one), like
    Python's ValueError for a closed file. ``status`` is LOCKS_ERR_INVALID_ARG."""

    def __init__(self, call: str, what: str = "cache") -> None:
        self.status, self.name, self.call = 1, STATUS_NAMES[1], call
        RuntimeError.__init__(self, f"{call}: the {what} is closed")


_BY_STATUS: Dict[int, Type[LocksError]] = {
    1: InvalidArgError, 2: OOMError, 3: PoolFullError, 4: NonFiniteError, 5: BudgetError,
    6: NoSeqError, 7: UnsupportedError, 8: LocksIOError, 9: FormatError, 10: BackendError,
    11: NoMetaError,
}


def check(status: int, call: str, detail: str = "") -> None:
    """Raises the exception of ``status`` unless it is LOCKS_OK, with the library's
    reason (locks_last_error, thread-local: read right after the failing call, on the
    thread that made it) in the message and in ``.reason``."""
    if status != 0:
        raw = lib.locks_last_error()
        reason = raw.decode(errors="replace") if raw else ""
        raise _BY_STATUS.get(status, LocksError)(status, call, detail, reason)
