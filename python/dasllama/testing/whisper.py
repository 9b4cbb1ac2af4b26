"""Random-weight Whisper models as CTranslate2 directories, for fast tests of the reader, the
converter and the chain.

``write_random_whisper_dir(folder, seed=0)`` writes ``model.bin`` (CTranslate2's binary layout,
version 6, the variables of a WhisperSpec), ``config.json``, ``vocabulary.json`` and a
``tokenizer.json`` with a few merges. The vocabulary is English-only in Whisper's order: the
256 byte-level tokens and four merged ones, <|endoftext|>, <|startoftranscript|>, one language, the task and
special tokens, then 1501 timestamps <|0.00|> .. <|30.00|>. The audio side keeps Whisper's
sizes (80 mel bins, 1500 encoder rows: 30 s windows); the widths are small.

``write_ct2_model(path, variables, aliases)`` writes any variables in that layout (a dict of
NumPy arrays; float32, float16, int8, int16 and int32 are stored by their CTranslate2 type).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Optional, Union

import numpy as np

__all__ = ["write_ct2_model", "write_random_whisper_dir", "byte_level_tokens",
           "RANDOM_WHISPER"]

_CT2_TYPE_IDS = {np.dtype("float32"): 0, np.dtype("int8"): 1, np.dtype("int16"): 2,
                 np.dtype("int32"): 3, np.dtype("float16"): 4}

# The random model's sizes.
RANDOM_WHISPER = dict(d=64, n_head=2, n_enc=2, n_dec=2, n_mels=80, n_audio_ctx=1500,
                      n_text_ctx=448)


def _string(s: str) -> bytes:
    b = s.encode("utf-8") + b"\0"
    return struct.pack("<H", len(b)) + b


def write_ct2_model(path: Union[str, os.PathLike], variables: dict, aliases: Optional[dict] = None,
                    spec: str = "WhisperSpec", revision: int = 3, version: int = 6) -> Path:
    """Write ``variables`` (name -> array) as a CTranslate2 model.bin."""
    path = Path(path)
    out = bytearray(struct.pack("<I", version))
    out += _string(spec) + struct.pack("<I", revision)
    out += struct.pack("<I", len(variables))
    for name, value in variables.items():
        a = np.array(value, order="C", copy=True)   # keeps rank 0 (ascontiguousarray would not)
        out += _string(name) + struct.pack("<B", a.ndim)
        out += b"".join(struct.pack("<I", d) for d in a.shape)
        out += struct.pack("<BI", _CT2_TYPE_IDS[a.dtype], a.nbytes) + a.tobytes()
    aliases = aliases or {}
    out += struct.pack("<I", len(aliases))
    for alias, target in aliases.items():
        out += _string(alias) + _string(target)
    path.write_bytes(bytes(out))
    return path


def byte_level_tokens() -> list:
    """GPT-2's 256 byte-level token texts, in byte order."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
                 list(range(0xAE, 0x100)))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return [mapping[b] for b in range(256)]


