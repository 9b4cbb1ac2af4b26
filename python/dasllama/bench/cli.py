"""``dasllama bench``: the command line of the benchmarks.

``_add_bench_parser(sub)`` adds the ``bench`` command to dasllama's own parser, with
``llm`` (throughput against llama.cpp), ``tts`` (Pocket TTS against the pocket-tts
package), ``serve`` (the HTTP server against llama-server), ``check`` (the regression
check), ``board`` (the HTML board), ``tune`` (race kernel knobs, write the tuning file) and
``tuning`` (show it);
``llm_main()`` is ``bench llm`` standing alone (bench/llm_bench.py calls it).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from pathlib import Path

from ..errors import DasllamaError
from . import check, llm, probe, record, tuning
from .progress import Progress, stop_on_signals
from .llama_cpp import (FLASH_ATTN, PYTHON_ENV, LlamaBenchBinary, LlamaCppRunner, PeerError,
                        find_peer_python)

__all__ = ["add_llm_arguments", "add_tts_arguments", "default_ngl", "record_run",
           "run_and_record", "run_llm", "run_tts", "llm_main"]

ENGINES = {"both": ("dasllama", "llama.cpp"), "dasllama": ("dasllama",),
           "llama.cpp": ("llama.cpp",)}


def _default_threads() -> int:
    m = probe.machine()
    return m["physical_cores"] or m["logical_cores"] or 1


def default_ngl(device: str, given: Optional[int] = None) -> int:
    """llama.cpp's offloaded layers: the number given, else all (99) when dasllama runs on a
    GPU and none (0) on the CPU, so the peer runs where dasllama does."""
    if given is not None:
        if given < 0:
            raise llm.BenchError(f"--llama-cpp-ngl {given}: expected 0 or more layers")
        return given
    return 0 if llm.backend_of(device) == "cpu" else 99


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
    p.add_argument("--n-depth", "--depth", default="0", metavar="D[,D...]",
                   help="tokens already in the cache before each test, comma-separated "
                        "(llama-bench's -d; default 0): every test runs at every depth, named "
                        "e.g. tg128@d4096")
    p.add_argument("--kv-type", choices=("f16", "f32", "q8_0"), default="f16",
                   help="dasllama's KV cache type (llama.cpp keeps its f16 default)")
    p.add_argument("--device", "-d", default="cpu", metavar="DEVICE",
                   help="where dasllama runs: cpu (default), vulkan (the best GPU), vulkan:N "
                        "or vulkan:NAME (a part of the device's name)")
    p.add_argument("--llama-cpp-ngl", type=int, default=None, metavar="N",
                   help="layers llama.cpp offloads to the GPU (default 99 when --device is a "
                        "GPU, else 0); its rows are GPU rows when N > 0")
    p.add_argument("--llama-cpp-flash-attn", choices=FLASH_ATTN, default="auto",
                   help="llama.cpp's flash attention (default auto: llama.cpp decides)")
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
    p.add_argument("--no-rerun", action="store_true",
                   help=f"do not run a cell again when its cv exceeds "
                        f"{100 * record.NOISE_CV:.0f}%% (it is still marked noisy)")
    p.add_argument("--check", action="store_true",
                   help="then compare the rows with the stored record of this box (exit 1 "
                        "when a row is more than 5%% below the stored mean)")
    p.add_argument("--records", metavar="DIR",
                   help="stored records for --check (default bench/records)")


def _openers(args, engines) -> dict:
    out = {}
    device = getattr(args, "device", "cpu")
    ngl = default_ngl(device, getattr(args, "llama_cpp_ngl", None))
    flash_attn = getattr(args, "llama_cpp_flash_attn", "auto")
    if "dasllama" in engines:
        out["dasllama"] = lambda path, threads, n_ctx: llm.DasllamaEngine(
            path, threads=threads, n_ctx=n_ctx, kv_type=args.kv_type, device=device)
    if "llama.cpp" in engines:
        if args.llama_bench:
            out["llama.cpp"] = lambda path, threads, n_ctx: LlamaBenchBinary(
                args.llama_bench, path, threads=threads, n_gpu_layers=ngl,
                flash_attn=flash_attn)
        else:
            python = find_peer_python(args.llama_cpp_python)
            if not python:
                raise PeerError(f"no interpreter for llama.cpp: pass --llama-cpp-python (a Python "
                                f"3.12 with `pip install cyllama`), set ${PYTHON_ENV}, pass "
                                f"--llama-bench PATH, or use --engine dasllama")
            out["llama.cpp"] = lambda path, threads, n_ctx: LlamaCppRunner(
                path, threads=threads, n_ctx=n_ctx, python=python, n_gpu_layers=ngl,
                flash_attn=flash_attn)
    return out


def _unpaired_note(device: str, ngl: int, engines) -> Optional[str]:
    """A warning when dasllama and llama.cpp would run on different backends: their rows do
    not pair (pairs share the backend class, CPU or GPU), so no ratio, board cell or check comes
    of them."""
    if "dasllama" not in engines or "llama.cpp" not in engines:
        return None
    ours_gpu, peer_gpu = llm.backend_of(device) != "cpu", ngl > 0
    if ours_gpu == peer_gpu:
        return None
    return (f"dasllama runs on {device} but llama.cpp offloads {ngl} layers: the rows of "
            f"different backends do not pair, so the run gives no ratio")


def records_dir() -> Optional[Path]:
    """bench/records of the source tree this package sits in; None in an installed wheel."""
    here = Path(__file__).resolve()
    for d in here.parents:
        if (d / "bench" / "schema.json").is_file():
            return d / "bench" / "records"
    return None


def run_and_record(paths, openers, *, threads: int, reps: int, n_prompt: int, n_gen: int,
                   depths=(0,), seed: int = 0, pause: float = 0.1, kv_type: str = "f16",
                   device: str = "cpu",
                   noise_cv: Optional[float] = record.NOISE_CV, out: Optional[str] = None,
                   quiet: bool = False, stream=None) -> tuple:
    """Run the LLM benchmark with progress on stderr and the record written as rows finish
    (see record_run). Returns (record, path written or None)."""
    def run(on_event, on_rows):
        return llm.benchmark(paths, openers, threads=threads, reps=reps, n_prompt=n_prompt,
                             n_gen=n_gen, depths=depths, seed=seed, pause=pause,
                             kv_type=kv_type, device=device, noise_cv=noise_cv, on_event=on_event,
                             on_rows=on_rows)
    return record_run(run, gpu=llm.backend_of(device) != "cpu", out=out, quiet=quiet,
                      stream=stream)


def record_run(run, *, gpu: bool = False, out: Optional[str] = None, quiet: bool = False,
               stream=None) -> tuple:
    """``run(on_event=, on_rows=)`` (a benchmark's whole run, returning its result) with
    progress on stderr and the record written as rows finish, so a stop, even a hard one,
    leaves a valid file holding every finished row. SIGTERM and SIGHUP stop it like Ctrl-C.
    With ``gpu`` the machine probe asks dasllama's runtime for the GPUs. Returns (record,
    path written or None)."""
    show = Progress(quiet, stream)
    machine = probe.machine(gpu=gpu)
    box = probe.box_name(machine)
    build = probe.build()
    path = Path(out.format(box=box)) if out else None
    written = [None]

    def checkpoint(result):
        if path is not None and result["rows"]:
            rec = record.finish(result, machine, build, None, box=box)
            rec["complete"] = False    # still running (or killed hard, if it stays so)
            written[0] = record.write(rec, path)

    with stop_on_signals():
        result = run(on_event=show, on_rows=checkpoint)
        machine["loadavg_1m_end"] = probe.loadavg()
        rec = record.finish(result, machine, build, probe.process_peak_rss_bytes(), box=box)
        if path is not None and rec["rows"]:
            written[0] = record.write(rec, path)
    stopped = result.get("stopped")
    if stopped:
        where = written[0] or "nowhere (no --out)"
        show.say(f"stopped by {stopped['signal']} after {stopped['rows_done']} of "
                 f"{stopped['rows_planned']} rows; "
                 + (f"the finished rows are kept in {where}" if rec["rows"] else
                    "no row had finished: nothing written"))
    return rec, written[0]


def run_llm(args) -> int:
    from .. import models
    names = args.model or ["smollm2", "gemma3"]
    paths = [models.find(n) for n in names]
    engines = ENGINES[args.engine]
    threads = args.threads or _default_threads()
    openers = _openers(args, engines)
    note = _unpaired_note(args.device, default_ngl(args.device, args.llama_cpp_ngl), engines)
    if note and not args.quiet:
        print(f"note: {note}", file=sys.stderr)
    rec, path = run_and_record(paths, openers, threads=threads, reps=args.reps,
                               n_prompt=args.n_prompt, n_gen=args.n_gen,
                               depths=llm.parse_depths(getattr(args, "n_depth", "0")),
                               seed=args.seed,
                               pause=args.pause, kv_type=args.kv_type, device=args.device,
                               noise_cv=None if args.no_rerun else record.NOISE_CV,
                               out=args.out, quiet=args.quiet)
    return _report(rec, path, args, memory=True)


def add_tts_arguments(p: argparse.ArgumentParser) -> None:
    from . import tts
    p.add_argument("--model", "-m", default="random", metavar="random|PATH",
                   help="a Pocket TTS .gguf (then --checkpoint and --tokenizer give the "
                        "package its source), or random (default): the package's English "
                        "model with random weights, built and converted here; or a Kokoro "
                        "model (kokoro, or its folder): then against onnxruntime on its ONNX "
                        "file, short, medium and long texts (bench/tts_kokoro.py)")
    p.add_argument("--voice", default=None,
                   help="Kokoro: the voice pack (default jf_alpha)")
    p.add_argument("--sizes", default=None, metavar="SIZES",
                   help="Kokoro: the texts to speak, of short,medium,long (default all)")
    p.add_argument("--lane", action="append", metavar="LANE",
                   help=f"with --model random: the lanes to convert and measure "
                        f"({', '.join(tts.LANES)}); repeat or separate by commas "
                        f"(default f32)")
    p.add_argument("--checkpoint", metavar="SAFETENSORS",
                   help="the TTSModel state dict the .gguf was converted from (the package "
                        "loads it)")
    p.add_argument("--tokenizer", metavar="FILE",
                   help="that model's tokenizer (tokenizers .json or SentencePiece .model)")
    p.add_argument("--language", default="english",
                   help="the package's config the checkpoint follows (default english)")
    p.add_argument("--work", metavar="DIR",
                   help="where --model random builds its files (default: the model cache)")
    p.add_argument("--engine", choices=("both", "dasllama", "pocket-tts", "kokoro-onnx"),
                   default="both", help="which engines to time (default: both, alternating)")
    p.add_argument("--device", "-d", default="cpu", metavar="DEVICE",
                   help="where dasllama runs (default cpu); the package runs on the CPU")
    p.add_argument("--threads", "-t", type=int, default=None,
                   help="threads for both engines (default: physical cores)")
    p.add_argument("--reps", "-r", type=int, default=5, help="timed requests (default 5)")
    p.add_argument("--frames", "-f", type=int, default=50,
                   help="frames a request makes, EOS off (default 50: 4 s of audio)")
    p.add_argument("--text", default=tts.TEXT, help="the sentence (one chunk)")
    p.add_argument("--temperature", type=float, default=0.3,
                   help="sampling temperature of the timed requests (default 0.3)")
    p.add_argument("--precision", choices=("f32", "fast"), default="f32",
                   help="dasllama's activations: f32 (default) or fast (8-bit in the "
                        "backbone's quantized matrices)")
    p.add_argument("--peer-device", choices=("cpu", "cuda"), default="cpu",
                   help="where the pocket-tts package runs: torch's CPU (default) or its first "
                        "CUDA GPU, whose rows pair with dasllama's on a GPU --device")
    p.add_argument("--peer-process", choices=("own", "same"), default="own",
                   help="the package in a runner process of its own (default) or in this one")
    p.add_argument("--seed", type=int, default=0, help="noise seed of the first request")
    p.add_argument("--pause", type=float, default=0.1,
                   help="seconds of rest before each timed request (default 0.1)")
    p.add_argument("--quiet-wait", type=float, default=0.0, metavar="SECONDS",
                   help="before each timed request wait up to SECONDS for the rest of the "
                        "machine to be quiet, and run a disturbed request again (default 0: "
                        "off; others' CPU use is recorded either way)")
    p.add_argument("--out", "-o", metavar="FILE",
                   help="write the JSON record there; {box} becomes the machine's label")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    p.add_argument("--no-rerun", action="store_true",
                   help="do not run an engine's requests again when a cell's cv exceeds 3%%")
    p.add_argument("--check", action="store_true",
                   help="then compare the rows with the stored record of this box")
    p.add_argument("--records", metavar="DIR",
                   help="stored records for --check (default bench/records)")


def _tts_files(args) -> tuple:
    """(GGUF paths, checkpoint, tokenizer) the run measures."""
    from . import tts
    from .. import models
    if args.model == "random":
        lanes = [x for given in (args.lane or ["f32"]) for x in given.split(",") if x]
        folder = Path(args.work) if args.work else models.cache_dir() / "pocket-random"
        built = tts.random_model(folder, lanes)
        return [built["gguf"][lane] for lane in lanes], built["checkpoint"], built["tokenizer"]
    if args.lane:
        raise llm.BenchError("--lane converts the random model; a .gguf has its own lane")
    path = models.find(args.model)
    if args.engine != "dasllama" and not (args.checkpoint and args.tokenizer):
        raise llm.BenchError(f"the package needs the weights {path.name} was converted from: "
                             f"pass --checkpoint SAFETENSORS and --tokenizer FILE (or "
                             f"--engine dasllama)")
    return [path], args.checkpoint, args.tokenizer


def _run_tts_kokoro(args) -> int:
    from . import tts_kokoro
    engines = {"both": ("dasllama", tts_kokoro.PEER)}.get(args.engine, (args.engine,))
    if "pocket-tts" in engines:
        raise llm.BenchError("--engine pocket-tts is Pocket's peer; Kokoro's is kokoro-onnx")
    threads = args.threads or _default_threads()
    sizes = tuple(x for x in (args.sizes or ",".join(tts_kokoro.TEXTS)).split(",") if x)

    def run(on_event, on_rows):
        return tts_kokoro.benchmark(args.model, threads=threads, reps=args.reps,
                                    voice=args.voice or "jf_alpha", pause=args.pause,
                                    engines=engines, sizes=sizes, on_event=on_event,
                                    on_rows=on_rows, device=args.device)
    return _report(*record_run(run, out=args.out, quiet=args.quiet), args)


def run_tts(args) -> int:
    from . import pocket_peer, tts
    from ..kokoro import is_kokoro
    if args.model != "random" and is_kokoro(args.model):
        return _run_tts_kokoro(args)
    if args.voice is not None or args.sizes is not None or args.engine == "kokoro-onnx":
        raise llm.BenchError("--voice, --sizes and --engine kokoro-onnx are for Kokoro models")
    paths, checkpoint, tokenizer = _tts_files(args)
    threads = args.threads or _default_threads()
    peer_class = (pocket_peer.PocketRunner if args.peer_process == "own"
                  else pocket_peer.PocketPackage)

    def open_dasllama(path, threads):
        return tts.DasllamaTTSEngine(path, threads=threads, device=args.device,
                                     precision=args.precision)

    def open_package(threads):
        return peer_class(checkpoint, tokenizer, threads=threads, language=args.language,
                          device=args.peer_device)

    open_ours = open_dasllama if args.engine in ("both", "dasllama") else None
    open_peer = open_package if args.engine in ("both", "pocket-tts") else None
    ours_on_gpu = llm.backend_of(args.device) != "cpu"
    if open_ours and open_peer and ours_on_gpu != (args.peer_device != "cpu") and \
            not args.quiet:
        print(f"note: dasllama runs on {args.device}, the package on {args.peer_device}: a "
              f"CPU row and a GPU row do not pair, so the run gives no ratio", file=sys.stderr)

    def run(on_event, on_rows):
        return tts.benchmark(paths, open_ours, open_peer, threads=threads, reps=args.reps,
                             frames=args.frames, text=args.text,
                             temperature=args.temperature, seed=args.seed, pause=args.pause,
                             device=args.device, quiet_wait=args.quiet_wait,
                             noise_cv=None if args.no_rerun else record.NOISE_CV,
                             checkpoint=checkpoint and Path(checkpoint),
                             on_event=on_event, on_rows=on_rows,
                             config={"precision": args.precision,
                                     "peer_process": args.peer_process,
                                     "peer_device": args.peer_device})
    return _report(*record_run(run, gpu=ours_on_gpu or args.peer_device != "cpu", out=args.out,
                               quiet=args.quiet), args)


def _report(rec: dict, path, args, memory: bool = False) -> int:
    """A finished run's table (and memory lines), where its record went, and the exit code:
    130 when a signal stopped it, else the --check comparison's, else 0."""
    if rec["rows"]:
        print(record.format_table(rec))
        if memory and rec.get("memory"):
            print()
            print(record.format_memory(rec))
    if path:
        print(f"\nrecord written to {path}" + ("" if rec["complete"] else " (incomplete)"))
    if rec.get("stopped"):
        return 130
    return _check(rec, args.records) if args.check else 0


