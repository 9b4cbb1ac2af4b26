"""`dasllama serve`: the OpenAI-compatible server from the command line.

::

    dasllama serve -m smollm2 --parallel 4 --port 8080
    dasllama serve -m chat=smollm2 -m ./other.gguf --api-key KEY --cors http://localhost:3000

Each -m is a model name, a .gguf path, or NAME=MODEL to serve it under NAME (the `model`
field of requests); without a NAME a path is served under its file name's stem.

    dasllama serve --tts pocket=./pocket.gguf --voice alice=./alice.wav   # /v1/audio/speech
    dasllama serve -m smollm2 --asr                     # + /v1/audio/transcriptions (tiny.en)
    dasllama serve --asr whisper-tiny.en --asr en=./whisper.gguf          # speech to text only
    dasllama serve -m smollm2 --ray --replicas 2                          # on Ray Serve
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .config import (DEFAULT_CTX, DEFAULT_HOST, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUEUE,
                     DEFAULT_MAX_UPLOAD_BYTES, DEFAULT_PARALLEL, DEFAULT_PORT,
                     DEFAULT_TIMEOUT_S, ModelSpec, ServerConfig)

__all__ = ["add_serve_parser", "model_specs", "tts_specs", "asr_specs", "DEFAULT_ASR_MODEL"]

API_KEY_ENV = "DASLLAMA_API_KEY"
# The speech recognition model --asr serves when it is given without a value: the smallest
# packaged Whisper, fetched on first use like the default language model.
DEFAULT_ASR_MODEL = "whisper-tiny.en"

_DESCRIPTION = """Serve models over an OpenAI-compatible HTTP API (/v1/chat/completions,
/v1/completions, /v1/embeddings, /v1/models, /tokenize, /detokenize, /metrics, /health;
/v1/audio/speech with --tts; /v1/audio/transcriptions and /translations with --asr).

  dasllama serve -m smollm2 --parallel 4 --port 8080
  dasllama serve -m chat=smollm2 -m ./other.gguf --api-key KEY --cors http://localhost:3000

Each -m is a model name, a .gguf path, or NAME=MODEL to serve it under NAME (the `model`
field of requests); without a NAME a path is served under its file name's stem."""


def _name_and_source(value: str, flag: str) -> tuple:
    """(NAME, MODEL) of a NAME=MODEL value; NAME is "" for a bare MODEL."""
    name, sep, source = value.partition("=")
    if not sep:
        return "", value
    if not name:
        raise ValueError(f"{flag} {value!r}: the name before '=' is empty")
    return name, source


def model_specs(values) -> list:
    """ModelSpecs from -m values (NAME, PATH or NAME=MODEL); each model is found now, so a
    typo fails before the server starts."""
    from .. import models
    from ..llm import DEFAULT_MODEL

    specs = []
    for value in values or [DEFAULT_MODEL]:
        name, source = _name_and_source(value, "-m")
        path = models.find(source)
        if not name:
            name = source if source in models.PACKAGED else Path(path).stem
        specs.append(ModelSpec(name=name, source=str(path)))
    return specs


def tts_specs(values, voices) -> list:
    """Speech ModelSpecs from --tts values (NAME, PATH or NAME=MODEL) with the --voice
    NAME=FILE voices; models and voice files are found now."""
    from .. import models

    voice_files = {}
    for value in voices or []:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--voice {value!r}: expected NAME=FILE (a .wav or a voice file)")
        if not os.path.isfile(path):
            raise ValueError(f"--voice {value!r}: no file {path!r}")
        voice_files[name] = path
    specs = []
    for value in values or []:
        name, source = _name_and_source(value, "--tts")
        path = models.find(source)
        specs.append(ModelSpec(name=name or Path(path).stem, source=str(path), kind="tts",
                               voices=dict(voice_files)))
    return specs


