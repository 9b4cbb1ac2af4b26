"""Fuzzing the live server: at least 2,000 generated request bodies (hypothesis), from
arbitrary JSON to near-valid requests with one field gone wrong, against `dasllama serve` in a
subprocess. Every answer must be below 500 (a 503 only as a full queue, with Retry-After),
every error must be in the OpenAI shape, and the process must stay alive and healthy."""

from __future__ import annotations

import collections
import json
import math
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from test_server_support import httpx, random_model
from requires import require

require("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

EXAMPLES = 2000
ROUTES = ("/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize")
# The server's start-up line carries the bound address (the test asks for port 0).
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
START_TIMEOUT_S = 60
STATUSES: collections.Counter = collections.Counter()   # (route, status) over the run


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    path = random_model(tmp_path_factory.mktemp("fuzz_model"), "fuzz")
    cmd = [sys.executable, "-m", "dasllama.cli", "serve", "-m", f"fuzz={path}", "--port", "0",
           "--parallel", "2", "--ctx", "64", "--max-queue", "4", "--threads", "1",
           "--timeout", "30"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline, url = time.monotonic() + START_TIMEOUT_S, None
        while url is None:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                pytest.fail(f"dasllama serve exited with {proc.returncode} before listening")
            match = LISTENING.search(line)
            url = match.group(1) if match else None
            if time.monotonic() > deadline:
                pytest.fail("dasllama serve did not announce its address in time")
        # Keep reading the log so a chatty server never blocks on a full pipe; its tail is
        # what a failure shows.
        log = collections.deque(maxlen=200)
        drain = threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True)
        drain.start()
        with httpx.Client(base_url=url, timeout=60) as c:
            while c.get("/health").status_code != 200:
                assert proc.poll() is None, "the server died while loading"
                assert time.monotonic() < deadline, "the model did not load in time"
                time.sleep(0.05)
            yield proc, c, log
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        proc.stderr.close()


# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------
scalars = (st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5)
                           | st.dictionaries(st.text(max_size=12), inner, max_size=5),
                           max_leaves=20)
small_ints = st.integers(-3, 40)
message = st.fixed_dictionaries(
    {}, optional={"role": st.sampled_from(["user", "system", "assistant", "tool", "developer",
                                           "robot"]) | json_values,
                  "content": st.text(max_size=60) | json_values
                  | st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image"]),
                                                    "text": st.text(max_size=20)}), max_size=3),
                  "name": st.text(max_size=10), "tool_calls": json_values})
sampling = {
    "model": st.sampled_from(["fuzz", "other"]) | json_values,
    "max_tokens": small_ints | json_values,
    "temperature": st.floats(-1, 3) | json_values,
    "top_p": st.floats(-0.5, 1.5) | json_values,
    "top_k": small_ints | json_values,
    "min_p": st.floats(-0.5, 1.5) | json_values,
    "seed": st.integers(-2 ** 64, 2 ** 64) | json_values,
    "stop": st.text(max_size=5) | st.lists(st.text(max_size=5), max_size=5) | json_values,
    "presence_penalty": st.floats(-3, 3) | json_values,
    "frequency_penalty": st.floats(-3, 3) | json_values,
    "repetition_penalty": st.floats(-1, 3) | json_values,
    "n": st.integers(-1, 20) | json_values,
    "stream": st.booleans() | json_values,
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}) | json_values,
    "ignore_eos": st.booleans() | json_values,
    "logit_bias": json_values,
}
chat_body = st.fixed_dictionaries({}, optional={
    "messages": st.lists(message, max_size=4) | json_values,
    "logprobs": st.booleans() | json_values,
    "top_logprobs": st.integers(-1, 25) | json_values,
    "response_format": st.fixed_dictionaries({"type": st.sampled_from(
        ["text", "json_object", "json_schema", "xml"])}) | json_values,
    "tools": json_values, "tool_choice": json_values,
    **sampling})
completion_body = st.fixed_dictionaries({}, optional={
    "prompt": st.text(max_size=60) | st.lists(st.integers(-5, 600), max_size=8)
    | st.lists(st.text(max_size=10), max_size=3) | json_values,
    "logprobs": st.integers(-1, 25) | json_values, "echo": st.booleans() | json_values,
    "suffix": json_values, "best_of": json_values, **sampling})
tokenize_body = st.fixed_dictionaries({}, optional={
    "model": st.just("fuzz") | json_values, "content": st.text(max_size=80) | json_values,
    "add_special": st.booleans() | json_values, "parse_special": st.booleans() | json_values,
    "with_pieces": st.booleans() | json_values,
    "tokens": st.lists(st.integers(-5, 700), max_size=10) | json_values})
