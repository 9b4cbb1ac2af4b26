"""Speech to text: dasllama's Whisper against faster-whisper on the same model and samples.

``dasllama bench asr -m whisper-tiny.en`` transcribes clips of 10 s, 60 s and 5 min with both
engines, at each precision (``int8`` against faster-whisper's ``int8``, ``float32`` against its
``float32``) and beam size (1 and 5), and writes one record. The clips are built at run time,
deterministically, from the ASR test fixtures (``--clips``, default tests/fixtures/asr of the
source tree): whole fixture clips in a fixed order with half a second of silence between them,
each added only while it fits, the rest padded with silence to the exact length, so nothing
large is committed and every run times the same samples.

The model is ``-m``: a packaged name (``whisper-tiny.en``) or a CTranslate2 directory. Both
engines read that directory's weights: faster-whisper directly, dasllama through the GGUF it
converts once into its cache.

``--engine all`` adds whisper.cpp (the ``pywhispercpp`` package) as a second peer, on a ggml
file that dasllama's writer makes from the same directory once (``whisper_cpp_file``): the
float32 lane against its F16 file (whisper.cpp runs no F32 file on the CPU; the packaged
models' weights are float16, which F16 holds exactly), the int8 lane against its Q8_0 blocks. Its
transcripts are compared with dasllama's by text (it reports no tokens); its first text is
timed in its new-segment callback, since its segments come back when the call returns.

Three tests come from every request (one transcription of a whole clip, its segments
consumed to the end), each suffixed by the cell: clip length, precision and beam
(``rtf_60sint8b5``: the 60 s clip, int8, beam 5):

* ``request_wall`` (ms): samples in, the last segment out (the log-mel is inside);
* ``first_text`` (ms): from the call to the first segment;
* ``rtf`` (x): seconds of audio per second of wall time, above 1 faster than real time.

Method, as the other benches:

* Each engine runs in a runner process of its own (``python -m dasllama.bench.asr --runner``,
  the same interpreter), so the two thread pools never share a process and each side's peak
  RSS is its own. Both get ``--threads``: dasllama's pool, CTranslate2's ``cpu_threads``.
* Options are the same on both sides: temperature 0 (no fallback), the beam size, English,
  timestamps on, ``condition_on_previous_text``, faster-whisper's default suppression.
* Validation before timing, which is also the warm-up: each engine transcribes the clip
  once; the record keeps whether the transcripts are identical (text and tokens) and the word
  error rate between them when they are not.
* Then ``reps`` timed requests, alternating (dasllama 1, faster-whisper 1, dasllama 2, ...),
  with a pause before each so the other runner's threads are idle. Statistics over the
  requests (mean, sd, median, min, max, cv); ratios dasllama / peer come from medians when
  printed, never stored.
* A cell whose rtf cv exceeds 3% has its engine's requests run once more (alternating with
  any other noisy engine); the second attempt replaces the first for that engine's three
  rows, which keep the first cv and samples. A row still above 3% is ``noisy``.
* On a shared box, ``--quiet-wait SECONDS`` waits (up to that long) before each request for
  the rest of the machine to be quiet, measures the CPU time others used during it, and runs a
  disturbed request again (at most 3 times); the rows keep what the discarded attempts
  measured (``disturbed_samples``), the seconds waited and others' CPU seconds.
* Memory: before the timed cells, each engine opens the model in a fresh runner and
  transcribes the longest clip at the largest beam once; the record's ``memory`` holds that
  process's peak RSS, its RSS before and after the model loaded, and the model file's size.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from . import quiet
from .llm import BenchError, _sha256, schedule
from .record import NOISE_CV
from .stats import summarize

__all__ = ["ALL_ENGINES", "TESTS", "CLIP_SECONDS", "FIXTURE_ORDER", "Request", "build_clip",
           "word_errors", "test_name", "Runner", "measure_cell", "rows_for", "benchmark",
           "add_asr_arguments", "run_asr", "runner_main", "whisper_cpp_file"]

OURS, PEER, WHISPER_CPP = "dasllama", "faster-whisper", "whisper.cpp"
ENGINES = (OURS, PEER)                     # the default run
ALL_ENGINES = (OURS, PEER, WHISPER_CPP)    # --engine all
TESTS = (("request_wall", "ms"), ("first_text", "ms"), ("rtf", "x"))
SAMPLE_RATE = 16000
CLIP_SECONDS = (10, 60, 300)
BEAMS = (1, 5)
COMPUTE_TYPES = ("int8", "float32")
_LANE = {"int8": "int8", "float32": "f32"}       # the cell's short name in a test
FIXTURE_ORDER = ("us_plain.flac", "gb_fast.flac", "over_30s.flac", "long_silences.flac")
GAP_S = 0.5              # silence between fixture clips in a built clip
DEFAULT_PAUSE_S = 0.1    # rest before each timed request: the other runner's threads go idle
RUNNER_START_S = 600.0   # a runner that has not said "ready" by then (a conversion) has failed


# ----------------------------------------------------------------------------------------
# clips and transcripts

def build_clip(sources: Sequence, seconds: float, gap_s: float = GAP_S):
    """``seconds`` of 16 kHz samples from ``sources`` (float32 arrays, used in order and then
    again): each whole source is appended, after ``gap_s`` of silence, while it fits; when none
    fits any more the rest is silence. Raises BenchError when no source fits at all."""
    import numpy as np
    total = int(round(seconds * SAMPLE_RATE))
    gap = np.zeros(int(round(gap_s * SAMPLE_RATE)), np.float32)
    if not sources:
        raise BenchError("no source clips to build the benchmark's clips from")
    parts, used, misses, i = [], 0, 0, 0
    while misses < len(sources):
        src = np.asarray(sources[i % len(sources)], np.float32)
        need = src.size + (gap.size if parts else 0)
        if src.size and used + need <= total:
            if parts:
                parts.append(gap)
            parts.append(src)
            used += need
            misses = 0
        else:
            misses += 1
        i += 1
    if not parts:
        raise BenchError(f"no source clip fits in {seconds} s (the shortest is "
                         f"{min(len(s) for s in sources) / SAMPLE_RATE:.1f} s)")
    parts.append(np.zeros(total - used, np.float32))
    return np.concatenate(parts)


def fixture_dir() -> Optional[Path]:
    """tests/fixtures/asr of the source tree this package sits in (None in a wheel)."""
    for d in Path(__file__).resolve().parents:
        if (d / "tests" / "fixtures" / "asr").is_dir():
            return d / "tests" / "fixtures" / "asr"
    return None


def load_sources(folder) -> list:
    """The fixture clips of FIXTURE_ORDER in ``folder`` as 16 kHz float32 arrays."""
    from .. import audio
    folder = Path(folder)
    missing = [n for n in FIXTURE_ORDER if not (folder / n).is_file()]
    if missing:
        raise BenchError(f"--clips {folder}: missing {', '.join(missing)} (the ASR fixture "
                         f"clips the benchmark's clips are built from)")
    return [audio.load(folder / n, SAMPLE_RATE) for n in FIXTURE_ORDER]


_WORD = re.compile(r"[a-z0-9']+")


def words(text: str) -> List[str]:
    """Lower-case words without punctuation: what a word error rate compares."""
    return _WORD.findall(text.lower())


def word_errors(hyp: str, ref: str) -> float:
    """Word error rate of ``hyp`` against ``ref``: word-level edit distance / words in ref
    (0 for two empty texts; 1.0 per word when ref is empty)."""
    h, r = words(hyp), words(ref)
    if not r:
        return float(len(h))
    prev = list(range(len(h) + 1))
    for i, rw in enumerate(r, 1):
        cur = [i] + [0] * len(h)
        for j, hw in enumerate(h, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (rw != hw))
        prev = cur
    return prev[-1] / len(r)


def test_name(test: str, seconds: float, compute_type: str, beam: int) -> str:
    """``rtf_60sint8b5``: the test, then the cell (clip seconds, precision, beam)."""
    return f"{test}_{int(round(seconds))}s{_LANE[compute_type]}b{beam}"


# ----------------------------------------------------------------------------------------
# the runner process (one engine, one precision)

def _peak_rss() -> Optional[int]:
    from .probe import peak_rss_bytes
    return peak_rss_bytes()


class _OursInRunner:
    def __init__(self, model: str, compute_type: str, threads: int):
        from .. import ASR
        self.asr = ASR(model, compute_type=compute_type, n_threads=threads)
        from .probe import build
        b = build()
        self.version = b["version"] + (f"+g{b['git_sha']}" if b["git_sha"] else "") + \
            ("-dirty" if b["git_dirty"] else "")
        self.details = {"version": self.version, "compute_type": compute_type,
                        "model_file": self.asr.path.name,
                        "model_file_size": self.asr.path.stat().st_size}

    def transcribe(self, samples, beam: int):
        return self.asr.transcribe(samples, beam_size=beam, temperature=0.0)[0]


class _PeerInRunner:
    def __init__(self, model: str, compute_type: str, threads: int):
        from importlib.metadata import version
        from faster_whisper import WhisperModel
        self.model = WhisperModel(model, device="cpu", compute_type=compute_type,
                                  cpu_threads=threads, num_workers=1)
        bin_path = Path(model) / "model.bin"
        self.version = version("faster-whisper")
        self.details = {"version": self.version, "ctranslate2": version("ctranslate2"),
                        "compute_type": compute_type, "cpu_threads": threads,
                        "model_file": bin_path.name, "model_file_size": bin_path.stat().st_size}

    def transcribe(self, samples, beam: int):
        return self.model.transcribe(samples, beam_size=beam, temperature=0.0,
                                     language="en")[0]


class _Segment:
    def __init__(self, text: str):
        self.text, self.tokens = text, ()


# whisper.cpp's file type for each lane. float32: F16, whisper.cpp's full precision (its CPU
# build runs no F32 file: an F32 convolution fails an assertion, F32 matrices crash), which holds
# the packaged models' float16 values exactly; int8: its 8-bit blocks (32 values a float16
# scale, another grouping than CTranslate2's one scale a row).
_GGML_TYPES = {"float32": "F16", "int8": "Q8_0"}


def whisper_cpp_file(folder: Path, compute_type: str) -> Path:
    """The whisper.cpp ggml file written from the CTranslate2 directory ``folder`` for a lane,
    once, beside the GGUF dasllama converts it to in the model cache."""
    from ..convert.whisper_ggml import write_ggml_whisper
    from ..models import converted_path
    kind = _GGML_TYPES[compute_type]
    gguf = converted_path(folder)
    path = gguf.with_name(f"{gguf.stem}.{kind.lower()}.ggml.bin")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_ggml_whisper(folder, path, kind)
    return path


class _WhisperCppInRunner:
    """whisper.cpp through pywhispercpp on the ggml file written from the same directory, with
    the other engines' options: temperature 0 and no fallback, English, timestamps, the
    previous window's text as the prompt within a clip, non-speech tokens suppressed; greedy or
    beam search (a model each: pywhispercpp fixes the strategy when it opens one). Every
    request starts afresh, as the other engines' do: whisper.cpp keeps the text it decoded in
    its context between calls and carries it in as the next call's prompt unless no_context
    is set (which still conditions each window on the previous one within a call). Segments
    come back when the call returns; the first one's time is taken in its new-segment
    callback."""

    def __init__(self, model: str, compute_type: str, threads: int):
        from importlib.metadata import PackageNotFoundError, version
        try:
            self.version = version("pywhispercpp")
        except PackageNotFoundError:
            raise BenchError("the whisper.cpp peer needs the pywhispercpp package "
                             "(pip install pywhispercpp)") from None
        self.path = whisper_cpp_file(Path(model), compute_type)
        self.threads, self.models, self.first_ns = threads, {}, None
        self.details = {"version": self.version, "compute_type": compute_type,
                        "ggml_type": _GGML_TYPES[compute_type], "n_threads": threads,
                        "model_file": self.path.name,
                        "model_file_size": self.path.stat().st_size}

    def _model(self, beam: int):
        if beam not in self.models:
            from pywhispercpp.model import Model
            self.models[beam] = Model(
                str(self.path), params_sampling_strategy=0 if beam == 1 else 1,
                redirect_whispercpp_logs_to=None, n_threads=self.threads, print_progress=False,
                print_realtime=False, language="en", no_context=True, temperature=0.0,
                temperature_inc=0.0, suppress_nst=True, greedy={"best_of": 1},
                beam_search={"beam_size": beam, "patience": 1.0})
        return self.models[beam]

    def transcribe(self, samples, beam: int):
        model, stamps = self._model(beam), []
        t0 = time.perf_counter_ns()
        got = model.transcribe(samples, new_segment_callback=lambda _s: stamps.append(
            time.perf_counter_ns()))
        self.first_ns = stamps[0] - t0 if stamps else None
        # pywhispercpp strips the leading space the other engines' segment texts carry
        return [_Segment(" " + s.text.lstrip()) for s in got]


_RUNNER_ENGINES = {OURS: _OursInRunner, PEER: _PeerInRunner, WHISPER_CPP: _WhisperCppInRunner}


def runner_main(argv=None) -> int:
    """The runner: one JSON object a line. After loading it writes {"event": "ready",
    "version", "details", "baseline_rss", "loaded_rss"}, then answers each request:

        {"cmd": "run", "audio": "clip.npy", "beam_size": 5}
            -> {"ok": true, "wall_ns", "first_ns", "text", "tokens", "segments"}
        {"cmd": "rss"}  -> {"ok": true, "peak_rss": bytes (this process, VmHWM)}
        {"cmd": "quit"} -> {"ok": true}, then exit
        anything that fails -> {"ok": false, "error": "..."}
    """
    p = argparse.ArgumentParser(prog="python -m dasllama.bench.asr --runner")
    p.add_argument("--runner", action="store_true")
    p.add_argument("--engine", choices=ALL_ENGINES, required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--compute-type", choices=COMPUTE_TYPES, required=True)
    p.add_argument("--threads", type=int, required=True)
    a = p.parse_args(argv)
    import numpy as np
    # Libraries' prints, Python's and their C code's (whisper.cpp writes to fd 1), must not
    # break the protocol: it gets a descriptor of its own and fd 1 goes to stderr.
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def say(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    from .probe import rss_bytes
    baseline = rss_bytes()
    try:
        engine = _RUNNER_ENGINES[a.engine](a.model, a.compute_type, a.threads)
    except Exception as e:   # noqa: BLE001 - the harness reports it
        say({"event": "error", "error": f"{type(e).__name__}: {e}"})
        return 1
    say({"event": "ready", "version": engine.version, "details": engine.details,
         "baseline_rss": baseline, "loaded_rss": rss_bytes()})
    clips: Dict[str, object] = {}
    for line in sys.stdin:
        try:
            req = json.loads(line)
            cmd = req.get("cmd")
            if cmd == "quit":
                say({"ok": True})
                return 0
            if cmd == "rss":
                say({"ok": True, "peak_rss": _peak_rss()})
                continue
            if cmd != "run":
                raise ValueError(f"unknown cmd {cmd!r}")
            path = req["audio"]
            if path not in clips:
                clips[path] = np.load(path)
            samples = clips[path]
            texts, tokens, first = [], [], None
            t0 = time.perf_counter_ns()
            for s in engine.transcribe(samples, int(req["beam_size"])):
                if first is None:
                    first = time.perf_counter_ns() - t0
                texts.append(s.text)
                tokens.extend(int(t) for t in s.tokens)
            wall = time.perf_counter_ns() - t0
            if getattr(engine, "first_ns", None) is not None:   # an engine that returns at the end
                first = engine.first_ns
            say({"ok": True, "wall_ns": wall, "first_ns": first if first is not None else wall,
                 "text": "".join(texts), "tokens": tokens, "segments": len(texts)})
        except Exception as e:   # noqa: BLE001 - answered, the runner keeps serving
            say({"ok": False, "error": f"{type(e).__name__}: {e}"})
    return 0


@dataclass
class Request:
    """One timed transcription: wall and first-segment times (ns), what it said, and the CPU
    seconds the rest of the machine used meanwhile (None where /proc has no counters)."""
    wall_ns: int
    first_ns: int
    text: str = ""
    tokens: list = field(default_factory=list)
    others_cpu_s: Optional[float] = None
    waited_s: float = 0.0
    discarded: list = field(default_factory=list)   # disturbed attempts' wall_ns


class Runner:
    """One engine at one precision in a runner process of its own (see runner_main)."""

    backend, device = "cpu", None

    def __init__(self, engine: str, model, compute_type: str, threads: int,
                 python: Optional[str] = None, work: Optional[Path] = None):
        self.name, self.threads, self.compute_type = engine, threads, compute_type
        self._log = tempfile.NamedTemporaryFile(
            "w+", prefix=f"asr-{engine}-", suffix=".log", dir=work, delete=False)
        cmd = [python or sys.executable, "-m", "dasllama.bench.asr", "--runner",
               "--engine", engine, "--model", str(model), "--compute-type", compute_type,
               "--threads", str(threads)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, text=True, bufsize=1)
        try:
            ready = self._read(RUNNER_START_S)
        except BenchError as e:
            ready = {"error": str(e)}
        if ready.get("event") != "ready":
            why = f"{engine} ({compute_type}) did not start: {ready.get('error', ready)}"
            tail = "" if "runner's last output" in why else self._tail()
            self.close()
            raise BenchError(why + tail)
        self.version = ready["version"]
        self.details = ready["details"]
        self.baseline_rss, self.loaded_rss = ready["baseline_rss"], ready["loaded_rss"]

    def _tail(self) -> str:
        try:
            if not self._log.closed:
                self._log.flush()
            text = Path(self._log.name).read_text()[-1500:]
        except OSError:
            return ""
        return f"\n--- {self.name} runner's last output ---\n{text}" if text.strip() else ""

    def _read(self, timeout: float) -> dict:
        import select
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            code = self.proc.poll()
            raise BenchError(f"{self.name} runner {'exited with ' + str(code) if code is not None else 'gave no answer'}"
                             f"{self._tail()}")
        return json.loads(line)

    def _ask(self, req: dict, timeout: float = 3600.0) -> dict:
        if self.proc.poll() is not None:
            raise BenchError(f"{self.name} runner exited with {self.proc.returncode}"
                             f"{self._tail()}")
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        reply = self._read(timeout)
        if not reply.get("ok"):
            raise BenchError(f"{self.name} ({self.compute_type}): {reply.get('error')}")
        return reply

    def run(self, clip: Path, beam: int) -> Request:
        r = self._ask({"cmd": "run", "audio": str(clip), "beam_size": beam})
        return Request(r["wall_ns"], r["first_ns"], r["text"], r["tokens"])

    def peak_rss(self) -> Optional[int]:
        return self._ask({"cmd": "rss"})["peak_rss"]

    def cpu_seconds(self) -> float:
        """User plus system CPU seconds of the runner so far (0 where /proc has none)."""
        from .quiet import process_cpu_seconds
        return process_cpu_seconds(self.proc.pid)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        try:
            os.unlink(self._log.name)
        except OSError:
            pass


# ----------------------------------------------------------------------------------------
# one cell: a clip at a precision and beam

def _figures(reqs: Sequence[Request], seconds: float) -> dict:
    return {"request_wall": [r.wall_ns / 1e6 for r in reqs],
            "first_text": [r.first_ns / 1e6 for r in reqs],
            "rtf": [seconds / (r.wall_ns / 1e9) for r in reqs]}


def _guarded_run(runner, runners, clip, beam, quiet_wait: float) -> Request:
    """One timed request under bench/quiet.py's guard (quiet.guarded_run)."""
    return quiet.guarded_run(lambda: runner.run(clip, beam), runners, quiet_wait)


