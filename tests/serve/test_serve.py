"""`locks serve` end to end (ctest test_model_serve): the real `openai` client and curl
against servers started here on 127.0.0.1 (a free port each, stopped by the test).

Greedy answers are compared with `locks run --temp 0` on the same prompt (SmolLM2),
text for text: completions, chat, streaming and not, several clients at once, and a small
load test (8 clients x 4 requests, short and long prompts, prefix reuse) where every
answer equals its single-request answer. Faults: bad JSON, wrong types, unknown model,
limits and auth get 4xx in OpenAI's error shape and the server goes on answering; a
client that disconnects mid-stream frees its slot; a full queue answers 503.

Environment: LOCKS_CLI (the `locks` binary), LOCKS_MODEL (SmolLM2-135M GGUF).
"""
import json
import os
import re
import signal
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request

import xxhash

import pytest

openai = pytest.importorskip("openai")

CLI = os.environ.get("LOCKS_CLI", "build/locks")
MODEL = os.environ.get("LOCKS_MODEL") or subprocess.run(
    ["scripts/fetch-model.sh"], capture_output=True, text=True, check=True).stdout.strip()
ALIAS = "smollm2"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Server:
    def __init__(self, *args):
        self.p = subprocess.Popen([CLI, "serve", "-m", MODEL, "--port", "0", "--alias", ALIAS, "-t", "2", *args],
                                  stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        deadline = time.time() + 60
        while self.port is None:
            line = self.p.stderr.readline()
            assert line, "server exited before listening: " + "".join(self.log)
            self.log.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            assert time.time() < deadline
        threading.Thread(target=self._drain, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"
        while True:  # 503 while loading, then 200
            try:
                if self.get("/health")[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.time() < deadline and self.p.poll() is None, "".join(self.log)
            time.sleep(0.05)

    def _drain(self):
        for line in self.p.stderr:
            self.log.append(line)

    def request(self, method, path, body=None, headers=None, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def get(self, path, headers=None):
        return self.request("GET", path, headers=headers)

    def metrics(self, headers=None):
        st, text = self.get("/metrics", headers)
        assert st == 200
        return {k: float(v) for k, v in re.findall(r"^(\w+) (\S+)$", text, re.M)}

    def client(self, key="none"):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=120)

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        rc = self.p.wait(timeout=30)
        assert rc == 0, "".join(self.log)


@pytest.fixture(scope="module")
def srv():
    s = Server("-np", "4", "-c", "8192", "-b", "64", "--max-queue", "64")
    yield s
    s.stop()


_ref_cache = {}


def reference(prompt, n, chat=False):
    """`locks run --temp 0`'s text for prompt (its trailing newline dropped)."""
    key = (MODEL, prompt, n, chat)
    if key not in _ref_cache:
        cmd = [CLI, "run", "-m", MODEL, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "2"] + (["--chat"] if chat else [])
        out = subprocess.run(cmd, capture_output=True, check=True).stdout.decode("utf-8", "replace")
        assert out.endswith("\n")
        _ref_cache[key] = out[:-1]
    return _ref_cache[key]


def test_completions_greedy_equals_locks_run(srv):
    c = srv.client()
    prompt = "The three primary colours are"
    r = c.completions.create(model=ALIAS, prompt=prompt, max_tokens=24, temperature=0)
    assert r.choices[0].text == reference(prompt, 24)
    assert r.usage.completion_tokens == 24 and r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens > 3 and r.usage.total_tokens == r.usage.prompt_tokens + 24
    parts = list(c.completions.create(model=ALIAS, prompt=prompt, max_tokens=24, temperature=0, stream=True))
    assert "".join(p.choices[0].text for p in parts if p.choices) == reference(prompt, 24)
    assert parts[-1].choices[0].finish_reason == "length"


def test_chat_greedy_equals_locks_run_chat(srv):
    c = srv.client()
    q = "Name a large animal that lives in the sea."
    r = c.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": q}], max_tokens=40, temperature=0)
    ref = reference(q, 40, chat=True)
    assert r.choices[0].message.content == ref and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == ("length" if r.usage.completion_tokens == 40 else "stop")
    stream = c.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": q}], max_tokens=40,
                                       temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == ref
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == r.choices[0].finish_reason


def test_stop_and_locks_object(srv):
    c = srv.client()
    prompt = "Count: 1, 2, 3, 4, 5, 6,"
    full = reference(prompt, 24)
    stop = full[5:8]
    r = c.completions.create(model=ALIAS, prompt=prompt, max_tokens=24, temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop" and r.choices[0].text == full[:full.index(stop)]
    # streaming: the held-back text never leaks past the stop string
    parts = c.completions.create(model=ALIAS, prompt=prompt, max_tokens=24, temperature=0, stop=stop, stream=True)
    assert "".join(p.choices[0].text for p in parts if p.choices) == full[:full.index(stop)]
    # the locks object: dense attention (`full`) on a short prompt is what locks gives at this budget
    r = c.completions.create(model=ALIAS, prompt=prompt, max_tokens=24, temperature=0,
                             extra_body={"locks": {"selector": "full", "budget": 64}})
    assert r.choices[0].text == full and r.model_extra["locks"]["selector"] == "full"
    # seeded sampling is reproducible
    a = [c.completions.create(model=ALIAS, prompt=prompt, max_tokens=16, temperature=1.0, seed=7).choices[0].text
         for _ in range(2)]
    assert a[0] == a[1]


def reference_full(prompt, n):
    """`locks run --selector full --temp 0`: dense attention, what speculation must give."""
    key = (prompt, n, "full")
    if key not in _ref_cache:
        cmd = [CLI, "run", "-m", MODEL, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "2", "--selector", "full"]
        out = subprocess.run(cmd, capture_output=True, check=True).stdout.decode("utf-8", "replace")
        _ref_cache[key] = out[:-1]
    return _ref_cache[key]


def test_speculate_gives_dense_output(srv):
    """locks.speculate: LOCKS drafts at a budget far below the context (some rejected),
    dense verification: greedy output token for token dense attention's."""
    doc = open(os.path.join(ROOT, "docs", "ENGINE.md")).read()[:1200] + "\nIn short,"
    c = srv.client()
    before = srv.metrics()
    r = c.completions.create(model=ALIAS, prompt=doc, max_tokens=24, temperature=0,
                             extra_body={"locks": {"speculate": 4, "budget": 64}})
    assert r.choices[0].text == reference_full(doc, 24)
    m = srv.metrics()
    drafted = m["locks_spec_drafted_total"] - before["locks_spec_drafted_total"]
    assert drafted > 0 and m["locks_spec_accepted_total"] - before["locks_spec_accepted_total"] <= drafted
    st, body = srv.request("POST", "/v1/completions", {"prompt": "x", "locks": {"speculate": 2, "selector": "full"}})
    assert st == 400 and json.loads(body)["error"]["param"] == "locks.speculate"
    st, body = srv.request("POST", "/v1/completions", {"prompt": "x", "locks": {"budget": 32}})
    assert st == 400 and json.loads(body)["error"]["param"] == "locks.budget"


def test_concurrent_clients(srv):
    prompts = ["Once upon a time", "The best way to learn", "In the year 2050,", "Water boils at"]
    want = {p: reference(p, 20) for p in prompts}
    got = {}

    def run(p):
        got[p] = srv.client().completions.create(model=ALIAS, prompt=p, max_tokens=20, temperature=0).choices[0].text

    ts = [threading.Thread(target=run, args=(p,)) for p in prompts]
    [t.start() for t in ts]
    [t.join(120) for t in ts]
    assert got == want


def test_prefix_reuse(srv):
    doc = open(os.path.join(ROOT, "README.md")).read()[:700]
    prompt = doc + "\nQuestion: what is this text about?\nAnswer:"
    c = srv.client()
    r1 = c.completions.create(model=ALIAS, prompt=prompt, max_tokens=8, temperature=0)
    r2 = c.completions.create(model=ALIAS, prompt=prompt, max_tokens=8, temperature=0)
    assert r2.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens - 16
    assert r1.choices[0].text == r2.choices[0].text == reference(prompt, 8)


def test_shared_prefix_pages_and_cache_ram_eviction():
    """One slot and --cache-ram for one kept prefix: a document asked again after another
    one is answered from the kept prefix's shared pages (only the rest prefilled, the
    same text as `locks run`); a third document evicts the least recently used one."""
    s = Server("-np", "1", "-c", "2048", "-b", "64", "--cache-ram", "60")
    try:
        assert any(" 1 kept prefixes" in line for line in s.log), "".join(s.log)
        text = open(os.path.join(ROOT, "README.md")).read()
        docs = {k: text[i * 1200:(i + 1) * 1200] + "\nQuestion: what is this text about?\nAnswer:"
                for i, k in enumerate("ABCD")}
        c = s.client()

        def ask(k):
            r = c.completions.create(model=ALIAS, prompt=docs[k], max_tokens=8, temperature=0)
            return r.choices[0].text, r.usage.prompt_tokens, r.usage.prompt_tokens_details.cached_tokens

        a1, n_a, cached = ask("A")
        assert cached == 0
        assert ask("B")[2] < 16           # A's pages go to the kept prefix
        a2, _, cached = ask("A")          # the slot takes them back, shared
        assert cached >= n_a - 16 and a1 == a2 == reference(docs["A"], 8)
        m = s.metrics()
        assert m["locks_prompt_tokens_shared_total"] == cached and m["locks_prefix_cache_kept_total"] == 1
        ask("C")                          # A is held already: nothing kept
        ask("D")                          # C kept, A evicted
        assert s.metrics()["locks_prefix_cache_evictions_total"] == 1
        assert ask("A")[2] < 16           # evicted; D kept, C evicted
        assert s.metrics()["locks_prefix_cache_evictions_total"] == 2
        d_text, n_d, cached = ask("D")    # kept
        assert cached >= n_d - 16 and d_text == reference(docs["D"], 8)
    finally:
        s.stop()


def test_bad_model_listening_line_says_loading():
    """The port is bound before the model loads (/health: 503 meanwhile), and the line
    says so: a model that fails to load ends the server without a "ready" line."""
    p = subprocess.run([CLI, "serve", "-m", "/nonexistent/model.gguf", "--port", "0"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0
    assert re.search(r"listening on http://127\.0\.0\.1:\d+, loading the model", p.stderr), p.stderr
    assert "ready" not in p.stderr.replace('"ready"', ""), p.stderr


def test_curl_sse_framing(srv):
    body = json.dumps({"model": ALIAS, "prompt": "Hello", "max_tokens": 6, "temperature": 0, "stream": True})
    out = subprocess.run(["curl", "-sN", "-H", "Content-Type: application/json", "-d", body,
                          srv.url + "/v1/completions"], capture_output=True, check=True, timeout=60).stdout.decode()
    events = out.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]", repr(out[-80:])
    datas = [e for e in events[:-2] if not e.startswith(":")]
    assert all(e.startswith("data: {") and "\n" not in e for e in datas), out
    chunks = [json.loads(e[6:]) for e in datas]
    assert "".join(ch["choices"][0]["text"] for ch in chunks) == reference("Hello", 6)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_bad_requests_get_4xx_and_the_server_goes_on(srv):
    def err(st_body, status, param=None):
        st, body = st_body
        assert st == status, body
        e = json.loads(body)["error"]
        assert e["message"] and e["type"] and "code" in e
        if param:
            assert e["param"] == param
    h = {"Content-Type": "application/json"}
    err(srv.request("POST", "/v1/completions", raw=b'{"prompt": "x", ', headers=h), 400)
    err(srv.request("POST", "/v1/completions", raw=b'[1, 2]', headers=h), 400)
    err(srv.request("POST", "/v1/completions", {"prompt": "x", "temperature": "hot"}), 400, "temperature")
    err(srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2.5}), 400, "max_tokens")
    err(srv.request("POST", "/v1/completions", {"prompt": 7}), 400, "prompt")
    err(srv.request("POST", "/v1/completions", {"prompt": "x", "stop": [1]}), 400, "stop")
    err(srv.request("POST", "/v1/completions", {"prompt": "x", "locks": {"budget": 0}}), 400, "locks.budget")
    err(srv.request("POST", "/v1/completions", {"prompt": "x", "locks": {"selector": "quest"}}), 400, "locks.selector")
    err(srv.request("POST", "/v1/completions", {"prompt": [49152]}), 400, "prompt")
    err(srv.request("POST", "/v1/chat/completions", {"messages": []}), 400, "messages")
    err(srv.request("POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}), 400, "messages")
    err(srv.request("POST", "/v1/completions", {"model": "gpt-4", "prompt": "x"}), 400, "model")
    err(srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 3000}), 400)  # > the 2048-token slot
    err(srv.request("POST", "/v1/completions", {"prompt": "word " * 2100}), 400)  # the prompt alone is too long
    # a body over --max-body (4 MiB): 413 as soon as the headers say so, the body unread
    import socket
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as so:
        so.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 6000000\r\n\r\n" + b'{"prompt": "' + b"a" * 1000)
        resp = b""
        while b"\r\n\r\n" not in resp or not resp.rstrip().endswith(b"}"):
            got = so.recv(65536)
            if not got:
                break
            resp += got
    head, _, body = resp.partition(b"\r\n\r\n")
    err((int(head.split()[1]), body.decode()), 413)
    err(srv.request("GET", "/v1/completions"), 405)
    err(srv.request("GET", "/nope"), 404)
    with pytest.raises(openai.BadRequestError):
        srv.client().completions.create(model="other", prompt="x")
    # still answering, and nothing was left in a slot
    assert srv.client().completions.create(model=ALIAS, prompt="Hi", max_tokens=3, temperature=0).choices[0].text
    m = srv.metrics()
    assert m["locks_slots_busy"] == 0 and m["locks_queue_depth"] == 0 and m["locks_requests_rejected_total"] >= 17


def test_disconnect_mid_stream_frees_the_slot(srv):
    before = srv.metrics()["locks_requests_cancelled_total"]
    c = srv.client()
    s = c.completions.create(model=ALIAS, prompt="1, 2, 3, 4, 5, 6, 7, 8,", max_tokens=1500,
                             temperature=0, stream=True)
    n = 0
    for _ in s:
        n += 1
        if n == 3:
            break
    s.close()  # the client hangs up
    deadline = time.time() + 20
    while time.time() < deadline:
        m = srv.metrics()
        if m["locks_slots_busy"] == 0 and m["locks_requests_cancelled_total"] == before + 1:
            break
        time.sleep(0.1)
    assert m["locks_slots_busy"] == 0 and m["locks_requests_cancelled_total"] == before + 1, m
    assert m["locks_tokens_generated_total"] > 0 and m["locks_kv_bytes_dense_total"] > 0


def test_load_every_answer_equals_its_single_request_answer(srv):
    doc = open(os.path.join(ROOT, "docs", "DESIGN.md")).read()
    long_a = doc[:1000] + "\nSummary:"  # ~250 tokens: prefilled in chunks of 64 (-b)
    long_b = doc[:1000] + "\nThe main idea:"  # shares a long prefix with long_a
    prompts = ["Hello, my name is", "The weather today", long_a, "Three facts about cats:", long_b, "def fib(n):"]
    want = {p: reference(p, 8) for p in prompts}
    errors, done = [], []

    def client(i):
        c = srv.client()
        for k in range(4):
            p = prompts[(i + k) % len(prompts)]
            stream = (i + k) % 2 == 0
            try:
                if stream:
                    text = "".join(ch.choices[0].text for ch in c.completions.create(
                        model=ALIAS, prompt=p, max_tokens=8, temperature=0, stream=True) if ch.choices)
                else:
                    text = c.completions.create(model=ALIAS, prompt=p, max_tokens=8, temperature=0).choices[0].text
                if text != want[p]:
                    errors.append((p[:30], text, want[p]))
                done.append(1)
            except Exception as e:  # noqa: BLE001 (any failure is a lost answer)
                errors.append((p[:30], repr(e)))

    t0 = time.time()
    ts = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    [t.start() for t in ts]
    [t.join(300) for t in ts]
    assert not errors, errors[:3]
    assert len(done) == 32 and time.time() - t0 < 300
    m = srv.metrics()
    assert m["locks_prompt_tokens_cached_total"] > 0 and m["locks_slots_busy"] == 0


def test_api_key_and_queue_full():
    s = Server("-np", "1", "-c", "2048", "--max-queue", "1", "--api-key", "sekret")
    try:
        assert s.get("/health")[0] == 200  # no key needed
        for path in ["/v1/models", "/metrics"]:
            st, body = s.get(path)
            assert st == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
            assert s.get(path, {"Authorization": "Bearer wrong"})[0] == 401
        with pytest.raises(openai.AuthenticationError):
            s.client("wrong").completions.create(model=ALIAS, prompt="x", max_tokens=2)
        auth = {"Authorization": "Bearer sekret"}
        assert json.loads(s.get("/v1/models", auth)[1])["data"][0]["id"] == ALIAS
        c = s.client("sekret")
        # one slot busy, one request queued, the next one is 503
        a = c.completions.create(model=ALIAS, prompt="1, 2, 3, 4, 5, 6, 7, 8,", max_tokens=1000, temperature=0, stream=True)
        next(iter(a))
        box = {}
        b = threading.Thread(target=lambda: box.setdefault("b", c.completions.create(
            model=ALIAS, prompt="Hi", max_tokens=2, temperature=0)))
        b.start()
        deadline = time.time() + 20
        while s.metrics(auth)["locks_queue_depth"] < 1:
            assert time.time() < deadline
            time.sleep(0.05)
        with pytest.raises(openai.APIStatusError) as e:
            c.completions.create(model=ALIAS, prompt="x", max_tokens=2)
        assert e.value.status_code == 503
        a.close()
        b.join(60)
        assert box["b"].choices[0].text == reference("Hi", 2)
    finally:
        s.stop()


def test_readme_examples():
    """The README's `locks serve` curl and openai examples, against a server on the port they name."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    sec = readme[readme.index("<!-- serve-examples -->"):]
    curl = re.search(r"```sh\n(curl .*?)```", sec, re.S).group(1)
    py = re.search(r"```python\n(.*?)```", sec, re.S).group(1)
    import socket
    with socket.socket() as so:  # a free port in place of the README's 8080
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    assert "127.0.0.1:8080" in curl and "127.0.0.1:8080" in py
    curl, py = (x.replace("127.0.0.1:8080", f"127.0.0.1:{port}") for x in (curl, py))
    p = subprocess.Popen([CLI, "serve", "-m", MODEL, "--port", str(port), "-np", "2", "-c", "4096", "-t", "2"],
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.time() < deadline and p.poll() is None
            time.sleep(0.05)
        out = subprocess.run(["sh", "-c", curl], capture_output=True, check=True, timeout=120).stdout.decode()
        assert json.loads(out)["choices"][0]["message"]["content"]
        out = subprocess.run(["python3", "-c", py], capture_output=True, check=True, timeout=120).stdout.decode()
        assert out.strip()
    finally:
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 0


def test_gemma3_chat_template():
    """Gemma 3 (its turns, <bos> from the template): chat and completions = `locks run`."""
    gemma = os.environ.get("LOCKS_GEMMA3_MODEL") or subprocess.run(
        ["scripts/fetch-model.sh", "gemma3-270m"], capture_output=True, text=True, check=True).stdout.strip()
    global MODEL
    saved, MODEL = MODEL, gemma
    try:
        s = Server("-np", "2", "-c", "2048")
        try:
            c = s.client()
            q = "What is the capital of France?"
            r = c.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": q}], max_tokens=16,
                                          temperature=0)
            assert r.choices[0].message.content == reference(q, 16, chat=True)
            r = c.completions.create(model=ALIAS, prompt="The capital of France is", max_tokens=16, temperature=0)
            assert r.choices[0].text == reference("The capital of France is", 16)
        finally:
            s.stop()
    finally:
        MODEL = saved



def slot_checksum(img):
    """slotfile.c's checksum of a slot file image: XXH3-64 (seed 0) with its checksum
    field, bytes 176..184, as 0."""
    return xxhash.xxh3_64_intdigest(img[:176] + bytes(8) + img[184:])


def slot_layout(data):
    """The header fields and section offsets of a version 2 slot file (slotfile.c)."""
    magic, version, L, hkv, d, _vocab, n = struct.unpack_from("<8s6I", data, 0)
    rank, prec, sum_bytes, n_sum = struct.unpack_from("<4I", data, 160)
    (checksum,) = struct.unpack_from("<Q", data, 176)
    kv = 2 * L * n * hkv * d
    toks = 184
    k = toks + 4 * n
    sums = k + 2 * kv
    return dict(magic=magic, version=version, n=n, rank=rank, prec=prec, sum_bytes=sum_bytes, n_sum=n_sum,
                checksum=checksum, k=k, sums=sums, size=sums + n_sum * (n // 16) * hkv * sum_bytes, d=d)


def test_slot_save_restore_across_restarts(tmp_path):
    """A slot's tokens, K/V and page summaries to a file and back in a new server: the same
    prompt then prefills only its last part and answers as `locks run`. Names that leave the
    folder, truncated, corrupted and foreign files are refused with 4xx; the server goes on.
    A version 1 file (no summaries) and a file saved with another summary rank restore by
    rebuilding the summaries."""
    doc = open(os.path.join(ROOT, "README.md")).read()[:900] + "\nIn one sentence:"
    a = Server("-np", "2", "-c", "4096", "--slot-save-path", str(tmp_path))
    try:
        r = a.client().completions.create(model=ALIAS, prompt=doc, max_tokens=6, temperature=0)
        slot = r.model_extra["locks"]["id_slot"]
        st, body = a.request("POST", f"/slots/{slot}?action=save", {"filename": "doc.slot"})
        assert st == 200 and json.loads(body)["n_saved"] == r.usage.prompt_tokens + 5, body
        for bad in ["../doc.slot", "/etc/passwd", ".hidden", "a/b", ""]:
            st, body = a.request("POST", f"/slots/{slot}?action=save", {"filename": bad})
            assert st == 400 and json.loads(body)["error"]["param"] == "filename", bad
        assert a.request("POST", "/slots/9?action=save", {"filename": "x"})[0] == 400
        assert a.request("POST", "/slots/0?action=drop", {"filename": "x"})[0] == 400
    finally:
        a.stop()
    assert not (tmp_path.parent / "doc.slot").exists()
    data = (tmp_path / "doc.slot").read_bytes()
    lay = slot_layout(data)
    assert lay["magic"] == b"LOCKSLT1" and lay["version"] == 2 and lay["size"] == len(data), lay
    assert lay["rank"] == 8 and lay["prec"] == 1 and lay["n_sum"] == 30 and lay["n"] >= 32, lay
    assert lay["sum_bytes"] == lay["d"] + 2 + 8 * lay["d"] // 2 + 2 * 8 + 16 * 8 + 2 * 8, lay
    assert slot_checksum(data) == lay["checksum"]
    files = {
        "cut.slot": data[:len(data) // 2],
        "short.slot": data[:-1],                                     # one byte short
        "long.slot": data + b"\0",
        "junk.slot": os.urandom(4096),
        "flip_sums.slot": data[:-3] + bytes([data[-3] ^ 0x10]) + data[-2:],  # in the summaries
        "flip_k.slot": data[:lay["k"] + 101] + bytes([data[lay["k"] + 101] ^ 1]) + data[lay["k"] + 102:],
        "newer.slot": data[:8] + struct.pack("<I", 3) + data[12:],
    }
    # a non-finite summary scale (the first record's mu scale) under a valid checksum:
    # refused by the engine's checks, not by the checksum
    nan = bytearray(data)
    struct.pack_into("<H", nan, lay["sums"] + lay["d"], 0x7c00)
    struct.pack_into("<Q", nan, 176, slot_checksum(bytes(nan)))
    files["nan_scale.slot"] = bytes(nan)
    # version 1: the first 160 bytes of the header (version 1), tokens, K and V
    files["v1.slot"] = data[:8] + struct.pack("<I", 1) + data[12:160] + data[184:lay["sums"]]
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    b = Server("-np", "2", "-c", "4096", "--slot-save-path", str(tmp_path))
    try:
        for name, status, why in [("cut.slot", 400, "bytes"), ("short.slot", 400, "bytes"), ("long.slot", 400, "bytes"),
                                  ("junk.slot", 400, "not a locks slot file"), ("newer.slot", 400, "not a locks"),
                                  ("flip_sums.slot", 400, "checksum"), ("flip_k.slot", 400, "checksum"),
                                  ("nan_scale.slot", 400, "non-finite"), ("missing.slot", 404, "no slot file")]:
            st, body = b.request("POST", "/slots/1?action=restore", {"filename": name})
            assert st == status and why in json.loads(body)["error"]["message"], (name, body)
        for name, summaries in [("v1.slot", "rebuilt"), ("doc.slot", "restored")]:
            st, body = b.request("POST", "/slots/1?action=restore", {"filename": name})
            assert st == 200 and json.loads(body)["n_restored"] == lay["n"], body
            assert json.loads(body)["summaries"] == summaries, (name, body)
            r = b.client().completions.create(model=ALIAS, prompt=doc, max_tokens=6, temperature=0)
            assert r.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens - 16
            assert r.model_extra["locks"]["id_slot"] == 1
            assert r.choices[0].text == reference(doc, 6), name
    finally:
        b.stop()
    c = Server("-np", "1", "-c", "4096", "--rank", "4", "--slot-save-path", str(tmp_path))
    try:  # another summary shape: the K/V restore, the summaries are rebuilt at rank 4
        st, body = c.request("POST", "/slots/0?action=restore", {"filename": "doc.slot"})
        assert st == 200 and json.loads(body)["summaries"] == "rebuilt", body
        r = c.client().completions.create(model=ALIAS, prompt=doc, max_tokens=6, temperature=0)
        assert r.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens - 16
    finally:
        c.stop()
