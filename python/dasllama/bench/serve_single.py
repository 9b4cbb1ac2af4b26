"""The single-request row of ``dasllama bench serve``: one request through ``dasllama serve``
against ``LLM.generate`` in the harness's own process, from the same run.

Both run the same model file with the same threads and the same context per sequence (the
server's ``--ctx``), on the same prompt token ids (the harness tokenizes SINGLE_PROMPT once
and sends the ids as /v1/completions' ``prompt``), greedily (temperature 0), for
``--max-tokens`` tokens or until the model's end of generation, whichever comes first. Before
timing, one untimed call of each checks that both generate the same text and the same number
of tokens; a difference is an error, not a figure.

A repetition times the whole call: for the server, from sending the (non-streamed) request to
reading the last byte of its response (a connection per request); for LLM.generate, the
call. The figure is completion tokens over that time (t/s): prompt evaluation, decoding and,
for the server, HTTP, JSON, the engine thread and the event loop. Repetitions alternate (server
1, generate 1, server 2, ...) after the same pause and quiet wait as the other cells; rows hold
the statistics over the repetitions (test ``single_c1``, engines ``dasllama`` and
``LLM.generate``: ``record.pairs`` quotes their ratio, the server over the library call).
Each row also keeps the CPU seconds of each repetition (``cpu_s``: the server's process, or
the harness's for LLM.generate): on a loaded machine, where the wall time follows the others'
load, the CPU a request costs moves much less.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Callable

from .quiet import cpu_self
from .serve_load import SENTENCES, ServeError, ServerProcess
from .stats import summarize

__all__ = ["SINGLE_TEST", "ANCHOR", "SINGLE_PROMPT", "time_server", "time_generate",
           "measure_single", "single_rows", "single_cell"]

SINGLE_TEST = "single_c1"
ANCHOR = "LLM.generate"       # the row's reference engine
# Prose the models continue for a long while before an end of generation (about 200 tokens).
SINGLE_PROMPT = " ".join(SENTENCES[:8])


def time_server(host: str, port: int, model_id: str, ids: list, max_tokens: int,
                timeout: float) -> dict:
    """One non-streamed /v1/completions request of token ids on a connection of its own (a
    kept-alive one would be closed by the server during a long quiet wait): wall_ns (connect
    and send to the last byte), completion tokens, prompt tokens, text and finish reason."""
    body = json.dumps({"model": model_id, "prompt": list(ids), "max_tokens": max_tokens,
                       "temperature": 0}).encode()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        t0 = time.perf_counter_ns()
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        wall = time.perf_counter_ns() - t0
    except (OSError, http.client.HTTPException) as e:
        raise ServeError(f"single request: {type(e).__name__}: {e}") from e
    finally:
        conn.close()
    if resp.status != 200:
        raise ServeError(f"single request: HTTP {resp.status}: {raw[:300]!r}")
    out = json.loads(raw)
    usage = out.get("usage") or {}
    return {"wall_ns": wall, "tokens": int(usage.get("completion_tokens", 0)),
            "prompt_tokens": int(usage.get("prompt_tokens", 0)),
            "text": out["choices"][0]["text"], "finish": out["choices"][0].get("finish_reason")}


def time_generate(llm, ids: list, max_tokens: int) -> dict:
    """One LLM.generate call on token ids, greedy: wall_ns, tokens, text, finish reason."""
    t0 = time.perf_counter_ns()
    text = llm.generate(list(ids), max_tokens=max_tokens, temperature=0)
    wall = time.perf_counter_ns() - t0
    st = llm.stats
    return {"wall_ns": wall, "tokens": int(st.get("gen_tokens", 0)), "prompt_tokens": len(ids),
            "text": text, "finish": st.get("finish_reason")}


def _tps(fig: dict) -> float:
    return fig["tokens"] * 1e9 / fig["wall_ns"]


def measure_single(server: ServerProcess, llm, model_id: str, *, reps: int, max_tokens: int,
                   timeout: float, before_rep: Callable[[], float] = lambda: 0.0,
                   on_rep: Callable[[str, int, dict], None] = lambda name, rep, fig: None,
                   host: str = "127.0.0.1") -> dict:
    """Validate, warm up, then time ``reps`` alternating repetitions of the server and of
    LLM.generate. before_rep() runs before each repetition (the pause and the quiet wait) and
    returns the seconds it waited; on_rep(engine, rep, figure) hears each one. Returns {"dasllama": [figures], ANCHOR: [figures],
    "validation": {...}}; each figure has tps, wall_ns, tokens, waited_s."""
    ids = llm.tokenize(SINGLE_PROMPT)
    served = time_server(host, server.port, model_id, ids, max_tokens, timeout)
    called = time_generate(llm, ids, max_tokens)
    if served["prompt_tokens"] != len(ids):
        raise ServeError(f"single request: the server counted {served['prompt_tokens']} "
                         f"prompt tokens for {len(ids)} ids")
    if (served["text"], served["tokens"]) != (called["text"], called["tokens"]):
        raise ServeError(f"single request: the server generated {served['tokens']} tokens "
                         f"({served['text'][:80]!r}...), LLM.generate {called['tokens']} "
                         f"({called['text'][:80]!r}...): not the same work")
    figures: dict = {"dasllama": [], ANCHOR: []}
    for rep in range(reps):
        for name in ("dasllama", ANCHOR):
            waited = before_rep()
            cpu0 = server.cpu_seconds() if name == "dasllama" else cpu_self()
            fig = (time_server(host, server.port, model_id, ids, max_tokens, timeout)
                   if name == "dasllama" else time_generate(llm, ids, max_tokens))
            fig["cpu_s"] = (server.cpu_seconds() if name == "dasllama" else cpu_self()) - cpu0
            if fig["tokens"] != called["tokens"]:
                raise ServeError(f"single request: {name} generated {fig['tokens']} tokens "
                                 f"this time, {called['tokens']} at validation")
            fig["tps"] = _tps(fig)
            fig["waited_s"] = waited
            figures[name].append(fig)
            on_rep(name, rep, fig)
    figures["validation"] = {"prompt_tokens": len(ids), "completion_tokens": called["tokens"],
                             "finish_reason": called["finish"], "same_text": True,
                             "text": called["text"][:200]}
    return figures


def single_rows(model: dict, versions: dict, figures: dict, *, threads: int, max_tokens: int,
                slots: int, ctx: int, noise_cv: float, backend: str = "cpu") -> list:
    """The two rows (the server, then LLM.generate) of measure_single's figures."""
    rows = []
    for engine in ("dasllama", ANCHOR):
        figs = figures[engine]
        values = [f["tps"] for f in figs]
        s = summarize(values)
        rows.append({"kind": "serve", "engine": engine, "backend": backend,
                     "version": versions[engine], "threads": threads, "model": model["file"],
                     "model_sha256": model["sha256"], "arch": model["arch"],
                     "quant": model["quant"], "params": model["params"], "test": SINGLE_TEST,
                     "unit": "t/s", **s.as_dict(), "noisy": bool(s.cv > noise_cv),
                     "reruns": 0, "samples": values,
                     "samples_ns": [int(f["wall_ns"]) for f in figs],
                     "waited_s": [round(f["waited_s"], 1) for f in figs],
                     "cpu_s": [round(f["cpu_s"], 3) for f in figs],
                     "concurrency": 1, "requests": 1, "max_tokens": max_tokens,
                     "completion_tokens": figs[0]["tokens"], "slots": slots,
                     "ctx_per_slot": ctx, "prompt_tokens": figs[0]["prompt_tokens"],
                     "how": ("one non-streamed /v1/completions request of the prompt's token "
                             "ids, send to last byte" if engine == "dasllama" else
                             "LLM.generate on the same ids in the harness's process")})
    return rows