def _plain(text: str) -> str:
    """A transcript with the whitespace between segments normalized (whisper.cpp's segments
    carry their leading space differently)."""
    return " ".join(text.split())


def _agreement(v: dict) -> str:
    """The cell's transcript agreement: dasllama against faster-whisper, then whisper.cpp."""
    parts = []
    if v.get("texts_identical") is not None:
        parts.append("identical" if v["texts_identical"] else f"differ (WER {v['wer']:.3f})")
    w = v.get("whisper_cpp")
    if w is not None:
        parts.append("whisper.cpp " + ("identical" if w["texts_identical"] else
                                       f"WER {w['wer']:.3f}"))
    return ", ".join(parts) or "of one engine"


def measure_cell(runners: Sequence, clip: Path, seconds: float, beam: int, *, reps: int,
                 pause: float = DEFAULT_PAUSE_S, quiet_wait: float = 0.0,
                 noise_cv: Optional[float] = NOISE_CV,
                 on_event: Callable = lambda *a, **k: None, label: str = "") -> dict:
    """Validate (the warm-up too), then ``reps`` alternating timed requests per engine, the
    noisy rule of the module text. Returns {"requests": {engine: [Request]}, "reruns":
    {engine: first attempt}, "validation": {...}}."""
    if reps < 1:
        raise BenchError(f"reps must be at least 1, got {reps}")
    got = {r.name: r.run(clip, beam) for r in runners}
    for name in got:
        on_event("warmup", engine=name, test=label)
    validation = {"texts_identical": None, "tokens_identical": None, "wer": None,
                  "words": {n: len(words(g.text)) for n, g in got.items()}}
    if OURS in got and PEER in got:
        ours, peer = got[OURS], got[PEER]
        validation["texts_identical"] = ours.text == peer.text
        validation["tokens_identical"] = ours.tokens == peer.tokens
        validation["wer"] = word_errors(ours.text, peer.text)
        if not validation["texts_identical"]:
            validation["texts"] = {n: g.text for n, g in got.items()}
    if OURS in got and WHISPER_CPP in got:   # whisper.cpp gives no tokens: text and WER only
        ours, theirs = got[OURS], got[WHISPER_CPP]
        same = _plain(ours.text) == _plain(theirs.text)
        validation["whisper_cpp"] = {"texts_identical": same,
                                     "wer": word_errors(ours.text, theirs.text)}
        if not same:
            validation.setdefault("texts", {n: g.text for n, g in got.items()})
    on_event("note", message=f"{label}: transcripts " + _agreement(validation))
    names = [r.name for r in runners]
    by_name = {r.name: r for r in runners}
    requests: dict = {n: [] for n in names}

    def timed(which, attempt):
        for rep, name in schedule(which, reps):
            if pause > 0:
                time.sleep(pause)
            r = _guarded_run(by_name[name], list(runners), clip, beam, quiet_wait)
            requests[name].append(r)
            on_event("run", engine=name, test=label, rep=rep, ns=r.wall_ns, attempt=attempt)

    timed(names, 0)
    cvs = {n: summarize(_figures(requests[n], seconds)["rtf"]).cv for n in names}
    noisy = [n for n in names if noise_cv is not None and reps > 1 and cvs[n] > noise_cv]
    reruns: dict = {}
    if noisy:
        on_event("rerun", test=label, engines=noisy, cv={n: cvs[n] for n in noisy})
        for n in noisy:
            reruns[n], requests[n] = requests[n], []
        timed(noisy, 1)
    return {"requests": requests, "reruns": reruns, "validation": validation}


