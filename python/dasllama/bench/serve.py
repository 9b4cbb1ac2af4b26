"""Serving: `dasllama serve` against llama.cpp's llama-server, over HTTP, from one run.

    dasllama bench serve -m smollm2 --threads 2 --concurrency 1,4,8 --requests 16 \\
        --max-tokens 128 --llama-server PATH [--reps 5] [-o bench/records/serve-{box}.json]

* Both engines run as server processes on 127.0.0.1 (free ports), loaded at once, with the
  same slots and the same context per slot. dasllama gives every slot its whole ``--ctx``;
  llama-server splits ``-c`` across its ``-np`` slots, so it is started with ``-c slots x
  ctx``. Both get ``--threads``.
* A level is ``--requests`` streamed chat completions sent by ``c`` concurrent clients (a
  closed loop: a client sends its next request when its previous one ends). Every request
  asks for exactly ``--max-tokens`` tokens (``ignore_eos``, temperature 0); a response with
  fewer is an error, not a figure. Prompts (about 200 tokens) differ per request and per
  repetition, so no prompt cache flatters a level.
* Per repetition of a level: aggregate t/s = completion tokens / wall time of the level; time
  to first token (TTFT) p50 and p95 over its requests; per-request decode t/s (the tokens
  after the first over the time from first to last), median over its requests.
* Repetitions alternate engines (dasllama 1, llama.cpp 1, dasllama 2, ...) with a pause
  before each; rows hold the statistics over the repetitions, ratios come from medians.
* The prefix cell: every request carries one long shared system prompt and a short question
  of its own, after an untimed round that primes the caches. Its rows say how many prompt
  tokens the servers reported as reused (usage.prompt_tokens_details.cached_tokens).
* Memory: each server's peak RSS (VmHWM of its process) and RSS once ready; dasllama's KV
  pool bytes as its /health or /metrics report them, llama-server's KV buffers from its log.
* The single-request cell (``--single on|only``, serve_single): one request through
  ``dasllama serve`` against ``LLM.generate`` in the harness's process on the same prompt
  ids and tokens, alternating, after the other cells of the model.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from . import probe
from .llama_cpp import PeerError
from .llm import BenchError, model_info, schedule
from .quiet import (DISTURBED_RETRIES, QUIET_CORES, QUIET_STREAK, QUIET_WINDOW_S, cpu_self,
                    disturbed, machine_busy_s, wait_quiet)
from .record import NOISE_CV
from .serve_load import (SYSTEM_PROMPT, ServeError, ServerProcess, free_port,
                         percentile, prefix_bodies, request_bodies, run_level, stream_chat)
from .serve_single import single_cell
from .stats import summarize

__all__ = ["ServeError", "PeerError", "Engine", "dasllama_engine", "llama_server_engine",
           "request_bodies", "prefix_bodies", "SYSTEM_PROMPT", "level_figures", "rows_for",
           "benchmark", "add_serve_arguments", "run_serve", "format_serve_table",
           "format_serve_memory", "portable_command"]

HOST = "127.0.0.1"
DEFAULT_CONCURRENCY = (1, 4, 8)
DEFAULT_REQUESTS = 16
DEFAULT_MAX_TOKENS = 128
# Context of each slot: the prefix cell's prompt (~650 tokens) plus 128 generated must fit.
DEFAULT_CTX_PER_SLOT = 1024
# Rest before each timed repetition, so the other server's worker threads stop spinning.
DEFAULT_PAUSE_S = 1.0
WARMUP_TOKENS = 8          # the untimed warm-up and priming requests generate this many
VALIDATE_TOKENS = 16       # the validation request before timing
# --smoke: random-weight test vocabularies spend ~3x the tokens of a real one on English.
SMOKE = {"concurrency": "1,2", "requests": 2, "max_tokens": 8, "reps": 2, "ctx": 4096,
         "pause": 0.0, "no_rerun": True}

# ----------------------------------------------------------------------------------------
# engines

class Engine:
    """One server engine: how to start it for a model, and what the record says of it."""

    def __init__(self, name: str, argv: Callable, version: str, details: dict,
                 kv_from_log: bool = False):
        self.name, self.argv, self.version, self.details = name, argv, version, details
        self.kv_from_log = kv_from_log      # llama-server prints its KV buffer sizes


def _dasllama_version() -> str:
    b = probe.build()
    return b["version"] + (f"+g{b['git_sha']}" if b["git_sha"] else "") + \
        ("-dirty" if b["git_dirty"] else "")


def dasllama_engine(python: Optional[str] = None, extra: Sequence[str] = (),
                    device: str = "cpu") -> Engine:
    """``python -m dasllama.cli serve -m MODEL --parallel P --ctx CTX --threads T`` (the
    ``dasllama serve`` command): each slot has the whole --ctx; a GPU ``device`` adds
    ``--device DEVICE``."""
    exe = python or sys.executable
    if device != "cpu":
        extra = [*extra, "--device", device]

    def argv(model, *, slots, ctx, threads, port):
        return [exe, "-m", "dasllama.cli", "serve", "-m", str(model), "--parallel", str(slots),
                "--ctx", str(ctx), "--threads", str(threads), "--host", HOST,
                "--port", str(port), *extra]
    return Engine("dasllama", argv, _dasllama_version(),
                  {"server": "dasllama serve", "context": "--ctx per slot",
                   **({"extra_args": list(extra)} if extra else {})})


# "version: 0.6.0-dev (build 11434, commit abc1234)"; older builds: "version: 11434 (abc1234)"
_VERSION_LINE = re.compile(r"version:\s*\S+\s*\(build\s+(\d+),\s*commit\s+([^)]*)\)"
                           r"|version:\s*(\d+)\s*\(([^)]*)\)")


def llama_server_engine(binary: str, build_note: Optional[str] = None,
                        extra: Sequence[str] = ()) -> Engine:
    """``llama-server -m MODEL -np P -c P*CTX -t T``: llama-server splits -c across its slots
    (its KV cache is not unified when -np is given), so each slot gets CTX. Raises PeerError
    when the binary is missing or cannot say its version."""
    import shutil
    import subprocess
    path = shutil.which(binary) or binary
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise PeerError(f"--llama-server {binary}: no such executable file")
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise PeerError(f"--llama-server {binary}: cannot run `{binary} --version`: {e}") from e
    said = (r.stdout + r.stderr).strip()
    m = _VERSION_LINE.search(said)
    if r.returncode != 0 or not m:
        raise PeerError(f"--llama-server {binary}: `--version` exited {r.returncode} without a "
                        f"version line; it said: {said[-600:] or '(nothing)'}")
    number, commit = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    version = f"b{number}" + (f" ({commit})" if commit != "unknown" else "")
    details = {"server": "llama-server", "binary": Path(path).name,
               "context": "-c slots x ctx, split across -np slots",
               "version_text": said.splitlines()[0][:200]}
    built = [ln.strip() for ln in said.splitlines() if ln.strip().startswith("built with")]
    if built:
        details["built_with"] = built[0][:200]
    if build_note:
        details["build"] = build_note
    if extra:
        details["extra_args"] = list(extra)

    def argv(model, *, slots, ctx, threads, port):
        return [path, "-m", str(model), "-np", str(slots), "-c", str(slots * ctx),
                "-t", str(threads), "--host", HOST, "--port", str(port),
                *template_args(str(model)), *extra]
    return Engine("llama.cpp", argv, version, details, kv_from_log=True)


@functools.lru_cache(maxsize=None)
def template_args(model: str) -> tuple:
    """llama-server's arguments that make it render the chat prompt as dasllama does. A file
    with a chat template needs none. Gemma 3 270M ships without one: dasllama renders Gemma's
    turn format (dasllama.chat), llama-server would fall back to ChatML, a longer and
    different prompt; its built-in ``gemma`` template (outside Jinja) is Gemma's format."""
    from .. import gguf
    with gguf.open(model) as f:
        meta = f.metadata
        if meta.get("tokenizer.chat_template"):
            return ()
        if "<start_of_turn>" in (meta.get("tokenizer.ggml.tokens") or ()):
            return ("--no-jinja", "--chat-template", "gemma")
    return ()


