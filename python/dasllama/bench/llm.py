"""LLM throughput: prompt processing (ppN) and token generation (tgN), dasllama against a peer.

The method is llama-bench's (llama.cpp tools/llama-bench), followed exactly so the figures
compare with what llama.cpp users quote:

* ppN: decode N random token ids as one prompt into an empty cache (BOS first when the model
  adds one); t/s = N / time.
* tgN: N single-token decodes into an empty cache, starting from BOS (when the model adds one)
  then random ids; t/s = N / time. Like llama-bench, generation does not follow a prompt, and
  nothing is sampled: the next id is random, not the model's choice.
* One warm-up before the timed repetitions: the whole prompt for pp, a single token for tg
  (llama-bench warms generation with one token). The cache is cleared before every run, and
  the clearing is not timed.
* Depth (llama-bench's ``-d``): a test at depth D first fills the cache with D random ids as
  one prompt, untimed, then times ppN or tgN at positions D..; its name gets ``@dD`` (e.g.
  ``tg128@d4096``). Each repetition's filling ids are drawn once and given to every engine.
* Statistics over the per-repetition rates (mean, sd, median, min, max, cv); the ratio of
  engines is the ratio of medians (derived when printing, never stored).
* A cell (one test of one engine) whose cv exceeds 3% is run once more; if the second
  attempt's cv is still above 3%, its row is marked ``noisy``.

Unlike llama-bench, both engines live in one run on one machine, and their repetitions
alternate (dasllama 1, llama.cpp 1, dasllama 2, ...) so that drift in clock speed or in other
load hits both; each repetition's token ids are drawn once and given to both engines. One
context of n_prompt + n_gen positions serves both tests (llama-bench makes one per test; the
size changes only how much cache is reserved, not the work done).
"""

from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..errors import DasllamaError
from . import gpu_clock, probe
from .record import NOISE_CV
from .stats import summarize

__all__ = ["BenchError", "TestSpec", "DasllamaEngine", "backend_of", "make_tokens", "schedule",
           "model_info", "measure", "rows_for", "benchmark", "parse_depths"]

# llama.cpp's general.file_type codes (LLAMA_FTYPE_MOSTLY_*) for the names people quote.
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
               10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
               16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}
_KV_BYTES = {"f32": 4.0, "f16": 2.0, "q8_0": 34 / 32}


class BenchError(DasllamaError, RuntimeError):
    """A benchmark that cannot run as asked (an engine missing, engines that disagree)."""


BACKENDS = ("cpu", "vulkan", "metal")


def backend_of(device: str) -> str:
    """The backend a device spec names: "cpu", "vulkan" ("vulkan", "vulkan:0", "vulkan:NAME")
    or "metal"."""
    backend = str(device).split(":", 1)[0].strip().lower()
    if backend not in BACKENDS:
        raise BenchError(f"device {device!r}: expected cpu, vulkan, vulkan:N, vulkan:NAME "
                         f"or metal")
    return backend


@dataclass(frozen=True)
class TestSpec:
    kind: str        # "pp" or "tg"
    n_tokens: int
    depth: int = 0   # tokens already in the cache when the timed run starts

    @property
    def name(self) -> str:
        return f"{self.kind}{self.n_tokens}" + (f"@d{self.depth}" if self.depth else "")


