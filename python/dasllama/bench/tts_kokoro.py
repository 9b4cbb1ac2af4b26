"""Speech synthesis: Kokoro in dasllama against onnxruntime (kokoro-onnx's engine) on the same
int8 ONNX file.

``dasllama bench tts -m kokoro`` speaks three texts with both engines: short (5 words),
medium (20 words) and long (100 words, several sentences). Three tests per text, suffixed by
its size (``rtf_long``):

* ``request_wall`` (ms): text in, the whole audio out;
* ``first_audio`` (ms): from the call to the first chunk's audio (both engines speak chunk by
  chunk, so this is the first chunk's synthesis; dasllama's includes its text plan);
* ``rtf`` (x): seconds of audio per second of wall time, above 1 faster than real time.

Method, as the other benches: one text plan for both engines (dasllama's: KokoroTTS.plan, the
same phoneme ids, chunks and voice rows, so the engines differ only in how they compute; a
long text's first chunk is a phrase of at most FIRST_CHUNK_PHONEMES, by plan's first_limit
rule, for a quick first audio), a validation run
of each text first (the record keeps both audio lengths, whether the durations agree (equal
lengths) and the audios' rel-l2), one warm-up request per engine, then ``reps`` timed requests
alternating with a pause before each so the other engine's threads are idle. Both engines
get ``--threads``: dasllama's pool and onnxruntime's intra-op threads (inter-op 1). Kokoro has
no noise, so every request of a text is the same work.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator, Optional

import numpy as np

from .llm import BenchError, schedule
from .pocket_peer import Request
from .record import NOISE_CV
from .stats import summarize

__all__ = ["TEXTS", "PEER", "benchmark"]

PEER = "kokoro-onnx"
TEXTS = {
    "short": "The weather is nice today.",
    "medium": "After a long day at work, she made a cup of tea and read her favorite book "
              "quietly by the warm fire.",
    "long": "The old lighthouse stood at the edge of the cliff for more than a century. Every "
            "night its light swept across the dark water, guiding fishing boats safely back "
            "to the harbor. When the keeper retired, the village worried that the light "
            "would go out forever. But a group of volunteers decided to restore it. They "
            "repaired the stairs, replaced the broken windows, and cleaned the great lens "
            "until it shone again. On the first night of its return, the whole village "
            "gathered on the shore to watch the beam turn slowly over the sea.",
}
TESTS = (("request_wall", "ms"), ("first_audio", "ms"), ("rtf", "x"))


def _request(pieces: Iterator[np.ndarray], tokens: Callable, keep_audio: bool) -> Request:
    """One timed request: ``pieces`` consumed to the end (the clock runs from the first
    next()), with the chunks' ids from ``tokens()`` and the audio when ``keep_audio``."""
    kept, samples, first = [], 0, None
    t0 = time.perf_counter_ns()
    for audio in pieces:
        if first is None:
            first = time.perf_counter_ns() - t0
        samples += len(audio)
        if keep_audio:
            kept.append(audio)
    wall = time.perf_counter_ns() - t0
    return Request(wall, first, samples, tokens() if keep_audio else [],
                   np.concatenate(kept) if keep_audio else None)


class _Peer:
    """onnxruntime speaking the engine's plan chunk by chunk."""

    name = PEER

    def __init__(self, speak: Callable, version: str, threads: int, tts):
        self._speak, self.version, self.threads, self._tts = speak, version, threads, tts

    def _pieces(self, text: str, voice: str) -> Iterator[np.ndarray]:
        chunks = self._tts.plan(text)       # inside the clock: kokoro-onnx phonemizes too
        pack = self._tts.voice_pack(voice)
        for c in chunks:
            yield self._speak(c.ids, pack[c.style_row], 1.0)

    def run(self, text: str, voice: str, keep_audio: bool = False) -> Request:
        return _request(self._pieces(text, voice),
                        lambda: [c.ids for c in self._tts.plan(text)], keep_audio)


class _Ours:
    """dasllama.kokoro.KokoroTTS.stream, the served lane (text plan included)."""

    name = "dasllama"

    def __init__(self, tts, version: str, threads: int):
        self.tts, self.version, self.threads = tts, version, threads

    def run(self, text: str, voice: str, keep_audio: bool = False) -> Request:
        return _request(self.tts.stream(text, voice, word_timestamps=False),
                        lambda: [c.ids for c in self.tts.plan(text)], keep_audio)


def _rel_l2(a, b) -> Optional[float]:
    if a is None or b is None or len(a) != len(b):
        return None
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b)) if np.linalg.norm(b) else None