# Bodies that are valid, to reach generation (small: the fuzz run stays short)...
valid_message = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "system", "developer"]),
    "content": st.text(max_size=40) | st.lists(st.fixed_dictionaries(
        {"type": st.just("text"), "text": st.text(max_size=15)}), min_size=1, max_size=2)})
valid_sampling = {
    "max_tokens": st.integers(0, 12), "temperature": st.floats(0, 2), "top_p": st.floats(0, 1),
    "top_k": st.integers(0, 50), "min_p": st.floats(0, 1), "seed": st.integers(0, 2 ** 40),
    "stop": st.text(min_size=1, max_size=3) | st.lists(st.text(min_size=1, max_size=3),
                                                       max_size=3),
    "presence_penalty": st.floats(-2, 2), "frequency_penalty": st.floats(-2, 2),
    "repetition_penalty": st.floats(0.5, 2), "n": st.integers(1, 3), "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
    "ignore_eos": st.booleans()}
valid_chat = st.fixed_dictionaries(
    {"model": st.just("fuzz"), "messages": st.lists(valid_message, min_size=1, max_size=3)},
    optional={"logprobs": st.just(True), "top_logprobs": st.integers(0, 5), **valid_sampling})
valid_completion = st.fixed_dictionaries(
    {"model": st.just("fuzz"),
     "prompt": st.text(min_size=1, max_size=40) | st.lists(st.integers(0, 511), min_size=1,
                                                            max_size=8)},
    optional={"logprobs": st.integers(0, 5), "echo": st.booleans(), **valid_sampling})


def _mutated(body: dict, key: str, value, drop: bool) -> dict:
    body = dict(body)
    if drop:
        body.pop(key, None)
    else:
        body[key] = value
    return body


# ...the same with one field set to anything or removed...
fields = st.sampled_from(sorted(set(sampling) | {"messages", "prompt", "logprobs",
                                                "top_logprobs", "echo", "response_format"}))


def one_field_wrong(valid):
    return st.builds(_mutated, valid, fields, json_values, st.booleans())


# ...and anything at all.
requests = st.one_of(
    st.tuples(st.just("/v1/chat/completions"), valid_chat),
    st.tuples(st.just("/v1/completions"), valid_completion),
    st.tuples(st.just("/v1/chat/completions"), one_field_wrong(valid_chat)),
    st.tuples(st.just("/v1/completions"), one_field_wrong(valid_completion)),
    st.tuples(st.just("/v1/chat/completions"), chat_body),
    st.tuples(st.just("/v1/completions"), completion_body),
    st.tuples(st.sampled_from(["/tokenize", "/detokenize"]), tokenize_body),
    st.tuples(st.sampled_from(ROUTES), json_values),
    st.tuples(st.sampled_from(ROUTES), st.binary(max_size=80)),
)


def _encode(body) -> bytes:
    if isinstance(body, bytes):
        return body
    # NaN and infinities as Python's json writes them: not JSON, which the server must refuse
    # or read as the numbers they are, never crash on.
    return json.dumps(body, allow_nan=True).encode()


def _check_answer(r, route):
    assert r.status_code < 500 or r.status_code == 503, (route, r.status_code, r.text[:300])
    if r.status_code == 503:
        assert r.headers.get("retry-after"), r.text
    if r.status_code >= 400:
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"], err


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(request=requests)
def test_generated_bodies_never_break_the_server(live, request):
    proc, c, log = live
    route, body = request
    r = c.post(route, content=_encode(body), headers={"content-type": "application/json"})
    STATUSES[(route, r.status_code)] += 1
    try:
        _check_answer(r, route)
    except AssertionError:
        print("server log tail:\n" + "".join(list(log)[-40:]))
        raise
    if r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"):
        events = [e for e in r.text.split("\n\n") if e.strip()]
        assert events[-1] == "data: [DONE]" or '"error"' in events[-1], events[-1][:200]
    elif r.status_code == 200:
        assert isinstance(r.json(), dict)
    assert proc.poll() is None, "the server process died"


def test_server_alive_and_healthy_after_fuzzing(live):
    proc, c, log = live
    print("\nanswers by route and status:", dict(sorted(STATUSES.items())))
    total = sum(STATUSES.values())
    assert total >= EXAMPLES, f"only {total} bodies were sent"
    # The bodies must reach generation too, not only the validators.
    for route in ("/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"):
        assert STATUSES[(route, 200)] > 0, f"no generated body was served on {route}"
    assert proc.poll() is None
    assert c.get("/health").status_code == 200
    r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                             "max_tokens": 3})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"
    assert not math.isnan(float(r.json()["usage"]["total_tokens"]))
