"""Runs the README's Python example (between the PY-EXAMPLE markers) and checks its
output against float64 attention over the pages it selected."""
import os
import re

import numpy as np

from conftest import f16, ref_attention, selected_tokens

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def test_readme_python_example(rng, capsys):
    text = open(README).read()
    m = re.search(r"<!-- PY-EXAMPLE-BEGIN -->\s*```python\n(.*?)```\s*<!-- PY-EXAMPLE-END -->", text, re.S)
    assert m, "README.md has no PY-EXAMPLE block"
    code = m.group(1)
    assert len(code.strip().splitlines()) <= 12
    seed = int(rng.integers(1 << 31))
    code = code.replace("default_rng(0)", f"default_rng({seed})")  # fresh data each run
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)
    k, v, q, out, sel = ns["k"], ns["v"], ns["q"], ns["out"], ns["sel"]
    n = k.shape[0]
    tokens = selected_tokens(sel.pages[0], sel.n_pages[0], n)
    ref = ref_attention(q[0], f16(k), f16(v), tokens)
    assert np.max(np.abs(out[0] - ref)) / np.max(np.abs(ref)) < 2e-5
    # the tokens each KV head attended, counted page by page (a full last page counts
    # 16: the old bound 16 (c - 1) + n % 16 let one page too many through at n = 4000)
    assert all(1024 - 16 < len(t) <= 1024 for t in tokens), [len(t) for t in tokens]  # filled to within a page
    assert "(1, 32, 128)" in capsys.readouterr().out
