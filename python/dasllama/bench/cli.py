"""``dasllama bench llm``: the command line of the LLM benchmark.

``_add_bench_parser(sub)`` adds the ``bench`` command to dasllama's own parser; ``llm_main()``
is the same command standing alone (bench/llm_bench.py calls it).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from ..errors import DasllamaError
from . import llm, probe, record
from .llama_cpp import PYTHON_ENV, LlamaBenchBinary, LlamaCppRunner, PeerError, find_peer_python

__all__ = ["add_llm_arguments", "run_llm", "llm_main"]

ENGINES = {"both": ("dasllama", "llama.cpp"), "dasllama": ("dasllama",),
           "llama.cpp": ("llama.cpp",)}


def _default_threads() -> int:
    m = probe.machine()
    return m["physical_cores"] or m["logical_cores"] or 1


def add_llm_arguments(p: argparse.ArgumentParser, default_out: Optional[str] = None) -> None:
    p.add_argument("--model", "-m", action="append", metavar="NAME|PATH",
                   help="smollm2, gemma3 or a .gguf path; repeat for several "
                        "(default: smollm2 and gemma3)")
    p.add_argument("--engine", choices=sorted(ENGINES), default="both",
                   help="which engines to time (default: both, alternating)")
    p.add_argument("--threads", "-t", type=int, default=None,
                   help="threads for both engines (default: physical cores)")
    p.add_argument("--reps", "-r", type=int, default=5, help="timed repetitions (default 5)")
    p.add_argument("--n-prompt", "-p", type=int, default=512, help="pp test length (default 512)")
    p.add_argument("--n-gen", "-n", type=int, default=128, help="tg test length (default 128)")
    p.add_argument("--kv-type", choices=("f16", "f32", "q8_0"), default="f16",
                   help="dasllama's KV cache type (llama.cpp keeps its f16 default)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random token ids")
    p.add_argument("--pause", type=float, default=0.1,
                   help="seconds of rest before each timed run, so the other engine's "
                        "threads are idle (default 0.1)")
    p.add_argument("--llama-cpp-python", metavar="PYTHON",
                   help=f"interpreter with llama.cpp's bindings (the cyllama wheel, CPython "
                        f"3.12); default ${PYTHON_ENV}, else python3.12 on PATH")
    p.add_argument("--llama-bench", metavar="PATH",
                   help="time a llama-bench executable instead (one invocation a repetition)")
    p.add_argument("--out", "-o", default=default_out, metavar="FILE",
                   help="write the JSON record there; {box} becomes the machine's label"
                        + (f" (default {default_out})" if default_out else ""))
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")


def _openers(args, engines) -> dict:
    out = {}
    if "dasllama" in engines:
        out["dasllama"] = lambda path, threads, n_ctx: llm.DasllamaEngine(
            path, threads=threads, n_ctx=n_ctx, kv_type=args.kv_type)
    if "llama.cpp" in engines:
        if args.llama_bench:
            out["llama.cpp"] = lambda path, threads, n_ctx: LlamaBenchBinary(
                args.llama_bench, path, threads=threads)
        else:
            python = find_peer_python(args.llama_cpp_python)
            if not python:
                raise PeerError(f"no interpreter for llama.cpp: pass --llama-cpp-python (a Python "
                                f"3.12 with `pip install cyllama`), set ${PYTHON_ENV}, pass "
                                f"--llama-bench PATH, or use --engine dasllama")
            out["llama.cpp"] = lambda path, threads, n_ctx: LlamaCppRunner(
                path, threads=threads, n_ctx=n_ctx, python=python)
    return out


def _progress(quiet: bool):
    def on_event(kind, **f):
        if quiet:
            return
        if kind == "model":
            msg = f"model {f['file']} ({f['arch']}, {f['quant']}, {f['params']:,} parameters)"
        elif kind == "validate":
            msg = f"  top-5 next tokens after {f['prompt_tokens']} ids: {f['top']}"
            if f["top1_agree"] is False:
                msg += "  <- the engines disagree on top-1"
        elif kind == "warmup":
            msg = f"  {f['test']:<6} {f['engine']:<9} warm-up"
        else:
            msg = f"  {f['test']:<6} {f['engine']:<9} rep {f['rep'] + 1}: {f['ns'] / 1e6:9.1f} ms"
        print(msg, file=sys.stderr, flush=True)
    return on_event


def run_llm(args) -> int:
    from .. import models
    names = args.model or ["smollm2", "gemma3"]
    paths = [models.find(n) for n in names]
    engines = ENGINES[args.engine]
    threads = args.threads or _default_threads()
    machine = probe.machine()
    result = llm.benchmark(paths, _openers(args, engines), threads=threads, reps=args.reps,
                           n_prompt=args.n_prompt, n_gen=args.n_gen, seed=args.seed,
                           pause=args.pause, kv_type=args.kv_type,
                           on_event=_progress(args.quiet))
    machine["loadavg_1m_end"] = probe.machine()["loadavg_1m"]
    rec = record.finish(result, machine, probe.build(), probe.process_peak_rss_bytes())
    print(record.format_table(rec))
    print()
    print(record.format_memory(rec))
    if args.out:
        path = record.write(rec, args.out.format(box=probe.box_name(machine)))
        print(f"\nrecord written to {path}")
    return 0


def _add_bench_parser(sub) -> None:
    """Add ``bench`` (with its ``llm`` command) to dasllama's subcommands."""
    p = sub.add_parser("bench", help="measure dasllama against llama.cpp")
    bsub = p.add_subparsers(dest="bench_command", required=True)
    q = bsub.add_parser("llm", help="LLM prompt (ppN) and generation (tgN) throughput",
                        description=llm.__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_llm_arguments(q)
    q.set_defaults(run=run_llm)


def llm_main(argv=None, default_out: Optional[str] = None) -> int:
    """``dasllama bench llm`` as a program of its own."""
    p = argparse.ArgumentParser(prog="llm_bench", description=llm.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_llm_arguments(p, default_out)
    args = p.parse_args(argv)
    try:
        return run_llm(args)
    except (DasllamaError, FileNotFoundError) as e:
        print(f"llm_bench: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