_KV_LOG = re.compile(r"KV buffer size\s*=\s*([0-9.]+)\s*MiB")    # one line per cache buffer
_SYSINFO = re.compile(r"system_info:.*$", re.MULTILINE)


def _kv_bytes_of(value) -> Optional[int]:
    """The KV pool's bytes in a /health body: the first integer under a key naming both kv
    and bytes, at any depth."""
    if isinstance(value, dict):
        for k, v in value.items():
            lk = str(k).lower()
            if "kv" in lk and "bytes" in lk and isinstance(v, int) and not isinstance(v, bool):
                return v
        for v in value.values():
            found = _kv_bytes_of(v)
            if found is not None:
                return found
    if isinstance(value, list):
        for v in value:
            found = _kv_bytes_of(v)
            if found is not None:
                return found
    return None


def _kv_bytes_from_metrics(text: str) -> Optional[int]:
    """Sum of the Prometheus samples whose metric name says kv and bytes (one per model)."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0].lower()
        if "kv" in name and "bytes" in name:
            try:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
            except (IndexError, ValueError):
                continue
    return int(total) if seen else None


def seat_steps_from_metrics(text: str) -> dict:
    """{(seat, outcome): steps} of dasllama's dasllama_gpu_seat_steps_total samples (outcome:
    "served" or a decline reason), summed over models."""
    from prometheus_client.parser import text_string_to_metric_families  # the server extra

    out: dict = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "dasllama_gpu_seat_steps_total":
                key = (sample.labels.get("seat"), sample.labels.get("outcome"))
                out[key] = out.get(key, 0.0) + sample.value
    return out


def _seat_scrape(server: ServerProcess, where: str) -> dict:
    """The batch seat's step counts from the server's /metrics, or a BenchError saying why
    there are none (the scrape failed, or the server runs no GPU seat)."""
    text = server.get_text("/metrics")
    if text is None:
        raise BenchError(f"{where}: dasllama's /metrics did not answer, so whether the GPU "
                         "served the steps is unknown")
    steps = {outcome: n for (seat, outcome), n in seat_steps_from_metrics(text).items()
             if seat == "batch"}
    if "served" not in steps:
        raise BenchError(f"{where}: dasllama's /metrics has no batch seat: the model is not "
                         "on the GPU")
    return steps


def _seat_delta(before: dict, after: dict, where: str) -> dict:
    """The batch seat's steps between two scrapes, by outcome."""
    delta = {k: int(n - before.get(k, 0.0)) for k, n in after.items()}
    if any(n < 0 for n in delta.values()):
        raise BenchError(f"{where}: dasllama's seat counts went down ({before} then {after}): "
                         "the model was reloaded during the repetition")
    return delta


