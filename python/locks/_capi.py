"""ctypes declarations of include/locks.h (the part the package uses) and the loader.

The shared library is found, in order, at $LOCKS_LIBRARY, next to this file (where
``pip install ./python`` puts it), in the repository's build/ directory (a source
checkout), or by the system loader (``liblocks.so`` installed with CMake).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import POINTER, Structure, c_char_p, c_float, c_int32, c_size_t, c_void_p

from ._abi import FIELDS

LOCKS_PAGE = 16

c_int32_p = POINTER(c_int32)
c_float_p = POINTER(c_float)


def _mirror(cname: str, doc: str) -> type:
    """The ctypes struct of C struct ``cname``, from the field list generated with the C
    side's (scripts/gen_abi.py -> _abi.py and src/abi.c)."""
    py, fields = FIELDS[cname]
    return type(py, (Structure,), {"_fields_": [(f, t) for f, t, _ in fields], "__doc__": doc})


CacheParams = _mirror("locks_cache_params", "locks_cache_params")
StepParams = _mirror("locks_step_params", "locks_step_params")
Selection = _mirror("locks_selection", "locks_selection")
StepStats = _mirror("locks_step_stats", "locks_step_stats")
ExtKV = _mirror("locks_ext_kv", 'locks_ext_kv: the caller\'s K/V pages (include/locks.h, "Caller-owned KV pages").')


def _find() -> str:
    env = os.environ.get("LOCKS_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "liblocks.so"),
                 os.path.join(os.path.dirname(os.path.dirname(here)), "build", "liblocks.so")):
        if os.path.exists(cand):
            return cand
    found = ctypes.util.find_library("locks")
    if not found:
        raise OSError("liblocks.so not found: set LOCKS_LIBRARY, pip install ./python, "
                      "or build the CMake target locks_shared")
    return found


lib = ctypes.CDLL(_find())

_P = c_void_p  # locks_cache *, locks_step_graph *


def _decl(name: str, restype, *argtypes) -> None:
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)


_decl("locks_status_str", c_char_p, ctypes.c_int)
_decl("locks_last_error", c_char_p)
_decl("locks_selector_parse", ctypes.c_int, c_char_p, POINTER(ctypes.c_int))
_decl("locks_cache_default_params", CacheParams)
_decl("locks_step_default_params", StepParams)
_decl("locks_cache_init", _P, CacheParams, POINTER(ctypes.c_int))
_decl("locks_cache_free", None, _P)
_decl("locks_cache_seq_add", ctypes.c_int, _P, c_int32_p)
_decl("locks_cache_seq_remove", ctypes.c_int, _P, c_int32)
_decl("locks_cache_seq_len", c_int32, _P, c_int32)
_decl("locks_cache_block_table", c_int32_p, _P, c_int32, c_int32_p)
_decl("locks_cache_free_pages", c_int32, _P)
_decl("locks_cache_seq_truncate", ctypes.c_int, _P, c_int32, c_int32)
_decl("locks_cache_append", ctypes.c_int, _P, c_int32, c_int32)
_decl("locks_cache_write", ctypes.c_int, _P, c_int32, c_int32, c_int32, c_int32, c_void_p, c_void_p)
_decl("locks_cache_summary_get", ctypes.c_int, _P, c_int32, c_int32, c_int32, c_void_p, c_void_p, c_void_p)
_decl("locks_cache_summary_bytes", c_size_t, _P)
_decl("locks_cache_set_stream", ctypes.c_int, _P, c_void_p)
_decl("locks_decode_step", ctypes.c_int, _P, c_int32, c_int32_p, c_int32, c_void_p, c_int32,
      POINTER(StepParams), c_void_p, POINTER(Selection), POINTER(StepStats))
_decl("locks_score", ctypes.c_int, _P, c_int32, c_int32, c_void_p, c_int32, POINTER(StepParams), c_void_p)
_decl("locks_select", ctypes.c_int, _P, c_int32, c_void_p, POINTER(StepParams), c_void_p, c_void_p, c_int32)
_decl("locks_attend", ctypes.c_int, _P, c_int32, c_int32, c_void_p, c_int32, c_float, c_void_p, c_void_p,
      c_int32, c_void_p, c_void_p)
