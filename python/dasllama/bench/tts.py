"""Speech synthesis: Pocket TTS in dasllama against the pocket-tts package on the same weights.

One request is one sentence spoken without a voice prompt and streamed to its end. Both
engines pin its length: EOS off and the frame count fixed (``--frames``, 50 by default: 4 s
of audio at 12.5 frames a second), because a model's EOS head decides the length on its own
(random weights fire it anywhere) and a figure is only comparable when the work is. Three
tests come from every request:

* ``request_wall`` (ms): text in, the whole audio out (normalization, tokenization, prompt,
  frame loop and Mimi decoding are all inside);
* ``first_audio`` (ms): from the call to the first piece of audio (one frame, 80 ms, in both);
* ``rtf`` (x): seconds of audio per second of wall time, above 1 faster than real time;

and a fourth where both engines time it:

* ``prompt_stage`` (ms): the request's text rows through the backbone, as each engine's own
  clock says (dasllama's stage times, ``stats["stages"]["prompt_ms"]``; the package's
  prompting call, pocket_peer.py). It is not part of the noisy rule below.

The method, as ``dasllama bench llm``'s:

* Validation before timing: both engines speak the text once at temperature 0 (no noise, so
  deterministic): their token ids must agree and both must make exactly ``frames`` frames
  (the same number of samples). The record keeps both and the rel-l2 distance of the two
  audios (small in the f32 lane, larger in quantized lanes; reported, not judged).
* One warm-up request per engine at the timed temperature, then ``reps`` timed requests,
  alternating (dasllama 1, pocket-tts 1, dasllama 2, ...) with a pause before each so the
  other engine's threads are idle; request k uses noise seed ``seed + k`` in both.
* Statistics over the requests (mean, sd, median, min, max, cv); ratios dasllama / peer are
  derived from medians when printed, never stored.
* A cell (one test of one engine) whose cv exceeds 3% has its engine's requests run once
  more (alternating with any other noisy engine); the second attempt replaces the first for
  all that engine's rows (they come from the same requests), which keep the first
  attempt's cv and samples. A row still above 3% is marked ``noisy``.

On a shared box every timed request records the CPU seconds the rest of the machine used
meanwhile (``others_cpu_s``: /proc/stat's busy time less the harness's and the runner's), so a
record says how loaded the box was. ``--quiet-wait SECONDS`` also waits (up to that long)
before each request for the rest of the machine to be quiet, and runs a request disturbed by
others (more than a twentieth of a core on average) again, at most 3 times; the rows keep the
seconds waited and what the discarded attempts measured (``disturbed_samples``). The guard is
bench/quiet.py's, as ``dasllama bench asr`` and ``serve`` use it.

Both engines get the same thread count: dasllama's pool (``n_threads``) and torch's intra-op
pool (``torch.set_num_threads``; the package also runs Mimi decoding on a second Python thread
of its own). The package runs in a runner process by default (pocket_peer.py), so the two
thread pools never share a process; ``--peer-process same`` runs it in the harness's.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from . import probe, quiet
from .llm import BenchError, backend_of, model_info, schedule
from .pocket_peer import ENGINE as PEER, Request
from .record import NOISE_CV
from .stats import summarize

__all__ = ["TESTS", "TEXT", "DasllamaTTSEngine", "validate", "measure", "rows_for",
           "benchmark", "random_model"]

TESTS = (("request_wall", "ms"), ("first_audio", "ms"), ("rtf", "x"))
# The test made only from requests that time their prompt stage (Request.prompt_ns).
PROMPT_TEST = ("prompt_stage", "ms")
TEXT = "The quick brown fox jumps over the lazy dog near the quiet river."
LANES = ("f32", "f16", "q8_0")


def _version() -> str:
    b = probe.build()
    return b["version"] + (f"+g{b['git_sha']}" if b["git_sha"] else "") + \
        ("-dirty" if b["git_dirty"] else "")


class DasllamaTTSEngine:
    """dasllama.TTS behind the interface the harness drives (pocket_peer.PocketPackage's)."""

    name = "dasllama"

    def __init__(self, path, *, threads: int, device: str = "cpu", precision: str = "f32",
                 factory: Optional[Callable] = None):
        self.backend = backend_of(device)
        if factory is None:
            from ..tts import TTS as factory
        from ..errors import TTSInputError
        try:
            self.tts = factory(str(path), device=device, n_threads=threads, precision=precision)
        except TTSInputError as e:
            raise BenchError(f"dasllama cannot run Pocket TTS as asked: {e}") from e
        self.threads = threads
        self.sample_rate = int(self.tts.sample_rate)
        self.frame_size = int(self.tts.config["frame_size"])
        self.version = _version()
        self.device = None if self.backend == "cpu" else str(device)
        self.details = {"device": device, "precision": precision}

    def run(self, text: str, frames: int, temperature: float, seed: int,
            keep_audio: bool = False) -> Request:
        """One request of exactly ``frames`` frames: ``TTS.stream`` with EOS off and
        ``max_frames`` (the C++ frame loop's own limit), consumed to its end. With
        ``keep_audio`` (the validation) also the token ids of each chunk."""
        import numpy as np
        tokens = [ids for _, ids, _ in self.tts.plan(text)] if keep_audio else []
        pieces, samples, first = [], 0, None
        t0 = time.perf_counter_ns()
        for piece in self.tts.stream(text, None, temperature, seed, max_frames=frames,
                                     eos=False):
            if first is None:
                first = time.perf_counter_ns() - t0
            samples += len(piece)
            if keep_audio:
                pieces.append(piece)
        wall = time.perf_counter_ns() - t0
        audio = np.concatenate(pieces) if keep_audio and pieces else None
        prompt_ms = self.tts.stats.get("stages", {}).get("prompt_ms")
        return Request(wall, first if first is not None else wall, samples, tokens, audio,
                       prompt_ns=None if prompt_ms is None else int(round(prompt_ms * 1e6)))

    def close(self) -> None:
        self.tts.close()


def _rel_l2(a, b) -> Optional[float]:
    import numpy as np
    if a is None or b is None or len(a) != len(b):
        return None
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    norm = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / norm if norm > 0 else None


def validate(engines: Sequence, text: str, frames: int) -> dict:
    """Before timing: each engine speaks ``text`` once at temperature 0. Raises BenchError when
    they read different token ids, when the text makes more than one chunk (the frame count is
    pinned per request), or when an engine makes other than ``frames`` frames."""
    got = {e.name: e.run(text, frames, 0.0, 0, keep_audio=True) for e in engines}
    tokens = {n: r.tokens for n, r in got.items()}
    samples = {n: r.samples for n, r in got.items()}
    for name, chunks in tokens.items():
        if len(chunks) != 1:
            raise BenchError(f"{name} cut the text into {len(chunks)} chunks; the benchmark "
                             f"pins the frames of one request: give a shorter --text")
    if len({tuple(c[0]) for c in tokens.values()}) > 1:
        raise BenchError(f"the engines read different token ids for {text!r}: "
                         f"{ {n: c[0] for n, c in tokens.items()} } (another tokenizer?)")
    shapes = {(e.sample_rate, e.frame_size) for e in engines}
    if len(shapes) > 1:
        raise BenchError(f"the engines' (sample rate, samples a frame) differ: {shapes}")
    rate, frame_size = shapes.pop()
    want = frames * frame_size
    wrong = {n: s for n, s in samples.items() if s != want}
    if wrong:
        raise BenchError(f"pinned at {frames} frames ({want} samples), but {wrong}: the text's "
                         f"length cap is below the frames asked for (a longer --text or "
                         f"fewer --frames)")
    names = [e.name for e in engines]
    rel = _rel_l2(got[names[0]].audio, got[names[-1]].audio) if len(names) > 1 else None
    return {"text_chars": len(text), "tokens": len(next(iter(tokens.values()))[0]),
            "tokens_agree": True, "frames": frames, "samples": samples,
            "sample_rate": rate, "temperature": 0.0, "audio_rel_l2": rel}


def _figures(reqs: Sequence[Request], sample_rate: int) -> dict:
    """test -> the per-request figures (ms, ms, x)."""
    return {"request_wall": [r.wall_ns / 1e6 for r in reqs],
            "first_audio": [r.first_audio_ns / 1e6 for r in reqs],
            "rtf": [r.samples / sample_rate / (r.wall_ns / 1e9) for r in reqs]}


def _worst_cv(reqs, sample_rate) -> float:
    cvs = [summarize(v).cv for v in _figures(reqs, sample_rate).values()]
    return max((c for c in cvs if not math.isnan(c)), default=0.0)


def _guarded_run(engine, processes, text, frames, temperature, seed,
                 quiet_wait: float) -> Request:
    """One timed request under bench/quiet.py's guard (quiet.guarded_run)."""
    return quiet.guarded_run(lambda: engine.run(text, frames, temperature, seed), processes,
                             quiet_wait)


def _timed(names, by_name, text, frames, temperature, seed, reps, pause, out, on_event,
           attempt=0, quiet_wait: float = 0.0):
    processes = [e for e in by_name.values() if hasattr(e, "cpu_seconds")]
    for rep, name in schedule(names, reps):
        if pause > 0:
            time.sleep(pause)    # let the other engine's threads go idle
        r = _guarded_run(by_name[name], processes, text, frames, temperature, seed + rep,
                         quiet_wait)
        out[name].append(r)
        on_event("run", engine=name, test="request", rep=rep, ns=r.wall_ns,
                 first_ns=r.first_audio_ns, attempt=attempt)


def measure(engines: Sequence, *, text: str, frames: int, reps: int, temperature: float = 0.3,
            seed: int = 0, pause: float = 0.0, noise_cv: Optional[float] = NOISE_CV,
            quiet_wait: float = 0.0, on_event: Callable = lambda *a, **k: None) -> dict:
    """Validate, warm up, then time ``reps`` alternating requests on every engine (the noisy
    rule in the module docstring). Returns {"requests": {engine: [Request]}, "reruns":
    {engine: [first attempt's Requests]}, "validation": {...}}."""
    if reps < 1:
        raise BenchError(f"reps must be at least 1, got {reps}")
    if frames < 1:
        raise BenchError(f"frames must be at least 1, got {frames}")
    validation = validate(engines, text, frames)
    on_event("note", message=f"validated: {validation['tokens']} tokens agree, {frames} frames "
                             f"each, audio rel-l2 at temperature 0: "
                             f"{validation['audio_rel_l2']}")
    names = [e.name for e in engines]
    by_name = {e.name: e for e in engines}
    for e in engines:
        e.run(text, frames, temperature, seed + reps)    # warm-up, a seed no timed run uses
        on_event("warmup", engine=e.name, test="request")
    rate = validation["sample_rate"]
    requests = {n: [] for n in names}
    _timed(names, by_name, text, frames, temperature, seed, reps, pause, requests, on_event,
           quiet_wait=quiet_wait)
    first = {n: _worst_cv(requests[n], rate) for n in names}
    noisy = [n for n in names if noise_cv is not None and reps > 1 and first[n] > noise_cv]
    reruns: dict = {}
    if noisy:
        on_event("rerun", test="request", engines=noisy, cv={n: first[n] for n in noisy})
        for n in noisy:
            reruns[n], requests[n] = requests[n], []
        _timed(noisy, by_name, text, frames, temperature, seed, reps, pause, requests,
               on_event, attempt=1, quiet_wait=quiet_wait)
    return {"requests": requests, "reruns": reruns, "validation": validation}


def _timed_prompts(reqs: Optional[Sequence[Request]]) -> bool:
    return bool(reqs) and all(r.prompt_ns is not None for r in reqs)


def rows_for(engine, model: dict, requests: Sequence[Request], sample_rate: int, *,
             text: str, quant: str, first_attempt: Optional[Sequence[Request]] = None,
             noise_cv: float = NOISE_CV) -> list:
    """The engine's rows (request_wall, first_audio, rtf, and prompt_stage when every request
    timed its prompt) from its timed requests."""
    figures = _figures(requests, sample_rate)
    firsts = _figures(first_attempt, sample_rate) if first_attempt else None
    ns = {"request_wall": [r.wall_ns for r in requests],
          "first_audio": [r.first_audio_ns for r in requests],
          "rtf": [r.wall_ns for r in requests]}
    first_ns = None if not first_attempt else {
        "request_wall": [r.wall_ns for r in first_attempt],
        "first_audio": [r.first_audio_ns for r in first_attempt],
        "rtf": [r.wall_ns for r in first_attempt]}
    tests = list(TESTS)
    if _timed_prompts(requests) and (not first_attempt or _timed_prompts(first_attempt)):
        tests.append(PROMPT_TEST)
        figures["prompt_stage"] = [r.prompt_ns / 1e6 for r in requests]
        ns["prompt_stage"] = [r.prompt_ns for r in requests]
        if first_attempt:
            firsts["prompt_stage"] = [r.prompt_ns / 1e6 for r in first_attempt]
            first_ns["prompt_stage"] = [r.prompt_ns for r in first_attempt]
    rows = []
    for test, unit in tests:
        s = summarize(figures[test])
        row = {"kind": "tts", "engine": engine.name,
               "backend": getattr(engine, "backend", "cpu"),
               "version": engine.version, "threads": engine.threads,
               "model": model["file"], "model_sha256": model["sha256"], "arch": model["arch"],
               "quant": quant, "params": model["params"],
               "test": test, "unit": unit, **s.as_dict(),
               "noisy": bool(s.cv > noise_cv), "reruns": 1 if first_attempt else 0,
               "samples": figures[test], "samples_ns": ns[test],
               "text_chars": len(text),
               "audio_seconds": requests[0].samples / sample_rate, "voice": "none"}
        if getattr(engine, "device", None):
            row["device"] = engine.device
        others = [r.others_cpu_s for r in requests]
        if any(o is not None for o in others):
            row["others_cpu_s"] = [o if o is not None else 0.0 for o in others]
        row["waited_s"] = [r.waited_s for r in requests]
        disturbed = [d for r in requests for d in r.discarded]
        if disturbed and test == "request_wall":
            row["disturbed_samples"] = [d / 1e6 for d in disturbed]
        if firsts is not None:
            row["first_cv"] = summarize(firsts[test]).cv
            row["first_samples_ns"] = first_ns[test]
        rows.append(row)
    return rows


def random_model(folder, lanes: Sequence[str]) -> dict:
    """The random-weight English model of dasllama.testing.pocket in ``folder`` (built once,
    reused after): {"checkpoint", "tokenizer", "gguf": {lane: path}}. Needs pocket-tts and
    torch."""
    bad = [lane for lane in lanes if lane not in LANES]
    if bad:
        raise BenchError(f"lane {bad[0]!r}: expected one of {', '.join(LANES)}")
    try:
        from ..testing.pocket import PocketFixture
        fx = PocketFixture.build(folder, lanes)
    except ImportError as e:
        raise BenchError(f"--model random builds the package's English model with random "
                         f"weights: pip install torch==2.13.0 pocket-tts==4.0.1 tokenizers "
                         f"({e})") from e
    out = {"checkpoint": fx.checkpoint, "tokenizer": fx.tokenizer,
           "gguf": {lane: fx.gguf_path(lane) for lane in lanes}}
    fx.model = None           # the torch model is not needed here: the peer loads the file
    return out


def benchmark(models: Sequence, open_ours: Optional[Callable], open_peer: Optional[Callable],
              *, threads: int, reps: int, frames: int = 50, text: str = TEXT,
              temperature: float = 0.3, seed: int = 0, pause: float = 0.1,
              device: str = "cpu", noise_cv: Optional[float] = NOISE_CV,
              quiet_wait: float = 0.0,
              checkpoint: Optional[Path] = None, on_event: Callable = lambda *a, **k: None,
              on_rows: Callable = lambda result: None, config: Optional[dict] = None) -> dict:
    """The whole TTS benchmark over ``models`` (GGUF paths, e.g. one per lane of one
    checkpoint). ``open_ours(path, threads=)`` opens dasllama on a file; ``open_peer(threads=)``
    opens the package once (its weights are the checkpoint every file came from) and serves
    every file. A file's six rows are added together, then ``on_rows(result)``. Ctrl-C (or a
    signal the command line maps to it) stops the run with the finished rows kept."""
    if not open_ours and not open_peer:
        raise BenchError("no engine to run")
    per_model = 3 * (bool(open_ours) + bool(open_peer))
    total = per_model * len(models)
    result = {"config": {"frames": frames, "reps": reps, "threads": threads, "warmup": 1,
                         "alternate": True, "seed": seed, "pause_s": pause,
                         "temperature": temperature, "text": text, "voice": None,
                         "device": device, "noise_cv": noise_cv, "noise_reruns": 1,
                         "quiet_wait_s": quiet_wait,
                         **(config or {})},
              "engines": {}, "rows": [], "memory": [], "validation": []}
    on_event("start", total_rows=total)
    peer = None
    current: dict = {}

    def heard(kind, **f):
        if kind in ("run", "warmup"):
            current.update(engine=f["engine"], test=f["test"])
        on_event(kind, **f)

    try:
        if open_peer:
            peer = open_peer(threads=threads)
            result["engines"][PEER] = dict(peer.versions)
            if checkpoint is not None:
                result["engines"][PEER]["checkpoint_sha256"] = _sha256(checkpoint)
        for path in models:
            model = model_info(path, 0)
            current.clear()
            current["model"] = model["file"]
            heard("model", **model)
            engines = []
            try:
                baseline = probe.rss_bytes()
                scoped = probe.reset_peak_rss()
                if open_ours:
                    engines.append(open_ours(path, threads=threads))
                if peer is not None:
                    engines.append(peer)
                got = measure(engines, text=text, frames=frames, reps=reps,
                              temperature=temperature, seed=seed, pause=pause,
                              noise_cv=noise_cv, quiet_wait=quiet_wait, on_event=heard)
                rate = got["validation"]["sample_rate"]
                for e in engines:
                    quant = "F32" if e is peer else model["quant"]
                    result["rows"] += rows_for(e, model, got["requests"][e.name], rate,
                                               text=text, quant=quant,
                                               first_attempt=got["reruns"].get(e.name),
                                               noise_cv=noise_cv or NOISE_CV)
                    if e is not peer:
                        result["engines"][e.name] = {"version": e.version, **e.details}
                    if e is peer:
                        mem = {"peak_rss": e.max_rss(), "peak_scope": e.rss_scope}
                    else:
                        mem = {"peak_rss": probe.peak_rss_bytes(), "baseline_rss": baseline,
                               "peak_scope": "since model load" if scoped else "whole process"}
                    result["memory"].append({"engine": e.name, "model": model["file"],
                                             "model_file_size": model["file_size"], **mem})
                result["validation"].append({"model": model["file"], **got["validation"]})
                on_event("rows", done=len(result["rows"]), total=total)
                on_rows(result)
            finally:
                for e in engines:
                    if e is not peer:
                        e.close()
    except KeyboardInterrupt as stop:
        result["stopped"] = {"signal": getattr(stop, "signal_name", "SIGINT"),
                             "rows_done": len(result["rows"]), "rows_planned": total,
                             "during": dict(current)}
    finally:
        if peer is not None:
            peer.close()
    return result


def _sha256(path) -> str:
    from .llm import _sha256 as sha
    return sha(Path(path))
