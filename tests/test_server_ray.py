"""The server on Ray Serve (dasllama.server.ray_serve): a local Ray cluster of 2 CPUs on
loopback, two replicas of a small random-weight model behind Serve's HTTP proxy, through the
openai client and httpx.

Both replicas serve (the x-dasllama-replica header names each), streams pass through Ray, a
full queue is a 503, and a request sent right after one replica is killed is served by the
other. Every wait is bounded; the cluster is shut down at the end.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

# Ray binds its own services (GCS, raylet, agents, proxy) to the node's address, and on Linux
# that is the machine's network address unless multi-node clusters are turned off; off, every
# one binds loopback. Read when ray is first imported, so set before any test imports it.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import pytest  # noqa: E402
from requires import require  # noqa: E402

from dasllama.testing.random_gguf import write_random_model  # noqa: E402

pytestmark = pytest.mark.timeout(240)

APP = "dasllama-test"
N_CTX = 2048
# A request long enough (about a second on one thread) that several sent together overlap.
LONG_TOKENS = 1900
# Bounds on the waits: replicas start in a few seconds on 2 cores; leave room for a busy box.
READY_TIMEOUT_S = 90.0
REQUEST_TIMEOUT_S = 60.0
# Looking for both replicas: pairs of requests sent together (Ray routes the second of a pair
# to the idler replica), a pause between pairs, until READY_TIMEOUT_S. A replica that is still
# loading, or restarting after a health check it missed on a loaded box, answers again within
# that time; a fixed count of quick probes can all land while it is away.
PROBE_PAUSE_S = 0.5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(base url, Serve's ray module) of two replicas of a random model on a local cluster."""
    require("fastapi")
    require("uvicorn")
    ray = require("ray")
    from ray import serve
    from ray._private import ray_constants

    assert not ray_constants.ENABLE_RAY_CLUSTER, "ray was imported before this module"

    from dasllama.server import ModelSpec, ServerConfig
    from dasllama.server.ray_serve import RayOptions, build_application

    path = write_random_model(tmp_path_factory.mktemp("ray") / "tiny.gguf", "llama",
                              n_ctx=N_CTX, n_embd=128, n_layer=4, n_ff=256, seed=3)
    port = _free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        # One slot and a queue of one: three requests fill the two replicas and the queue.
        config = ServerConfig(models=[ModelSpec("tiny", str(path))], parallel=1, n_ctx=N_CTX,
                              threads=1, max_queue=1, request_timeout=REQUEST_TIMEOUT_S)
        # Half a CPU each, so the replica that replaces a killed one finds room.
        serve.run(build_application(config, RayOptions(replicas=2, num_cpus=0.5)), name=APP,
                  route_prefix="/")
        yield f"http://127.0.0.1:{port}", ray
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


def _complete(url, max_tokens=8, **extra):
    import httpx
    body = {"model": "tiny", "prompt": "once upon a time", "max_tokens": max_tokens,
            "temperature": 0, **extra}
    return httpx.post(url + "/v1/completions", json=body, timeout=REQUEST_TIMEOUT_S)


def _replicas_seen(url, want: int = 2) -> set:
    """Replica ids from response headers, probing (PROBE_PAUSE_S) until `want` distinct ones
    answered or READY_TIMEOUT_S passed (a replica still loading its model makes a request
    wait, not fail)."""
    from concurrent.futures import ThreadPoolExecutor

    from dasllama.server.ray_serve import REPLICA_HEADER
    seen, deadline = set(), time.monotonic() + READY_TIMEOUT_S
    with ThreadPoolExecutor(want) as pool:
        while len(seen) < want and time.monotonic() < deadline:
            for r in pool.map(lambda _: _complete(url), range(want)):
                assert r.status_code == 200, r.text
                seen.add(r.headers[REPLICA_HEADER])
            if len(seen) < want:
                time.sleep(PROBE_PAUSE_S)
    return seen


def test_both_replicas_serve(cluster):
    url, _ = cluster
    seen = _replicas_seen(url)
    assert len(seen) == 2, f"only replica(s) {seen} answered in {READY_TIMEOUT_S:.0f} s"


def test_streaming_through_ray(cluster):
    import httpx
    openai = require("openai")
    from dasllama.server.ray_serve import REPLICA_HEADER

    url, _ = cluster
    with openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0,
                       timeout=REQUEST_TIMEOUT_S) as client:
        whole = client.completions.create(model="tiny", prompt="once upon a time",
                                          max_tokens=24, temperature=0)
        pieces = [c.choices[0].text for c in client.completions.create(
            model="tiny", prompt="once upon a time", max_tokens=24, temperature=0,
            stream=True) if c.choices]
    assert len(pieces) >= 10
    assert "".join(pieces) == whole.choices[0].text
    body = {"model": "tiny", "prompt": "once upon a time", "max_tokens": 24, "temperature": 0,
            "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body,
                      timeout=REQUEST_TIMEOUT_S) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers[REPLICA_HEADER]
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and len(lines) >= 10