def single_cell(server: ServerProcess, model_id: str, path, model: dict, result: dict, *,
                reps: int, threads: int, max_tokens: int, slots: int, ctx: int, timeout: float,
                noise_cv: float, before_rep: Callable[[], float], on_event,
                host: str = "127.0.0.1", device: str = "cpu") -> list:
    """The cell in ``dasllama bench serve``'s run (serve.benchmark): LLM.generate loaded here
    with the server's threads and context per slot, measure_single against ``server`` (the
    dasllama one), its validation added to the result's; returns the two rows."""
    from ..llm import LLM

    def on_rep(name: str, rep: int, f: dict) -> None:
        on_event("note", message=f"{model['file']}  single     {name:<12} rep {rep + 1}: "
                                 f"{f['tps']:7.1f} t/s, {f['wall_ns'] / 1e6:8.1f} ms, waited "
                                 f"{f['waited_s']:.0f} s")

    with LLM(str(path), n_ctx=ctx, threads=threads, device=device) as llm:
        figures = measure_single(server, llm, model_id, reps=reps, max_tokens=max_tokens,
                                 timeout=timeout, before_rep=before_rep, on_rep=on_rep,
                                 host=host)
    result["engines"].setdefault(ANCHOR, {"version": result["engines"]["dasllama"]["version"],
                                          "how": "dasllama.LLM in the harness's process"})
    result["validation"].append({"model": model["file"], "cell": "single",
                                 **figures["validation"]})
    versions = {n: result["engines"][n]["version"] for n in ("dasllama", ANCHOR)}
    return single_rows(model, versions, figures, threads=threads, max_tokens=max_tokens,
                       slots=slots, ctx=ctx, noise_cv=noise_cv, backend=device.split(":", 1)[0])