def _check(new: dict, folder: Optional[str]) -> int:
    folder = folder or records_dir()
    if folder is None:
        print("dasllama bench check: no stored records here; pass --records DIR",
              file=sys.stderr)
        return 2
    findings = check.compare(new, check.load_records(folder))
    print(check.format_findings(findings, check.box_of(new)))
    code = check.exit_code(findings)
    if code == 2:
        print(f"nothing to compare: {folder} has no row of box {check.box_of(new)!r} for "
              f"these files and tests", file=sys.stderr)
    return code


def run_check(args) -> int:
    return _check(record.load(args.record), args.records)


def run_board(args) -> int:
    from . import board
    folder = args.records or records_dir()
    if folder is None:
        print("dasllama bench board: pass --records DIR", file=sys.stderr)
        return 2
    out = args.out or Path(folder).parent / "board"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("dasllama bench board: the charts need matplotlib (pip install matplotlib)",
              file=sys.stderr)
        return 2
    index = board.render(board.load_folder(folder), out)
    print(f"board written to {index}")
    return 0


def run_tune(args) -> int:
    from .. import models
    from . import tune
    path = models.find(args.model)
    threads = args.threads or _default_threads()
    candidates = [int(x) for x in args.candidates.split(",")]
    show = Progress(args.quiet)

    def on_event(kind, **f):
        if kind == "run":
            show.say(f"{f['knob']} = {f['value']:<5} rep {f['rep'] + 1}: {f['rate']:8.1f} t/s")

    res = tune.run_tune(path, threads=threads, n_prompt=args.n_prompt, reps=args.reps,
                        candidates=candidates, out=args.out, seed=args.seed, on_event=on_event)
    from .stats import summarize
    for value, rates in res["rates"].items():
        s = summarize(rates)
        mark = "  <- chosen" if value == res["chosen"] else ""
        mark += "  (default)" if value == res["default"] else ""
        print(f"{tune.TOKEN_TILE} = {value:<5} median {s.median:8.1f} t/s  cv "
              f"{100 * s.cv:4.1f}%{mark}")
    print(f"sidecar written to {res['path']}" if res["path"] else
          f"sidecar not written (${tuning.ENV} is off)")
    return 0