def rows_for(runner, model: dict, requests: Sequence[Request], seconds: float, beam: int, *,
             first_attempt: Optional[Sequence[Request]] = None,
             noise_cv: float = NOISE_CV) -> list:
    """The engine's three rows of one cell from its timed requests."""
    figures = _figures(requests, seconds)
    firsts = _figures(first_attempt, seconds) if first_attempt else None
    ns = {"request_wall": [r.wall_ns for r in requests],
          "first_text": [r.first_ns for r in requests],
          "rtf": [r.wall_ns for r in requests]}
    rows = []
    for test, unit in TESTS:
        s = summarize(figures[test])
        row = {"kind": "asr", "engine": runner.name, "backend": runner.backend,
               "version": runner.version, "threads": runner.threads,
               "model": model["file"], "model_sha256": model["sha256"], "arch": model["arch"],
               "quant": runner.compute_type, "params": model["params"],
               "test": test_name(test, seconds, runner.compute_type, beam), "unit": unit,
               **s.as_dict(), "noisy": bool(s.cv > noise_cv),
               "reruns": 1 if first_attempt else 0,
               "samples": figures[test], "samples_ns": ns[test],
               "audio_seconds": float(seconds), "beam_size": beam,
               "compute_type": runner.compute_type}
        others = [r.others_cpu_s for r in requests]
        if any(o is not None for o in others):
            row["others_cpu_s"] = [o if o is not None else 0.0 for o in others]
        row["waited_s"] = [r.waited_s for r in requests]
        disturbed = [d for r in requests for d in r.discarded]
        if disturbed and test != "first_text":
            row["disturbed_samples"] = [d / 1e6 if test == "request_wall" else
                                        seconds / (d / 1e9) for d in disturbed]
        if firsts is not None:
            row["first_cv"] = summarize(firsts[test]).cv
            row["first_samples_ns"] = [r.wall_ns if test != "first_text" else r.first_ns
                                       for r in first_attempt]
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------
# the whole run

