"""The serving benchmark's plumbing: server processes and the load they are given.

``request_bodies`` and ``prefix_bodies`` write the requests: streamed chat completions of a
fixed length (``ignore_eos``, temperature 0) over English prompts that differ per request
and per repetition from their first words on, or that share one long system prompt.

``ServerProcess`` starts a server command on 127.0.0.1, waits for ``/health`` to answer 200
(bounded), reads its RSS and CPU time from /proc, and stops it (SIGTERM, then SIGKILL after a
grace period); on Linux the server also dies with the harness (PR_SET_PDEATHSIG).

``stream_chat`` sends one streamed chat completion and times it: the first content chunk
(time to first token), the last one, and the usage of the final chunk. ``run_level`` sends a
list of requests from ``c`` client threads in a closed loop (each client sends its next
request when its previous one ends) and times the whole level. The client is the standard
library's http.client on plain threads: a light client matters on a small machine, where
whatever it spends is taken from the server under test.
"""

from __future__ import annotations

import http.client
import json
import math
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from .llama_cpp import PeerError
from .llm import BenchError
from .quiet import process_cpu_seconds

__all__ = ["ServeError", "SENTENCES", "TASKS", "SYSTEM_PROMPT", "request_bodies",
           "prefix_bodies", "RequestResult", "LevelResult", "stream_chat", "run_level",
           "percentile", "free_port", "ServerProcess"]

HEALTH_POLL_S = 0.25      # between /health probes while a server loads
STOP_GRACE_S = 15.0       # a server gets this long to exit on SIGTERM before SIGKILL
LOG_TAIL_BYTES = 3000     # what an error quotes of a server's log


class ServeError(BenchError):
    """A server answered a request wrongly (an HTTP error, a broken stream, missing usage)."""


# ----------------------------------------------------------------------------------------
# prompts: realistic prose, distinct per request and per repetition (written for this file)

SENTENCES = (
    "The harbour town rebuilt its sea wall after the winter storms, using granite blocks hauled "
    "from a quarry two valleys away.",
    "A bakery on the corner starts its ovens at four in the morning so the first loaves are "
    "cool enough to slice by seven.",
    "Our team moved the nightly database backup to the hour when traffic is lowest, which cut "
    "the replication lag in half.",
    "The committee asked for a budget that separates one-time hardware purchases from the "
    "recurring cost of support contracts.",
    "Volunteers counted forty-two species of birds along the river trail during the spring "
    "survey, three more than last year.",
    "The new bus route connects the hospital, the university campus and the train station "
    "with a departure every twelve minutes.",
    "After the firmware update, several customers reported that their thermostats lost the "
    "schedule they had programmed.",
    "The museum plans to digitize its collection of maps, some of which are too fragile to be "
    "handled without gloves.",
    "Moving the shipping estimate above the fold on the checkout page raised completed orders "
    "by four percent in a month.",
    "The orchard switched to drip irrigation, and the trees used a third less water through "
    "the dry months of July and August.",
    "Engineers found that the vibration came from a loose mounting bracket rather than from "
    "the motor bearings they had suspected.",
    "The library extended its opening hours during exam weeks and added power outlets to the "
    "long tables on the second floor.",
    "Each chapter of the handbook ends with a checklist, so new staff can confirm they have "
    "covered the essential safety steps.",
    "The city council will vote next month on whether to turn two lanes of the main avenue "
    "into a protected bicycle path.",
    "Our supplier raised the price of recycled cardboard, so we are comparing quotes from "
    "three regional packaging companies.",
    "The research vessel spent six weeks mapping the seabed, collecting sediment cores at "
    "depths of up to four kilometres.",
    "A community garden opened on the empty lot behind the school, with raised beds kept for "
    "families on the waiting list.",
    "The software team agreed to freeze new features two weeks before the release and to "
    "spend that time fixing reported bugs.",
    "Heavy rain delayed the harvest, and the cooperative is renting extra dryers to keep the "
    "grain from spoiling in storage.",
    "The theatre company rehearses in a converted warehouse, where the acoustics are "
    "surprisingly good for spoken drama.",
    "Customers can now return items at any of our stores, even when they bought them through "
    "the online shop.",
    "The observatory will host a public evening when Jupiter is closest to Earth, weather "
    "permitting, with telescopes on the roof.",
    "Our quarterly survey shows that most people open the mobile app in the morning, mainly "
    "to check their messages.",
    "The bridge inspection found minor corrosion on two support cables, which will be treated "
    "during the summer closure.",
)
TASKS = (
    "Summarize the following notes in a few sentences.",
    "Write a short reply that answers the questions these notes raise.",
    "List the main facts in these notes as bullet points.",
    "Explain which of these notes matters most to a small business owner, and why.",
    "Rewrite these notes as a friendly paragraph for a community newsletter.",
    "Suggest three follow-up actions for the people mentioned in these notes.",
)
SENTENCES_PER_PROMPT = 7        # about 200 prompt tokens with a task line and a ticket number
SYSTEM_PROMPT = ("You are the assistant of a regional news desk. Answer questions about the "
                 "notes below, briefly and accurately; say so when the notes do not tell.\n\n"
                 "Notes:\n" + "\n".join(f"- {s}" for s in SENTENCES))


