"""Soak: `dasllama serve` under mixed requests for a while, watching its memory.

    python bench/serve_soak.py [-m smollm2] [--duration 600] [--clients 4] [--parallel 4]
                               [--out bench/records/soak/soak-{box}.json]

* The server runs as a child process (``python -m dasllama.cli serve``) on 127.0.0.1 and a
  free port, with ``--parallel`` slots of ``--ctx`` tokens each.
* ``--clients`` client threads send requests back to back for ``--duration`` seconds, each
  picking its next kind at random (seeded) from the mix: chat and completions, plain and
  streamed; chat with response_format json_schema; embeddings (only when the model answers
  a probe request with 200); streamed chats the client drops after the first token
  (disconnects); and malformed bodies, which must get a 4xx.
* Every few seconds (``--sample-every``) the server's resident memory is read from
  /proc/PID/status (VmRSS). The warm figure is the median of the samples taken between 20% and
  25% of the run (after warm-up: the KV pool, the grammar caches and the allocator's arenas
  are in use by then); the end figure is the median of the last 5%. Growth is end over warm.
* Goals, each a line of the report and a field of the summary: no 5xx other than deliberate
  503s (a full queue, with Retry-After); no failed request (a good body not answered 200, a
  malformed one not answered 4xx, a broken stream, an invalid JSON reply, a connection
  error); RSS growth under ``--growth-goal`` percent; the process alive at the end, with
  /health 200 and no request left running or queued once the load stops. The exit code is 1
  when a goal fails (2 when the server never came up).

The summary (``--out``; ``{box}`` becomes the machine's label) is a JSON object of its own
(``"schema": "dasllama.soak/1"``), not a row record of bench/schema.json: a soak has no
reference engine to pair with. It lives under bench/records/soak/ so that the row records'
tools (the board, the regression check, the schema test) never read it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import http.client
import json
import os
import random
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import probe
from .llama_cpp import PeerError
from .serve_load import ServerProcess, _proc_status, free_port, percentile, sse_data

__all__ = ["main", "add_soak_arguments", "add_soak_parser", "run_soak", "soak", "summarize",
           "format_summary", "one_request", "malformed_bodies", "Outcome", "MIX",
           "SUMMARY_SCHEMA"]

SUMMARY_SCHEMA = "dasllama.soak/1"
HOST = "127.0.0.1"
DEFAULT_MODEL = "smollm2"
DEFAULT_DURATION_S = 600.0
DEFAULT_CLIENTS = 4
DEFAULT_SLOTS = 4
DEFAULT_CTX = 2048
DEFAULT_MAX_TOKENS = 32            # generated tokens per request at most (a few seconds each)
DEFAULT_SAMPLE_S = 2.0
DEFAULT_GROWTH_GOAL_PCT = 5.0
WARM_AT = 0.20                     # the warm RSS window starts at this fraction of the run
WINDOW = 0.05                      # each RSS window spans this fraction of the run
REQUEST_TIMEOUT_S = 120.0          # one request (a socket timeout): far above any reply here
READY_TIMEOUT_S = 300.0            # the server's start and model load
IDLE_WAIT_S = 15.0                 # after the load, running and queued must reach 0 by then
DISCONNECT_MAX_TOKENS = 512        # a dropped stream would run this long: long enough to drop
PROGRESS_EVERY_S = 30.0
FAILURE_EXAMPLES = 10              # failures quoted in the summary

# The mix: kind -> weight (a client's next request is one of these, by weight).
MIX = {"chat": 3, "chat_stream": 3, "completion": 2, "completion_stream": 2,
       "json_schema": 2, "embeddings": 1, "disconnect": 1, "malformed": 2}

QUESTIONS = (
    "What is a river delta?", "Name three uses of copper.", "Why is the sky blue?",
    "Describe a quiet morning in a small town.", "How do bees make honey?",
    "Give a tip for writing clear emails.", "What does a lighthouse keeper do?",
    "Explain what a database index is.", "Write a sentence about autumn leaves.",
    "What is the capital of France, and why is it famous?",
    "Suggest a name for a bakery.", "How far away is the Moon?")
SYSTEM = "You are a helpful assistant. Answer briefly."
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 16},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["friend", "work", "family"]}, "maxItems": 3}},
    "required": ["name", "age"], "additionalProperties": False}


def malformed_bodies(model: str) -> List[Tuple[str, bytes]]:
    """(path, body) pairs that a server must refuse with a 4xx."""
    ask = [{"role": "user", "content": "hi"}]
    bodies = [
        ("/v1/chat/completions", b"{not json"),
        ("/v1/chat/completions", b"[1, 2, 3]"),
        ("/v1/chat/completions", {"model": model}),
        ("/v1/chat/completions", {"model": model, "messages": "hi"}),
        ("/v1/chat/completions", {"model": model, "messages": [{"content": "no role"}]}),
        ("/v1/chat/completions", {"model": model, "messages": [{"role": 3, "content": "x"}]}),
        ("/v1/chat/completions", {"model": model, "messages": ask, "max_tokens": -1}),
        ("/v1/chat/completions", {"model": model, "messages": ask, "temperature": 9}),
        ("/v1/chat/completions", {"model": "no-such-model", "messages": ask}),
        ("/v1/chat/completions", {"model": model, "messages": ask, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strng"}}}}),
        ("/v1/completions", {"model": model, "prompt": 5.5}),
        ("/v1/completions", {"model": model, "prompt": "x", "n": 0}),
        ("/v1/embeddings", {"model": model, "input": {"text": "x"}}),
        ("/tokenize", {"model": model}),
        ("/detokenize", {"model": model, "tokens": [-5]}),
    ]
    return [(p, b if isinstance(b, bytes) else json.dumps(b).encode()) for p, b in bodies]



@dataclass
class Outcome:
    """One request of the soak: its kind, the HTTP status (None: no answer), whether the
    answer is the one expected, and why not."""
    kind: str
    status: Optional[int]
    ok: bool
    seconds: float
    deliberate_503: bool = False
    note: str = ""


# --------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------
def _post(port: int, path: str, body: bytes, timeout: float):
    """(status, Retry-After header, body bytes) of a POST."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Retry-After"), resp.read()
    finally:
        conn.close()


