"""The library's reason for a refused call (locks_last_error) is in the exception."""
import numpy as np
import pytest

import locks


def test_init_reason():
    with pytest.raises(locks.InvalidArgError) as e:
        locks.Cache(n_layers=1, n_kv_heads=2, head_dim=12, n_pages=4)  # in the binding's range, not a multiple of 8
    assert "head_dim 12" in str(e.value) and "multiples of 8" in e.value.reason


def test_step_reason():
    rng = np.random.default_rng()
    with locks.Cache(n_layers=1, n_kv_heads=2, head_dim=64, n_pages=8) as cache:
        seq = cache.seq_add()
        with pytest.raises(locks.InvalidArgError, match="is empty"):
            cache.decode_step(0, [seq], rng.standard_normal((1, 2, 64), dtype=np.float32))
        k, v = rng.standard_normal((2, 20, 2, 64), dtype=np.float32)
        cache.extend(seq, [(k, v)])
        with pytest.raises(locks.InvalidArgError, match="n_q_heads 3 is not a positive multiple of n_kv_heads 2"):
            cache.decode_step(0, [seq], rng.standard_normal((1, 3, 64), dtype=np.float32))
