"""A bounded load test: 16 concurrent clients send 300 short streamed requests on loopback.
No request may be lost and no answer may be a 5xx other than a deliberate 503 (full queue,
with Retry-After, retried). Time to first token (p50/p95) and tokens/s are printed, not
asserted (timing is never pass/fail; `dasllama bench` measures performance)."""

from __future__ import annotations

import json
import threading
import time

from test_server_support import httpx, metrics, random_model, serve, spec

CLIENTS = 16
REQUESTS = 300
# A client retries a 503 at most this often (each after its Retry-After) before the test
# counts the request as lost.
MAX_RETRIES = 50


def _percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def test_sixteen_clients_three_hundred_requests(tmp_path):
    path = random_model(tmp_path, "load")
    with serve([spec("load", path)], n_ctx=512, parallel=4, max_queue=8) as srv:
        url = srv.url
        before = metrics(url)
        todo = list(range(REQUESTS))
        lock = threading.Lock()
        results, failures, busy = {}, [], [0]

        def one(i: int, c: httpx.Client):
            max_tokens = 4 + i % 13
            body = {"model": "load", "prompt": f"Request number {i}: the river", "stream": True,
                    "max_tokens": max_tokens, "temperature": 0.8, "seed": i,
                    "ignore_eos": True, "stream_options": {"include_usage": True}}
            for _ in range(MAX_RETRIES):
                t0 = time.perf_counter()
                ttft, text, usage = None, [], None
                with c.stream("POST", url + "/v1/completions", json=body) as r:
                    if r.status_code == 503:
                        assert r.headers.get("retry-after"), "a 503 without Retry-After"
                        r.read()
                        with lock:
                            busy[0] += 1
                        time.sleep(0.05)   # shorter than Retry-After: the test is bounded
                        continue
                    if r.status_code != 200:
                        r.read()
                        raise AssertionError(f"request {i}: {r.status_code} {r.text[:200]}")
                    for line in r.iter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        chunk = json.loads(line[6:])
                        assert "error" not in chunk, chunk
                        if chunk["choices"] and chunk["choices"][0]["text"]:
                            ttft = ttft or time.perf_counter() - t0
                            text.append(chunk["choices"][0]["text"])
                        usage = chunk.get("usage") or usage
                assert usage is not None and usage["completion_tokens"] == max_tokens, usage
                return ttft, max_tokens, time.perf_counter() - t0
            raise AssertionError(f"request {i} stayed refused after {MAX_RETRIES} tries")

        def client_loop():
            with httpx.Client(timeout=120) as c:
                while True:
                    with lock:
                        if not todo:
                            return
                        i = todo.pop()
                    try:
                        results[i] = one(i, c)
                    except BaseException as e:     # reported by the test thread
                        with lock:
                            failures.append(e)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client_loop) for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        wall = time.perf_counter() - t0
        assert not any(t.is_alive() for t in threads), "clients still running after 300 s"
        assert not failures, failures[:3]
        assert sorted(results) == list(range(REQUESTS)), "requests were lost"
        after = metrics(url)

    tokens = sum(r[1] for r in results.values())
    ttfts = [r[0] for r in results.values() if r[0] is not None]
    key = ("dasllama_generated_tokens_total", "load")
    assert after[key] - before.get(key, 0) == tokens
    print(f"\n{REQUESTS} requests from {CLIENTS} clients in {wall:.2f} s: {tokens / wall:.0f} "
          f"tokens/s, time to first token p50 {_percentile(ttfts, 0.5) * 1000:.1f} ms, p95 "
          f"{_percentile(ttfts, 0.95) * 1000:.1f} ms; {busy[0]} deliberate 503s retried")