def _stream(port: int, path: str, body: bytes, timeout: float,
            drop_after_first: bool = False):
    """(status, Retry-After, events, done) of a streamed POST: the JSON events before
    data: [DONE]. With drop_after_first, the connection is closed after the first event that
    carries text (a client that goes away mid-stream)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    events, done = [], False
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json",
                                                      "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            return resp.status, resp.getheader("Retry-After"), [resp.read()], False
        for data in sse_data(resp):
            if data == b"[DONE]":
                done = True
                break
            events.append(json.loads(data))
            if drop_after_first and _event_text(events[-1]):
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                break
        return 200, None, events, done
    finally:
        conn.close()


def _event_text(event: dict) -> str:
    """The text an SSE event carries: chat deltas' content or completions' text."""
    out = []
    for ch in event.get("choices") or []:
        delta = ch.get("delta")
        out.append((delta.get("content") or "") if isinstance(delta, dict)
                   else (ch.get("text") or ""))
    return "".join(out)


# --------------------------------------------------------------------------------------------
# The request kinds
# --------------------------------------------------------------------------------------------
def _messages(rng: random.Random, n: int) -> list:
    q = rng.choice(QUESTIONS)
    if rng.random() < 0.5:     # half share the system prompt: the prefix cache is exercised
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]
    return [{"role": "user", "content": f"{q} (request {n})"}]


def _sampling(rng: random.Random, n: int, max_tokens: int) -> dict:
    return {"max_tokens": rng.randint(max(1, max_tokens // 4), max_tokens),
            "temperature": rng.choice([0.0, 0.7, 1.0]), "seed": n}


def _check_json_reply(data: bytes) -> str:
    """Why a json_schema reply is wrong ("" when it is right): cut replies may be partial."""
    reply = json.loads(data)
    choice = reply["choices"][0]
    if choice.get("finish_reason") != "stop":
        return ""
    value = json.loads(choice["message"]["content"])
    if not isinstance(value, dict) or not {"name", "age"} <= set(value) <= set(
            PERSON["properties"]):
        return f"the reply does not follow the schema: {value!r}"[:300]
    return ""


def _check_stream(events: list, done: bool) -> str:
    if not done:
        return "the stream ended without data: [DONE]"
    for e in events:
        if not isinstance(e, dict) or e.get("error"):
            return f"an error event: {e!r}"[:300]
    if not any(ch.get("finish_reason") for e in events for ch in e.get("choices") or []):
        return "no finish_reason in the stream"
    return ""


def one_request(kind: str, rng: random.Random, n: int, port: int, model: str,
                max_tokens: int, timeout: float) -> Outcome:
    """Sends one request of `kind` and judges its answer."""
    t0 = time.perf_counter()
    expect_4xx = kind == "malformed"
    try:
        if kind == "malformed":
            path, body = rng.choice(malformed_bodies(model))
            status, retry, data = _post(port, path, body, timeout)
            note = "" if 400 <= status < 500 else f"{path} {body[:80]!r}: {data[:200]!r}"
        elif kind in ("chat", "json_schema"):
            req = {"model": model, "messages": _messages(rng, n),
                   **_sampling(rng, n, max_tokens)}
            if kind == "json_schema":
                req["max_tokens"] = max(req["max_tokens"], 2 * max_tokens)
                req["response_format"] = {"type": "json_schema",
                                          "json_schema": {"name": "person", "schema": PERSON}}
            status, retry, data = _post(port, "/v1/chat/completions", json.dumps(req).encode(),
                                        timeout)
            note = _check_json_reply(data) if kind == "json_schema" and status == 200 else ""
        elif kind == "completion":
            req = {"model": model, "prompt": rng.choice(QUESTIONS), **_sampling(rng, n,
                                                                                  max_tokens)}
            status, retry, data = _post(port, "/v1/completions", json.dumps(req).encode(),
                                        timeout)
            note = ""
        elif kind == "embeddings":
            req = {"model": model, "input": [rng.choice(QUESTIONS), f"request {n}"]}
            status, retry, data = _post(port, "/v1/embeddings", json.dumps(req).encode(),
                                        timeout)
            note = ""
            if status == 200 and len(json.loads(data)["data"]) != 2:
                note = "embeddings: not one vector per input"
        elif kind in ("chat_stream", "completion_stream", "disconnect"):
            chat = kind != "completion_stream"
            req = {"model": model, "stream": True, "stream_options": {"include_usage": True},
                   **_sampling(rng, n, max_tokens)}
            if chat:
                req["messages"] = _messages(rng, n)
            else:
                req["prompt"] = rng.choice(QUESTIONS)
            if kind == "disconnect":
                req.update(max_tokens=DISCONNECT_MAX_TOKENS, ignore_eos=True)
            path = "/v1/chat/completions" if chat else "/v1/completions"
            status, retry, events, done = _stream(port, path, json.dumps(req).encode(), timeout,
                                                  drop_after_first=kind == "disconnect")
            data = events[0] if status != 200 and events else b""
            note = "" if status != 200 or kind == "disconnect" else _check_stream(events, done)
        else:
            raise ValueError(f"unknown request kind {kind!r}")
    except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError,
            TypeError) as e:
        return Outcome(kind, None, False, time.perf_counter() - t0,
                       note=f"{type(e).__name__}: {e}"[:300])
    seconds = time.perf_counter() - t0
    deliberate = status == 503 and bool(retry) and not expect_4xx
    if deliberate:
        return Outcome(kind, status, True, seconds, deliberate_503=True)
    expected = 400 <= status < 500 if expect_4xx else status == 200
    if not expected and not note:
        note = f"HTTP {status}: {data[:200]!r}"
    return Outcome(kind, status, expected and not note, seconds, note=note)


# --------------------------------------------------------------------------------------------
# Memory and the server's state
# --------------------------------------------------------------------------------------------
class RssSampler:
    """Reads a process's VmRSS every `period` seconds on a thread: .samples is a list of
    (seconds since start, bytes); .gone is set when the process disappears."""

    def __init__(self, pid: int, period: float):
        self.pid, self.period = pid, period
        self.samples: List[Tuple[float, int]] = []
        self.gone = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._t0 = time.monotonic()

    def _run(self):
        while not self._stop.is_set():
            rss = _proc_status(self.pid, "VmRSS")
            if rss is None:
                self.gone.set()
                return
            self.samples.append((round(time.monotonic() - self._t0, 3), rss))
            self._stop.wait(self.period)

    def start(self):
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(self.period + 5.0)


_METRIC_LINE = re.compile(r"^dasllama_(requests_running|requests_queued)\{[^}]*\}\s+(\S+)$",
                          re.MULTILINE)


def _busy(server: ServerProcess) -> Optional[float]:
    """Requests running plus queued, over all models, from /metrics (None: no answer)."""
    text = server.get_text("/metrics")
    if text is None:
        return None
    return sum(float(v) for _, v in _METRIC_LINE.findall(text))


def _wait_idle(server: ServerProcess, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _busy(server) == 0:
            return True
        time.sleep(0.25)
    return False


# --------------------------------------------------------------------------------------------
# The figures
# --------------------------------------------------------------------------------------------
def _window_median(samples, start: float, end: float) -> Optional[int]:
    xs = [b for t, b in samples if start <= t <= end]
    return int(percentile(xs, 0.5)) if xs else None


def summarize(outcomes: Sequence[Outcome], samples: Sequence[Tuple[float, int]], *,
              duration: float, alive: bool, idle_after: bool,
              growth_goal_pct: float = DEFAULT_GROWTH_GOAL_PCT) -> dict:
    """The soak's figures and goals from its outcomes and RSS samples (seconds, bytes)."""
    by_status: Dict[str, int] = {}
    by_kind: Dict[str, Dict[str, int]] = {}
    seconds: Dict[str, List[float]] = {}
    failures, server_errors, deliberate = [], 0, 0
    for o in outcomes:
        key = "no answer" if o.status is None else str(o.status)
        by_status[key] = by_status.get(key, 0) + 1
        kind = by_kind.setdefault(o.kind, {})
        kind[key] = kind.get(key, 0) + 1
        seconds.setdefault(o.kind, []).append(o.seconds)
        if o.deliberate_503:
            deliberate += 1
        elif o.status is not None and o.status >= 500:
            server_errors += 1
        if not o.ok:
            failures.append(o)
    warm_window = (WARM_AT * duration, (WARM_AT + WINDOW) * duration)
    end_window = ((1.0 - WINDOW) * duration, duration)
    warm = _window_median(samples, *warm_window)
    end = _window_median(samples, *end_window)
    growth = 100.0 * (end - warm) / warm if warm and end is not None else None
    after_warm = [b for t, b in samples if t >= warm_window[0]]
    goals = {
        "no_server_errors": server_errors == 0,
        "no_failed_requests": not failures,
        f"rss_growth_under_{growth_goal_pct:g}_pct": growth is not None
        and growth < growth_goal_pct,
        "alive": alive,
        "idle_after_load": idle_after,
    }
    return {
        "requests": {
            "total": len(outcomes),
            "per_second": round(len(outcomes) / duration, 3) if duration > 0 else None,
            "by_status": dict(sorted(by_status.items())),
            "by_kind": {k: dict(sorted(v.items())) for k, v in sorted(by_kind.items())},
            "seconds_p50": {k: round(percentile(v, 0.5), 4) for k, v in sorted(seconds.items())},
            "seconds_p95": {k: round(percentile(v, 0.95), 4)
                            for k, v in sorted(seconds.items())},
            "failed": len(failures),
            "failure_examples": [{"kind": o.kind, "status": o.status, "note": o.note}
                                 for o in failures[:FAILURE_EXAMPLES]],
        },
        "server_errors_5xx": server_errors,
        "deliberate_503": deliberate,
        "rss": {
            "first_bytes": samples[0][1] if samples else None,
            "warm_bytes": warm, "end_bytes": end,
            "growth_pct": None if growth is None else round(growth, 3),
            "goal_pct": growth_goal_pct,
            "max_after_warm_bytes": max(after_warm) if after_warm else None,
            "warm_window_s": [round(x, 1) for x in warm_window],
            "end_window_s": [round(x, 1) for x in end_window],
            "samples": [[t, b] for t, b in samples],
        },
        "alive": alive,
        "idle_after_load": idle_after,
        "goals": goals,
        "passed": all(goals.values()),
    }


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2 ** 20:.1f} MiB"


