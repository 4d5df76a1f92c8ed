#!/usr/bin/env python3
"""cubin_cmp.py OLD.cubin NEW.cubin PATTERN — did a refactor keep a kernel's machine code?

For a move-only change (issue 23: summary2_kernel split into helpers, the score kernels'
shared prologue) when no disassembler is installed (this machine's CUDA has nvcc and
ptxas only): compares the .text.<kernel> sections of two cubins (nvcc -cubin -arch=sm_90
-O3 ... of the file before and after), kernels matched by mangled name (a template bool
the change removed, Lb0E, is ignored). Per kernel: instruction count (16 bytes each),
whether the bytes are equal, and how many instructions changed opcode class (the low 12
bits; register numbers and scheduling bits are ignored). Same count and ~0 opcode changes:
the same arithmetic, allocated differently.
"""
import collections
import re
import struct
import sys


def sections(path):
    d = open(path, "rb").read()
    (shoff,) = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
    stro = hdrs[shstrndx][4]
    return {d[stro + h[0]:d.index(b"\0", stro + h[0])].decode(): d[h[4]:h[4] + h[5]] for h in hdrs}


def opcodes(b):
    return collections.Counter(int.from_bytes(b[i:i + 16], "little") & 0xFFF for i in range(0, len(b), 16))


def main():
    old, new, pat = sections(sys.argv[1]), sections(sys.argv[2]), sys.argv[3]
    by_norm = {re.sub("Lb0E", "", n): n for n in old if n.startswith(".text.")}
    for n, b in sorted(new.items()):
        if not n.startswith(".text.") or pat not in n:
            continue
        o = n if n in old else by_norm.get(n)
        if o is None:
            print(f"{n[6:]}: not in {sys.argv[1]}")
            continue
        a = old[o]
        moved = sum((opcodes(a) - opcodes(b)).values())
        same = "bytes equal" if a == b else "bytes differ"
        print(f"{n[6:70]}: {len(a) // 16} -> {len(b) // 16} instructions, {same}, {moved} changed opcode")


if __name__ == "__main__":
    main()
