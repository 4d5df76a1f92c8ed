#!/usr/bin/env python3
"""`locks serve --backend cuda` on the device, with Python's standard library only (the
device has no `openai` package): greedy completions against `locks run --backend cuda
--temp 0` on the same prompts.

  gpu2122_serve.py LOCKS_CLI MODEL

Checks (exit 1 on any failure):
  - a 1-slot server (a one-sequence context, as `locks run`'s) answers /v1/completions and
    /v1/chat/completions with exactly `locks run --temp 0`'s text (`--chat` for chat);
    streaming (server-sent events ending with `data: [DONE]`) gives the same text;
  - a 4-slot server: 8 requests from 4 concurrent clients, short and long prompts mixed,
    each answer equal to that server's answer to the same request sent alone (a subset
    step's rows are bit for bit the whole batch's); its answers against `locks run` are
    printed (different split sizes: equal unless a near-tie turns);
  - /health, /metrics, and a refusal at start of --slot-save-path with --backend cuda.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

CLI, MODEL = sys.argv[1], sys.argv[2]
N = 32
SHORT = ["The three primary colours are", "Count: 1, 2, 3, 4, 5, 6,", "The capital of France is",
         "def fibonacci(n):", "Water boils at", "A short poem about the sea:"]
with open("README.md", encoding="utf-8") as f:
    LONG = f.read()[:3000]  # ~700 tokens of the project's README
CHAT_Q = "Name a large animal that lives in the sea."
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def run_ref(prompt, n, chat=False):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt)
        path = f.name
    cmd = [CLI, "run", "--backend", "cuda", "-m", MODEL, "-f", path, "-n", str(n), "--temp", "0"]
    out = subprocess.run(cmd + (["--chat"] if chat else []), capture_output=True, check=True).stdout.decode("utf-8", "replace")
    os.unlink(path)
    return out[:-1] if out.endswith("\n") else out


class Server:
    def __init__(self, *args):
        self.p = subprocess.Popen([CLI, "serve", "--backend", "cuda", "-m", MODEL, "--port", "0", "--alias", "smollm2",
                                   *args], stderr=subprocess.PIPE, text=True)
        self.log, self.port = [], None
        deadline = time.time() + 120
        while self.port is None:
            line = self.p.stderr.readline()
            if not line:
                raise RuntimeError("server exited: " + "".join(self.log))
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if time.time() > deadline:
                raise RuntimeError("no port: " + "".join(self.log))
        threading.Thread(target=lambda: [self.log.append(x) for x in self.p.stderr], daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"
        while True:
            try:
                if self.req("GET", "/health")[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.time() > deadline or self.p.poll() is not None:
                raise RuntimeError("not healthy: " + "".join(self.log))
            time.sleep(0.1)

    def req(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        r = urllib.request.Request(self.url + path, data=data, method=method,
                                   headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(r, timeout=180) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def complete(self, prompt, n=N, stream=False):
        body = {"model": "smollm2", "prompt": prompt, "max_tokens": n, "temperature": 0, "stream": stream}
        st, text = self.req("POST", "/v1/completions", body)
        if st != 200:
            raise RuntimeError(f"HTTP {st}: {text}")
        if not stream:
            return json.loads(text)["choices"][0]["text"]
        events = [ln[6:] for ln in text.split("\n") if ln.startswith("data: ")]
        if not events or events[-1] != "[DONE]":
            raise RuntimeError("stream does not end with data: [DONE]")
        return "".join(c["text"] for e in events[:-1] for c in json.loads(e).get("choices", []))

    def chat(self, q, n=40):
        body = {"model": "smollm2", "messages": [{"role": "user", "content": q}], "max_tokens": n, "temperature": 0}
        st, text = self.req("POST", "/v1/chat/completions", body)
        if st != 200:
            raise RuntimeError(f"HTTP {st}: {text}")
        return json.loads(text)["choices"][0]["message"]["content"]

    def stop(self):
        self.p.send_signal(2)
        return self.p.wait(timeout=60)


t0 = time.time()
refs = {p: run_ref(p, N) for p in SHORT[:4]}
ref_long = run_ref(LONG, 16)
ref_chat = run_ref(CHAT_Q, 40, chat=True)
print(f"references from `locks run --backend cuda --temp 0`: {time.time() - t0:.1f} s", flush=True)

s1 = Server("-np", "1", "-c", "4096")
for p in SHORT[:4]:
    got = s1.complete(p)
    check(got == refs[p], f"1 slot: completion == locks run: {p!r} -> {got[:60]!r}")
check(s1.complete(SHORT[0], stream=True) == refs[SHORT[0]], "1 slot: streamed completion == locks run")
check(s1.complete(LONG, 16) == ref_long, "1 slot: ~700-token prompt == locks run")
got = s1.chat(CHAT_Q)
check(got == ref_chat, f"1 slot: chat == locks run --chat: {got[:60]!r}")
check(s1.req("GET", "/health")[0] == 200, "/health 200")
st, met = s1.req("GET", "/metrics")
check(st == 200 and "locks_" in met, "/metrics answers")
check(s1.stop() == 0, "1-slot server stops on SIGINT with 0")

s4 = Server("-np", "4", "-c", "16384")
jobs = [(p, N) for p in SHORT] + [(LONG, 16), (SHORT[1], N)]
alone = {j: s4.complete(*j) for j in set(jobs)}
results, lock = {}, threading.Lock()


def client(k):
    for i in range(k, len(jobs), 4):
        text = s4.complete(*jobs[i], stream=(i % 3 == 0))
        with lock:
            results[i] = text


threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
t0 = time.time()
for t in threads:
    t.start()
for t in threads:
    t.join()
print(f"4 concurrent clients, {len(jobs)} requests: {time.time() - t0:.1f} s", flush=True)
check(len(results) == len(jobs), f"4 slots: {len(results)} of {len(jobs)} answers")
same = sum(results.get(i) == alone[j] for i, j in enumerate(jobs))
check(same == len(jobs), f"4 slots: {same} of {len(jobs)} concurrent answers == the same request alone")
vs_run = sum(alone[(p, N)] == refs[p] for p in SHORT[:4]) + (alone[(LONG, 16)] == ref_long)
print(f"info  4 slots vs locks run (1 sequence): {vs_run} of 5 answers identical", flush=True)
check(s4.stop() == 0, "4-slot server stops on SIGINT with 0")

r = subprocess.run([CLI, "serve", "--backend", "cuda", "-m", MODEL, "--port", "0", "--slot-save-path", "/tmp"],
                   capture_output=True, text=True, timeout=60)
check(r.returncode == 2 and "CPU backend" in r.stderr, "--slot-save-path with --backend cuda refused at start")
print(f"{len(failures)} failures", flush=True)
sys.exit(1 if failures else 0)