def format_summary(s: dict) -> str:
    r, m = s["requests"], s["rss"]
    lines = [f"soak of {s['config']['model']} for {s['config']['duration_s']:g} s, "
             f"{s['config']['clients']} clients, {s['config']['slots']} slots: "
             f"{r['total']} requests ({r['per_second']}/s), {r['failed']} failed",
             "  by status: " + ", ".join(f"{k}: {v}" for k, v in r["by_status"].items())]
    for kind, counts in r["by_kind"].items():
        lines.append(f"    {kind:<18} " + ", ".join(f"{k}: {v}" for k, v in counts.items())
                     + f"  (p50 {r['seconds_p50'][kind]:.3f} s)")
    lines.append(f"  5xx: {s['server_errors_5xx']} (deliberate 503s: {s['deliberate_503']})")
    growth = "-" if m["growth_pct"] is None else f"{m['growth_pct']:+.2f}%"
    lines.append(f"  RSS: warm {_mib(m['warm_bytes'])}, end {_mib(m['end_bytes'])}, growth "
                 f"{growth} (goal < {m['goal_pct']:g}%), max after warm-up "
                 f"{_mib(m['max_after_warm_bytes'])}, peak {_mib(m.get('peak_bytes'))}")
    lines.append(f"  alive: {s['alive']}; idle after the load: {s['idle_after_load']}")
    for ex in r["failure_examples"]:
        lines.append(f"  failed {ex['kind']} ({ex['status']}): {ex['note']}")
    lines.append("  goals: " + ", ".join(f"{k} {'ok' if v else 'FAILED'}"
                                        for k, v in s["goals"].items()))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------