# ----------------------------------------------------------------------------------------
# one repetition of a cell, and the figures of a repetition

def level_figures(level) -> dict:
    """The figures of one repetition: aggregate t/s, TTFT p50/p95 (ms), the median per-request
    decode rate (t/s), and the mean prompt and cached tokens per request."""
    reqs = level.requests
    ttft = [r.ttft_ns / 1e6 for r in reqs]
    decode = [r.decode_tps for r in reqs if r.decode_tps is not None]
    tokens = sum(r.completion_tokens for r in reqs)
    return {"agg": tokens * 1e9 / level.wall_ns, "ttft_p50": percentile(ttft, 0.50),
            "ttft_p95": percentile(ttft, 0.95),
            "req": percentile(decode, 0.50) if decode else None,
            "wall_ns": level.wall_ns, "completion_tokens": tokens,
            "prompt_tokens": sum(r.prompt_tokens for r in reqs) / len(reqs),
            "cached_tokens": sum(r.cached_tokens or 0 for r in reqs) / len(reqs),
            "cached_reported": all(r.cached_tokens is not None for r in reqs)}


def _check_tokens(engine: str, level, max_tokens: int) -> None:
    for r in level.requests:
        if r.completion_tokens != max_tokens:
            raise ServeError(f"{engine}: request {r.index} gave {r.completion_tokens} "
                             f"completion tokens, not the {max_tokens} asked for "
                             f"(ignore_eos not honoured, or the context ran out; finish "
                             f"reason {r.finish_reason!r})")


ROW_TESTS = (("agg", "t/s"), ("ttft_p50", "ms"), ("ttft_p95", "ms"), ("req", "t/s"))
PREFIX_TESTS = (("agg", "t/s"), ("ttft_p50", "ms"), ("ttft_p95", "ms"))


def backend_of(device: str) -> str:
    """A row's backend: "cpu", or the GPU API of a device spec ("vulkan:0" -> "vulkan")."""
    return device.split(":", 1)[0]


def rows_for(engine: Engine, model: dict, cell: dict, reps_figures: list,
             first: Optional[list] = None, threads: int = 1,
             noise_cv: float = NOISE_CV, backend: str = "cpu") -> list:
    """The rows of one engine's cell (a level, or the prefix cell) from each repetition's
    figures. ``first``: the figures of a first attempt that a re-run replaced."""
    prefix = "prefix_" if cell["prefix"] else ""
    rows = []
    for test, unit in (PREFIX_TESTS if cell["prefix"] else ROW_TESTS):
        values = [f[test] for f in reps_figures if f[test] is not None]
        if not values or min(values) <= 0:
            continue      # e.g. a per-request rate of one-token requests
        s = summarize(values)
        row = {"kind": "serve", "engine": engine.name,
               "backend": backend if engine.name == "dasllama" else "cpu",
               "version": engine.version, "threads": threads, "model": model["file"],
               "model_sha256": model["sha256"], "arch": model["arch"],
               "quant": model["quant"], "params": model["params"],
               "test": f"{prefix}{test}_c{cell['concurrency']}", "unit": unit, **s.as_dict(),
               "noisy": bool(s.cv > noise_cv), "reruns": 1 if first else 0,
               "samples": values, "concurrency": cell["concurrency"],
               "requests": cell["requests"], "max_tokens": cell["max_tokens"],
               "slots": cell["slots"], "ctx_per_slot": cell["ctx"],
               "prompt_tokens": summarize([f["prompt_tokens"] for f in reps_figures]).median,
               "cached_tokens": summarize([f["cached_tokens"] for f in reps_figures]).median,
               "cached_reported": all(f["cached_reported"] for f in reps_figures)}
        if test == "agg":
            row["samples_ns"] = [int(f["wall_ns"]) for f in reps_figures]
            row["server_cpu_s"] = [round(f["server_cpu_s"], 3) for f in reps_figures]
            row["client_cpu_s"] = [round(f["client_cpu_s"], 3) for f in reps_figures]
            row["waited_s"] = [round(f.get("waited_s", 0.0), 1) for f in reps_figures]
            row["disturbed_samples"] = [x for f in reps_figures
                                        for x in f.get("disturbed_agg", [])]
            if all("seat_steps" in f for f in reps_figures):   # the GPU's steps, timed reps
                steps = [f["seat_steps"] for f in reps_figures]
                row["seats"] = {"batch": {
                    "served": sum(st.get("served", 0) for st in steps),
                    "declined": {k: sum(st.get(k, 0) for st in steps)
                                 for k in steps[0] if k != "served"}}}
            if all(f.get("others_cpu_s") is not None for f in reps_figures):
                row["others_cpu_s"] = [round(f["others_cpu_s"], 3) for f in reps_figures]
        if first:
            was = [f[test] for f in first if f[test] is not None]
            row["first_cv"] = summarize(was).cv if was else 0.0
            row["first_samples"] = was
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------
# the benchmark

def _disturbed(fig: dict) -> bool:
    return disturbed(fig.get("others_cpu_s"), fig["wall_ns"] / 1e9)


