"""The server's guards and lifecycle: API-key auth, CORS, the body limit, the bounded queue
(503 with Retry-After), the per-request timeout, /health while a model loads or after a load
failed, and keep-alive unloading with reload on the next request."""

from __future__ import annotations

import threading
import time

import pytest

from test_server_support import (SLOW, assert_error_shape, client, httpx, metric, openai,
                                 random_model, serve, spec, wait_for)

from dasllama.server.config import ModelSpec
from dasllama.server.registry import LoadedLLM

KEY = "test-key-5f2c"
ORIGIN = "http://ui.example"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("limits_models")


@pytest.fixture(scope="module")
def tiny(folder):
    return random_model(folder, "tiny")


@pytest.fixture(scope="module")
def slow(folder):
    return random_model(folder, "slow", **SLOW)


# --------------------------------------------------------------------------------------------
# Auth and CORS
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def guarded(tiny):
    with serve([spec("tiny", tiny)], n_ctx=128, parallel=1, api_key=KEY, cors_origins=[ORIGIN],
               max_body_bytes=16 * 1024) as srv:
        yield srv


@pytest.fixture(scope="module")
def open_server(tiny):
    with serve([spec("tiny", tiny)], n_ctx=128, parallel=1) as srv:
        yield srv


def test_api_key_guards_every_route_but_health(guarded):
    url = guarded.url
    assert httpx.get(url + "/health").status_code == 200
    bearer = {"Authorization": f"Bearer {KEY}"}
    for method, path in (("GET", "/v1/models"), ("GET", "/metrics"),
                         ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
                         ("POST", "/tokenize"), ("GET", "/v1/unknown")):
        r = httpx.request(method, url + path, json={})
        err = assert_error_shape(r, 401)
        assert err["code"] == "invalid_api_key" and r.headers["www-authenticate"] == "Bearer"
        r = httpx.request(method, url + path, json={},
                          headers={"Authorization": "Bearer wrong-key"})
        assert_error_shape(r, 401)
        r = httpx.request(method, url + path, json={}, headers={"Authorization": KEY})
        assert_error_shape(r, 401)   # not a Bearer header
    assert httpx.get(url + "/v1/models", headers=bearer).status_code == 200
    # With the key, a bad body gets its own answer (the key check comes first, not instead).
    assert_error_shape(httpx.post(url + "/v1/chat/completions", json={}, headers=bearer), 400,
                       "messages")


def test_openai_client_with_and_without_the_key(guarded):
    r = client(guarded, api_key=KEY).chat.completions.create(model="tiny", messages=MESSAGES,
                                                             max_tokens=3)
    assert r.choices[0].message.content is not None
    with pytest.raises(openai.AuthenticationError):
        client(guarded, api_key="nope").chat.completions.create(model="tiny",
                                                                messages=MESSAGES)


def test_cors_headers_only_for_allowed_origins(guarded):
    url = guarded.url
    r = httpx.get(url + "/health", headers={"Origin": ORIGIN})
    assert r.headers.get("access-control-allow-origin") == ORIGIN
    r = httpx.get(url + "/health", headers={"Origin": "http://elsewhere.example"})
    assert "access-control-allow-origin" not in r.headers
    # A preflight is answered without the API key (browsers send none with it).
    r = httpx.options(url + "/v1/chat/completions",
                      headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                               "Access-Control-Request-Headers": "authorization,content-type"})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in r.headers["access-control-allow-methods"]
    # A 401 still carries CORS headers, so the browser can show why.
    r = httpx.get(url + "/v1/models", headers={"Origin": ORIGIN})
    assert r.status_code == 401 and r.headers.get("access-control-allow-origin") == ORIGIN


def test_cors_is_off_by_default(open_server):
    url = open_server.url
    r = httpx.get(url + "/health", headers={"Origin": ORIGIN})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    r = httpx.options(url + "/v1/chat/completions",
                      headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in r.headers
    assert r.status_code == 405


def test_body_limit(guarded):
    url, bearer = guarded.url, {"Authorization": f"Bearer {KEY}"}
    big = {"model": "tiny", "messages": [{"role": "user", "content": "x" * 20000}]}
    err = assert_error_shape(httpx.post(url + "/v1/chat/completions", json=big, headers=bearer),
                             413)
    assert err["code"] == "request_too_large" and str(16 * 1024) in err["message"]

    def chunked():     # no Content-Length: the limit holds while reading
        for _ in range(40):
            yield b"x" * 1024

    r = httpx.post(url + "/v1/chat/completions", content=chunked(),
                   headers={**bearer, "content-type": "application/json"})
    assert_error_shape(r, 413)
    small = {"model": "tiny", "messages": MESSAGES, "max_tokens": 2}
    assert httpx.post(url + "/v1/chat/completions", json=small, headers=bearer).status_code == 200


# --------------------------------------------------------------------------------------------
# Admission: queue and timeout
# --------------------------------------------------------------------------------------------
LONG = {"messages": MESSAGES, "max_tokens": 3000, "ignore_eos": True, "temperature": 0,
        "stream": True}


def test_full_queue_is_a_503_with_retry_after(slow):
    with serve([spec("slow", slow)], n_ctx=4096, parallel=1, max_queue=1) as srv:
        url = srv.url
        with httpx.Client(base_url=url, timeout=60) as a, httpx.Client(base_url=url,
                                                                       timeout=60) as b:
            with a.stream("POST", "/v1/chat/completions", json=LONG) as running:
                wait_for(lambda: metric(url, "requests_running", "slow") == 1, "A to run")
                with b.stream("POST", "/v1/chat/completions", json=LONG) as waiting:
                    wait_for(lambda: metric(url, "requests_queued", "slow") == 1,
                             "B to wait in the queue")
                    r = httpx.post(url + "/v1/chat/completions", json={**LONG, "stream": False})
                    err = assert_error_shape(r, 503)
                    assert err["code"] == "queue_full"
                    assert int(r.headers["retry-after"]) >= 1
                    assert running.status_code == 200 and waiting.status_code == 200
        # Both clients are gone: the slot and the queue empty, and the server serves again.
        wait_for(lambda: metric(url, "requests_running", "slow") == 0
                 and metric(url, "requests_queued", "slow") == 0, "the slot to free")
        r = httpx.post(url + "/v1/chat/completions",
                       json={"messages": MESSAGES, "max_tokens": 2}, timeout=60)
        assert r.status_code == 200


def test_request_timeout_cancels_and_answers_504(slow):
    with serve([spec("slow", slow)], n_ctx=4096, parallel=1, request_timeout=0.5) as srv:
        t0 = time.monotonic()
        r = httpx.post(srv.url + "/v1/chat/completions", json={**LONG, "stream": False},
                       timeout=60)
        elapsed = time.monotonic() - t0
        err = assert_error_shape(r, 504)
        assert err["code"] == "timeout" and elapsed < 10
        wait_for(lambda: metric(srv.url, "slots_busy", "slow") == 0, "the slot to free")
        generated = metric(srv.url, "generated_tokens_total", "slow")
        assert 0 < generated < 3000, "the timed-out request was not cut short"
        # A stream that times out ends with an error event instead of [DONE].
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=LONG,
                          timeout=60) as s:
            lines = [line for line in s.iter_lines() if line]
        assert '"timeout"' in lines[-1] and lines[-1] != "data: [DONE]"


