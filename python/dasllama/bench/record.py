"""Benchmark records: the JSON file, the printed table, and the ratios derived from it.

A record is one JSON object: ``schema``, ``created``, ``complete``, ``box``, ``command``,
``env``, ``machine`` (the probe), ``build`` (dasllama's version and commit), ``config``,
``engines``, ``rows`` (one per engine, model and test), ``memory`` and ``validation``.
bench/README.md describes every field and bench/schema.json checks them.

Ratios are never stored: ``pairs()`` derives dasllama / reference from medians whenever a
table or the board needs them, so a record cannot disagree with its own ratios.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import shlex
import sys
from pathlib import Path
from typing import Iterator, Optional

from .stats import Summary

__all__ = ["SCHEMA", "OURS", "NOISE_CV", "ENV_KNOBS", "backend_class", "pair_key", "pairs",
           "ratio", "finish", "format_table", "format_memory", "write", "load"]

SCHEMA = "dasllama.bench/2"
OURS = "dasllama"
NOISE_CV = 0.03          # a cell above this cv is run once more, then marked noisy
# Environment variables that change what dasllama or its peer does; a record keeps those set.
ENV_KNOBS = ("DASLLAMA_CPU_ISA", "DASLLAMA_TUNING", "DASLLAMA_LOG", "DASLLAMA_LLAMA_CPP_PYTHON",
             "OMP_NUM_THREADS", "GGML_NTHREADS", "VK_ICD_FILENAMES", "MESA_VK_DEVICE_SELECT",
             "CT2_FORCE_CPU_ISA")
# ... and every variable with one of these prefixes: dasllama's seat switches, llama.cpp's
# Vulkan knobs (GGML_VK_VISIBLE_DEVICES, GGML_VK_DISABLE_COOPMAT, ...).
ENV_KNOB_PREFIXES = ("DASLLAMA_SEAT_", "GGML_VK_")
# Which way is better, by unit: throughputs and real-time multiples up, latencies down.
_HIGHER_IS_BETTER = {"t/s": True, "x": True, "ms": False, "s": False}


def higher_is_better(row: dict) -> bool:
    return _HIGHER_IS_BETTER.get(row.get("unit"), True)


def backend_class(row: dict) -> str:
    """"cpu", or "gpu" for a row on any GPU API (vulkan, metal, cuda): a dasllama GPU row pairs
    with a reference's GPU row of the same run, the reference on its own API (pocket-tts on
    CUDA against dasllama on Vulkan); the rows keep their backends."""
    return "cpu" if row.get("backend", "cpu") == "cpu" else "gpu"


def pair_key(row: dict) -> tuple:
    """What a dasllama row and its reference row share: kind, backend class, model file and
    test."""
    return (row.get("kind", "llm"), backend_class(row), row["model"], row["test"])


def _summary(row: dict) -> Summary:
    return Summary(**{k: row[k] for k in ("n", "mean", "sd", "median", "min", "max", "cv")})


def ratio(ours: dict, reference: dict) -> float:
    """dasllama / reference from the rows' medians (nan when the reference median is 0)."""
    return ours["median"] / reference["median"] if reference["median"] else math.nan


def pairs(rows: list) -> Iterator[tuple]:
    """(dasllama row, reference row, ratio) for every dasllama row that has a reference row
    from the same run (same kind, backend class, model and test), in the rows' order."""
    refs = {}
    for r in rows:
        if r["engine"] != OURS:
            refs.setdefault(pair_key(r), r)
    for r in rows:
        if r["engine"] == OURS and pair_key(r) in refs:
            ref = refs[pair_key(r)]
            yield r, ref, ratio(r, ref)


def command_line() -> str:
    """This process's command line, as a shell would take it back; the program is named
    ``dasllama`` whether it ran as the console script or as ``python -m dasllama(.cli)``, so no
    path of the machine goes into a record."""
    argv = list(sys.argv)
    if argv and argv[0].replace("\\", "/").endswith(
            ("/dasllama", "dasllama", "dasllama/cli.py", "dasllama/__main__.py")):
        argv[0] = "dasllama"
    return " ".join(shlex.quote(a) for a in argv)


def env_knobs() -> dict:
    return {k: v for k, v in sorted(os.environ.items())
            if k in ENV_KNOBS or k.startswith(ENV_KNOB_PREFIXES)}


def finish(result: dict, machine: dict, build: dict, process_peak_rss: Optional[int], *,
           box: str, command: Optional[str] = None, env: Optional[dict] = None) -> dict:
    """The complete record from ``llm.benchmark``'s result and the probes. A result that a
    signal stopped (``result["stopped"]``) gives a record with ``complete: false``."""
    rec = {"schema": SCHEMA,
           "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "complete": not result.get("stopped"),
           "box": box,
           "command": command if command is not None else command_line(),
           "env": env if env is not None else env_knobs(),
           "machine": machine, "build": build,
           **{k: v for k, v in result.items() if k != "stopped"}}
    if result.get("stopped"):
        rec["stopped"] = result["stopped"]
    if process_peak_rss is not None:
        rec["process_peak_rss"] = process_peak_rss
    return rec