def _ticket(rng: random.Random) -> str:
    return f"Ticket {rng.randrange(100000, 1000000)}."


def _body(model: str, messages: list, max_tokens: int) -> dict:
    return {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}


def request_bodies(model: str, n: int, max_tokens: int, key: str) -> list:
    """n chat bodies with distinct ~200-token prompts, fixed by ``key`` (seed, cell,
    repetition): a different key gives different prompts from their first tokens on."""
    out = []
    for i in range(n):
        rng = random.Random(f"{key}-{i}")
        text = (f"{_ticket(rng)} {rng.choice(TASKS)}\n\n"
                + " ".join(rng.sample(SENTENCES, SENTENCES_PER_PROMPT)))
        out.append(_body(model, [{"role": "user", "content": text}], max_tokens))
    return out


def prefix_bodies(model: str, n: int, max_tokens: int, key: str) -> list:
    """n chat bodies sharing SYSTEM_PROMPT, each with a short question of its own."""
    out = []
    for i in range(n):
        rng = random.Random(f"{key}-{i}")
        question = f"{_ticket(rng)} {rng.choice(TASKS)} Use only the notes about " \
                   f"{rng.choice(('transport', 'nature', 'business', 'culture', 'software'))}."
        out.append(_body(model, [{"role": "system", "content": SYSTEM_PROMPT},
                                 {"role": "user", "content": question}], max_tokens))
    return out



@dataclass
class RequestResult:
    index: int
    ttft_ns: int                 # request sent -> first content chunk
    last_ns: int                 # request sent -> last content chunk
    done_ns: int                 # request sent -> end of the stream
    completion_tokens: int
    prompt_tokens: int
    cached_tokens: Optional[int]  # None when the server did not say
    content_chunks: int
    finish_reason: Optional[str]
    text: str

    @property
    def decode_tps(self) -> Optional[float]:
        """Tokens after the first over the time from the first content chunk to the last."""
        span = self.last_ns - self.ttft_ns
        if self.completion_tokens < 2 or span <= 0:
            return None
        return (self.completion_tokens - 1) * 1e9 / span