def model_source(name_or_path) -> Path:
    """The CTranslate2 directory ``-m`` names (a packaged model is pulled on first use)."""
    from .. import models
    from ..convert.whisper import find_whisper_dir
    found = models.find_or_pull(name_or_path)
    folder = find_whisper_dir(found)
    if folder is None:
        raise BenchError(f"-m {name_or_path}: {found} is not a CTranslate2 Whisper directory "
                         f"(model.bin, config.json, ...); faster-whisper reads only that, so "
                         f"the benchmark needs it (the same weights for both engines)")
    return folder


def model_info(folder: Path) -> dict:
    """What the rows say about the model: the directory's name, model.bin's sha256 and size,
    and the parameter count of its variables (quantization scales left out)."""
    from ..convert.ct2 import read_ct2_model
    try:
        variables = read_ct2_model(folder / "model.bin").variables
        params = sum(int(v.size) for name, v in variables.items()
                     if not name.endswith("_scale"))
    except Exception as e:   # noqa: BLE001 - a model the peer reads may still be timed
        raise BenchError(f"{folder / 'model.bin'}: cannot count its parameters: {e}") from e
    return {"file": folder.name, "sha256": _sha256(folder / "model.bin"), "arch": "whisper",
            "params": params, "file_size": (folder / "model.bin").stat().st_size}