def format_table(record: dict) -> str:
    """The rows as an aligned table, then the ratios (derived here, from medians)."""
    mw = max([34] + [len(r["model"]) for r in record["rows"]])
    tw = max([6] + [len(r["test"]) for r in record["rows"]])     # tts: "request_wall"
    ew = max([9] + [len(r["engine"]) for r in record["rows"]])
    head = f"{'model':<{mw}} {'test':<{tw}} {'engine':<{ew}} {'backend':<7} {'median':>9} " \
           f"{'mean':>9} {'sd':>7} {'cv':>6} {'min':>9} {'max':>9}  achieved"
    lines = [head, "-" * len(head)]
    for r in record["rows"]:
        achieved = (f"~{r['approx_GBps']:.1f} GB/s" if "approx_GBps" in r
                    else f"~{r['approx_GFLOPs']:.0f} GFLOP/s" if "approx_GFLOPs" in r else "")
        noisy = ("  noisy" if r.get("noisy") else "") + \
            ("  GPU clock low" if r.get("gpu_clock_low") else "")
        lines.append(f"{r['model']:<{mw}} {r['test']:<{tw}} {r['engine']:<{ew}} "
                     f"{r.get('backend', 'cpu'):<7} {r['median']:>9.2f} "
                     f"{r['mean']:>9.2f} {r['sd']:>7.2f} {100 * r['cv']:>5.1f}% {r['min']:>9.2f} "
                     f"{r['max']:>9.2f}  {achieved}{noisy}")
    units = sorted({r.get("unit", "t/s") for r in record["rows"]})
    achieved = ("; achieved = median rate x weight bytes read per token (tg) or matmul FLOPs "
                "per token (pp)" if any("approx_GBps" in r or "approx_GFLOPs" in r
                                        for r in record["rows"]) else "")
    lines.append(f"({'/'.join(units)}; cv = sd/mean{achieved}; noisy: cv above "
                 f"{100 * NOISE_CV:.0f}% after a re-run)")
    if any(r.get("gpu_clock_low") for r in record["rows"]):
        lines.append("(GPU clock low: the GPU's core clock read before these runs was under half "
                     "its maximum, so they measured the clock state, not the engines)")
    found = list(pairs(record["rows"]))
    if found:
        title = f"dasllama/{found[0][1]['engine']} (medians)"
        lines += ["", f"{'model':<{mw}} {'test':<{tw}} {'backend':<7} {title:>30}"]
        for ours, ref, q in found:
            mark = "  noisy" if ours.get("noisy") or ref.get("noisy") else ""
            better = "" if higher_is_better(ours) else "  (ms: below 1 is ahead)"
            lines.append(f"{ours['model']:<{mw}} {ours['test']:<{tw}} "
                         f"{ours.get('backend', 'cpu'):<7} {q:>30.3f}{mark}{better}")
        devices = {r["device"] for r in record["rows"] if r.get("device")}
        if devices:
            lines.append(f"(GPU rows ran on {'; '.join(sorted(devices))})")
    if record.get("stopped"):
        lines.append(f"\n(stopped by {record['stopped']['signal']}: {len(record['rows'])} rows "
                     f"finished)")
    return "\n".join(lines)


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def format_memory(record: dict) -> str:
    """Peak RSS against what the model needs at least: the file (mapped) plus the KV cache."""
    lines = [f"{'model':<34} {'engine':<9} {'peak MiB':>9} {'before MiB':>10} {'file MiB':>9} "
             f"{'KV MiB':>7} {'peak-before-file-KV':>20}"]
    for m in record.get("memory", []):
        extra = None
        if m.get("peak_rss") is not None and m.get("baseline_rss") is not None:
            extra = m["peak_rss"] - m["baseline_rss"] - m["model_file_size"] - m["kv_cache_bytes"]
        lines.append(f"{m['model'][:34]:<34} {m['engine']:<9} {_mib(m.get('peak_rss')):>9} "
                     f"{_mib(m.get('baseline_rss')):>10} {_mib(m['model_file_size']):>9} "
                     f"{_mib(m['kv_cache_bytes']):>7} {_mib(extra):>20}")
    lines.append(f"(KV = a full cache of n_ctx positions in {record['config']['kv_type']}; "
                 f"dasllama process peak over the whole run: "
                 f"{_mib(record.get('process_peak_rss'))} MiB)")
    return "\n".join(lines)


def _json_safe(x):
    """NaN is not JSON: an undefined figure (a cv of a zero mean) is written as null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def write(record: dict, path) -> Path:
    """Write the record as indented JSON, atomically (a temporary file renamed over the old
    one): a reader, or a run stopped at any moment, never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_json_safe(record), indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path


def load(path) -> dict:
    """A record from its JSON file (not validated: tests/test_bench_schema.py does that)."""
    return json.loads(Path(path).read_text())
