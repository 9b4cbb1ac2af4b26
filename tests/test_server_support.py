"""What the server tests share (this module holds no tests): random-weight models, a server on
a background thread on 127.0.0.1 and a free port, /metrics readings, and an openai client.

The server packages are in the `test` extra; without them these tests skip (fail under CI).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from requires import require

require("fastapi")
require("uvicorn")
require("prometheus_client")
httpx = require("httpx")
openai = require("openai")

from dasllama.server.config import ModelSpec, ServerConfig  # noqa: E402
from dasllama.server.local import BackgroundServer  # noqa: E402
from dasllama.testing.random_gguf import write_random_model  # noqa: E402

# The small random model: a step takes well under a millisecond, for tests that need many
# requests. The "slow" one (wider, deeper) takes about 1.5 ms a step on one core, so a
# generation of a thousand tokens lasts long enough to watch slots fill and empty.
SMALL = dict(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128)
SLOW = dict(n_embd=384, n_layer=4, n_head=4, n_head_kv=2, n_ff=768)
# Polling /metrics for a condition gives up after this long: every condition the tests wait
# for happens within a second on an idle machine; the rest is room for a loaded CI runner.
WAIT_S = 20.0


def random_model(folder: Path, name: str = "model", **shape) -> Path:
    """A random-weight llama with the ChatML template, written to folder/name.gguf."""
    return write_random_model(folder / f"{name}.gguf", "llama", chat_template=True,
                              **{**SMALL, **shape})


@contextlib.contextmanager
def serve(models, **config):
    """A started server with every model loaded; yields the BackgroundServer."""
    config.setdefault("port", 0)
    config.setdefault("threads", 1)
    server = BackgroundServer(ServerConfig(models=list(models), **config))
    with server:
        server.wait_ready()
        yield server


def spec(name: str, path: Path, **kw) -> ModelSpec:
    return ModelSpec(name=name, source=str(path), **kw)


def client(server, api_key: str = "none", **kw):
    """An openai client for the server (no retries: a test sees every status)."""
    return openai.OpenAI(base_url=server.url + "/v1", api_key=api_key, max_retries=0,
                         timeout=kw.pop("timeout", 120.0), **kw)


def metrics(url: str, **headers) -> dict:
    """{(metric name, model label or None): value} from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", headers=headers, timeout=30).text
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, sample.labels.get("model"))] = sample.value
    return out


def metric(url: str, name: str, model: str) -> float:
    return metrics(url).get((f"dasllama_{name}", model), 0.0)


def wait_for(condition, what: str, timeout: float = WAIT_S, period: float = 0.005):
    """Polls condition() until it is true; fails naming what it waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(period)
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}")


def assert_error_shape(response, status: int, param_contains: str = None):
    """The response is status with an OpenAI error body; param names the field when given."""
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) >= {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    if param_contains is not None:
        assert err["param"] is not None and param_contains in err["param"], err
    return err