def benchmark(model, *, engines: Sequence[str] = ENGINES, threads: int, reps: int,
              clip_seconds: Sequence[float] = CLIP_SECONDS, beams: Sequence[int] = BEAMS,
              compute_types: Sequence[str] = COMPUTE_TYPES, clips: Optional[Path] = None,
              pause: float = DEFAULT_PAUSE_S, quiet_wait: float = 0.0,
              noise_cv: Optional[float] = NOISE_CV, memory: bool = True,
              open_runner: Optional[Callable] = None, work: Optional[Path] = None,
              on_event: Callable = lambda *a, **k: None,
              on_rows: Callable = lambda result: None) -> dict:
    """The ASR benchmark of one model over every (precision, beam, clip) cell. ``model``: a
    packaged name or a CTranslate2 directory. ``open_runner(engine, folder, compute_type,
    threads)`` opens an engine (default: a Runner process). A cell's rows (every engine's) are
    added together, then ``on_rows(result)``. Ctrl-C stops the run between requests with the
    finished rows kept."""
    import numpy as np
    bad = [c for c in compute_types if c not in COMPUTE_TYPES]
    if bad:
        raise BenchError(f"compute type {bad[0]!r}: expected one of {', '.join(COMPUTE_TYPES)}")
    if not engines:
        raise BenchError("no engine to run")
    if any(b < 1 for b in beams):
        raise BenchError(f"beam sizes must be positive, got {list(beams)}")
    folder = model_source(model)
    info = model_info(folder)
    if clips is None:
        clips = fixture_dir()
        if clips is None:
            raise BenchError("no fixture clips here (an installed wheel): pass --clips DIR with "
                             + ", ".join(FIXTURE_ORDER))
    sources = load_sources(clips)
    open_runner = open_runner or (lambda e, f, c, t: Runner(e, f, c, t, work=work))
    total = 3 * len(engines) * len(compute_types) * len(beams) * len(clip_seconds)
    result = {"config": {"reps": reps, "threads": threads, "warmup": 1, "alternate": True,
                         "pause_s": pause, "quiet_wait_s": quiet_wait, "device": "cpu",
                         "noise_cv": noise_cv, "noise_reruns": 1, "temperature": 0.0,
                         "language": "en", "clip_seconds": list(clip_seconds),
                         "beam_sizes": list(beams), "compute_types": list(compute_types),
                         "clip_sources": list(FIXTURE_ORDER), "clip_gap_s": GAP_S},
              "engines": {}, "rows": [], "memory": [], "validation": []}
    on_event("start", total_rows=total)
    on_event("model", file=info["file"], arch="whisper", quant="/".join(compute_types),
             params=info["params"])
    current: dict = {}
    with tempfile.TemporaryDirectory(prefix="dasllama-bench-asr-", dir=work) as tmp:
        paths = {}
        for s in clip_seconds:
            paths[s] = Path(tmp) / f"clip_{int(round(s))}s.npy"
            np.save(paths[s], build_clip(sources, s))
        try:
            if memory:   # first, so that a run stopped early still has it
                longest, widest = max(clip_seconds), max(beams)
                for ct in compute_types:
                    for e in engines:
                        current.update(compute_type=ct, engine=e, stage="memory")
                        result["memory"].append(_memory(open_runner, e, folder, ct, threads,
                                                        paths[longest], longest, widest,
                                                        info))
                        on_event("note", message=_memory_line(result["memory"][-1]))
            for ct in compute_types:
                runners = []
                try:
                    for e in engines:
                        current.update(compute_type=ct, engine=e, stage="load")
                        runners.append(open_runner(e, folder, ct, threads))
                        result["engines"].setdefault(e, {})[ct] = runners[-1].details
                        result["engines"][e]["version"] = runners[-1].version
                    for beam in beams:
                        for s in clip_seconds:
                            label = f"{int(round(s))}s {ct} beam {beam}"
                            current.update(stage="timing", cell=label)
                            got = measure_cell(runners, paths[s], s, beam, reps=reps,
                                               pause=pause, quiet_wait=quiet_wait,
                                               noise_cv=noise_cv, on_event=on_event,
                                               label=label)
                            for r in runners:
                                result["rows"] += rows_for(
                                    r, info, got["requests"][r.name], s, beam,
                                    first_attempt=got["reruns"].get(r.name),
                                    noise_cv=noise_cv or NOISE_CV)
                            result["validation"].append(
                                {"model": info["file"], "clip_seconds": s, "beam_size": beam,
                                 "compute_type": ct, **got["validation"]})
                            on_event("rows", done=len(result["rows"]), total=total)
                            on_rows(result)
                finally:
                    for r in runners:
                        r.close()
        except KeyboardInterrupt as stop:
            result["stopped"] = {"signal": getattr(stop, "signal_name", "SIGINT"),
                                 "rows_done": len(result["rows"]), "rows_planned": total,
                                 "during": dict(current)}
    return result