def _probe_embeddings(port: int, model: str) -> Tuple[bool, str]:
    try:
        status, _, data = _post(port, "/v1/embeddings",
                                json.dumps({"model": model, "input": "probe"}).encode(), 60.0)
    except (OSError, http.client.HTTPException) as e:
        return False, f"{type(e).__name__}: {e}"
    return status == 200, f"HTTP {status}" + ("" if status == 200 else f": {data[:200]!r}")


def soak(model: str, *, duration: float, clients: int, slots: int, ctx: int,
         threads: Optional[int], max_tokens: int, sample_every: float, seed: int,
         growth_goal_pct: float, timeout: float = REQUEST_TIMEOUT_S,
         log: Callable[[str], None] = lambda s: None) -> dict:
    """Runs the soak (see the module docstring); returns the summary."""
    port = free_port(HOST)
    argv = [sys.executable, "-m", "dasllama.cli", "serve", "-m", str(model), "--parallel",
            str(slots), "--ctx", str(ctx), "--host", HOST, "--port", str(port)]
    if threads:
        argv += ["--threads", str(threads)]
    logs = tempfile.mkdtemp(prefix="dasllama-soak-")
    server = ServerProcess("dasllama", argv, HOST, port, logs)
    try:
        server.start()
        server.wait_ready(READY_TIMEOUT_S)
        model_id = server.model_id()
        embeddings, probe_note = _probe_embeddings(port, model_id)
        mix = {k: w for k, w in MIX.items() if embeddings or k != "embeddings"}
        log(f"serving {model_id} on port {port}; embeddings: {probe_note}; "
            f"{duration:g} s of load from {clients} clients")
        ready_rss = server.rss()
        sampler = RssSampler(server.proc.pid, sample_every).start()
        outcomes: List[Outcome] = []
        lock = threading.Lock()
        counter = [0]
        t_end = time.monotonic() + duration
        kinds, weights = list(mix), list(mix.values())

        def client(index: int):
            rng = random.Random(seed * 1000 + index)
            while time.monotonic() < t_end and not sampler.gone.is_set():
                with lock:
                    counter[0] += 1
                    n = counter[0]
                kind = rng.choices(kinds, weights)[0]
                o = one_request(kind, rng, n, port, model_id, max_tokens, timeout)
                with lock:
                    outcomes.append(o)

        workers = [threading.Thread(target=client, args=(i,), name=f"soak-client-{i}",
                                    daemon=True) for i in range(clients)]
        for w in workers:
            w.start()
        next_note = time.monotonic() + PROGRESS_EVERY_S
        while time.monotonic() < t_end and not sampler.gone.is_set():
            time.sleep(min(1.0, max(0.0, t_end - time.monotonic())))
            if time.monotonic() >= next_note:
                next_note += PROGRESS_EVERY_S
                rss = sampler.samples[-1][1] if sampler.samples else None
                with lock:
                    done, bad = len(outcomes), sum(not o.ok for o in outcomes)
                log(f"{duration - max(0.0, t_end - time.monotonic()):.0f} s: {done} requests, "
                    f"{bad} failed, RSS {_mib(rss)}")
        # Bounded: every request ends within its socket timeout.
        for w in workers:
            w.join(timeout + 10.0)
        stuck = sum(w.is_alive() for w in workers)
        sampler.stop()
        alive = server.proc.poll() is None and server.get_text("/health") is not None
        idle = alive and _wait_idle(server, IDLE_WAIT_S)
        peak = server.peak_rss()
        with lock:
            done = list(outcomes)
        summary = summarize(done, sampler.samples, duration=duration, alive=alive,
                            idle_after=idle, growth_goal_pct=growth_goal_pct)
        if stuck:
            summary["goals"]["clients_finished"] = False
            summary["passed"] = False
        summary["rss"].update(ready_bytes=ready_rss, peak_bytes=peak)
        summary["config"] = {
            "model": str(model), "model_id": model_id, "duration_s": duration,
            "clients": clients, "slots": slots, "ctx": ctx, "threads": threads,
            "max_tokens": max_tokens, "sample_every_s": sample_every, "seed": seed,
            "mix": mix, "embeddings": embeddings, "embeddings_probe": probe_note,
            "server": " ".join(["dasllama"] + argv[3:])}
        if not alive:
            summary["server_log_tail"] = server.log_tail()
        return summary
    finally:
        server.stop()
        shutil.rmtree(logs, ignore_errors=True)