def _vocabulary() -> list:
    specials = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>",
                "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>",
                "<|notimestamps|>"]
    stamps = [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
    return byte_level_tokens() + [a + b for a, b in _merge_pairs()] + specials + stamps


def _merge_pairs() -> list:
    space = byte_level_tokens()[ord(" ")]
    return [(space, "t"), ("h", "e"), (space, "a"), ("i", "n")]


def write_random_whisper_dir(folder: Union[str, os.PathLike], seed: int = 0,
                             dtype=np.float32) -> Path:
    """A random-weight Whisper model as a CTranslate2 directory in ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    s = RANDOM_WHISPER
    d, ff, n_mels = s["d"], 4 * s["d"], s["n_mels"]
    vocab = _vocabulary()
    n_vocab = len(vocab)

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(dtype)

    def vec(n, scale=0.1, center=0.0):
        return (center + scale * rng.standard_normal(n)).astype(dtype)

    v = {}

    def linear(name, rows, cols):
        v[name + "/weight"] = mat(rows, cols)
        v[name + "/bias"] = vec(rows)

    def norm(name):
        v[name + "/gamma"] = vec(d, 0.1, 1.0)
        v[name + "/beta"] = vec(d)

    v["decoder/activation"] = np.array(3, np.int8)
    v["decoder/alibi"] = np.array(0, np.int8)
    v["decoder/alignment_heads"] = np.array(1, np.int16)
    v["decoder/alignment_layer"] = np.array(-1, np.int16)
    v["decoder/embeddings/weight"] = (rng.standard_normal((n_vocab, d))).astype(dtype)
    v["decoder/num_heads"] = np.array(s["n_head"], np.int16)
    v["decoder/position_encodings/encodings"] = vec(s["n_text_ctx"] * d, 0.5).reshape(
        s["n_text_ctx"], d)
    v["decoder/pre_norm"] = np.array(1, np.int8)
    v["decoder/scale_embeddings"] = np.array(0, np.int8)
    v["decoder/start_from_zero_embedding"] = np.array(0, np.int8)
    norm("decoder/layer_norm")
    for i in range(s["n_dec"]):
        p = f"decoder/layer_{i}"
        norm(p + "/self_attention/layer_norm")
        linear(p + "/self_attention/linear_0", 3 * d, d)
        linear(p + "/self_attention/linear_1", d, d)
        norm(p + "/attention/layer_norm")
        linear(p + "/attention/linear_0", d, d)
        linear(p + "/attention/linear_1", 2 * d, d)
        linear(p + "/attention/linear_2", d, d)
        norm(p + "/ffn/layer_norm")
        linear(p + "/ffn/linear_0", ff, d)
        linear(p + "/ffn/linear_1", d, ff)
    v["encoder/conv1/weight"] = (rng.standard_normal((d, n_mels, 3)) /
                                 np.sqrt(3 * n_mels)).astype(dtype)
    v["encoder/conv1/bias"] = vec(d)
    v["encoder/conv2/weight"] = (rng.standard_normal((d, d, 3)) / np.sqrt(3 * d)).astype(dtype)
    v["encoder/conv2/bias"] = vec(d)
    v["encoder/num_heads"] = np.array(s["n_head"], np.int16)
    t = np.arange(s["n_audio_ctx"])[:, None] * np.exp(
        -np.log(10000.0) * np.arange(d // 2) / (d // 2 - 1))[None, :]
    v["encoder/position_encodings/encodings"] = np.concatenate(
        [np.sin(t), np.cos(t)], axis=1).astype(dtype)
    norm("encoder/layer_norm")
    for i in range(s["n_enc"]):
        p = f"encoder/layer_{i}"
        norm(p + "/self_attention/layer_norm")
        linear(p + "/self_attention/linear_0", 3 * d, d)
        linear(p + "/self_attention/linear_1", d, d)
        norm(p + "/ffn/layer_norm")
        linear(p + "/ffn/linear_0", ff, d)
        linear(p + "/ffn/linear_1", d, ff)
    write_ct2_model(folder / "model.bin", dict(sorted(v.items())),
                    {"decoder/projection/weight": "decoder/embeddings/weight"})
    eot = vocab.index("<|endoftext|>")
    byte_tokens = byte_level_tokens()
    space = byte_tokens[ord(" ")]
    config = {"alignment_heads": [[1, 0], [1, 1]], "lang_ids": [vocab.index("<|en|>")],
              # a few punctuation tokens stand in for the non-speech tokens
              "suppress_ids": [byte_tokens.index(c) for c in '"#()*+/:;<=>@[]^_{|}~'],
              "suppress_ids_begin": [byte_tokens.index(space), eot]}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "vocabulary.json").write_text(json.dumps(vocab))
    merges = [f"{a} {b}" for a, b in _merge_pairs()]
    (folder / "tokenizer.json").write_text(json.dumps(
        {"model": {"type": "BPE", "vocab": {t: i for i, t in enumerate(vocab[:eot])},
                   "merges": merges}}))
    return folder