def _one_rep(server: ServerProcess, idle: list, bodies: list, concurrency: int,
             max_tokens: int, timeout: float) -> dict:
    """One timed repetition on ``server`` while the ``idle`` servers wait: the level's figures
    plus the CPU seconds of the active server, of this client, of the idle servers, and of
    everything else on the machine (work nobody in this run did: others' load)."""
    idle0 = [s.cpu_seconds() for s in idle]
    busy0 = machine_busy_s()
    cpu0, me0 = server.cpu_seconds(), cpu_self()
    try:
        level = run_level(HOST, server.port, bodies, concurrency, timeout)
    except ServeError as e:
        raise ServeError(f"{server.name}: {e}{server.died_note()}") from e
    _check_tokens(server.name, level, max_tokens)
    fig = level_figures(level)
    fig["server_cpu_s"] = server.cpu_seconds() - cpu0
    fig["client_cpu_s"] = cpu_self() - me0
    idle_used = [s.cpu_seconds() - c for s, c in zip(idle, idle0)]
    fig["idle_cpu_s"] = max(idle_used or [0.0])
    busy1 = machine_busy_s()
    fig["others_cpu_s"] = (None if busy0 is None or busy1 is None else max(
        0.0, busy1 - busy0 - fig["server_cpu_s"] - fig["client_cpu_s"] - sum(idle_used)))
    return fig


def _validate(servers: dict, model_ids: dict, ctx: int, max_tokens: int,
              timeout: float) -> dict:
    """Before timing: one greedy request of VALIDATE_TOKENS tokens per engine on the same
    prompt, and one prefix-cell prompt's length: the record keeps the texts, the prompt
    lengths each server counted, and whether the long prompt plus max_tokens fits a slot."""
    out = {"prompt_tokens": {}, "text": {}, "completion_tokens": {}}
    for name, server in servers.items():
        body = request_bodies(model_ids[name], 1, VALIDATE_TOKENS, "validate")[0]
        long = prefix_bodies(model_ids[name], 1, 1, "validate-prefix")[0]
        try:
            r = stream_chat(HOST, server.port, body, timeout)
            lp = stream_chat(HOST, server.port, long, timeout).prompt_tokens
        except ServeError as e:
            raise ServeError(f"{name}: validation: {e}{server.died_note()}") from e
        out["prompt_tokens"][name] = r.prompt_tokens
        out["text"][name] = r.text[:200]
        out["completion_tokens"][name] = r.completion_tokens
        out.setdefault("content_chunks", {})[name] = r.content_chunks
        if r.completion_tokens != VALIDATE_TOKENS:
            raise ServeError(f"{name}: the validation request gave {r.completion_tokens} "
                             f"tokens, not {VALIDATE_TOKENS} (is ignore_eos honoured?)")
        if lp + max_tokens > ctx:
            raise BenchError(f"{name}: the prefix prompt has {lp} tokens; with --max-tokens "
                             f"{max_tokens} it needs --ctx {lp + max_tokens} or more, not {ctx}")
        out.setdefault("prefix_prompt_tokens", {})[name] = lp
    texts = list(out["text"].values())
    common = 0
    if len(texts) > 1:
        while common < min(map(len, texts)) and len({t[common] for t in texts}) == 1:
            common += 1
    out["text_common_chars"] = common if len(texts) > 1 else None
    out["prompt_tokens_agree"] = (len(set(out["prompt_tokens"].values())) == 1
                                  if len(texts) > 1 else None)
    return out


def _probe_log(engine: Engine, path, slots: int, ctx: int, threads: int, timeout: float,
               log_dir: Optional[str]) -> dict:
    """llama-server prints its KV buffer sizes and system info only at log verbosity 4, which
    also traces every request: an untimed start with ``-lv 4``, stopped once ready, reads
    them, and the timed server runs at the default verbosity."""
    port = free_port(HOST)
    s = ServerProcess(engine.name, [*engine.argv(path, slots=slots, ctx=ctx, threads=threads,
                                                 port=port), "-lv", "4"],
                      HOST, port, log_dir=log_dir, role="log-probe")
    try:
        s.start()
        s.wait_ready(timeout)
        text = s.log_text()
    finally:
        s.stop()
    sizes = [float(x) for x in _KV_LOG.findall(text)]
    info = _SYSINFO.search(text)
    return {"kv_pool_bytes": int(sum(sizes) * 2**20) if sizes else None,
            "system_info": info.group(0)[:600] if info else None}


def _memory(engine: Engine, server: ServerProcess, model: dict, ready_rss: Optional[int],
            health: dict, kv_logged: Optional[int], slots: int, ctx: int) -> dict:
    mem = {"engine": engine.name, "model": model["file"], "peak_rss": server.peak_rss(),
           "ready_rss": ready_rss, "model_file_size": model["file_size"],
           "kv_full_f16_bytes": model["kv_cache_bytes"], "positions": slots * ctx}
    if engine.kv_from_log:
        mem["kv_pool_bytes"] = kv_logged
        mem["kv_source"] = "its log at -lv 4 (KV buffer size)" if kv_logged else "not found"
    else:
        kv = _kv_bytes_of(health)
        source = "/health"
        if kv is None:
            kv = _kv_bytes_from_metrics(server.get_text("/metrics") or "")
            source = "/metrics"
        mem["kv_pool_bytes"] = kv
        mem["kv_source"] = source if kv is not None else "not reported"
    return mem


def _label(cell: dict) -> str:
    return ("prefix " if cell["prefix"] else "") + f"c={cell['concurrency']}"