_decl("locks_step_graph_capture", _P, _P, c_int32, c_int32_p, c_int32, c_void_p, c_int32,
      POINTER(StepParams), c_int32, c_void_p, POINTER(ctypes.c_int))
_decl("locks_step_graph_replay", ctypes.c_int, _P)
_decl("locks_step_graph_free", None, _P)

_decl("locks_step_plan_init", _P, _P, c_int32_p, c_int32, c_int32, POINTER(StepParams), c_int32,
      POINTER(ctypes.c_int))
_decl("locks_step_plan_free", None, _P)
_decl("locks_step_plan_set_lens", ctypes.c_int, _P, c_void_p, c_void_p, c_int32, c_void_p)
_decl("locks_step_plan_pages_filled", ctypes.c_int, _P, c_int32, c_int32, c_void_p)
_decl("locks_step_plan_decode", ctypes.c_int, _P, c_int32, c_void_p, c_void_p, c_void_p)
_decl("locks_step_plan_selection", ctypes.c_int, _P, POINTER(c_void_p), POINTER(c_void_p), c_int32_p)
_decl("locks_step_plan_status", ctypes.c_int, _P, POINTER(ctypes.c_uint32))

# LOCKS_DEV_* bits of a plan's status word (locks.h, "Capturable decode step")
DEV_BITS = {1: "NONFINITE", 2: "BUDGET", 4: "BAD_LEN", 8: "EMPTY"}

# ---- the structs above against the library's own sizeof / offsetof ----------------------
_decl("locks_abi_layout", c_size_t, c_char_p, c_char_p)
_decl("locks_abi_fields", c_size_t, c_char_p)

MIRRORS = {"locks_cache_params": CacheParams, "locks_step_params": StepParams, "locks_selection": Selection,
           "locks_step_stats": StepStats, "locks_ext_kv": ExtKV}


def layout_mismatches(cname: str, cls: type) -> list:
    """How the ctypes struct ``cls`` differs from the C struct ``cname`` of the loaded
    library (size, field count, each field's offset); empty when they agree."""
    bad = []
    size = lib.locks_abi_layout(cname.encode(), None)
    if size == ctypes.c_size_t(-1).value:
        return [f"{cname}: unknown to the library"]
    if size != ctypes.sizeof(cls):
        bad.append(f"{cname}: sizeof {size} in C, {ctypes.sizeof(cls)} here")
    n = lib.locks_abi_fields(cname.encode())
    if n != len(cls._fields_):
        bad.append(f"{cname}: {n} fields in C, {len(cls._fields_)} here")
    for name, _ in cls._fields_:
        off = lib.locks_abi_layout(cname.encode(), name.encode())
        if off != getattr(cls, name).offset:
            bad.append(f"{cname}.{name}: offset {'missing' if off == ctypes.c_size_t(-1).value else off} in C, "
                       f"{getattr(cls, name).offset} here")
    return bad


_bad = [m for cname, cls in MIRRORS.items() for m in layout_mismatches(cname, cls)]
if _bad:  # a struct changed in locks.h and not here: every call would pass garbage
    raise ImportError("locks: python/locks/_capi.py does not match liblocks.so: " + "; ".join(_bad))

HAVE_EXT = hasattr(lib, "locks_cache_init_ext")
if HAVE_EXT:
    _decl("locks_cache_init_ext", _P, CacheParams, POINTER(ExtKV), POINTER(ctypes.c_int))
    _decl("locks_cache_seq_set_pages", ctypes.c_int, _P, c_int32, c_int32_p, c_int32, c_int32)
    _decl("locks_cache_pages_filled", ctypes.c_int, _P, c_int32, c_int32_p, c_int32)
    _decl("locks_cache_pages_release", ctypes.c_int, _P, c_int32_p, c_int32)
