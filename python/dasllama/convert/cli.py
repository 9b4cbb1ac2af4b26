"""``dasllama convert``: checkpoints to GGUF on the command line.

::

    dasllama convert pocket model.safetensors --tokenizer tokenizer.json -o pocket.gguf
    dasllama convert pocket model.safetensors --tokenizer tokenizer.model -o pocket-q8.gguf \\
        --lane q8_0 --config english_7m.yaml
    dasllama convert whisper faster-whisper-tiny.en/ -o whisper-tiny.en.gguf
    dasllama convert whisper ggml-base.en-q5_0.bin -o whisper-base.en.gguf
    dasllama convert kokoro kokoro-v1.0.int8.onnx --voices voices_ja.npz -o kokoro.gguf
    dasllama convert kokoro kokoro-v1_0.pth --config config.json --voices af_heart.pt -o kokoro.gguf

``add_convert_parser(sub)`` adds the command to dasllama's own argument parser (the
subparsers object of ``dasllama.cli.main``); each command sets ``run``, which returns the
exit status.
"""

from __future__ import annotations

import argparse
import sys
import time

__all__ = ["add_convert_parser"]


def _cmd_pocket(args) -> int:
    from .pocket import LANES, convert_pocket

    start = time.perf_counter()
    out = convert_pocket(args.checkpoint, args.tokenizer, args.output, lane=args.lane,
                         config=args.config)
    size = out.stat().st_size
    print(f"wrote {out} ({size / 2**20:.1f} MiB, lane {args.lane}: transformer linears "
          f"{LANES[args.lane][0]}) in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


def _cmd_whisper(args) -> int:
    from .whisper import convert_whisper

    start = time.perf_counter()
    out = convert_whisper(args.directory, args.output, lane=args.lane)
    size = out.stat().st_size
    print(f"wrote {out} ({size / 2**20:.1f} MiB, lane {args.lane}) in "
          f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


def _cmd_kokoro(args) -> int:
    from . import ConvertError

    start = time.perf_counter()
    if str(args.model).endswith((".pth", ".pt")):   # hexgrad's PyTorch checkpoint
        from .kokoro_torch import convert_kokoro_torch

        if args.config is None:
            raise ConvertError(f"{args.model}: a PyTorch checkpoint needs --config config.json")
        out = convert_kokoro_torch(args.model, args.config, args.voices, args.output)
        what = "float32 weights"
    else:
        from .kokoro import convert_kokoro

        if len(args.voices) != 1:
            raise ConvertError(f"an ONNX graph takes one --voices file, got {len(args.voices)}")
        out = convert_kokoro(args.model, args.voices[0], args.output, vocab=args.vocab)
        what = "integer weights kept as int8 with their scales and zero points"
    size = out.stat().st_size
    print(f"wrote {out} ({size / 2**20:.1f} MiB; {what}) in {time.perf_counter() - start:.1f} s",
          file=sys.stderr)
    return 0


def add_convert_parser(sub) -> argparse.ArgumentParser:
    """Add ``convert`` (with its ``pocket`` subcommand) to ``sub``; returns its parser."""
    p = sub.add_parser("convert", help="convert an upstream checkpoint to GGUF")
    models = p.add_subparsers(dest="model", required=True, metavar="MODEL")
    q = models.add_parser(
        "pocket", help="Pocket TTS (Kyutai pocket-tts): a TTSModel state dict",
        description="Convert a Pocket TTS checkpoint (the released model.safetensors, or a "
                    "TTSModel state dict saved with safetensors) and its tokenizer to GGUF.")
    q.add_argument("checkpoint", metavar="CHECKPOINT.safetensors",
                   help="the TTSModel state dict (flow_lm.* and mimi.* tensors)")
    q.add_argument("--tokenizer", required=True, metavar="TOKENIZER",
                   help="the config's tokenizer: a tokenizers .json or a SentencePiece .model")
    q.add_argument("-o", "--output", required=True, metavar="OUT.gguf", help="the GGUF to write")
    q.add_argument("--lane", choices=("f32", "f16", "q8_0"), default="f32",
                   help="the transformer linears' type (default f32); everything else is f32")
    q.add_argument("--config", default=None, metavar="CONFIG",
                   help="the package's config (.yaml needs PyYAML, or .json) when it is not the "
                        "English one; fields it leaves out keep the English values")
    q.set_defaults(run=_cmd_pocket)
    q = models.add_parser(
        "whisper", help="Whisper: a CTranslate2 model directory (as faster-whisper uses it) or "
                        "a whisper.cpp ggml-*.bin file",
        description="Convert a CTranslate2 Whisper directory (model.bin, config.json, "
                    "vocabulary.json or vocabulary.txt, optionally tokenizer.json and "
                    "preprocessor_config.json), or a whisper.cpp model file (ggml-*.bin: f32, "
                    "f16 or quantized), to one GGUF: weights, mel filters, vocabulary, config.")
    q.add_argument("directory", metavar="SOURCE",
                   help="the CTranslate2 model directory or the whisper.cpp .bin file")
    q.add_argument("-o", "--output", required=True, metavar="OUT.gguf", help="the GGUF to write")
    q.add_argument("--lane", choices=("auto", "f32", "f16"), default="auto",
                   help="the matrices' type (default auto: the source's precision, a ggml "
                        "file's quantized blocks kept); norms, biases, positions and mel "
                        "filters are f32")
    q.set_defaults(run=_cmd_whisper)
    q = models.add_parser(
        "kokoro", help="Kokoro / Kitten TTS: an ONNX graph (float or int8) or hexgrad's PyTorch "
                       "checkpoint, and voice packs",
        description="Convert a Kokoro or Kitten TTS ONNX graph (as kokoro-onnx exports it), or "
                    "hexgrad's PyTorch checkpoint (.pth, with --config), its voice packs and "
                    "phoneme vocabulary to one GGUF. Dimensions come from the graph or the "
                    "checkpoint and config; a node, initializer or key the converter does not "
                    "know fails by name.")
    q.add_argument("model", metavar="MODEL", help="the ONNX graph (.onnx) or the KModel "
                                                  "checkpoint (.pth)")
    q.add_argument("--voices", required=True, nargs="+", metavar="VOICES",
                   help="voice packs: .npz (kokoro-onnx's .bin is one), or .pt (several for a "
                        "checkpoint: one file per voice, as hexgrad ships them)")
    q.add_argument("--config", default=None, metavar="CONFIG.json",
                   help="a checkpoint's config.json (widths, plbert, istftnet, vocab)")
    q.add_argument("--vocab", default=None, metavar="VOCAB.json",
                   help="the phoneme vocabulary ({\"vocab\": {symbol: id}}, kokoro's config.json); "
                        "default: vocab.json or config.json beside the model or the voices")
    q.add_argument("-o", "--output", required=True, metavar="OUT.gguf", help="the GGUF to write")
    q.set_defaults(run=_cmd_kokoro)
    return p