def asr_specs(values) -> list:
    """Speech recognition ModelSpecs from --asr values (NAME, PATH or NAME=MODEL; the flag
    alone gives DEFAULT_ASR_MODEL). A packaged model keeps its name and is fetched when it
    loads if it is not here yet; a path must exist now."""
    from .. import models

    specs = []
    for value in values or []:
        name, source = _name_and_source(value, "--asr")
        if os.path.exists(source):   # a folder keeps its whole name ("whisper-tiny.en")
            name = name or (Path(source).name if os.path.isdir(source) else Path(source).stem)
        elif models.is_pullable(source) and not models.is_hub_reference(source):
            name = name or source
        else:
            raise ValueError(f"--asr {value!r}: no such file or folder, and {source!r} is not "
                             f"a packaged model (whisper models: "
                             f"{', '.join(n for n in models.PACKAGED if 'whisper' in n)})")
        specs.append(ModelSpec(name=name, source=source, kind="asr"))
    return specs


def _autoscale(text):
    low, sep, high = text.partition(":")
    try:
        bounds = (int(low), int(high)) if sep else None
    except ValueError:
        bounds = None
    if bounds is None or not 0 <= bounds[0] <= bounds[1] or bounds[1] < 1:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX replicas with 0 <= MIN <= MAX "
                                         f"and MAX >= 1, got {text!r}")
    return bounds


def _positive(kind):
    def parse(text):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    return parse


def _non_negative(kind):
    def parse(text):
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value
    return parse


def add_serve_parser(sub) -> argparse.ArgumentParser:
    """Adds the `serve` subcommand to an argparse subparsers object."""
    p = sub.add_parser("serve", help="serve models over an OpenAI-compatible HTTP API",
                       description=_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", action="append", default=None, metavar="MODEL",
                   help="a model name, a .gguf path, or NAME=MODEL (repeatable; default "
                        "smollm2)")
    p.add_argument("--tts", action="append", default=None, metavar="MODEL",
                   help="a Pocket TTS model to serve on /v1/audio/speech: a name, a .gguf "
                        "path, or NAME=MODEL (repeatable); with --tts and no -m, no language "
                        "model is served")
    p.add_argument("--voice", action="append", default=None, metavar="NAME=FILE",
                   help="a voice for the --tts models: a .wav to clone or a voice file "
                        "(repeatable; the voice 'default' is the model's own)")
    p.add_argument("--asr", action="append", nargs="?", const=DEFAULT_ASR_MODEL, default=None,
                   metavar="MODEL",
                   help=f"a Whisper model to serve on /v1/audio/transcriptions and "
                        f"/translations: a packaged name, a .gguf or a CTranslate2 folder, or "
                        f"NAME=MODEL (repeatable; alone: {DEFAULT_ASR_MODEL}); with --asr and "
                        f"no -m, no language model is served")
    p.add_argument("--parallel", type=_positive(int), default=DEFAULT_PARALLEL, metavar="N",
                   help=f"sequences decoded together per model (slots; default "
                        f"{DEFAULT_PARALLEL})")
    p.add_argument("--ctx", type=_positive(int), default=DEFAULT_CTX, metavar="N",
                   help=f"context of each slot in tokens (default {DEFAULT_CTX})")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to bind (default {DEFAULT_HOST}: this machine only)")
    p.add_argument("--port", type=_non_negative(int), default=DEFAULT_PORT,
                   help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_ENV), metavar="KEY",
                   help=f"require 'Authorization: Bearer KEY' on every route but /health "
                        f"(default ${API_KEY_ENV}; none: no auth)")
    p.add_argument("--cors", default=None, metavar="ORIGINS",
                   help="allow browsers from these origins (comma-separated, or *); "
                        "default: CORS off")
    p.add_argument("--max-queue", type=_non_negative(int), default=DEFAULT_MAX_QUEUE,
                   metavar="N", help=f"requests that may wait for a slot per model before "
                                     f"new ones get 503 (default {DEFAULT_MAX_QUEUE})")
    p.add_argument("--keep-alive", type=_non_negative(float), default=None, metavar="SECONDS",
                   help="unload a model idle this long; it reloads on the next request "
                        "(default: keep loaded)")
    p.add_argument("--threads", type=_positive(int), default=None, metavar="N",
                   help="worker threads per model (default: one per physical core)")
    p.add_argument("--device", default=None,
                   help="cpu, vulkan, vulkan:N or metal (default $DASLLAMA_DEVICE, else cpu)")
    p.add_argument("--kv-type", default="f16", choices=["f16", "f32", "q8_0"],
                   help="KV cache element type (default f16)")
    p.add_argument("--sliding-rings", action="store_true",
                   help="sliding-window layers (Gemma-3's local layers) keep a ring of "
                        "window + 127 rows per slot instead of --ctx: a smaller KV pool, but "
                        "prompt chunks of at most 128 tokens and no reuse of a cached prefix "
                        "whose window has left the ring (default off)")
    p.add_argument("--timeout", type=_positive(float), default=DEFAULT_TIMEOUT_S,
                   metavar="SECONDS", help=f"cancel a generation request after this long "
                                           f"(default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--max-body", type=_positive(int), default=DEFAULT_MAX_BODY_BYTES,
                   metavar="BYTES", help=f"largest request body (default "
                                         f"{DEFAULT_MAX_BODY_BYTES})")
    p.add_argument("--max-upload", type=_positive(int), default=DEFAULT_MAX_UPLOAD_BYTES,
                   metavar="BYTES", help=f"largest transcription or translation request (the "
                                         f"audio file and its form; default "
                                         f"{DEFAULT_MAX_UPLOAD_BYTES})")
    p.add_argument("--log-level", default="warning",
                   choices=["critical", "error", "warning", "info", "debug"],
                   help="server log level (default warning; info logs every request)")
    p.add_argument("--ray", action="store_true",
                   help="serve on Ray Serve (the ray extra): replicas of the server behind "
                        "Ray's proxy on --host:--port; joins $RAY_ADDRESS or starts a local "
                        "cluster")
    p.add_argument("--replicas", type=_positive(int), default=1, metavar="N",
                   help="with --ray: replicas of the server (default 1)")
    p.add_argument("--autoscale", type=_autoscale, default=None, metavar="MIN:MAX",
                   help="with --ray: scale between MIN and MAX replicas by load instead of "
                        "--replicas")
    p.set_defaults(run=_cmd_serve)
    return p