def _start_servers(servers: dict, engines: Sequence[Engine], path, model: dict, *, slots: int,
                   ctx: int, threads: int, timeout: float, log_dir: str, engines_info: dict,
                   on_event: Callable) -> dict:
    """Start each engine's server for ``path`` (added to ``servers`` as it starts, so the
    caller stops whatever started) and wait until it is ready. Returns per engine its
    /health body, RSS once ready, model id, and the KV bytes its log gave (llama-server)."""
    started = {}
    for e in engines:
        kv_logged = None
        if e.kv_from_log:
            if template_args(str(path)):
                engines_info[e.name].setdefault("chat_template_args", {})[model["file"]] = \
                    " ".join(template_args(str(path)))
            probed = _probe_log(e, path, slots, ctx, threads, timeout, log_dir)
            kv_logged = probed["kv_pool_bytes"]
            if probed.get("system_info"):
                engines_info[e.name]["system_info"] = probed["system_info"]
        port = free_port(HOST)
        s = ServerProcess(e.name, e.argv(path, slots=slots, ctx=ctx, threads=threads,
                                         port=port), HOST, port, log_dir=log_dir)
        servers[e.name] = s
        on_event("note", message=f"starting {e.name} on port {port}: "
                                 f"{' '.join(portable_command(s.argv))}")
        s.start()
        health = s.wait_ready(timeout)
        started[e.name] = {"health": health, "ready_rss": s.rss(), "model_id": s.model_id(),
                           "kv_logged": kv_logged}
    return started


def _run_cell(cell: dict, names: list, servers: dict, ids: dict, file: str, *, reps: int,
              seed: int, pause: float, quiet_wait: float, timeout: float,
              noise_cv: Optional[float], idle_max: dict, on_event: Callable,
              device: str = "cpu") -> tuple:
    """One cell on every engine: an untimed round (warm-up; for the prefix cell, priming),
    then ``reps`` repetitions alternating engines, and once more for an engine whose
    aggregate cv exceeds ``noise_cv``. On a GPU ``device``, each dasllama repetition must
    have had every engine step served by the device (its /metrics before and after): a row
    saying "vulkan" for steps the CPU ran would be false. Returns (figures, first attempts)
    per engine."""
    label = _label(cell)
    make = prefix_bodies if cell["prefix"] else request_bodies
    n_warm = cell["concurrency"] if cell["prefix"] else cell["slots"]
    for n in names:
        run_level(HOST, servers[n].port, make(ids[n], n_warm, WARMUP_TOKENS,
                                              f"{seed}-{file}-{label}-warmup"),
                  n_warm, timeout)
    figures: dict = {n: [] for n in names}
    firsts: dict = {}

    def one(name, key):
        if pause > 0:
            time.sleep(pause)
        waited = wait_quiet(list(servers.values()), quiet_wait) if quiet_wait else 0.0
        if waited > (QUIET_STREAK + 1) * QUIET_WINDOW_S:
            on_event("note", message=f"waited {waited:.0f} s for the machine to be quiet")
        bodies = make(ids[name], cell["requests"], cell["max_tokens"], key)
        others = [servers[n] for n in names if n != name]
        check_seat = device != "cpu" and name == "dasllama"
        where = f"{file} {label}"
        if check_seat:
            before = _seat_scrape(servers[name], where)
        fig = _one_rep(servers[name], others, bodies, cell["concurrency"],
                       cell["max_tokens"], timeout)
        fig["waited_s"] = waited
        if check_seat:
            steps = _seat_delta(before, _seat_scrape(servers[name], where), where)
            declined = {k: n for k, n in steps.items() if k != "served" and n}
            if not steps["served"] or declined:
                raise BenchError(f"{where}: on --device {device}, dasllama's batch seat served "
                                 f"{steps['served']} steps of a repetition and declined "
                                 f"{declined or 'none'}; the CPU ran what it declined, so the "
                                 "timings would not be the GPU's")
            fig["seat_steps"] = steps
        return fig

    def timed(which, attempt):
        for rep, name in schedule(which, reps):
            key = f"{seed}-{file}-{label}-{rep}-{attempt}"
            fig, discarded = one(name, key), []
            # On a shared box (--quiet-wait), a repetition that others disturbed is run
            # again with fresh prompts (the old ones are in the server's cache now).
            while quiet_wait and _disturbed(fig) and len(discarded) < DISTURBED_RETRIES:
                on_event("note", message=(
                    f"{file}  {label:<10} {name:<9} rep {rep + 1}: disturbed (others used "
                    f"{fig['others_cpu_s']:.1f} CPU s in {fig['wall_ns'] / 1e9:.1f} s, "
                    f"{fig['agg']:.1f} t/s): again"))
                discarded.append(fig["agg"])
                fig = one(name, f"{key}-again{len(discarded)}")
            fig["disturbed_agg"] = discarded
            figures[name].append(fig)
            for n in names:
                if n != name:
                    idle_max[n] = max(idle_max[n], fig["idle_cpu_s"])
            on_event("note", message=(
                f"{file}  {label:<10} {name:<9} rep {rep + 1}{' (re-run)' if attempt else ''}: "
                f"{fig['agg']:7.1f} t/s, TTFT p50 {fig['ttft_p50']:7.1f} ms p95 "
                f"{fig['ttft_p95']:7.1f} ms, cached {fig['cached_tokens']:.0f}/"
                f"{fig['prompt_tokens']:.0f}"))

    timed(names, 0)
    noisy = [n for n in names if noise_cv is not None and reps > 1 and
             summarize([f["agg"] for f in figures[n]]).cv > noise_cv]
    if noisy:
        on_event("note", message=f"{label}: aggregate cv above {100 * noise_cv:.0f}% for "
                                 f"{', '.join(noisy)}: once more")
        for n in noisy:
            firsts[n], figures[n] = figures[n], []
        timed(noisy, 1)
    return figures, firsts


