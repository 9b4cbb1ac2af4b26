"""Benchmark records: ratios between engines, the printed table, and the JSON file.

A record is one JSON object: ``schema``, ``created``, ``machine`` (the probe), ``build``
(dasllama's version and commit), ``config``, ``engines``, ``rows`` (one per engine, model and
test), ``ratios``, ``memory`` and ``validation``. bench/README.md describes every field.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from pathlib import Path

from .stats import Summary

__all__ = ["SCHEMA", "ratios", "finish", "format_table", "format_memory", "write"]

SCHEMA = "dasllama.bench.llm/1"
OURS, PEER = "dasllama", "llama.cpp"


def _summary(row: dict) -> Summary:
    return Summary(**{k: row[k] for k in ("n", "mean", "sd", "median", "min", "max", "cv")})


def ratios(rows: list) -> list:
    """dasllama / llama.cpp per (model, test), from medians of t/s: above 1, dasllama is faster."""
    index = {(r["engine"], r["model"], r["test"]): r for r in rows}
    out = []
    for (engine, model, test), ours in index.items():
        theirs = index.get((PEER, model, test))
        if engine != OURS or theirs is None:
            continue
        o, t = _summary(ours), _summary(theirs)
        out.append({"model": model, "test": test, "dasllama_median": o.median,
                    "llama_cpp_median": t.median,
                    "ratio": o.median / t.median if t.median else math.nan})
    return out


def finish(result: dict, machine: dict, build: dict, process_peak_rss: int) -> dict:
    """The complete record from ``llm.benchmark``'s result and the probes."""
    return {"schema": SCHEMA,
            "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": machine, "build": build, **result,
            "ratios": ratios(result["rows"]), "process_peak_rss": process_peak_rss}


def format_table(record: dict) -> str:
    """The rows as an aligned table, then the ratios."""
    head = f"{'model':<34} {'test':<6} {'engine':<9} {'median':>9} {'mean':>9} {'sd':>7} " \
           f"{'cv':>6} {'min':>9} {'max':>9}  achieved"
    lines = [head, "-" * len(head)]
    for r in record["rows"]:
        achieved = (f"~{r['approx_GBps']:.1f} GB/s" if "approx_GBps" in r
                    else f"~{r['approx_GFLOPs']:.0f} GFLOP/s")
        lines.append(f"{r['model'][:34]:<34} {r['test']:<6} {r['engine']:<9} {r['median']:>9.2f} "
                     f"{r['mean']:>9.2f} {r['sd']:>7.2f} {100 * r['cv']:>5.1f}% {r['min']:>9.2f} "
                     f"{r['max']:>9.2f}  {achieved}")
    lines.append("(t/s; cv = sd/mean; achieved = median rate x weight bytes read per token (tg) "
                 "or matmul FLOPs per token (pp))")
    if record.get("ratios"):
        lines += ["", f"{'model':<34} {'test':<6} {'dasllama/llama.cpp (medians)':>30}"]
        for q in record["ratios"]:
            lines.append(f"{q['model'][:34]:<34} {q['test']:<6} {q['ratio']:>30.3f}")
    return "\n".join(lines)


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def format_memory(record: dict) -> str:
    """Peak RSS against what the model needs at least: the file (mapped) plus the KV cache."""
    lines = [f"{'model':<34} {'engine':<9} {'peak MiB':>9} {'before MiB':>10} {'file MiB':>9} "
             f"{'KV MiB':>7} {'peak-before-file-KV':>20}"]
    for m in record["memory"]:
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
    """Write the record as indented JSON (atomically: a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_json_safe(record), indent=1, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path
