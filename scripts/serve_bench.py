#!/usr/bin/env python3
"""serve_bench.py — N concurrent streaming clients against an OpenAI-compatible server
(`locks serve` or llama.cpp's llama-server): aggregate decode tok/s, time to first token
p50/p99, and the time to first token of the same prompts asked again (prefix reuse).
Standard library only (urllib, threads). Used by scripts/serve-bench.sh.

    serve_bench.py --url http://127.0.0.1:8080 --clients 4 --prompt-tokens 4096 --max-tokens 64
                   [--slot-restore NAME]

--slot-restore NAME (a server started with --slot-save-path): after the rounds, saves
slot 0 (which holds one of the prompts) as NAME and times restoring it (the client's
wall time of the restore request; the same request shape on both servers).

Prompts: sentences of the README's and docs' frequent words, a different seeded document
per client (no shared prefix), --prompt-tokens tokens long (within about 1%: the bytes a
token are measured first on another document). Prints one JSON
object per round.
"""
import argparse
import collections
import json
import os
import random
import re
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def vocabulary():
    """The 400 most frequent plain words of the README and docs."""
    counts = collections.Counter()
    for name in ["README.md", "docs/DESIGN.md", "docs/ENGINE.md"]:
        p = os.path.join(ROOT, name)
        if os.path.exists(p):
            counts.update(w for w in re.findall(r"[a-z]+", open(p, encoding="utf-8").read().lower()) if len(w) > 2)
    return [w for w, _ in counts.most_common(400)]


def document(words, seed, n_bytes):
    """Sentences of random words (seeded: a different document per seed), so that the
    bytes per token hardly vary from one document to another."""
    rng = random.Random(seed)
    out, size = [], 0
    while size < n_bytes:
        s = " ".join(rng.choice(words) for _ in range(rng.randint(6, 16))).capitalize() + ". "
        out.append(s)
        size += len(s)
    return "".join(out)[:n_bytes]


def prompt_tokens(url, model, prompt):
    """The server's count of the prompt's tokens (one token generated)."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read().decode())["usage"]["prompt_tokens"]


def stream_one(url, model, prompt, max_tokens, out):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "cache_prompt": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.time()
    first, n, usage = None, 0, {}
    try:
        r = urllib.request.urlopen(req, timeout=3600)
    except urllib.error.HTTPError as e:  # counted, never averaged in
        out.append({"error": f"{e.code} {e.read().decode()[:200]}"})
        return
    with r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ch = json.loads(line[6:])
            usage = ch.get("usage") or usage  # the last chunk's (include_usage)
            if ch.get("choices") and ch["choices"][0].get("text"):
                n += 1  # one event per token (both servers send a token per event)
                if first is None:
                    first = time.time()
    out.append({"ttft": (first or time.time()) - t0, "tokens": n, "decode_s": time.time() - (first or t0),
                "prompt_tokens": usage.get("prompt_tokens"),
                "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens")})


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default="model")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=4096)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--label", default="")
    ap.add_argument("--slot-restore", default="")
    a = ap.parse_args()
    # prompts of --prompt-tokens tokens: bytes a token measured on a document of another
    # seed (it shares no prefix with them), then each client's own document
    words = vocabulary()
    probe = document(words, 1000, min(8000, 2 * a.prompt_tokens))  # fits any slot the script makes
    bytes_per_token = len(probe) / prompt_tokens(a.url, a.model, probe)
    prompts = [document(words, i + 1, int(a.prompt_tokens * bytes_per_token)) for i in range(a.clients)]
    for rnd in ["first", "again"]:
        res = []
        t0 = time.time()
        ts = [threading.Thread(target=stream_one, args=(a.url, a.model, p, a.max_tokens, res)) for p in prompts]
        [t.start() for t in ts]
        [t.join() for t in ts]
        wall = time.time() - t0
        errors = [r["error"] for r in res if "error" in r]
        res = [r for r in res if "error" not in r]
        if not res:
            print(json.dumps({"label": a.label, "round": rnd, "errors": errors}), flush=True)
            continue
        ttft = [r["ttft"] for r in res]
        toks = sum(r["tokens"] for r in res)
        # aggregate decode rate: tokens after the first over the span from the first
        # client's first token to the last client's end
        span = max(r["ttft"] + r["decode_s"] for r in res) - min(ttft)
        print(json.dumps({"label": a.label, "round": rnd, "clients": a.clients, "prompt_tokens": a.prompt_tokens,
                          "tokens": toks, "wall_s": round(wall, 3),
                          "decode_tok_s": round((toks - len(res)) / span, 2) if span > 0 else None,
                          "ttft_p50_s": round(pct(ttft, 0.5), 3), "ttft_p99_s": round(pct(ttft, 0.99), 3),
                          "prompt_tokens_actual": [r["prompt_tokens"] for r in res],
                          "cached_tokens": [r["cached"] for r in res], "errors": errors}),
              flush=True)
    if a.slot_restore:
        res = {}
        for action in ["save", "restore"]:
            body = json.dumps({"filename": a.slot_restore}).encode()
            req = urllib.request.Request(f"{a.url}/slots/0?action={action}", data=body,
                                         headers={"Content-Type": "application/json"})
            t0 = time.time()
            with urllib.request.urlopen(req, timeout=600) as r:
                reply = json.loads(r.read().decode() or "{}")
            res[action + "_s"] = round(time.time() - t0, 3)
            res[action + "_reply"] = reply
        print(json.dumps({"label": a.label, "round": "slot_restore", "prompt_tokens": a.prompt_tokens, **res}),
              flush=True)


if __name__ == "__main__":
    main()