def test_full_queue_is_503(cluster):
    """Two replicas of one slot and a queue of one hold three requests; of eight long ones
    sent together the rest are 503s, the served ones complete, and the server recovers."""
    url, _ = cluster
    _replicas_seen(url)    # both up, so neither is still loading when the burst comes
    statuses, refusals, lock = [], [], threading.Lock()

    def one():
        r = _complete(url, max_tokens=LONG_TOKENS)
        with lock:
            statuses.append((r.status_code, r.json()["usage"]["completion_tokens"]
                             if r.status_code == 200 else r.headers.get("retry-after")))
            if r.status_code == 503:
                refusals.append((r.headers.get("content-type", ""), r.text))

    workers = [threading.Thread(target=one) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(REQUEST_TIMEOUT_S)
    assert not any(w.is_alive() for w in workers), "a request did not finish"
    codes = sorted(s for s, _ in statuses)
    print(f"statuses of 8 requests sent together: {codes}")
    assert len(codes) == 8 and set(codes) <= {200, 503}
    assert 503 in codes and 200 in codes
    assert all(n == LONG_TOKENS for s, n in statuses if s == 200)
    assert all(retry == "1" for s, retry in statuses if s == 503)
    # The app refuses, not Ray's proxy: the body is the OpenAI error shape, not plain text.
    for content_type, text in refusals:
        assert content_type.startswith("application/json"), (content_type, text)
        error = json.loads(text)["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        assert (error["code"], error["type"]) == ("queue_full", "unavailable_error"), error
    assert _complete(url).status_code == 200


def test_a_killed_replica_is_replaced_by_the_other(cluster):
    from ray import serve

    from dasllama.server.ray_serve import DEPLOYMENT_NAME, REPLICA_HEADER

    url, ray = cluster
    seen = _replicas_seen(url)
    assert len(seen) == 2
    victim, survivor = sorted(seen)
    actor = ray.get_actor(f"SERVE_REPLICA::{APP}#{DEPLOYMENT_NAME}#{victim}", namespace="serve")
    ray.kill(actor, no_restart=True)
    r = _complete(url)
    assert r.status_code == 200, r.text
    assert r.headers[REPLICA_HEADER] != victim
    answered = {r.headers[REPLICA_HEADER]}
    for _ in range(5):
        r = _complete(url)
        assert r.status_code == 200, r.text
        answered.add(r.headers[REPLICA_HEADER])
    assert victim not in answered and survivor in answered
    assert serve.status().applications[APP].status in ("RUNNING", "DEPLOYING")


# =============================================================================================
# The `serve run dasllama.server.ray_serve:app` builder (no cluster needed)
# =============================================================================================

@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    return str(write_random_model(tmp_path_factory.mktemp("ray_args") / "small.gguf", "llama"))


def test_serve_run_builder_reads_build_args_and_environment(small_model, monkeypatch):
    require("ray")
    from dasllama.server import ray_serve

    monkeypatch.setenv(ray_serve.ARGS_ENV, "--threads 2 --ctx 128")
    d = ray_serve.app({"model": small_model, "parallel": "3", "replicas": "2",
                       "max_queue": "5"})._bound_deployment
    # Twice what a replica admits (3 slots and 5 waiting); Ray itself never refuses (-1).
    assert (d.num_replicas, d.max_ongoing_requests, d.max_queued_requests) == (2, 16, -1)
    assert d.ray_actor_options["num_cpus"] == 2
    config = d.init_args[0]
    assert [(m.source, m.kind) for m in config.models] == [(small_model, "llm")]
    assert (config.threads, config.n_ctx, config.parallel) == (2, 128, 3)
    monkeypatch.delenv(ray_serve.ARGS_ENV)
    d = ray_serve.app({"args": f"-m {small_model} --max-queue 0"})._bound_deployment
    assert (d.max_ongoing_requests, d.max_queued_requests) == (8, -1)   # 4 slots, no queue
    assert d.init_args[0].threads == 1 and d.ray_actor_options["num_cpus"] == 1
    with pytest.raises(ValueError, match="invalid dasllama serve options"):
        ray_serve.app({"model": small_model, "parallel": "0"})


def test_autoscaling_options(small_model):
    require("ray")
    from dasllama.server import ModelSpec, ServerConfig
    from dasllama.server.ray_serve import RayOptions, deployment_options

    config = ServerConfig(models=[ModelSpec("a", small_model), ModelSpec("b", small_model),
                                  ModelSpec("speech", small_model, kind="tts")], parallel=2)
    out = deployment_options(config, RayOptions(autoscale=(0, 4)))
    # Slots 2 + 2 + 1 (the speech model's one) and 64 waiting per model, twice over.
    assert out["max_ongoing_requests"] == 2 * (2 + 2 + 1 + 3 * 64)
    assert out["max_queued_requests"] == -1
    assert out["autoscaling_config"] == {"min_replicas": 0, "max_replicas": 4,
                                         "initial_replicas": 1, "target_ongoing_requests": 5}
    assert "num_replicas" not in out
    assert deployment_options(config, RayOptions(replicas=3))["num_replicas"] == 3
    for bad in ((3, 1), (0, 0), (-1, 2)):
        with pytest.raises(ValueError, match="autoscale"):
            RayOptions(autoscale=bad)
