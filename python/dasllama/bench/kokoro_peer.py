"""The Kokoro peer the benches share: onnxruntime on the model's int8 ONNX file (the engine
kokoro-onnx runs), and the files of a pulled Kokoro folder (the graph, the GGUF converted from
it, the vocabulary and the voice packs)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

import numpy as np

from .llm import BenchError

__all__ = ["onnx_speaker", "kokoro_files", "file_sha256"]


def onnx_speaker(model_file: Path, threads: int) -> Callable:
    """A speak(ids, style, speed) over onnxruntime on the ONNX file."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise BenchError(f"the onnxruntime lane needs the onnxruntime package: {e}") from None
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in sess.get_inputs()}

    def speak(ids, style, speed):
        feed = {"tokens": np.array([[0, *ids, 0]], np.int64),
                "style": np.asarray(style, np.float32).reshape(1, -1),
                "speed": np.array([speed], np.float32)}
        feed = {k: v for k, v in feed.items() if k in inputs}
        return np.asarray(sess.run(["audio"], feed)[0], np.float32).reshape(-1)

    return speak


def kokoro_files(name: str):
    """(onnx file, converted GGUF, vocab, voice packs) of a pulled Kokoro model folder."""
    from .. import models
    from ..kokoro import resolve_model

    folder = Path(name) if Path(name).is_dir() else models.find_or_pull(name)
    onnx = sorted(folder.glob("*.onnx")) if folder.is_dir() else []
    voices = sorted(folder.glob("voices*.npz")) if folder.is_dir() else []
    if not onnx or not voices:
        raise BenchError(f"{folder}: the peer runs a Kokoro model folder with an .onnx file "
                         "and a voices*.npz pack (dasllama pull kokoro)")
    gguf = resolve_model(folder)     # converted once into the cache
    vocab = json.loads((folder / "vocab.json").read_text())["vocab"]
    packs = dict(np.load(voices[0]))
    return onnx[0], gguf, vocab, packs


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