def request_figures(reqs, rate: int) -> tuple:
    """Each test's figures (ms, ms, x) over the requests, and the nanoseconds they came from."""
    figures = {"request_wall": [r.wall_ns / 1e6 for r in reqs],
               "first_audio": [r.first_audio_ns / 1e6 for r in reqs],
               "rtf": [r.samples / rate / (r.wall_ns / 1e9) for r in reqs]}
    ns = {"request_wall": [r.wall_ns for r in reqs],
          "first_audio": [r.first_audio_ns for r in reqs], "rtf": [r.wall_ns for r in reqs]}
    return figures, ns


def _rows(engine, model: dict, size: str, text: str, reqs, rate: int) -> list:
    figures, ns = request_figures(reqs, rate)
    rows = []
    for test, unit in TESTS:
        s = summarize(figures[test])
        rows.append({"kind": "tts", "engine": engine.name, "backend": "cpu",
                     "version": engine.version, "threads": engine.threads,
                     "model": model["file"], "model_sha256": model["sha256"],
                     "arch": "kokoro", "quant": "int8", "test": f"{test}_{size}", "unit": unit,
                     **s.as_dict(), "noisy": bool(s.cv > NOISE_CV), "reruns": 0,
                     "samples": figures[test], "samples_ns": ns[test],
                     "text_chars": len(text), "audio_seconds": reqs[0].samples / rate,
                     "voice": model["voice"]})
    return rows


def benchmark(model: str = "kokoro", *, threads: int, reps: int, voice: str = "jf_alpha",
              pause: float = 0.1, engines=("dasllama", PEER), sizes=tuple(TEXTS),
              on_event: Callable = lambda *a, **k: None,
              on_rows: Callable = lambda result: None, device: str = "cpu") -> dict:
    """Both engines over TEXTS; the record's result part (config, engines, rows, validation).
    device: where dasllama's decoder and generator run (a GPU spec: the vocoder seat, the
    predictor on the CPU); onnxruntime runs on the CPU."""
    import onnxruntime as ort

    from ..kokoro import KokoroTTS
    from .kokoro_peer import file_sha256, kokoro_files, onnx_speaker
    from .tts import _version

    if reps < 1:
        raise BenchError(f"reps must be at least 1, got {reps}")
    bad = [z for z in sizes if z not in TEXTS]
    if bad or not sizes:
        raise BenchError(f"text sizes {bad or list(sizes)!r}: choose from {', '.join(TEXTS)}")
    onnx, gguf, vocab, packs = kokoro_files(model)
    tts = KokoroTTS(gguf, n_threads=threads, device=device)
    if voice not in tts.voices:
        raise BenchError(f"voice {voice!r} is not in the model's packs; accepted: "
                         f"{', '.join(tts.voices)}")
    opened = {"dasllama": lambda: _Ours(tts, _version(), threads),
              PEER: lambda: _Peer(onnx_speaker(onnx, threads), f"onnxruntime {ort.__version__}",
                                  threads, tts)}
    unknown = [e for e in engines if e not in opened]
    if unknown or not engines:
        raise BenchError(f"engines {unknown or list(engines)!r}: choose from "
                         f"{', '.join(opened)}")
    running = [opened[e]() for e in engines]
    info = {"file": onnx.name, "sha256": file_sha256(onnx), "voice": voice}
    result = {"config": {"reps": reps, "threads": threads, "warmup": 1, "alternate": True,
                         "pause_s": pause, "voice": voice, "speed": 1.0, "device": device,
                         "texts": {z: TEXTS[z] for z in sizes},
                         "phonemizer": "espeak-ng en-us"},
              "engines": {e.name: {"version": e.version} for e in running},
              "rows": [], "memory": [], "validation": []}
    total = 3 * len(running) * len(sizes)
    on_event("start", total_rows=total)
    rate = 24000
    for size in sizes:
        text = TEXTS[size]
        got = {e.name: e.run(text, voice, keep_audio=True) for e in running}
        lengths = {n: r.samples for n, r in got.items()}
        names = [e.name for e in running]
        chunks = next(iter(got.values())).tokens
        result["validation"].append({
            "text": size, "chunks": len(chunks), "phonemes": sum(len(c) for c in chunks),
            "samples": lengths, "durations_agree": len(set(lengths.values())) == 1,
            "audio_rel_l2": _rel_l2(got[names[0]].audio, got[names[-1]].audio)
            if len(names) > 1 else None})
        for e in running:
            e.run(text, voice)                  # warm-up
        reqs = {n: [] for n in names}
        by_name = {e.name: e for e in running}
        for rep, name in schedule(names, reps):
            if pause > 0:
                time.sleep(pause)
            r = by_name[name].run(text, voice)
            reqs[name].append(r)
            on_event("run", engine=name, test=size, rep=rep, ns=r.wall_ns,
                     first_ns=r.first_audio_ns, attempt=0)
        for e in running:
            result["rows"] += _rows(e, info, size, text, reqs[e.name], rate)
        on_event("rows", done=len(result["rows"]), total=total)
        on_rows(result)
    return result