def benchmark(models: Sequence, engines: Sequence[Engine], *, threads: int,
              concurrency: Sequence[int], requests: int, max_tokens: int, ctx: int,
              slots: Optional[int] = None, reps: int = 5, prefix_concurrency: Optional[int] = None,
              seed: int = 0, pause: float = DEFAULT_PAUSE_S, quiet_wait: float = 0.0,
              noise_cv: Optional[float] = NOISE_CV, start_timeout: float = 600.0,
              request_timeout: float = 600.0, log_dir: Optional[str] = None,
              config: Optional[dict] = None, on_event: Callable = lambda *a, **k: None,
              on_rows: Callable = lambda result: None, single: str = "off",
              device: str = "cpu") -> dict:
    """Start every engine's server for each model file, validate, warm up, then time each
    concurrency level and the prefix cell with repetitions alternating engines. Rows are added
    a cell at a time (every engine's rows together) and ``on_rows(result)`` hears each
    addition. single: "on" adds the single-request cell (serve_single) after each model's
    cells, "only" runs it alone, "off" leaves it out; it needs the dasllama engine. A
    KeyboardInterrupt stops the run between repetitions: the finished rows are kept and the
    result says ``stopped``. Servers are always stopped before returning."""
    concurrency = sorted({int(c) for c in concurrency})
    if not concurrency or concurrency[0] < 1:
        raise BenchError(f"--concurrency {concurrency}: expected levels of 1 or more")
    if reps < 1:
        raise BenchError(f"--reps {reps}: expected 1 or more")
    if requests < concurrency[-1]:
        raise BenchError(f"--requests {requests} is fewer than the highest concurrency "
                         f"{concurrency[-1]}: every client needs a request")
    slots = slots or concurrency[-1]
    if slots < concurrency[-1]:
        raise BenchError(f"--slots {slots} is fewer than the highest concurrency "
                         f"{concurrency[-1]}: requests would queue")
    if prefix_concurrency is None:
        prefix_concurrency = concurrency[-1]
    if single not in ("on", "off", "only"):
        raise BenchError(f"--single {single!r}: expected on, off or only")
    if single == "only" and "dasllama" not in [e.name for e in engines]:
        raise BenchError("--single only needs the dasllama engine")
    cells = [{"prefix": False, "concurrency": c} for c in concurrency]
    if prefix_concurrency:
        cells.append({"prefix": True, "concurrency": prefix_concurrency})
    if single == "only":
        cells, concurrency, prefix_concurrency = [], [], 0
    single_on = single != "off" and "dasllama" in [e.name for e in engines]
    for c in cells:
        c.update(requests=requests, max_tokens=max_tokens, slots=slots, ctx=ctx)
    result = {"config": {"reps": reps, "threads": threads, "warmup": 1, "alternate": True,
                         "seed": seed, "pause_s": pause, "quiet_wait_s": quiet_wait,
                         "quiet_cores": QUIET_CORES, "concurrency": concurrency,
                         "requests": requests, "max_tokens": max_tokens, "slots": slots,
                         "ctx_per_slot": ctx, "prefix_concurrency": prefix_concurrency,
                         "single": single if single_on else "off",
                         "temperature": 0, "ignore_eos": True, "stream": True,
                         "client": "http.client, one thread a concurrent client",
                         "device": device, "noise_cv": noise_cv, "noise_reruns": 1,
                         "context_note": "dasllama: --ctx CTX, each slot has CTX; "
                                         "llama-server: -c SLOTS*CTX split across -np SLOTS",
                         **(config or {})},
              "engines": {e.name: {"version": e.version, **e.details} for e in engines},
              "rows": [], "memory": [], "validation": []}
    per_cell = len(ROW_TESTS)
    total = len(models) * (len(engines) * (len(concurrency) * per_cell +
                                           (len(PREFIX_TESTS) if prefix_concurrency else 0))
                           + (2 if single_on else 0))
    on_event("start", total_rows=total)
    current: dict = {}
    names = [e.name for e in engines]
    scratch = None
    if log_dir is None:     # the servers' logs live as long as the run
        scratch = tempfile.TemporaryDirectory(prefix="bench-serve-")
        log_dir = scratch.name
    try:
        for path in models:
            model = model_info(path, slots * ctx)
            current.clear()
            current["model"] = model["file"]
            on_event("model", **model)
            servers: dict = {}
            try:
                started = _start_servers(servers, engines, path, model, slots=slots, ctx=ctx,
                                         threads=threads, timeout=start_timeout,
                                         log_dir=log_dir, engines_info=result["engines"],
                                         on_event=on_event)
                ids = {n: st["model_id"] for n, st in started.items()}
                checks = _validate(servers, ids, ctx, max_tokens, request_timeout)
                on_event("note", message=f"validation: {json.dumps(checks)[:400]}")
                idle_max = {n: 0.0 for n in names}
                for cell in cells:
                    current["cell"] = _label(cell)
                    figures, firsts = _run_cell(cell, names, servers, ids, model["file"],
                                                reps=reps, seed=seed, pause=pause,
                                                quiet_wait=quiet_wait,
                                                timeout=request_timeout, noise_cv=noise_cv,
                                                idle_max=idle_max, on_event=on_event,
                                                device=device)
                    for e in engines:
                        result["rows"] += rows_for(e, model, cell, figures[e.name],
                                                   firsts.get(e.name), threads,
                                                   noise_cv or NOISE_CV, backend_of(device))
                    on_event("rows", done=len(result["rows"]), total=total)
                    on_rows(result)
                if single_on:
                    current["cell"] = "single"

                    def before_rep() -> float:   # the pause and quiet wait of every cell
                        time.sleep(pause)
                        return wait_quiet(list(servers.values()), quiet_wait) \
                            if quiet_wait else 0.0
                    result["rows"] += single_cell(
                        servers["dasllama"], ids["dasllama"], path, model, result, reps=reps,
                        threads=threads, max_tokens=max_tokens, slots=slots, ctx=ctx,
                        timeout=request_timeout, noise_cv=noise_cv or NOISE_CV,
                        before_rep=before_rep, on_event=on_event, host=HOST, device=device)
                    on_event("rows", done=len(result["rows"]), total=total)
                    on_rows(result)
                for e in engines:
                    st = started[e.name]
                    result["memory"].append(_memory(e, servers[e.name], model, st["ready_rss"],
                                                    st["health"], st["kv_logged"], slots, ctx))
                result["validation"].append({"model": model["file"], **checks,
                                             "idle_cpu_s_max": idle_max})
                on_rows(result)
            finally:
                for s in servers.values():
                    s.stop()
    except KeyboardInterrupt as stop:
        result["stopped"] = {"signal": getattr(stop, "signal_name", "SIGINT"),
                             "rows_done": len(result["rows"]), "rows_planned": total,
                             "during": dict(current)}
    finally:
        if scratch is not None:
            scratch.cleanup()
    return result