def parse_depths(text) -> list:
    """The depths of ``--n-depth`` ("0,4096"; llama-bench's -d): distinct integers >= 0, in
    the order given. A bad list raises BenchError naming the value."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        depths = [int(p) for p in parts]
    except ValueError:
        raise BenchError(f"--n-depth {text!r}: expected comma-separated whole numbers, "
                         f"e.g. 0,4096") from None
    bad = [d for d in depths if d < 0]
    if bad or not depths:
        raise BenchError(f"--n-depth {text!r}: depths must be 0 or more")
    return list(dict.fromkeys(depths))


def make_tokens(n: int, n_vocab: int, bos: int, add_bos: bool, rng: random.Random) -> list:
    """n random ids in [0, n_vocab), the first one BOS when the model adds BOS (llama-bench)."""
    first = bos if add_bos and bos >= 0 else rng.randrange(n_vocab)
    return [first] + [rng.randrange(n_vocab) for _ in range(n - 1)]


def schedule(engines: Sequence[str], reps: int) -> list:
    """The order of timed runs: (repetition, engine), engines alternating within each one."""
    return [(rep, name) for rep in range(reps) for name in engines]


class DasllamaEngine:
    """dasllama's LLMModel behind the interface the harness drives (see llama_cpp.py)."""

    name = "dasllama"

    def __init__(self, path, *, threads: int, n_ctx: int, kv_type: str = "f16",
                 device: str = "cpu", factory: Optional[Callable] = None):
        self.backend = backend_of(device)
        if factory is None:
            from .. import _core
            if not hasattr(_core, "LLMModel"):
                raise BenchError("this build of dasllama._core has no LLMModel; "
                                   "measure the peer alone with --engine llama.cpp")
            factory = _core.LLMModel
        kwargs = {"n_ctx": n_ctx, "n_threads": threads, "kv_type": kv_type}
        if self.backend != "cpu":     # a CPU run works with builds that take no device
            kwargs["device"] = device
        try:
            self.model = factory(str(path), **kwargs)
        except TypeError as e:
            if "device" not in kwargs:
                raise
            raise BenchError(f"this build of dasllama._core cannot open a model on device "
                             f"{device!r} ({e}); rebuild it with the GPU runtime or "
                             f"benchmark --device cpu") from e
        b = probe.build()
        self.version = b["version"] + (f"+g{b['git_sha']}" if b["git_sha"] else "") + \
            ("-dirty" if b["git_dirty"] else "")
        self.threads = threads
        # The device's own name (e.g. "NVIDIA H200") when the model says it; rows of a GPU
        # backend carry it, CPU rows carry none.
        named = getattr(self.model, "device_name", None)
        self.device = None if self.backend == "cpu" else str(named or device)
        self.details = {"kv_type": kv_type, "n_ctx": n_ctx, "device": device}
        if named:
            self.details["device_name"] = str(named)
        # Seat use per test kind ("pp", "tg"), warm-ups included: what served and what fell
        # back to the CPU chain, so a GPU row can show the GPU did the work.
        self.seat_use: dict = {}

    def _seat_stats(self) -> Optional[dict]:
        """seat -> {"served", "declined", ...} (``seat_stats()``, else ``stats["seats"]``)."""
        if self.backend == "cpu":
            return None
        get = getattr(self.model, "seat_stats", None)
        if get is not None:
            return get()
        stats = getattr(self.model, "stats", None)
        return stats.get("seats") if isinstance(stats, dict) else None

    def _note_seats(self, test: str, before: Optional[dict], after: Optional[dict]) -> None:
        if before is None or after is None:
            return
        use = self.seat_use.setdefault(test, {})
        for seat, now in after.items():
            then = before.get(seat, {})
            u = use.setdefault(seat, {"served": 0, "declined": {}})
            u["served"] += int(now.get("served", 0)) - int(then.get("served", 0))
            for reason, n in (now.get("declined") or {}).items():
                d = int(n) - int((then.get("declined") or {}).get(reason, 0))
                if d:
                    u["declined"][reason] = u["declined"].get(reason, 0) + d

    def row_fields(self, test: str) -> dict:
        """What a row of test kind ``test`` adds: the device, and on a GPU the seats' use over
        that test's runs. A GPU row whose runs no seat served measured the CPU fallback, not
        the GPU: that is refused rather than recorded under the GPU's name."""
        if self.backend == "cpu":
            return {}
        fields = {"device": self.device}
        use = self.seat_use.get(test)
        if use is not None:
            fields["seats"] = use
            if not any(u["served"] > 0 for u in use.values()):
                declined = {s: u["declined"] for s, u in use.items() if u["declined"]}
                raise BenchError(f"no {self.backend} seat served the {test} runs on "
                                 f"{self.device} (declined: {declined or 'none counted'}): "
                                 f"the CPU fallback did the work")
        return fields

    def vocab(self):
        tok = self.model.tokenizer
        return int(self.model.n_vocab), int(tok.bos_id), bool(tok.add_bos)

    def run(self, test: str, tokens: Sequence[int], depth: Sequence[int] = ()) -> int:
        """Time ``test`` on ``tokens`` from an empty cache, or after ``depth`` ids evaluated
        first as one untimed prompt."""
        if test not in ("pp", "tg"):
            raise ValueError(f"unknown test {test!r} (expected 'pp' or 'tg')")
        m = self.model
        m.reset()
        if len(depth):
            m.eval(list(depth))
        before = self._seat_stats()      # read outside the timed region
        t0 = time.perf_counter_ns()
        if test == "pp":
            m.eval(list(tokens))
        else:
            for tok in tokens:
                m.eval([tok])
        ns = time.perf_counter_ns() - t0
        self._note_seats(test, before, self._seat_stats())
        return ns

    def top(self, tokens: Sequence[int], k: int = 5) -> list:
        self.model.reset()
        logits = self.model.eval(list(tokens))[-1]
        return [int(i) for i in sorted(range(len(logits)), key=lambda i: -logits[i])[:k]]

    def memory(self) -> dict:
        return {}    # the harness measures its own process

    def close(self) -> None:
        self.model.close()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_info(path, n_ctx: int, kv_type: str = "f16") -> dict:
    """What a record says about a model file: name, sha256, architecture, quantization,
    parameters, and the sizes that bound memory and speed: the bytes a decoded token reads
    (every matrix multiplied, including a tied output embedding; the input embedding is a
    lookup of one row), the matmul FLOPs per token, and a full KV cache at n_ctx."""
    from .. import gguf
    path = Path(path)
    with gguf.open(path) as f:
        meta, tensors = f.metadata, f.tensors
        arch = meta.get("general.architecture", "unknown")
        tied = "output.weight" not in tensors
        mm = [t for t in tensors.values() if len(t.shape) == 2 and
              (t.name != "token_embd.weight" or tied)]
        by_type: dict = {}
        for t in tensors.values():
            by_type[t.type] = by_type.get(t.type, 0) + t.nbytes
        ftype = meta.get("general.file_type")
        quant = _FILE_TYPES.get(ftype) or max(by_type, key=by_type.get)
        n_layer = int(meta.get(f"{arch}.block_count", 0))
        n_head = int(meta.get(f"{arch}.attention.head_count", 1) or 1)
        n_head_kv = int(meta.get(f"{arch}.attention.head_count_kv", n_head) or n_head)
        n_embd = int(meta.get(f"{arch}.embedding_length", 0))
        k_len = int(meta.get(f"{arch}.attention.key_length", n_embd // n_head))
        v_len = int(meta.get(f"{arch}.attention.value_length", n_embd // n_head))
        return {
            "file": path.name,
            "sha256": _sha256(path),
            "arch": arch,
            "name": meta.get("general.name"),
            "quant": quant,
            "params": sum(t.n_elements for t in tensors.values()),
            "file_size": path.stat().st_size,
            "weight_bytes": sum(by_type.values()),
            "bytes_per_token": sum(t.nbytes for t in mm),
            "flops_per_token": 2 * sum(t.n_elements for t in mm),
            "kv_cache_bytes": int(n_layer * n_ctx * n_head_kv * (k_len + v_len) *
                                  _KV_BYTES.get(kv_type, 2.0)),
        }


def _validate(engines, tokens, k: int = 5) -> dict:
    """Before timing: each engine's top-k next tokens after the same short prompt, so a record
    shows the engines computed the same model (top-1 may still differ where margins are tiny)."""
    tops = {e.name: e.top(tokens, k) for e in engines}
    known = [t for t in tops.values() if t]
    return {"prompt_tokens": len(tokens), "top": tops,
            "top1_agree": len({t[0] for t in known}) == 1 if len(known) > 1 else None}


def _cv(test: TestSpec, ns: Sequence[int]) -> float:
    return summarize([test.n_tokens * 1e9 / x for x in ns]).cv


def _run(engine, test: TestSpec, tokens, depth) -> int:
    """One timed run; the depth's ids go along only to a test at depth (so engines that know
    no depth still serve depth-0 tests)."""
    if test.depth:
        return engine.run(test.kind, tokens, depth=depth)
    return engine.run(test.kind, tokens)


def _depth_tokens(test: TestSpec, n_vocab, bos, add_bos, rng) -> list:
    """The ids that fill the cache before a test at depth (BOS first, as a prompt)."""
    return make_tokens(test.depth, n_vocab, bos, add_bos, rng) if test.depth else []


def _timed_reps(names, by_name, test, reps, rng, n_vocab, bos, add_bos, pause, samples,
                on_event, attempt=0, clock=None, clocks=None):
    """``reps`` alternating repetitions of ``test`` on the engines ``names`` (each repetition's
    ids, and its depth's, drawn once and given to every engine); appends ns to
    samples[name][test.name], and with a ``clock`` reader its reading just before each run to
    clocks[name][test.name]."""
    rep_tokens: dict = {}
    for rep, name in schedule(names, reps):
        if rep not in rep_tokens:
            depth = _depth_tokens(test, n_vocab, bos, add_bos, rng)
            rep_tokens = {rep: (make_tokens(test.n_tokens, n_vocab, bos, add_bos, rng), depth)}
        if pause > 0:
            time.sleep(pause)   # let the other engine's spinning threads go idle
        if clock is not None:
            clocks[name].setdefault(test.name, []).append(clock())
        ns = _run(by_name[name], test, *rep_tokens[rep])
        samples[name].setdefault(test.name, []).append(ns)
        on_event("run", engine=name, test=test.name, rep=rep, ns=ns, attempt=attempt)


def measure(path, engines: Sequence, tests: Sequence[TestSpec], *, reps: int, seed: int = 0,
            pause: float = 0.0, noise_cv: Optional[float] = NOISE_CV,
            on_event: Callable = lambda *a, **k: None,
            on_test: Callable = lambda *a, **k: None,
            clock: Optional[gpu_clock.ClockReader] = None) -> dict:
    """Time every test on every engine for one model file, repetitions alternating.

    A cell (one test of one engine) whose cv of rates exceeds ``noise_cv`` is run once more
    (its noisy engines alternating again, fresh ids), and the second attempt replaces the
    first; ``reruns`` keeps the first attempt's cv and samples. ``noise_cv=None`` never re-runs.
    ``engines`` are open engines; ``on_event(kind, **fields)`` hears each warm-up and run;
    ``on_test(test, samples, reruns)`` hears each finished test (every engine's cell).
    ``clock`` (gpu_clock.nvidia_smi_reader()) is read before every timed run.
    Returns {"samples": {engine: {test: [ns, ...]}}, "reruns": {engine: {test: {...}}},
    "clocks": {engine: {test: [(mhz, max_mhz) or None, ...]}}, "validation": {...},
    "vocab": (...)}.
    """
    vocabs = {e.name: e.vocab() for e in engines}
    known = {n: v for n, v in vocabs.items() if v is not None}
    if not known:
        raise BenchError("no engine reports a vocabulary to draw token ids from")
    if len({v[0] for v in known.values()}) > 1:
        raise BenchError(f"the engines disagree on the vocabulary size of {path}: {known}")
    n_vocab, bos, add_bos = next(iter(known.values()))
    short = make_tokens(min(16, max(t.n_tokens for t in tests)), n_vocab, bos, add_bos,
                        random.Random(f"{seed}-validate"))
    validation = _validate(engines, short)
    on_event("validate", **validation)
    names = [e.name for e in engines]
    by_name = {e.name: e for e in engines}
    samples = {n: {} for n in names}
    clocks = {n: {} for n in names}
    reruns: dict = {n: {} for n in names}
    for test in tests:
        rng = random.Random(f"{seed}-{test.name}")
        warm_depth = _depth_tokens(test, n_vocab, bos, add_bos, rng)
        warm = make_tokens(test.n_tokens if test.kind == "pp" else 1, n_vocab, bos, add_bos, rng)
        for e in engines:
            if not getattr(e, "warms_up_itself", False):
                _run(e, test, warm, warm_depth)
                on_event("warmup", engine=e.name, test=test.name)
        _timed_reps(names, by_name, test, reps, rng, n_vocab, bos, add_bos, pause, samples,
                    on_event, clock=clock, clocks=clocks)
        first = {n: _cv(test, samples[n][test.name]) for n in names}
        noisy = [n for n in names if noise_cv is not None and reps > 1 and first[n] > noise_cv]
        if noisy:
            on_event("rerun", test=test.name, engines=noisy, cv={n: first[n] for n in noisy})
            kept = {n: samples[n].pop(test.name) for n in noisy}
            for n in noisy:
                clocks[n].pop(test.name, None)
            _timed_reps(noisy, by_name, test, reps, rng, n_vocab, bos, add_bos, pause, samples,
                        on_event, attempt=1, clock=clock, clocks=clocks)
            for n in noisy:
                reruns[n][test.name] = {"first_cv": first[n], "first_samples_ns": kept[n]}
        on_test(test, {n: samples[n][test.name] for n in names},
                {n: reruns[n].get(test.name) for n in names},
                {n: clocks[n].get(test.name) for n in names})
    return {"samples": samples, "reruns": reruns, "clocks": clocks, "validation": validation,
            "vocab": [n_vocab, bos, add_bos]}


def rows_for(engine, model: dict, samples: dict, tests: Sequence[TestSpec],
             reruns: Optional[dict] = None, noise_cv: float = NOISE_CV,
             clocks: Optional[dict] = None) -> list:
    """One record row per test: the engine, the model, the statistics of its rates, and
    whether the cell stayed noisy (cv above ``noise_cv``) after its re-run; with ``clocks``
    ({test: samples}) the GPU clock read before each run (gpu_clock.summarize_clock)."""
    rows = []
    for test in tests:
        ns = samples[test.name]
        rates = [test.n_tokens * 1e9 / x for x in ns]
        s = summarize(rates)
        rerun = (reruns or {}).get(test.name)
        row = {
            "kind": "llm", "engine": engine.name,
            "backend": getattr(engine, "backend", "cpu"),
            "version": engine.version, "threads": engine.threads,
            "model": model["file"], "model_sha256": model["sha256"], "arch": model["arch"],
            "quant": model["quant"], "params": model["params"],
            "test": test.name, "depth": test.depth, "unit": "t/s", **s.as_dict(),
            "noisy": bool(s.cv > noise_cv), "reruns": 1 if rerun else 0,
            "samples_ts": rates, "samples_ns": list(ns),
        }
        # The device (for a GPU backend) and what else the engine says of this test's runs.
        if getattr(engine, "device", None):
            row["device"] = engine.device
        extra = getattr(engine, "row_fields", None)
        if extra is not None:
            row.update(extra(test.kind))
        if clocks and clocks.get(test.name):
            row.update(gpu_clock.summarize_clock(clocks[test.name]))
        if rerun:
            row["first_cv"] = rerun["first_cv"]
            row["first_samples_ns"] = list(rerun["first_samples_ns"])
        # What the median rate achieves: weight bytes streamed per decoded token, matmul
        # FLOPs per prompt token (attention left out; both are lower bounds).
        if test.kind == "tg":
            row["approx_GBps"] = s.median * model["bytes_per_token"] / 1e9
        else:
            row["approx_GFLOPs"] = s.median * model["flops_per_token"] / 1e9
        rows.append(row)
    return rows


def benchmark(models: Sequence, openers: dict, *, threads: int, reps: int, n_prompt: int,
              n_gen: int, depths: Sequence[int] = (0,), seed: int = 0, pause: float = 0.1,
              kv_type: str = "f16",
              device: str = "cpu", noise_cv: Optional[float] = NOISE_CV,
              on_event: Callable = lambda *a, **k: None,
              on_rows: Callable = lambda result: None, clock="auto") -> dict:
    """The whole LLM benchmark: for each model file, open the engines (``openers`` maps an
    engine name to ``open(path, threads=, n_ctx=)``), validate, time, and measure memory.

    Rows are added a test at a time (every engine's row of that test together, so a dasllama
    row never goes without its reference row), and ``on_rows(result)`` hears each addition
    (the command line writes the record there). A KeyboardInterrupt (Ctrl-C, or SIGTERM as
    the command line maps it) stops the run: the rows finished so far are kept and the result
    says ``stopped``. ``clock``: a gpu_clock reader, None for none, or "auto" (nvidia-smi's
    when dasllama runs on a GPU). Returns the record (see bench/README.md) without the machine
    probe."""
    if clock == "auto":
        clock = gpu_clock.nvidia_smi_reader() if backend_of(device) != "cpu" else None
    depths = list(depths) or [0]
    if any(int(d) < 0 for d in depths):
        raise BenchError(f"depths must be 0 or more, got {depths}")
    tests = []
    for d in depths:     # llama-bench's order: every test at one depth, then the next depth
        tests += [TestSpec("pp", n_prompt, int(d))] if n_prompt > 0 else []
        tests += [TestSpec("tg", n_gen, int(d))] if n_gen > 0 else []
    if not tests:
        raise BenchError("nothing to measure: n_prompt and n_gen are both 0")
    if reps < 1:
        raise BenchError(f"reps must be at least 1, got {reps}")
    n_ctx = max(depths) + n_prompt + n_gen
    result = {"config": {"n_prompt": n_prompt, "n_gen": n_gen, "reps": reps, "threads": threads,
                         "warmup": 1, "alternate": True, "seed": seed, "pause_s": pause,
                         "kv_type": kv_type, "n_ctx": n_ctx, "device": device,
                         "noise_cv": noise_cv,
                         "noise_reruns": 1, "n_depth": [int(d) for d in depths]},
              "engines": {}, "rows": [], "memory": [], "validation": []}
    total = len(models) * len(tests) * len(openers)
    on_event("start", total_rows=total)
    current: dict = {}

    def heard(kind, **f):
        if kind in ("run", "warmup"):
            current.update(engine=f["engine"], test=f["test"])
        on_event(kind, **f)

    try:
        for path in models:
            model = model_info(path, n_ctx, kv_type)
            current.clear()
            current["model"] = model["file"]
            heard("model", **model)
            engines = []

            def test_done(test, samples, reruns, clocks):
                for e in engines:
                    result["rows"] += rows_for(e, model, {test.name: samples[e.name]}, [test],
                                               {test.name: reruns[e.name]} if reruns[e.name]
                                               else None, noise_cv or NOISE_CV,
                                               {test.name: clocks[e.name]} if clocks[e.name]
                                               else None)
                    result["engines"][e.name] = {"version": e.version, **e.details}
                on_event("rows", done=len(result["rows"]), total=total)
                on_rows(result)

            try:
                baseline = probe.rss_bytes()
                scoped = probe.reset_peak_rss()
                for name, open_engine in openers.items():
                    engines.append(open_engine(path, threads=threads, n_ctx=n_ctx))
                measured = measure(path, engines, tests, reps=reps, seed=seed, pause=pause,
                                   noise_cv=noise_cv, on_event=heard, on_test=test_done,
                                   clock=clock)
                result["validation"].append({"model": model["file"], **measured["validation"]})
                for e in engines:
                    mem = e.memory() if e.name != "dasllama" else {
                        "peak_rss": probe.peak_rss_bytes(), "baseline_rss": baseline,
                        "peak_scope": "since model load" if scoped else "whole process"}
                    result["memory"].append({"engine": e.name, "model": model["file"],
                                             "model_file_size": model["file_size"],
                                             "kv_cache_bytes": model["kv_cache_bytes"], **mem})
                on_rows(result)
            finally:
                for e in engines:
                    e.close()
    except KeyboardInterrupt as stop:
        result["stopped"] = {"signal": getattr(stop, "signal_name", "SIGINT"),
                             "rows_done": len(result["rows"]), "rows_planned": total,
                             "during": dict(current)}
    return result