def add_soak_arguments(p: argparse.ArgumentParser, default_out: Optional[str] = None) -> None:
    p.add_argument("--model", "-m", default=DEFAULT_MODEL, metavar="NAME|PATH",
                   help=f"the model to serve (default {DEFAULT_MODEL})")
    p.add_argument("--duration", type=float, default=DEFAULT_DURATION_S, metavar="SECONDS",
                   help=f"seconds of load (default {DEFAULT_DURATION_S:g})")
    p.add_argument("--clients", type=int, default=DEFAULT_CLIENTS,
                   help=f"concurrent clients (default {DEFAULT_CLIENTS})")
    p.add_argument("--parallel", type=int, default=DEFAULT_SLOTS, metavar="N",
                   help=f"the server's slots (default {DEFAULT_SLOTS})")
    p.add_argument("--ctx", type=int, default=DEFAULT_CTX,
                   help=f"context per slot (default {DEFAULT_CTX})")
    p.add_argument("--threads", "-t", type=int, default=None,
                   help="the server's threads (default: its own, one per physical core)")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                   help=f"generated tokens per request at most (default {DEFAULT_MAX_TOKENS})")
    p.add_argument("--sample-every", type=float, default=DEFAULT_SAMPLE_S, metavar="SECONDS",
                   help=f"seconds between RSS samples (default {DEFAULT_SAMPLE_S:g})")
    p.add_argument("--growth-goal", type=float, default=DEFAULT_GROWTH_GOAL_PCT,
                   metavar="PCT", help=f"largest RSS growth after warm-up, in percent "
                                       f"(default {DEFAULT_GROWTH_GOAL_PCT:g})")
    p.add_argument("--seed", type=int, default=0, help="seed of the request mix (default 0)")
    p.add_argument("--out", "-o", default=default_out, metavar="FILE",
                   help="write the JSON summary there; {box} becomes the machine's label"
                        + (f" (default {default_out})" if default_out else ""))
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")