def _memory(open_runner, engine, folder, ct, threads, clip, seconds, beam, info) -> dict:
    """A fresh runner's peak RSS over loading the model and one transcription of ``clip``."""
    r = open_runner(engine, folder, ct, threads)
    try:
        r.run(clip, beam)
        peak = r.peak_rss()
        return {"engine": engine, "model": info["file"], "compute_type": ct,
                "clip_seconds": seconds, "beam_size": beam, "peak_rss": peak,
                "baseline_rss": r.baseline_rss, "loaded_rss": r.loaded_rss,
                "model_file": r.details.get("model_file"),
                "model_file_size": r.details.get("model_file_size"),
                "peak_scope": "the runner process: imports, model load, one transcription"}
    finally:
        r.close()


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.0f}"


def _memory_line(m: dict) -> str:
    extra = (None if None in (m["peak_rss"], m["baseline_rss"], m["model_file_size"]) else
             m["peak_rss"] - m["baseline_rss"] - m["model_file_size"])
    return (f"memory {m['engine']:<14} {m['compute_type']:<7} {int(m['clip_seconds'])} s beam "
            f"{m['beam_size']}: peak {_mib(m['peak_rss'])} MiB, before load "
            f"{_mib(m['baseline_rss'])} MiB, model file {_mib(m['model_file_size'])} MiB "
            f"({m['model_file']}), peak - before - file {_mib(extra)} MiB")