def config_from_args(args) -> ServerConfig:
    cors = None
    if args.cors:
        cors = [o.strip() for o in args.cors.split(",") if o.strip()]
    tts = tts_specs(getattr(args, "tts", None), getattr(args, "voice", None))
    asr = asr_specs(getattr(args, "asr", None))
    llms = model_specs(args.model) if args.model or not (tts or asr) else []
    return ServerConfig(models=llms + tts + asr, host=args.host, port=args.port,
                        parallel=args.parallel, n_ctx=args.ctx, threads=args.threads,
                        device=args.device, kv_type=args.kv_type,
                        sliding_rings=bool(getattr(args, "sliding_rings", False)),
                        api_key=args.api_key or None,
                        cors_origins=cors or None, max_queue=args.max_queue,
                        keep_alive=args.keep_alive, max_body_bytes=args.max_body,
                        max_upload_bytes=getattr(args, "max_upload", DEFAULT_MAX_UPLOAD_BYTES),
                        request_timeout=args.timeout)


def _cmd_serve(args) -> int:
    try:
        from . import run
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        print(f"dasllama: error: serving needs the server extra (pip install "
              f"'dasllama[server]'): {e}", file=sys.stderr)
        return 1
    config = config_from_args(args)
    if any(m.kind == "asr" for m in config.models):
        from .routers.transcription import multipart_missing
        if multipart_missing():
            print(f"dasllama: error: --asr: {multipart_missing()}", file=sys.stderr)
            return 1
    names = ", ".join(m.name for m in config.models)
    if getattr(args, "ray", False):
        try:
            from .ray_serve import RayOptions, serve_blocking
        except ImportError as e:
            print(f"dasllama: error: {e}", file=sys.stderr)
            return 1
        serve_blocking(config, RayOptions(replicas=args.replicas, autoscale=args.autoscale))
        return 0

    def announce(url: str) -> None:
        print(f"dasllama serve: listening on {url}/v1 (models: {names}; {config.parallel} "
              f"slots of {config.n_ctx} tokens each)", file=sys.stderr, flush=True)

    run(config, log_level=args.log_level, access_log=args.log_level in ("info", "debug"),
        announce=announce)
    return 0