# ----------------------------------------------------------------------------------------
# the command line

def portable_command(argv: Sequence[str]) -> list:
    """argv with every absolute path cut to its file name (records name no local paths) and
    the program, however it was started, called dasllama."""
    out = [Path(a).name if os.path.isabs(a) else a for a in argv]
    if out and out[0].endswith(("dasllama", "cli.py", "__main__.py")):
        out[0] = "dasllama"
    return out


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "-m", action="append", metavar="NAME|PATH",
                   help="smollm2, gemma3 or a .gguf path; repeat for several (default smollm2)")
    p.add_argument("--engine", choices=("both", "dasllama", "llama.cpp"), default="both",
                   help="which servers to time (default both, alternating)")
    p.add_argument("--llama-server", metavar="PATH",
                   help="llama.cpp's llama-server executable (needed unless --engine dasllama)")
    p.add_argument("--llama-server-build", metavar="TEXT",
                   help="how that llama-server was built (kept in the record)")
    p.add_argument("--llama-server-arg", action="append", default=[], metavar="ARG",
                   help="one more argument for llama-server (repeat; kept in the record), "
                        "e.g. --llama-server-arg=--no-repack")
    p.add_argument("--dasllama-arg", action="append", default=[], metavar="ARG",
                   help="one more argument for dasllama serve (repeat; kept in the record), "
                        "e.g. --dasllama-arg=--sliding-rings")
    p.add_argument("--device", default="cpu", metavar="cpu|vulkan|vulkan:N|vulkan:NAME",
                   help="where dasllama serve runs the model (default cpu); GPU rows pair with "
                        "no peer row (llama-server here is a CPU build)")
    p.add_argument("--threads", "-t", type=int, default=None,
                   help="threads for both servers (default: physical cores)")
    p.add_argument("--concurrency", "-c", default=",".join(map(str, DEFAULT_CONCURRENCY)),
                   help="concurrent clients per level, comma-separated (default %(default)s)")
    p.add_argument("--requests", "-n", type=int, default=DEFAULT_REQUESTS,
                   help="requests per level and repetition (default %(default)s)")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                   help="tokens every request generates, EOS ignored (default %(default)s)")
    p.add_argument("--ctx", type=int, default=DEFAULT_CTX_PER_SLOT,
                   help="context of each slot, the same for both servers (default %(default)s)")
    p.add_argument("--slots", type=int, default=None,
                   help="server slots (default: the highest concurrency)")
    p.add_argument("--prefix-concurrency", type=int, default=None,
                   help="clients of the shared-system-prompt cell (default: the highest "
                        "concurrency; 0 leaves the cell out)")
    p.add_argument("--single", choices=("on", "off", "only"), default="off",
                   help="the single-request cell: one request through dasllama serve against "
                        "LLM.generate on the same prompt and tokens (on: after each model's "
                        "cells; only: that cell alone; default off)")
    p.add_argument("--reps", "-r", type=int, default=5, help="timed repetitions (default 5)")
    p.add_argument("--seed", type=int, default=0, help="picks the prompts")
    p.add_argument("--pause", type=float, default=DEFAULT_PAUSE_S,
                   help="seconds of rest before each repetition (default %(default)s)")
    p.add_argument("--quiet-wait", type=float, default=0.0, metavar="SECONDS",
                   help="before each repetition, wait up to this long for the rest of the "
                        "machine to use under a fifth of a core (a shared box; default 0: "
                        "do not wait)")
    p.add_argument("--start-timeout", type=float, default=600.0,
                   help="seconds a server may take to answer /health 200 (default 600)")
    p.add_argument("--request-timeout", type=float, default=600.0,
                   help="seconds a request may stay silent (default 600)")
    p.add_argument("--logs", metavar="DIR", help="keep the servers' logs there")
    p.add_argument("--smoke", action="store_true",
                   help="a few tiny requests (levels 1,2; 2 requests of 8 tokens; 2 reps): "
                        "checks the plumbing, measures nothing")
    p.add_argument("--out", "-o", metavar="FILE",
                   help="write the JSON record there; {box} becomes the machine's label")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.add_argument("--no-rerun", action="store_true",
                   help="do not run a level again when its aggregate cv exceeds 3%%")