def format_summary(rec: dict) -> str:
    """Per cell: dasllama's median rtf, each peer's (faster-whisper, whisper.cpp where it ran)
    with the ratio, and the transcripts' agreement; then the memory lines."""
    rows = {(r["engine"], r["test"]): r for r in rec["rows"]}
    peers = [e for e in (PEER, WHISPER_CPP) if any(r["engine"] == e for r in rec["rows"])]
    short = {PEER: "fw", WHISPER_CPP: "w.cpp"}
    nan = float("nan")
    lines = [f"{'cell':<18} {'dasllama rtf':>12}"
             + "".join(f" {short[p] + ' rtf':>9} {'ratio':>6}" for p in peers) + "  transcripts"]
    for v in rec.get("validation", []):
        test = test_name("rtf", v["clip_seconds"], v["compute_type"], v["beam_size"])
        ours = rows.get((OURS, test))
        line = f"{test[4:]:<18} {ours['median'] if ours else nan:>12.1f}"
        for p in peers:
            peer = rows.get((p, test))
            q = (ours["median"] / peer["median"]) if ours and peer and peer["median"] else nan
            line += f" {peer['median'] if peer else nan:>9.1f} {q:>6.2f}"
        lines.append(line + "  " + _agreement(v))
    lines += [_memory_line(m) for m in rec.get("memory", [])]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------
