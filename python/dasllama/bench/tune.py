"""``dasllama bench tune``: race a kernel knob's candidates on a real model, keep the winner.

The first knob raced is ``cpu.matmul.token_tile``, the number of prompt tokens one prefill
matmul task covers (csrc/cpu/matmul.cpp). Method: one model loaded once; each candidate is
set, warmed up with one prompt, then the candidates alternate repetition by repetition (as
the engines do in ``bench llm``) on the same random prompt of ``n_prompt`` ids, so drift hits
them all. The winner is the candidate of highest median prompt rate; it replaces the default
only when its median beats the default's by more than ``margin`` (2%) and its slowest
repetition still beats the default's median, so that noise alone never moves a choice.
The result goes into the sidecar (dasllama.bench.tuning) for this box, version and device,
with every candidate's figures.
"""

from __future__ import annotations

import random
import time
from typing import Callable, Optional, Sequence

from . import probe, tuning
from .llm import BenchError, make_tokens
from .stats import summarize

__all__ = ["TOKEN_TILE", "TOKEN_TILE_CANDIDATES", "race", "choose", "record_race"]

TOKEN_TILE = "cpu.matmul.token_tile"
TOKEN_TILE_CANDIDATES = (16, 32, 64, 128, 256)


def race(model, knob: str, candidates: Sequence[int], *, n_prompt: int, reps: int,
         seed: int = 0, pause: float = 0.05,
         on_event: Callable = lambda *a, **k: None) -> dict:
    """Prompt rate (t/s) of ``model`` (an open _core.LLMModel) under each candidate value.
    The knob is left at the value it had before. Returns {value: [t/s, ...]}."""
    if reps < 1 or not candidates:
        raise BenchError(f"a race needs candidates and reps >= 1 (got {list(candidates)}, "
                         f"{reps})")
    before = tuning.get(knob)
    rng = random.Random(f"{seed}-tune")
    tok = model.tokenizer
    n_vocab, bos, add_bos = int(model.n_vocab), int(tok.bos_id), bool(tok.add_bos)
    rates: dict = {int(c): [] for c in candidates}

    def timed(ids) -> float:
        model.reset()
        t0 = time.perf_counter_ns()
        model.eval(ids)
        return n_prompt * 1e9 / (time.perf_counter_ns() - t0)

    try:
        warm = make_tokens(n_prompt, n_vocab, bos, add_bos, rng)
        for c in rates:
            tuning.set_knob(knob, c)    # refused with a message when outside the range
            timed(warm)
            on_event("warmup", knob=knob, value=c)
        for rep in range(reps):
            ids = make_tokens(n_prompt, n_vocab, bos, add_bos, rng)
            for c in rates:
                tuning.set_knob(knob, c)
                if pause > 0:
                    time.sleep(pause)
                rates[c].append(timed(ids))
                on_event("run", knob=knob, value=c, rep=rep, rate=rates[c][-1])
    finally:
        tuning.set_knob(knob, before)
    return rates


def choose(rates: dict, default: int, margin: float = 0.02) -> int:
    """The candidate of highest median rate, if it clearly beats ``default``: its median by
    more than ``margin``, and its slowest repetition the default's median (on a busy machine
    the spread is wide, and a choice must not follow noise). Otherwise the default stays."""
    stats = {c: summarize(r) for c, r in rates.items()}
    best = max(stats, key=lambda c: stats[c].median)
    if default in stats and (stats[best].median <= stats[default].median * (1 + margin) or
                             stats[best].min <= stats[default].median):
        return default
    return best


def record_race(doc: dict, device: dict, knob: str, value: int, race_info: dict) -> dict:
    """Put ``knob = value`` and the race's figures into ``doc``'s entry for ``device``."""
    for dev in doc["devices"]:
        if dev["id"] == device["id"]:
            break
    else:
        dev = {**device, "knobs": {}, "races": []}
        doc["devices"].append(dev)
    dev.update({k: v for k, v in device.items() if k != "id"})
    dev["knobs"][knob] = int(value)
    dev["races"] = [r for r in dev.get("races", []) if r.get("knob") != knob] + [race_info]
    return doc


def run_tune(model_path, *, threads: int, n_prompt: int, reps: int, candidates: Sequence[int],
             out: Optional[str], seed: int = 0, margin: float = 0.02,
             on_event: Callable = lambda *a, **k: None) -> dict:
    """Race the token tile on ``model_path`` and write (or, with out=None, only return) the
    sidecar. Returns {"chosen", "rates", "path", "sidecar"}."""
    from .. import __version__, _core
    from .llm import model_info
    info = model_info(model_path, n_prompt)
    registry = tuning.knobs()
    if TOKEN_TILE not in registry:
        raise BenchError(f"this build has no knob {TOKEN_TILE}")
    default = registry[TOKEN_TILE]["default"]
    model = _core.LLMModel(str(model_path), n_ctx=n_prompt, n_threads=threads)
    try:
        rates = race(model, TOKEN_TILE, candidates, n_prompt=n_prompt, reps=reps, seed=seed,
                     on_event=on_event)
    finally:
        model.close()
    chosen = choose(rates, default, margin)
    machine = probe.machine()
    box = probe.box_name(machine)
    path = tuning.sidecar_path(box) if out is None else out
    doc = None
    if path is not None:
        try:
            old = tuning.read(path)
            if old["dasllama_version"] == __version__ and old["box"] == box:
                doc = old     # keep the other devices' and knobs' choices
        except tuning.TuningError:
            pass              # absent, invalid or stale: start a new file
    if doc is None:
        doc = tuning.new_sidecar(box, __version__, {k: machine[k] for k in (
            "cpu", "arch", "flags", "logical_cores", "physical_cores", "memory_bytes")})
    doc["created"] = tuning.new_sidecar(box, __version__)["created"]
    race_info = {"knob": TOKEN_TILE, "default": default, "chosen": int(chosen),
                 "model": info["file"], "model_sha256": info["sha256"],
                 "test": f"pp{n_prompt}", "unit": "t/s", "threads": threads, "reps": reps,
                 "margin": margin,
                 "results": [{"value": c, **summarize(r).as_dict(), "samples": r}
                             for c, r in rates.items()]}
    device = {"id": tuning.cpu_device_id(), "threads": threads}
    record_race(doc, device, TOKEN_TILE, chosen, race_info)
    written = tuning.write(doc, path) if path is not None else None
    tuning.set_knob(TOKEN_TILE, chosen)
    return {"chosen": chosen, "default": default, "rates": rates, "path": written,
            "sidecar": doc}