def run_tuning_show(args) -> int:
    path = Path(args.file) if args.file else tuning.sidecar_path()
    if path is None:
        print(f"${tuning.ENV} turns the tuning file off")
        return 0
    outcome = tuning.apply(path)
    print(outcome.message)
    for name, k in tuning.knobs().items():
        print(f"  {name} = {k['value']} (default {k['default']}, range [{k['min']}, "
              f"{k['max']}]): {k['description']}")
    return 1 if outcome.status == "refused" else 0


def _run_bench(args) -> int:
    """``dasllama bench --check RECORD`` (the same as ``dasllama bench check RECORD``)."""
    if args.check_record:
        return _check(record.load(args.check_record), args.records)
    args.bench_parser.print_help(sys.stderr)
    return 2


def _add_bench_parser(sub) -> None:
    """Add ``bench`` and its commands (llm, tts, asr, serve, soak, quality, check, tune, tuning,
    board) to dasllama's parser."""
    p = sub.add_parser("bench", help="measure dasllama against reference engines")
    p.add_argument("--check", dest="check_record", metavar="RECORD",
                   help="the same as `dasllama bench check RECORD`")
    p.add_argument("--records", metavar="DIR", help="stored records (default bench/records)")
    p.set_defaults(run=_run_bench, bench_parser=p)
    bsub = p.add_subparsers(dest="bench_command")

    def command(name: str, help: str, description: Optional[str], run) -> argparse.ArgumentParser:
        q = bsub.add_parser(name, help=help, description=description,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        q.set_defaults(run=run)
        return q

    from . import asr, quality, serve, soak, tts, tune
    add_llm_arguments(command("llm", "LLM prompt (ppN) and generation (tgN) throughput",
                              llm.__doc__, run_llm))
    add_tts_arguments(command("tts", "Pocket TTS request time, first audio and real-time "
                                     "factor against the pocket-tts package",
                              tts.__doc__, run_tts))
    serve.add_serve_arguments(command("serve", "dasllama serve against llama-server: aggregate "
                                               "t/s and time to first token at several "
                                               "concurrencies", serve.__doc__, serve.run_serve))
    asr.add_asr_arguments(command("asr", "Whisper real-time factor, request time and first "
                                         "text against faster-whisper (and whisper.cpp)",
                                  asr.__doc__, asr.run_asr))
    soak.add_soak_parser(bsub)
    quality.add_quality_arguments(command("quality", "Kokoro's word error rate through an "
                                                     "ASR, per lane, against onnxruntime's",
                                          quality.__doc__, quality.run_quality))
    q = command("check", "compare a fresh record with the stored one of its box",
                check.__doc__, run_check)
    q.add_argument("record", help="the fresh run's record (JSON)")
    q.add_argument("--records", metavar="DIR", help="stored records (default bench/records)")
    q = command("board", "render the records as HTML and PNG charts", _board_doc(), run_board)
    q.add_argument("--records", metavar="DIR", help="records to show (default bench/records)")
    q.add_argument("--out", metavar="DIR", help="where to write (default bench/board)")
    q = command("tune", "race kernel choices on a model; write the tuning file",
                tune.__doc__, run_tune)
    q.add_argument("--model", "-m", default="smollm2", metavar="NAME|PATH",
                   help="the model to race on (default smollm2)")
    q.add_argument("--threads", "-t", type=int, default=None,
                   help="threads (default: physical cores)")
    q.add_argument("--reps", "-r", type=int, default=3, help="repetitions a candidate (3)")
    q.add_argument("--n-prompt", "-p", type=int, default=512, help="prompt length (512)")
    q.add_argument("--candidates", default=",".join(map(str, tune.TOKEN_TILE_CANDIDATES)),
                   help="token tile widths to race (default %(default)s)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--out", "-o", metavar="FILE",
                   help=f"the tuning file (default ${tuning.ENV}, else the per-user file)")
    q.add_argument("--quiet", "-q", action="store_true", help="no progress lines on stderr")
    q = command("tuning", "show the tuning file and the knobs in effect", tuning.__doc__,
                run_tuning_show)
    q.add_argument("file", nargs="?", help="a tuning file (default: this box's)")


def _board_doc() -> str:
    from . import board
    return board.__doc__


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