# the command line

def add_asr_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "-m", default="whisper-tiny.en", metavar="NAME|DIR",
                   help="a packaged Whisper (default whisper-tiny.en) or a CTranslate2 "
                        "directory; both engines read its weights")
    p.add_argument("--engine", choices=("both", "all") + ALL_ENGINES, default="both",
                   help="which engines to time: both (dasllama and faster-whisper, the "
                        "default), all (whisper.cpp too, through pywhispercpp), or one")
    p.add_argument("--compute-type", action="append", metavar="TYPE",
                   help=f"precisions ({', '.join(COMPUTE_TYPES)}); repeat or separate by "
                        f"commas (default both)")
    p.add_argument("--beam", action="append", metavar="N",
                   help="beam sizes; repeat or separate by commas (default 1,5)")
    p.add_argument("--seconds", action="append", metavar="S",
                   help="clip lengths in seconds; repeat or separate by commas "
                        "(default 10,60,300)")
    p.add_argument("--clips", metavar="DIR",
                   help="the fixture clips the clips are built from (default "
                        "tests/fixtures/asr of the source tree)")
    p.add_argument("--threads", "-t", type=int, default=2,
                   help="threads for both engines (default 2)")
    p.add_argument("--reps", "-r", type=int, default=5, help="timed requests a cell (default 5)")
    p.add_argument("--pause", type=float, default=DEFAULT_PAUSE_S,
                   help=f"seconds of rest before each timed request (default {DEFAULT_PAUSE_S})")
    p.add_argument("--quiet-wait", type=float, default=0.0, metavar="SECONDS",
                   help="on a shared box: wait up to this long before each request for the "
                        "machine to be quiet, and run a disturbed request again (default 0: off)")
    p.add_argument("--no-memory", action="store_true",
                   help="skip the peak-RSS pass on the longest clip")
    p.add_argument("--out", "-o", metavar="FILE",
                   help="write the JSON record there; {box} becomes the machine's label")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.add_argument("--no-rerun", action="store_true",
                   help="do not run an engine's requests again when a cell's cv exceeds 3%%")


def _list(given, default, cast):
    if not given:
        return tuple(default)
    try:
        return tuple(cast(x) for g in given for x in g.split(",") if x.strip())
    except ValueError as e:
        raise BenchError(f"cannot read {given!r}: {e}") from e


def run_asr(args) -> int:
    from . import record
    from .cli import record_run
    engines = {"both": ENGINES, "all": ALL_ENGINES}.get(args.engine, (args.engine,))
    compute_types = _list(args.compute_type, COMPUTE_TYPES, str)
    beams = _list(args.beam, BEAMS, int)
    seconds = _list(args.seconds, CLIP_SECONDS, float)
    if any(s <= 0 for s in seconds):
        raise BenchError(f"clip lengths must be positive, got {list(seconds)}")

    def run(on_event, on_rows):
        return benchmark(args.model, engines=engines, threads=args.threads, reps=args.reps,
                         clip_seconds=seconds, beams=beams, compute_types=compute_types,
                         clips=Path(args.clips) if args.clips else None, pause=args.pause,
                         quiet_wait=args.quiet_wait,
                         noise_cv=None if args.no_rerun else NOISE_CV,
                         memory=not args.no_memory, on_event=on_event, on_rows=on_rows)
    rec, path = record_run(run, out=args.out, quiet=args.quiet)
    if rec["rows"]:
        print(record.format_table(rec))
        print()
        print(format_summary(rec))
    if path:
        print(f"\nrecord written to {path}" + ("" if rec["complete"] else " (incomplete)"))
    return 130 if rec.get("stopped") else 0


if __name__ == "__main__":
    if "--runner" in sys.argv[1:]:
        sys.exit(runner_main(sys.argv[1:]))
    sys.exit("python -m dasllama.bench.asr is the benchmark's runner (--runner); "
             "the benchmark is `dasllama bench asr`")
