#!/usr/bin/env python3
"""gen_quant_fixture.py — reference dequantizations for tests/test_quant.c.

Random blocks of Q5_0, Q5_1, Q4_K, Q5_K and Q6_K (random bytes, with the fp16 scales set
to random finite values of either sign so every bit pattern of the quants and the six-bit
K-quant scales is exercised) dequantized by the PyPI `gguf` package's numpy code
(gguf.quants.dequantize), which shares nothing with src/model/quant.c.

Output (little-endian), for each type: u32 ggml type, u32 n_blocks, u32 block_bytes,
u32 block_elems, the blocks, then n_blocks * block_elems float32 values.

usage: pip install gguf numpy
       python3 scripts/gen_quant_fixture.py > tests/data/quant_ref.bin
"""
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

# type: (n_blocks, byte offsets of the fp16 scales)
TYPES = {
    T.Q5_0: (96, [0]),
    T.Q5_1: (96, [0, 2]),
    T.Q4_K: (24, [0, 2]),
    T.Q5_K: (24, [0, 2]),
    T.Q6_K: (24, [208]),
}


def main():
    rng = np.random.default_rng(20261201)
    out = sys.stdout.buffer
    for t, (n, offs) in TYPES.items():
        elems, bb = GGML_QUANT_SIZES[t]
        blocks = rng.integers(0, 256, size=(n, bb), dtype=np.uint8)
        for o in offs:
            scale = (rng.uniform(0.001, 0.1, size=n) * rng.choice([-1.0, 1.0], size=n)).astype(np.float16)
            blocks[:, o:o + 2] = scale.view(np.uint8).reshape(n, 2)
        ref = dequantize(blocks, t).astype(np.float32).reshape(n * elems)
        assert np.all(np.isfinite(ref))
        out.write(struct.pack("<4I", int(t), n, bb, elems))
        out.write(blocks.tobytes())
        out.write(ref.tobytes())


if __name__ == "__main__":
    main()