@dataclass
class LevelResult:
    wall_ns: int
    requests: list


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile with linear interpolation between closest ranks (NumPy's default)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile() of no values")
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _cached(usage: dict) -> Optional[int]:
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        return details["cached_tokens"]
    return None


def stream_chat(host: str, port: int, body: dict, timeout: float, index: int = 0,
                path: str = "/v1/chat/completions") -> RequestResult:
    """POST one streamed chat completion and time it. Raises ServeError on an HTTP error, an
    error event, a stream without a final usage, or a stream that ends without [DONE]."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter_ns()
    first = last = None
    usage, finish, chunks, text, done = None, None, 0, [], False
    try:
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json",
                              "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            said = resp.read(2000).decode("utf-8", "replace")
            raise ServeError(f"request {index}: HTTP {resp.status}: {said}")
        for data in sse_data(resp):
            if data == b"[DONE]":
                done = True
                break
            now = time.perf_counter_ns()
            try:
                msg = json.loads(data)
            except ValueError:
                raise ServeError(f"request {index}: not JSON in the stream: {data[:200]!r}")
            if not isinstance(msg, dict):
                raise ServeError(f"request {index}: a stream event that is not an object")
            if msg.get("error"):
                raise ServeError(f"request {index}: error event: {msg['error']}")
            for ch in msg.get("choices") or []:
                delta = ch.get("delta") or {}
                piece = delta.get("content") or delta.get("reasoning_content")
                if piece:
                    first = now if first is None else first
                    last = now
                    chunks += 1
                    text.append(piece)
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
            if msg.get("usage"):
                usage = msg["usage"]
    except (OSError, http.client.HTTPException) as e:
        raise ServeError(f"request {index}: {type(e).__name__}: {e}") from e
    finally:
        conn.close()
    end = time.perf_counter_ns()
    if not done:
        raise ServeError(f"request {index}: the stream ended without data: [DONE]")
    if not usage or not isinstance(usage.get("completion_tokens"), int):
        raise ServeError(f"request {index}: no usage in the stream (stream_options."
                         f"include_usage was asked for)")
    if first is None:       # nothing visible came: time the end of the stream instead
        first = last = end
    return RequestResult(index, first - t0, last - t0, end - t0, usage["completion_tokens"],
                         int(usage.get("prompt_tokens") or 0), _cached(usage), chunks, finish,
                         "".join(text))


def run_level(host: str, port: int, bodies: Sequence[dict], concurrency: int,
              timeout: float) -> LevelResult:
    """Send ``bodies`` from ``concurrency`` client threads, each taking the next body when its
    request ends; the wall time runs from the common start to the last response's end. The
    first failure stops the other clients after their current request and is raised."""
    pending = list(enumerate(bodies))
    results: list = [None] * len(pending)
    errors: list = []
    lock = threading.Lock()
    start = threading.Barrier(concurrency + 1)

    def client():
        try:
            start.wait()
        except threading.BrokenBarrierError:
            return
        while True:
            with lock:
                if not pending or errors:
                    return
                i, body = pending.pop(0)
            try:
                results[i] = stream_chat(host, port, body, timeout, index=i)
            except Exception as e:   # noqa: BLE001 - handed to the caller below
                with lock:
                    errors.append(e)
                return

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter_ns()
    # Bounded: each request is bounded by the socket timeout; a level cannot outlast them all.
    deadline = time.monotonic() + timeout * (len(pending) + 1)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    wall = time.perf_counter_ns() - t0
    if any(t.is_alive() for t in threads):
        raise ServeError(f"the level of {len(results)} requests did not finish in time")
    if errors:
        raise errors[0]
    return LevelResult(wall, results)


def sse_data(resp):
    """The data payloads of a server-sent-event response, in order, ending after b"[DONE]"
    when the server sends it (other fields and comment lines are skipped)."""
    for line in iter(resp.readline, b""):
        line = line.strip()
        if line.startswith(b"data:"):
            data = line[5:].strip()
            yield data
            if data == b"[DONE]":
                return


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec (Linux): receive SIGTERM when the harness dies."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _proc_status(pid: int, key: str) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _load_failed(text: str) -> bool:
    """A /health body saying the load failed ({"status": "error"}), not that it is loading."""
    try:
        body = json.loads(text)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("status") == "error"


class ServerProcess:
    """One server command run as a child process on ``host:port``, logging to a file."""

    def __init__(self, name: str, argv: Sequence[str], host: str, port: int, log_dir,
                 role: str = "server"):
        self.name, self.argv, self.host, self.port = name, list(argv), host, port
        folder = Path(log_dir)
        folder.mkdir(parents=True, exist_ok=True)
        self.log_path = folder / f"{name}-{role}-{port}.log"
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        try:
            log = open(self.log_path, "wb")
        except OSError as e:
            raise BenchError(f"{self.name}: cannot write its log {self.log_path}: {e}") from e
        with log:
            try:
                self.proc = subprocess.Popen(
                    self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
            except OSError as e:
                raise PeerError(f"{self.name}: cannot start `{' '.join(self.argv)}`: {e}") from e

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self) -> str:
        return self.log_text()[-LOG_TAIL_BYTES:].strip()

    def died_note(self) -> str:
        if self.proc is not None and self.proc.poll() is not None:
            return (f" ({self.name} exited with code {self.proc.returncode}; the end of its "
                    f"log:\n{self.log_tail()})")
        return ""

    def get(self, path: str, timeout: float = 10.0) -> tuple:
        """(status, body text) of a GET; OSError when nothing answers."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", "replace")
        except http.client.HTTPException as e:
            raise OSError(str(e)) from e
        finally:
            conn.close()

    def get_text(self, path: str) -> Optional[str]:
        try:
            status, text = self.get(path)
        except OSError:
            return None
        return text if status == 200 else None

    def wait_ready(self, timeout: float) -> dict:
        """Poll /health until it answers 200 (returns its JSON body, {} if not JSON). Raises
        PeerError, quoting the log's end, when the process exits first or time runs out."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            code = self.proc.poll()
            if code is not None:
                raise PeerError(f"{self.name} exited with code {code} before /health answered "
                                f"200.\ncommand: {' '.join(self.argv)}\nthe end of its log:\n"
                                f"{self.log_tail() or '(empty)'}")
            try:
                status, text = self.get("/health", timeout=5.0)
                if status == 200:
                    try:
                        body = json.loads(text)
                    except ValueError:
                        body = {}
                    return body if isinstance(body, dict) else {}
                last = f"HTTP {status}: {text[:300]}"
                if _load_failed(text):     # a load that failed does not come back
                    self.stop()
                    raise PeerError(f"{self.name}: the model failed to load ({last}).\n"
                                    f"command: {' '.join(self.argv)}\nthe end of its log:\n"
                                    f"{self.log_tail() or '(empty)'}")
            except OSError as e:
                last = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                self.stop()
                raise PeerError(f"{self.name} did not answer /health 200 within {timeout:.0f} s "
                                f"(last: {last}).\ncommand: {' '.join(self.argv)}\nthe end of "
                                f"its log:\n{self.log_tail() or '(empty)'}")
            time.sleep(HEALTH_POLL_S)

    def model_id(self) -> str:
        """The first model id of /v1/models (what requests name in their model field)."""
        text = self.get_text("/v1/models")
        try:
            data = json.loads(text or "")["data"]
            return str(data[0]["id"])
        except (ValueError, KeyError, IndexError, TypeError):
            raise PeerError(f"{self.name}: /v1/models gave no model id: {(text or '')[:300]}")

    def rss(self) -> Optional[int]:
        return _proc_status(self.proc.pid, "VmRSS") if self.proc else None

    def peak_rss(self) -> Optional[int]:
        return _proc_status(self.proc.pid, "VmHWM") if self.proc else None

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the process so far (0 where /proc has none)."""
        return process_cpu_seconds(self.proc.pid if self.proc else None)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_GRACE_S; waits for the exit."""
        p = self.proc
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(STOP_GRACE_S)