# --------------------------------------------------------------------------------------------
# Loading and keep-alive
# --------------------------------------------------------------------------------------------
def test_health_is_503_while_a_model_loads_and_after_a_failed_load(tiny):
    from dasllama.server.config import ServerConfig
    from dasllama.server.local import BackgroundServer

    release = threading.Event()
    config = ServerConfig(port=0, n_ctx=128, parallel=1, threads=1)

    def slow_load():
        assert release.wait(60), "the test never released the load"
        return LoadedLLM.load(ModelSpec("gated", str(tiny)), config)

    def broken_load():
        raise OSError("disk on fire")

    config.models = [ModelSpec("gated", loader=slow_load)]
    with BackgroundServer(config) as srv:
        r = httpx.get(srv.url + "/health")
        err = assert_error_shape(r, 503)
        assert r.json()["status"] == "loading" and "gated" in err["message"]
        card = httpx.get(srv.url + "/v1/models/gated").json()
        assert card["status"] == "loading" and card["n_ctx"] == 128 and card["slots"] == 1
        release.set()
        srv.wait_ready()
        assert httpx.get(srv.url + "/health").json() == {"status": "ok"}

    config = ServerConfig(port=0, models=[ModelSpec("broken", loader=broken_load)])
    with BackgroundServer(config) as srv:
        srv.wait_ready()
        r = httpx.get(srv.url + "/health")
        err = assert_error_shape(r, 503)
        assert r.json()["status"] == "error" and "disk on fire" in err["message"]
        r = httpx.post(srv.url + "/v1/chat/completions", json={"messages": MESSAGES})
        err = assert_error_shape(r, 503)
        assert err["code"] == "model_load_failed"


def test_a_request_cancelled_while_its_model_loads_leaves_the_load_to_finish():
    # A request cancelled while it waits for a load (a client gone, under a host that cancels
    # handlers) must not strand the model in "loading" with the loaded object never recorded,
    # never closed, and loaded again by the next request.
    import asyncio

    from dasllama.server.config import ServerConfig
    from dasllama.server.registry import ModelRegistry

    release = threading.Event()
    made = []

    class Model:
        closed = False

        def close(self):
            self.closed = True

    def load():
        assert release.wait(60), "the test never released the load"
        made.append(Model())
        return made[-1]

    async def scenario():
        registry = ModelRegistry(ServerConfig(
            models=[ModelSpec("m", kind="custom", loader=load)], load_at_start=False))
        await registry.start()
        entry = registry.get("m")
        first = asyncio.ensure_future(registry.lease(entry).__aenter__())
        for _ in range(200):      # bounded: until the load has begun
            if entry.state == "loading":
                break
            await asyncio.sleep(0.01)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        release.set()
        async with registry.lease(entry) as model:
            assert model is made[0]
        assert (entry.state, entry.loads, len(made)) == ("ready", 1, 1)
        await registry.close()
        assert made[0].closed

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_keep_alive_unloads_an_idle_model_and_reloads_it(tiny, slow):
    with serve([spec("tiny", tiny), spec("slow", slow)], n_ctx=4096, parallel=1,
               keep_alive=0.3) as srv:
        url = srv.url

        def status(name):
            return httpx.get(f"{url}/v1/models/{name}").json()["status"]

        wait_for(lambda: status("tiny") == "unloaded", "tiny to unload", period=0.05)
        assert metric(url, "model_loaded", "tiny") == 0.0
        assert httpx.get(url + "/health").status_code == 200   # unloaded is not unhealthy
        api = client(srv)
        r = api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=4,
                                        temperature=0)
        assert r.choices[0].message.content is not None
        assert srv.registry.get("tiny").loads == 2
        # A model in use is never unloaded, however long the request runs.
        wait_for(lambda: status("slow") == "unloaded", "slow to unload", period=0.05)
        with httpx.stream("POST", url + "/v1/chat/completions",
                          json={**LONG, "model": "slow"}, timeout=60) as s:
            lines = s.iter_lines()
            next(lines)
            time.sleep(1.0)     # several keep-alive periods, well short of the generation
            assert status("slow") == "ready"
            assert metric(url, "requests_running", "slow") == 1, "the request ended too soon"
