"""Whisper: a CTranslate2 model directory (as faster-whisper uses it) to one GGUF.

A directory holds ``model.bin`` (:mod:`dasllama.convert.ct2`), ``config.json`` (suppressed
tokens, language ids, alignment heads), a vocabulary (``vocabulary.json``, a JSON list, or
``vocabulary.txt``, one token a line), optionally ``tokenizer.json`` (its BPE merges, for
encoding prompts) and ``preprocessor_config.json`` (``feature_size``: the mel bins, 80 unless
it says 128). The GGUF gets the weights under the names below, the mel filterbank, the
vocabulary as a GPT-2 byte-level tokenizer (``tokenizer.ggml.*``) and the config
(``whisper.*``).

Tensor names (NumPy shapes; d = n_audio_state = n_text_state)::

    enc.conv1.weight [d, n_mels, 3]   enc.conv1.bias [d]   enc.conv2.weight [d, d, 3] ...
    enc.pos [n_audio_ctx, d]          enc.ln_post.{weight,bias}
    enc.blk.N.attn_ln.{weight,bias}   enc.blk.N.attn.qkv.{weight [3d, d], bias [3d]}
    enc.blk.N.attn.out.{weight,bias}  enc.blk.N.mlp_ln.*  enc.blk.N.mlp.fc1.*  enc.blk.N.mlp.fc2.*
    dec.tok_emb [n_vocab, d]          dec.pos [n_text_ctx, d]   dec.ln.{weight,bias}
    dec.blk.N.attn_ln / attn.qkv / attn.out       (self-attention)
    dec.blk.N.cross_ln / cross.q / cross.kv [2d, d] / cross.out   (cross-attention)
    dec.blk.N.mlp_ln / mlp.fc1 / mlp.fc2
    mel_filters [n_mels, n_fft / 2 + 1]

The output projection is tied to ``dec.tok_emb`` (a model whose projection is its own
variable gets ``dec.proj.weight``). An int8 model's matrices (lane "auto") are written as
stored: I8 ``NAME`` with F32 ``NAME_scale`` [rows] (weight = q / scale).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

import numpy as np

from . import ConvertError, GGUFWriter
from .ct2 import Ct2FormatError, Ct2Model, dequantized, read_ct2_model

__all__ = ["WhisperDirError", "WhisperDir", "WhisperTensor", "read_whisper_dir",
           "convert_whisper", "write_whisper_gguf", "mel_filters", "LANES"]

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_SECONDS = 30
# CTranslate2's Activation enum value for the erf GELU that Whisper uses.
_CT2_GELU = 3
# Matrices' GGUF type per lane; norms, biases, positions, convolutions and the mel filters
# stay F32 in every lane. "auto" keeps the source's precision (float16 -> F16).
LANES = ("auto", "f32", "f16")

_SPECIALS = {  # field -> the token's text (several spellings where models differ)
    "eot": ("<|endoftext|>",), "sot": ("<|startoftranscript|>",),
    "translate": ("<|translate|>",), "transcribe": ("<|transcribe|>",),
    "sot_lm": ("<|startoflm|>",), "sot_prev": ("<|startofprev|>",),
    "no_speech": ("<|nospeech|>", "<|nocaptions|>"), "no_timestamps": ("<|notimestamps|>",),
}


class WhisperDirError(Ct2FormatError):
    """A Whisper model directory that is incomplete or inconsistent; the message names the
    file and the field."""


@dataclass
class WhisperDir:
    """What a CTranslate2 Whisper directory holds, checked (weights stay in the mapping)."""

    path: Path
    model: Ct2Model
    hparams: dict
    tokens: list
    merges: list
    special: dict                                  # field -> token id (see _SPECIALS)
    config: dict = field(default_factory=dict)     # config.json


def mel_filters(sample_rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """Triangular filters on the Slaney mel scale, area-normalized ("slaney" norm), as Whisper's
    front end uses them: [n_mels, n_fft // 2 + 1] float32. The scale is linear (200/3 Hz a mel)
    up to 1 kHz and logarithmic above (27 mels an octave of 6.4x); the band edges are n_mels + 2
    points evenly spaced in mels from 0 Hz to the Nyquist frequency."""
    f_sp = 200.0 / 3.0
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0

    def hz_to_mel(f: float) -> float:
        return f / f_sp if f < min_log_hz else min_log_mel + np.log(f / min_log_hz) / logstep

    mels = np.linspace(0.0, hz_to_mel(sample_rate / 2.0), n_mels + 2)
    edges = np.where(mels >= min_log_mel, min_log_hz * np.exp(logstep * (mels - min_log_mel)),
                     f_sp * mels)
    bins = np.arange(n_fft // 2 + 1) * (sample_rate / n_fft)
    width = np.diff(edges)
    rising = (bins[None, :] - edges[:-2, None]) / width[:-1, None]
    falling = (edges[2:, None] - bins[None, :]) / width[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.astype(np.float32)


def _read_json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise WhisperDirError(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WhisperDirError(f"{path}: the {what} is not JSON: {e}") from None


def _vocabulary(folder: Path) -> list:
    as_json, as_text = folder / "vocabulary.json", folder / "vocabulary.txt"
    if as_json.is_file():
        tokens = _read_json(as_json, "vocabulary")
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise WhisperDirError(f"{as_json}: the vocabulary is not a JSON list of strings")
        return tokens
    if as_text.is_file():
        try:
            text = as_text.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise WhisperDirError(f"{as_text}: cannot read the vocabulary: {e}") from None
        return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    raise WhisperDirError(f"{folder}: no vocabulary (vocabulary.json or vocabulary.txt)")


def _merges(folder: Path) -> list:
    path = folder / "tokenizer.json"
    if not path.is_file():
        return []
    tok = _read_json(path, "tokenizer")
    merges = tok.get("model", {}).get("merges") if isinstance(tok, dict) else None
    if not isinstance(merges, list):
        raise WhisperDirError(f"{path}: field model.merges is missing or not a list")
    # tokenizers writes a merge as "a b" or, in newer files, as ["a", "b"]
    return [m if isinstance(m, str) else " ".join(m) for m in merges]


def _int_list(config: dict, key: str, path: Path, pairs: bool = False) -> list:
    value = config.get(key, [])
    ok = isinstance(value, list) and all(
        (isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)) if pairs
        else isinstance(v, int) for v in value)
    if not ok:
        raise WhisperDirError(f"{path}: field {key!r} is not a list of "
                              f"{'[layer, head] pairs' if pairs else 'integers'}")
    return value


def read_whisper_dir(folder: Union[str, os.PathLike]) -> WhisperDir:
    """Read and check a CTranslate2 Whisper directory. Raises WhisperDirError (a
    ConvertError) naming the file and the field that is wrong."""
    folder = Path(folder)
    if not folder.is_dir():
        raise WhisperDirError(f"{folder}: not a directory (a CTranslate2 Whisper model is a "
                              "folder with model.bin, config.json and a vocabulary)")
    bin_path = folder / "model.bin"
    if not bin_path.is_file():
        raise WhisperDirError(f"{folder}: model.bin is missing")
    model = read_ct2_model(bin_path)
    if model.spec != "WhisperSpec":
        raise WhisperDirError(f"{bin_path}: spec is {model.spec!r}, not 'WhisperSpec'")
    config_path = folder / "config.json"
    config = _read_json(config_path, "config") if config_path.is_file() else {}
    if not isinstance(config, dict):
        raise WhisperDirError(f"{config_path}: the config is not a JSON object")
    n_mels = 80
    pre_path = folder / "preprocessor_config.json"
    if pre_path.is_file():
        pre = _read_json(pre_path, "preprocessor config")
        n_mels = pre.get("feature_size", 80) if isinstance(pre, dict) else None
        if n_mels not in (80, 128):
            raise WhisperDirError(f"{pre_path}: field 'feature_size' is {n_mels!r} "
                                  "(80 or 128)")

    def check(name: str, want) -> None:
        have = model.scalar(name)
        if have != want:
            raise WhisperDirError(f"{bin_path}: variable {name!r} is {have}, expected {want} "
                                  "(not a Whisper layout this converter knows)")

    check("decoder/activation", _CT2_GELU)
    check("decoder/pre_norm", 1)
    check("decoder/alibi", 0)
    check("decoder/scale_embeddings", 0)

    def shape(name: str, rank: int) -> tuple:
        s = model.get(name).shape
        if len(s) != rank:
            raise WhisperDirError(f"{bin_path}: variable {name!r} has shape {s}, expected "
                                  f"{rank} dimensions")
        return s

    d, mels_in, k = shape("encoder/conv1/weight", 3)
    if mels_in != n_mels or k != 3:
        raise WhisperDirError(f"{bin_path}: variable 'encoder/conv1/weight' has shape "
                              f"{(d, mels_in, k)}, expected ({d}, {n_mels}, 3) for {n_mels} "
                              "mel bins")
    n_audio_ctx = shape("encoder/position_encodings/encodings", 2)[0]
    n_vocab, d_text = shape("decoder/embeddings/weight", 2)
    n_text_ctx = shape("decoder/position_encodings/encodings", 2)[0]
    n_enc = sum(1 for n in model.variables if n.startswith("encoder/layer_")
                and n.endswith("/self_attention/layer_norm/gamma"))
    n_dec = sum(1 for n in model.variables if n.startswith("decoder/layer_")
                and n.endswith("/self_attention/layer_norm/gamma"))
    hp = dict(n_mels=n_mels, n_audio_ctx=n_audio_ctx, n_audio_state=d,
              n_audio_head=model.scalar("encoder/num_heads"), n_audio_layer=n_enc,
              n_text_ctx=n_text_ctx, n_text_state=d_text,
              n_text_head=model.scalar("decoder/num_heads"), n_text_layer=n_dec,
              n_vocab=n_vocab)
    if d_text != d or n_enc == 0 or n_dec == 0 or d % hp["n_audio_head"] \
            or d % hp["n_text_head"]:
        raise WhisperDirError(f"{bin_path}: inconsistent sizes {hp}")
    tokens = _vocabulary(folder)
    if len(tokens) != n_vocab:
        raise WhisperDirError(f"{folder}: the vocabulary has {len(tokens)} tokens, "
                              f"decoder/embeddings/weight has {n_vocab} rows")
    index = {t: i for i, t in enumerate(tokens)}
    special = {}
    for key, texts in _SPECIALS.items():
        hit = next((index[t] for t in texts if t in index), None)
        if hit is None:
            raise WhisperDirError(f"{folder}: the vocabulary has no {' or '.join(texts)}")
        special[key] = hit
    special["timestamp_begin"] = special["no_timestamps"] + 1
    if special["timestamp_begin"] >= n_vocab:
        raise WhisperDirError(f"{folder}: no timestamp tokens follow <|notimestamps|>")
    for key in ("suppress_ids", "suppress_ids_begin", "lang_ids"):
        bad = [i for i in _int_list(config, key, config_path) if not 0 <= i < n_vocab]
        if bad:
            raise WhisperDirError(f"{config_path}: field {key!r} holds ids outside the "
                                  f"vocabulary: {bad[:5]}")
    heads = _int_list(config, "alignment_heads", config_path, pairs=True)
    if any(not (0 <= l < n_dec and 0 <= h < hp["n_text_head"]) for l, h in heads):
        raise WhisperDirError(f"{config_path}: field 'alignment_heads' names a layer or head "
                              "the model does not have")
    return WhisperDir(folder, model, hp, tokens, _merges(folder), special, config)


# ----------------------------------------------------------------------------- writing

def _tensor_map(wd: WhisperDir) -> list:
    """(gguf name, ct2 name, is a matrix) for every weight."""
    out = [("enc.conv1.weight", "encoder/conv1/weight", False),
           ("enc.conv1.bias", "encoder/conv1/bias", False),
           ("enc.conv2.weight", "encoder/conv2/weight", False),
           ("enc.conv2.bias", "encoder/conv2/bias", False),
           ("enc.pos", "encoder/position_encodings/encodings", False),
           ("enc.ln_post.weight", "encoder/layer_norm/gamma", False),
           ("enc.ln_post.bias", "encoder/layer_norm/beta", False),
           ("dec.tok_emb", "decoder/embeddings/weight", True),
           ("dec.pos", "decoder/position_encodings/encodings", False),
           ("dec.ln.weight", "decoder/layer_norm/gamma", False),
           ("dec.ln.bias", "decoder/layer_norm/beta", False)]

    def norm(gguf: str, ct2: str) -> list:
        return [(gguf + ".weight", ct2 + "/gamma", False), (gguf + ".bias", ct2 + "/beta", False)]

    def linear(gguf: str, ct2: str) -> list:
        return [(gguf + ".weight", ct2 + "/weight", True), (gguf + ".bias", ct2 + "/bias", False)]

    for i in range(wd.hparams["n_audio_layer"]):
        g, c = f"enc.blk.{i}", f"encoder/layer_{i}"
        out += norm(g + ".attn_ln", c + "/self_attention/layer_norm")
        out += linear(g + ".attn.qkv", c + "/self_attention/linear_0")
        out += linear(g + ".attn.out", c + "/self_attention/linear_1")
        out += norm(g + ".mlp_ln", c + "/ffn/layer_norm")
        out += linear(g + ".mlp.fc1", c + "/ffn/linear_0")
        out += linear(g + ".mlp.fc2", c + "/ffn/linear_1")
    for i in range(wd.hparams["n_text_layer"]):
        g, c = f"dec.blk.{i}", f"decoder/layer_{i}"
        out += norm(g + ".attn_ln", c + "/self_attention/layer_norm")
        out += linear(g + ".attn.qkv", c + "/self_attention/linear_0")
        out += linear(g + ".attn.out", c + "/self_attention/linear_1")
        out += norm(g + ".cross_ln", c + "/attention/layer_norm")
        out += linear(g + ".cross.q", c + "/attention/linear_0")
        out += linear(g + ".cross.kv", c + "/attention/linear_1")
        out += linear(g + ".cross.out", c + "/attention/linear_2")
        out += norm(g + ".mlp_ln", c + "/ffn/layer_norm")
        out += linear(g + ".mlp.fc1", c + "/ffn/linear_0")
        out += linear(g + ".mlp.fc2", c + "/ffn/linear_1")
    proj = "decoder/projection/weight"
    if wd.model.has(proj) and wd.model.aliases.get(proj) != "decoder/embeddings/weight":
        out.append(("dec.proj.weight", proj, True))
    return out


def _byte_level_types(tokens: list, special: dict) -> list:
    """tokenizer.ggml.token_type: 1 (normal) below <|endoftext|>, 3 (control) from it on:
    the special, language and timestamp tokens, which text decoding leaves out."""
    eot = special["eot"]
    return [1 if i < eot else 3 for i in range(len(tokens))]


@dataclass
class WhisperTensor:
    """One tensor for the GGUF: values (float32, encoded to ``type`` on write) or, when
    ``encoded``, bytes already in ``type``'s layout (copied from a ggml file)."""

    name: str
    shape: tuple
    type: str
    data: Callable[[], object]
    encoded: bool = False


def write_whisper_gguf(output: Union[str, os.PathLike], *, name: str, source: str, hparams: dict,
                       special: dict, config: dict, tokens: list, merges: list,
                       tensors: list, filters: np.ndarray) -> Path:
    """The GGUF both sources (a CTranslate2 directory, a whisper.cpp ggml file) become: the
    ``whisper.*`` config, the vocabulary as a GPT-2 byte-level tokenizer, the tensors (a list
    of WhisperTensor under the names of the module docstring) and the mel filterbank."""
    w = GGUFWriter()
    w.add("general.architecture", "str", "whisper")
    w.add("general.name", "str", name)
    w.add("general.source", "str", source)
    for key, value in hparams.items():
        w.add(f"whisper.{key}", "u32", int(value))
    w.add("whisper.sample_rate", "u32", SAMPLE_RATE)
    w.add("whisper.n_fft", "u32", N_FFT)
    w.add("whisper.hop_length", "u32", HOP_LENGTH)
    w.add("whisper.chunk_seconds", "u32", CHUNK_SECONDS)
    for key, value in special.items():
        w.add(f"whisper.token.{key}", "u32", int(value))
    w.add("whisper.suppress_ids", "i32[]", config.get("suppress_ids", []))
    w.add("whisper.suppress_ids_begin", "i32[]", config.get("suppress_ids_begin", []))
    w.add("whisper.lang_ids", "i32[]", config.get("lang_ids", []))
    w.add("whisper.alignment_heads", "i32[]",
          [x for pair in config.get("alignment_heads", []) for x in pair])
    w.add("tokenizer.ggml.model", "str", "gpt2")
    w.add("tokenizer.ggml.pre", "str", "gpt2")
    w.add("tokenizer.ggml.tokens", "str[]", tokens)
    w.add("tokenizer.ggml.token_type", "i32[]", _byte_level_types(tokens, special))
    if merges:
        w.add("tokenizer.ggml.merges", "str[]", merges)
    w.add("tokenizer.ggml.eos_token_id", "u32", special["eot"])
    w.add("tokenizer.ggml.bos_token_id", "u32", special["sot"])
    w.add("tokenizer.ggml.add_bos_token", "bool", False)
    for t in tensors:
        if t.encoded:
            w.add_encoded_tensor(t.name, t.shape, t.type, t.data)
        else:
            w.add_tensor(t.name, t.shape, t.type, t.data)
    filters = np.asarray(filters, dtype=np.float32)
    w.add_tensor("mel_filters", filters.shape, "F32", lambda: filters)
    return w.write(output)


def _row_scales(wd: WhisperDir, name: str, rows: int) -> np.ndarray:
    """The per-row scales of the int8 matrix ``name`` (one value broadcast to every row)."""
    scale_name = name + "_scale"
    if not wd.model.has(scale_name):
        raise WhisperDirError(f"{wd.path / 'model.bin'}: int8 variable {name!r} has no "
                              f"{scale_name!r}")
    scale = np.asarray(dequantized(wd.model, scale_name), np.float32).reshape(-1)
    if scale.size not in (1, rows) or not (np.isfinite(scale).all() and (scale > 0).all()):
        raise WhisperDirError(f"{wd.path / 'model.bin'}: {scale_name!r} is not {rows} positive "
                              "finite values")
    return np.broadcast_to(scale, (rows,)).copy()


def convert_whisper(folder: Union[str, os.PathLike], output: Union[str, os.PathLike],
                    lane: str = "auto") -> Path:
    """Write the Whisper model in ``folder`` (a CTranslate2 directory; or a whisper.cpp ggml
    ``.bin`` file, see :mod:`dasllama.convert.whisper_ggml`) to ``output`` (.gguf).
    lane: the matrices' type: "auto" (the source's precision: F16 for float16 weights, I8 with
    NAME_scale [rows] for int8 ones, F32 otherwise; a ggml file's own types), "f32" or "f16"."""
    if lane not in LANES:
        raise ConvertError(f"lane {lane!r} is not one of {', '.join(LANES)}")
    if Path(folder).is_file():
        from .whisper_ggml import convert_ggml_whisper
        return convert_ggml_whisper(folder, output, lane=lane)
    wd = read_whisper_dir(folder)
    tensors = []
    for gguf_name, ct2_name, is_matrix in _tensor_map(wd):
        src_type = wd.model.types[wd.model.aliases.get(ct2_name, ct2_name)]
        shape = wd.model.get(ct2_name).shape
        if is_matrix and lane == "auto" and src_type == "int8" and len(shape) == 2:
            # an int8 model's matrices stay as stored: I8 rows and NAME_scale (weight =
            # q / scale), which the int8 lane uses as they are
            tensors.append(WhisperTensor(
                gguf_name, shape, "I8", encoded=True,
                data=lambda name=ct2_name: np.ascontiguousarray(wd.model.get(name),
                                                                np.int8).tobytes()))
            tensors.append(WhisperTensor(gguf_name + "_scale", (shape[0],), "F32",
                                         lambda name=ct2_name, n=shape[0]: _row_scales(wd, name, n)))
            continue
        half = lane == "f16" or (lane == "auto" and src_type == "float16")
        tensors.append(WhisperTensor(gguf_name, shape,
                                     "F16" if is_matrix and half else "F32",
                                     lambda name=ct2_name: dequantized(wd.model, name)))
    return write_whisper_gguf(
        output, name=wd.path.name, source="CTranslate2 Whisper directory", hparams=wd.hparams,
        special=wd.special, config=wd.config, tokens=wd.tokens, merges=wd.merges,
        tensors=tensors, filters=mel_filters(SAMPLE_RATE, N_FFT, wd.hparams["n_mels"]))


def find_whisper_dir(path: Union[str, os.PathLike]) -> Optional[Path]:
    """``path`` when it is a folder with a model.bin (a CTranslate2 model), else None."""
    p = Path(path)
    return p if p.is_dir() and (p / "model.bin").is_file() else None