def _check_args(args) -> Optional[str]:
    for name in ("duration", "sample_every"):
        if getattr(args, name) <= 0:
            return f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}"
    for name in ("clients", "parallel", "ctx", "max_tokens"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}"
    if args.threads is not None and args.threads < 1:
        return f"--threads must be >= 1, got {args.threads}"
    return None


def run_soak(args) -> int:
    """The soak from parsed arguments: prints the report, writes --out; 0 when every goal is
    met, 1 when one fails, 2 when the arguments are wrong or the server does not come up."""
    problem = _check_args(args)
    if problem:
        print(f"dasllama bench soak: error: {problem}", file=sys.stderr)
        return 2
    log = (lambda s: None) if args.quiet else (lambda s: print(f"soak: {s}", file=sys.stderr,
                                                             flush=True))
    created = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    box = probe.this_box()
    machine = probe.machine()      # before the run: its load average is the one at the start
    try:
        summary = soak(args.model, duration=args.duration, clients=args.clients,
                       slots=args.parallel, ctx=args.ctx, threads=args.threads,
                       max_tokens=args.max_tokens, sample_every=args.sample_every,
                       seed=args.seed, growth_goal_pct=args.growth_goal, log=log)
    except PeerError as e:
        print(f"dasllama bench soak: error: {e}", file=sys.stderr)
        return 2
    summary = {"schema": SUMMARY_SCHEMA, "created": created, "box": box,
               "command": getattr(args, "command", None) or " ".join(
                   ["dasllama"] + sys.argv[1:]),
               "machine": {**machine, "loadavg_1m_end": probe.loadavg()},
               "build": probe.build(), **summary}
    print(format_summary(summary))
    if args.out:
        path = Path(args.out.format(box=box))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=1) + "\n")
        print(f"wrote {path}")
    return 0 if summary["passed"] else 1


def add_soak_parser(bsub) -> argparse.ArgumentParser:
    """Adds ``soak`` to ``dasllama bench``'s subcommands."""
    q = bsub.add_parser("soak", help="dasllama serve under mixed requests for a while: "
                                     "errors and RSS growth", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_soak_arguments(q)
    q.set_defaults(run=run_soak)
    return q


def main(argv: Optional[Sequence[str]] = None, default_out: Optional[str] = None) -> int:
    """``python bench/serve_soak.py ARGS`` / ``dasllama bench soak ARGS``."""
    p = argparse.ArgumentParser(prog="serve_soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_soak_arguments(p, default_out)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    args.command = " ".join(["serve_soak"] + argv)
    return run_soak(args)


if __name__ == "__main__":
    sys.exit(main())