def _levels(text: str) -> list:
    try:
        levels = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise BenchError(f"--concurrency {text!r}: expected integers separated by commas")
    if not levels or min(levels) < 1:
        raise BenchError(f"--concurrency {text!r}: expected levels of 1 or more")
    return levels


def format_serve_table(rec: dict) -> str:
    """Per model and cell: dasllama's and the reference's medians and their ratio."""
    from .record import pairs
    lines = [f"{'model':<34} {'test':<20} {'dasllama':>10} {'reference':>10} {'ratio':>7}  "
             f"cv (ours/ref)"]
    for ours, ref, q in pairs(rec["rows"]):
        mark = "  noisy" if ours["noisy"] or ref["noisy"] else ""
        lines.append(f"{ours['model'][:34]:<34} {ours['test']:<20} {ours['median']:>10.1f} "
                     f"{ref['median']:>10.1f} {q:>7.3f}  {100 * ours['cv']:.1f}%/"
                     f"{100 * ref['cv']:.1f}% {ours['unit']}{mark}")
    lines.append("(medians; t/s: above 1 is dasllama ahead; ms: below 1 is ahead)")
    alone = [r for r in rec["rows"] if not any(r is o or r is f for o, f, _ in
                                               pairs(rec["rows"]))]
    for r in alone:
        lines.append(f"{r['model'][:34]:<34} {r['test']:<20} {r['engine']:>10} "
                     f"{r['median']:>10.1f} {r['unit']}")
    return "\n".join(lines)


def format_serve_memory(rec: dict) -> str:
    def mib(n):
        return "-" if n is None else f"{n / 2**20:.1f}"
    lines = [f"{'model':<34} {'engine':<9} {'peak MiB':>9} {'ready MiB':>9} {'file MiB':>9} "
             f"{'KV MiB':>8}  peak / (file + KV)"]
    for m in rec.get("memory", []):
        kv, peak = m.get("kv_pool_bytes"), m.get("peak_rss")
        share = f"{peak / (m['model_file_size'] + kv):.2f}" if kv and peak else "-"
        lines.append(f"{m['model'][:34]:<34} {m['engine']:<9} {mib(peak):>9} "
                     f"{mib(m.get('ready_rss')):>9} {mib(m['model_file_size']):>9} "
                     f"{mib(kv):>8}  {share}  (KV from {m.get('kv_source')})")
    return "\n".join(lines)


def run_serve(args) -> int:
    """``dasllama bench serve``."""
    from .. import models as model_files
    from .cli import record_run
    if args.smoke:
        for k, v in SMOKE.items():
            setattr(args, k, v)
    threads = args.threads or probe.machine()["physical_cores"] or os.cpu_count() or 1
    engines = []
    if args.engine in ("both", "dasllama"):
        engines.append(dasllama_engine(extra=getattr(args, "dasllama_arg", None) or (),
                                       device=args.device))
    if args.engine in ("both", "llama.cpp"):
        if not args.llama_server:
            raise PeerError("the llama.cpp server needs --llama-server PATH (or use --engine "
                            "dasllama)")
        engines.append(llama_server_engine(args.llama_server, args.llama_server_build,
                                           args.llama_server_arg))
    paths = [model_files.find(n) for n in (args.model or ["smollm2"])]

    def run(on_event, on_rows):
        return benchmark(paths, engines, threads=threads, concurrency=_levels(args.concurrency),
                         requests=args.requests, max_tokens=args.max_tokens, ctx=args.ctx,
                         slots=args.slots, reps=args.reps,
                         prefix_concurrency=args.prefix_concurrency, seed=args.seed,
                         pause=args.pause, quiet_wait=args.quiet_wait,
                         noise_cv=None if args.no_rerun else NOISE_CV,
                         start_timeout=args.start_timeout,
                         request_timeout=args.request_timeout, log_dir=args.logs,
                         config={"smoke": True} if args.smoke else None,
                         on_event=on_event, on_rows=on_rows,
                         single=getattr(args, "single", "off"), device=args.device)
    saved = sys.argv
    sys.argv = portable_command(sys.argv)
    try:
        rec, path = record_run(run, out=args.out, quiet=args.quiet)
    finally:
        sys.argv = saved
    if rec["rows"]:
        print(format_serve_table(rec))
        print()
        print(format_serve_memory(rec))
    if path:
        print(f"\nrecord written to {path}" + ("" if rec["complete"] else " (incomplete)"))
    return 130 if rec.get("stopped") else 0
