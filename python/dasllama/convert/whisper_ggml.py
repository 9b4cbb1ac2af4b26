"""whisper.cpp's model files (``ggml-*.bin``): read into dasllama's Whisper GGUF, and written from
a CTranslate2 directory (so the reader is tested on real weights, and whisper.cpp itself can
check what the writer makes).

The layout (little-endian; as whisper.cpp's converter writes it and its loader reads it):

    int32 magic 0x67676d6c ("ggml")
    int32 n_vocab n_audio_ctx n_audio_state n_audio_head n_audio_layer
          n_text_ctx n_text_state n_text_head n_text_layer n_mels ftype
          (ftype: the matrices' type, plus 1000 x the quantization version when quantized)
    int32 n_mel, n_fft; float32 filters[n_mel][n_fft]          (the mel filterbank)
    int32 n_tokens; per token: int32 length, its bytes           (the BPE tokens by rank; the
          special tokens are not stored: their ids follow from n_vocab)
    tensors until the end of the file: int32 n_dims, name length, ggml type;
          int32 dims[n_dims] (innermost first); the name; the data
          (OpenAI's names: encoder.blocks.N.attn.query.weight, decoder.token_embedding.weight...)

What a ggml file does not hold is derived as whisper.cpp and OpenAI's tokenizer derive it:
the special token ids (from n_vocab: multilingual when n_vocab >= 51865, with n_vocab - 51765
- 1 languages), the BPE merges (recovered from the token ranks), the non-speech tokens that
``suppress_tokens=[-1]`` stands for (OpenAI's symbol list, encoded), and the alignment heads
(whisper.cpp's presets by model size). Quantized matrices are copied as they are stored.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Union

import numpy as np

from . import ConvertError, GGUF_TYPES, encoded_nbytes
from ..whisper_languages import LANGUAGES as WHISPER_LANGUAGES
from .bpe import bpe_by_rank, byte_encoder, merges_from_ranks
from .whisper import (N_FFT, SAMPLE_RATE, WhisperTensor, read_whisper_dir,
                      write_whisper_gguf)

__all__ = ["GgmlWhisperError", "GgmlWhisper", "read_ggml_whisper", "is_ggml_file",
           "convert_ggml_whisper", "write_ggml_whisper", "merges_from_ranks", "non_speech_tokens",
           "GGML_MAGIC"]

GGML_MAGIC = 0x67676D6C
QNT_VERSION = 2               # ggml's current quantization format version
QNT_VERSION_FACTOR = 1000     # ftype = type + factor * version for quantized files
_HPARAMS = ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
            "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "n_mels", "ftype")
_TYPE_NAMES = {v[0]: k for k, v in GGUF_TYPES.items()}     # ggml type id -> name
# The file's ftype (mod 1000) -> its matrices' type (ggml's ftype enum).
_FTYPE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
                10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K"}
_TYPE_FTYPES = {v: k for k, v in _FTYPE_TYPES.items()}
MULTILINGUAL_VOCAB = 51865    # n_vocab from which a model is multilingual
ENGLISH_EOT = 50256           # <|endoftext|> of the English-only vocabulary (+1 multilingual)
_LANGUAGE_BASE = 51765        # n_vocab - this (- 1 if multilingual) = languages in the vocab
# Whisper's language tokens in id order (<|en|> right after <|startoftranscript|>).
LANGUAGES = tuple(WHISPER_LANGUAGES)
# whisper.cpp's alignment-head presets, by (text layers, text width, English-only).
_ALIGNMENT_HEADS = {
    (4, 384, True): [(1, 0), (2, 0), (2, 5), (3, 0), (3, 1), (3, 2), (3, 3), (3, 4)],
    (4, 384, False): [(2, 2), (3, 0), (3, 2), (3, 3), (3, 4), (3, 5)],
    (6, 512, True): [(3, 3), (4, 7), (5, 1), (5, 5), (5, 7)],
    (6, 512, False): [(3, 1), (4, 2), (4, 3), (4, 7), (5, 1), (5, 2), (5, 4), (5, 6)],
    (12, 768, True): [(6, 6), (7, 0), (7, 3), (7, 8), (8, 2), (8, 5), (8, 7), (9, 0), (9, 4),
                      (9, 8), (9, 10), (10, 0), (10, 1), (10, 2), (10, 3), (10, 6), (10, 11),
                      (11, 2), (11, 4)],
    (12, 768, False): [(5, 3), (5, 9), (8, 0), (8, 4), (8, 7), (8, 8), (9, 0), (9, 7), (9, 9),
                       (10, 5)],
}
# OpenAI's non-speech symbols (whisper/tokenizer.py, non_speech_tokens): each symbol's token
# when it (or " " + it) is one token; the music signs' first token always.
_SYMBOLS = list('"#()*+/:;<=>@[\\]^_`{|}~\u300c\u300d\u300e\u300f') + \
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} \u266a\u266a \u266a\u266a\u266a".split()
_MUSIC = set("\u2669\u266a\u266b\u266c\u266d\u266e\u266f")
# A name longer than this, or more dimensions than ggml has, is not a tensor header.
_CONV_BIASES = ("encoder.conv1.bias", "encoder.conv2.bias")
_MAX_NAME = 256
_MAX_DIMS = 4
# A token longer than this is a corrupt length field (Whisper's longest token is 128 bytes).
_MAX_TOKEN = 1024


class GgmlWhisperError(ConvertError):
    """A whisper.cpp model file that is malformed or not a layout this reader knows; the
    message names the file, the field and its byte offset."""


def non_speech_tokens(tokens: list) -> list:
    """OpenAI's non-speech token ids for a vocabulary of BPE tokens by rank."""
    ranks = {t: i for i, t in enumerate(tokens)}

    def encode(text: str) -> list:
        return [ranks[p] for p in bpe_by_rank(text.encode("utf-8"), ranks, len(tokens))]

    out = {encode(" -")[0], encode(" '")[0]}
    for symbol in _SYMBOLS + sorted(_MUSIC):
        for ids in (encode(symbol), encode(" " + symbol)):
            if len(ids) == 1 or symbol in _MUSIC:
                out.add(ids[0])
    return sorted(out)


class GgmlWhisper:
    """A whisper.cpp model file, read and checked (tensor data stays in the memory map)."""

    def __init__(self, path: Union[str, os.PathLike]):
        self.path = Path(path)
        try:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as e:
            raise GgmlWhisperError(f"{self.path}: cannot be read ({e})") from None
        self._at = 0
        if self._int("magic") != GGML_MAGIC:
            raise GgmlWhisperError(f"{self.path}: offset 0: not a whisper.cpp ggml file (magic "
                                   f"is not 0x67676d6c)")
        self.hparams = {k: self._int(k) for k in _HPARAMS}
        ftype = self.hparams.pop("ftype") % QNT_VERSION_FACTOR
        if ftype not in _FTYPE_TYPES:
            raise GgmlWhisperError(f"{self.path}: field 'ftype' is {ftype}, not a file type "
                                   f"this reader knows ({sorted(_FTYPE_TYPES)})")
        self.matrix_type = _FTYPE_TYPES[ftype]
        hp = self.hparams
        if any(v <= 0 for v in hp.values()) or hp["n_audio_state"] != hp["n_text_state"] \
                or hp["n_mels"] not in (80, 128):
            raise GgmlWhisperError(f"{self.path}: inconsistent hyperparameters {hp}")
        n_mel, n_fft = self._int("filters.n_mel"), self._int("filters.n_fft")
        if n_mel != hp["n_mels"] or n_fft != N_FFT // 2 + 1:
            raise GgmlWhisperError(f"{self.path}: the mel filters are [{n_mel}, {n_fft}], "
                                   f"expected [{hp['n_mels']}, {N_FFT // 2 + 1}]")
        self.filters = self._floats(n_mel * n_fft, "filters").reshape(n_mel, n_fft)
        n_tokens = self._int("vocab.n_tokens")
        if not 0 < n_tokens <= hp["n_vocab"]:
            raise GgmlWhisperError(f"{self.path}: field 'vocab.n_tokens' is {n_tokens} "
                                   f"(the model has {hp['n_vocab']})")
        self.tokens = [self._bytes(self._int(f"vocab[{i}].length"), f"vocab[{i}]")
                       for i in range(n_tokens)]
        self.tensors: dict = {}
        while self._at < len(self._map):
            self._tensor()

    # -- reading ---------------------------------------------------------------------------
    def _take(self, n: int, what: str) -> np.ndarray:
        if n < 0 or self._at + n > len(self._map):
            raise GgmlWhisperError(f"{self.path}: offset {self._at}: {what} needs {n} bytes, "
                                   f"the file ends at {len(self._map)}")
        out = self._map[self._at:self._at + n]
        self._at += n
        return out

    def _int(self, what: str) -> int:
        return struct.unpack("<i", self._take(4, what).tobytes())[0]

    def _floats(self, n: int, what: str) -> np.ndarray:
        return np.frombuffer(self._take(4 * n, what).tobytes(), dtype="<f4").astype(np.float32)

    def _bytes(self, n: int, what: str) -> bytes:
        if not 0 <= n <= _MAX_TOKEN:
            raise GgmlWhisperError(f"{self.path}: offset {self._at - 4}: {what} has length {n}")
        return self._take(n, what).tobytes()

    def _tensor(self) -> None:
        start = self._at
        n_dims, length, ttype = (self._int("tensor header") for _ in range(3))
        if not 1 <= n_dims <= _MAX_DIMS or not 0 < length <= _MAX_NAME:
            raise GgmlWhisperError(f"{self.path}: offset {start}: a tensor header with {n_dims} "
                                   f"dimensions and a name of {length} bytes")
        dims = [self._int("tensor dims") for _ in range(n_dims)]
        name = self._bytes(length, "tensor name").decode("utf-8", errors="replace")
        type_name = _TYPE_NAMES.get(ttype)
        if type_name is None:
            raise GgmlWhisperError(f"{self.path}: offset {start}: tensor {name!r} has ggml type "
                                   f"{ttype}, which this reader does not know")
        shape = tuple(reversed(dims))   # NumPy order
        block = GGUF_TYPES[type_name][1]
        if any(d <= 0 for d in dims) or dims[0] % block:
            raise GgmlWhisperError(f"{self.path}: offset {start}: tensor {name!r} of shape "
                                   f"{list(shape)} does not fill {type_name} blocks of {block}")
        if name in self.tensors:
            raise GgmlWhisperError(f"{self.path}: offset {start}: tensor {name!r} appears twice")
        data = self._take(encoded_nbytes(type_name, shape), f"tensor {name!r} data")
        self.tensors[name] = (shape, type_name, data)

    # -- what the file does not say ----------------------------------------------------------
    @property
    def multilingual(self) -> bool:
        return self.hparams["n_vocab"] >= MULTILINGUAL_VOCAB

    def special(self) -> dict:
        """Token ids as whisper.cpp lays them out from n_vocab."""
        n = self.hparams["n_vocab"]
        languages = n - _LANGUAGE_BASE - (1 if self.multilingual else 0)
        eot = ENGLISH_EOT + (1 if self.multilingual else 0)
        translate = eot + 2 + languages
        ids = dict(eot=eot, sot=eot + 1, translate=translate, transcribe=translate + 1,
                   sot_lm=translate + 2, sot_prev=translate + 3, no_speech=translate + 4,
                   no_timestamps=translate + 5, timestamp_begin=translate + 6)
        if languages < 0 or languages > len(LANGUAGES) or ids["timestamp_begin"] >= n \
                or len(self.tokens) > eot:
            raise GgmlWhisperError(f"{self.path}: field 'n_vocab' is {n} with {len(self.tokens)} "
                                   f"tokens: not a Whisper vocabulary layout")
        return ids

    def vocabulary(self, special: dict) -> list:
        """Every token's text: the stored ones in GPT-2's byte spelling, then the specials."""
        enc = byte_encoder()
        texts = ["".join(enc[b] for b in t) for t in self.tokens]
        texts += [f"<|extra_{i}|>" for i in range(len(texts), special["eot"])]
        texts += ["<|endoftext|>", "<|startoftranscript|>"]
        languages = special["translate"] - special["sot"] - 1
        texts += [f"<|{code}|>" for code in LANGUAGES[:languages]]
        texts += ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
                  "<|nocaptions|>", "<|notimestamps|>"]
        n = self.hparams["n_vocab"]
        texts += [f"<|{0.02 * i:.2f}|>" for i in range(n - len(texts))]
        return texts

    def config(self, special: dict) -> dict:
        hp = self.hparams
        sot = special["sot"]
        heads = _ALIGNMENT_HEADS.get((hp["n_text_layer"], hp["n_text_state"],
                                      not self.multilingual), [])
        # As the models' own generation configs list them: the non-speech tokens and the
        # task and context tokens.
        tasks = [special[k] for k in ("sot", "translate", "transcribe", "sot_lm", "sot_prev",
                                      "no_speech")]
        return dict(
            suppress_ids=sorted(set(non_speech_tokens(self.tokens)) | set(tasks)),
            suppress_ids_begin=[self._space_id(), special["eot"]],
            lang_ids=list(range(sot + 1, special["translate"])) if self.multilingual else [],
            alignment_heads=[list(h) for h in heads])

    def _space_id(self) -> int:
        try:
            return self.tokens.index(b" ")
        except ValueError:
            raise GgmlWhisperError(f"{self.path}: the vocabulary has no token for ' '") from None

    def openai_state(self) -> dict:
        """Every tensor dequantized to float32 in OpenAI's checkpoint shapes (the names are
        already OpenAI's; whisper.cpp keeps the convolution biases as [channels, 1])."""
        return {name: _floats_of(entry).reshape(entry[0][:1] if name in _CONV_BIASES
                                                else entry[0])
                for name, entry in self.tensors.items()}

    def get(self, name: str, shape: tuple) -> tuple:
        hit = self.tensors.get(name)
        if hit is None:
            raise GgmlWhisperError(f"{self.path}: tensor {name!r} is missing")
        have = hit[0]
        if tuple(have) != tuple(shape) and not (len(shape) == 1 and have == (shape[0], 1)):
            raise GgmlWhisperError(f"{self.path}: tensor {name!r} has shape {list(have)}, "
                                   f"expected {list(shape)}")
        return hit


def read_ggml_whisper(path: Union[str, os.PathLike]) -> GgmlWhisper:
    return GgmlWhisper(path)


def is_ggml_file(path: Union[str, os.PathLike]) -> bool:
    """Whether ``path`` is a file that starts with ggml's magic (a whisper.cpp model)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and struct.unpack("<I", head)[0] == GGML_MAGIC


# ----------------------------------------------------------------------------- to GGUF

def _floats_of(entry) -> np.ndarray:
    shape, type_name, data = entry
    if type_name == "F32":
        return np.frombuffer(data.tobytes(), dtype="<f4").astype(np.float32)
    from .. import formats
    return formats.dequantize(type_name, data, int(np.prod(shape)))


def convert_ggml_whisper(path: Union[str, os.PathLike], output: Union[str, os.PathLike],
                         lane: str = "auto") -> Path:
    """Write a whisper.cpp ggml file as dasllama's Whisper GGUF. lane "auto" copies each
    matrix in its stored type (quantized blocks included); "f32" / "f16" re-encode them."""
    g = read_ggml_whisper(path)
    hp, special = g.hparams, g.special()
    d = hp["n_audio_state"]
    tensors = []

    def add(name: str, shape: tuple, parts: list, matrix: bool) -> None:
        """parts: ggml tensor names (or None for zeros of that many rows) stacked by rows."""
        entries = []
        for part, rows in parts:
            part_shape = (rows,) + tuple(shape[1:])
            entries.append(None if part is None else g.get(part, part_shape))
        types = {e[1] for e in entries if e is not None}
        stored = types.pop() if len(types) == 1 and None not in entries else None
        if matrix and lane == "auto" and stored not in (None, "F32"):
            blob = lambda es=entries: b"".join(e[2].tobytes() for e in es)   # noqa: E731
            tensors.append(WhisperTensor(name, shape, stored, blob, encoded=True))
            return
        kind = "F16" if matrix and (lane == "f16" or (lane == "auto" and stored == "F16")) \
            else "F32"

        def values(es=entries, ps=parts):
            out = [np.zeros((rows,) + tuple(shape[1:]), np.float32) if e is None
                   else _floats_of(e).reshape((rows,) + tuple(shape[1:]))
                   for e, (_, rows) in zip(es, ps)]
            return np.concatenate(out).reshape(shape)
        tensors.append(WhisperTensor(name, shape, kind, values))

    n_mels = hp["n_mels"]
    add("enc.conv1.weight", (d, n_mels, 3), [("encoder.conv1.weight", d)], False)
    add("enc.conv1.bias", (d,), [("encoder.conv1.bias", d)], False)
    add("enc.conv2.weight", (d, d, 3), [("encoder.conv2.weight", d)], False)
    add("enc.conv2.bias", (d,), [("encoder.conv2.bias", d)], False)
    add("enc.pos", (hp["n_audio_ctx"], d), [("encoder.positional_embedding", hp["n_audio_ctx"])],
        False)
    add("enc.ln_post.weight", (d,), [("encoder.ln_post.weight", d)], False)
    add("enc.ln_post.bias", (d,), [("encoder.ln_post.bias", d)], False)
    add("dec.tok_emb", (hp["n_vocab"], d), [("decoder.token_embedding.weight", hp["n_vocab"])],
        True)
    add("dec.pos", (hp["n_text_ctx"], d), [("decoder.positional_embedding", hp["n_text_ctx"])],
        False)
    add("dec.ln.weight", (d,), [("decoder.ln.weight", d)], False)
    add("dec.ln.bias", (d,), [("decoder.ln.bias", d)], False)

    def norm(ours: str, theirs: str) -> None:
        add(ours + ".weight", (d,), [(theirs + ".weight", d)], False)
        add(ours + ".bias", (d,), [(theirs + ".bias", d)], False)

    def linear(ours: str, theirs: list, rows_out: int, cols: int) -> None:
        """theirs: (ggml prefix, rows, has a bias) stacked into one matrix."""
        add(ours + ".weight", (rows_out, cols), [(p + ".weight", r) for p, r, _ in theirs], True)
        add(ours + ".bias", (rows_out,), [(p + ".bias" if b else None, r) for p, r, b in theirs],
            False)

    def attention(ours: str, theirs: str) -> None:
        linear(ours + ".qkv", [(theirs + ".query", d, True), (theirs + ".key", d, False),
                               (theirs + ".value", d, True)], 3 * d, d)
        linear(ours + ".out", [(theirs + ".out", d, True)], d, d)

    def block(o: str, t: str, cross: bool) -> None:
        norm(o + ".attn_ln", t + ".attn_ln")
        attention(o + ".attn", t + ".attn")
        if cross:
            norm(o + ".cross_ln", t + ".cross_attn_ln")
            linear(o + ".cross.q", [(t + ".cross_attn.query", d, True)], d, d)
            linear(o + ".cross.kv", [(t + ".cross_attn.key", d, False),
                                     (t + ".cross_attn.value", d, True)], 2 * d, d)
            linear(o + ".cross.out", [(t + ".cross_attn.out", d, True)], d, d)
        norm(o + ".mlp_ln", t + ".mlp_ln")
        linear(o + ".mlp.fc1", [(t + ".mlp.0", 4 * d, True)], 4 * d, d)
        linear(o + ".mlp.fc2", [(t + ".mlp.2", d, True)], d, 4 * d)

    for i in range(hp["n_audio_layer"]):
        block(f"enc.blk.{i}", f"encoder.blocks.{i}", cross=False)
    for i in range(hp["n_text_layer"]):
        block(f"dec.blk.{i}", f"decoder.blocks.{i}", cross=True)
    hparams = {k: hp[k] for k in ("n_mels", "n_audio_ctx", "n_audio_state", "n_audio_head",
                                  "n_audio_layer", "n_text_ctx", "n_text_state", "n_text_head",
                                  "n_text_layer", "n_vocab")}
    return write_whisper_gguf(
        output, name=g.path.stem, source="whisper.cpp ggml file", hparams=hparams,
        special=special, config=g.config(special), tokens=g.vocabulary(special),
        merges=merges_from_ranks(g.tokens), tensors=tensors, filters=g.filters)


# ----------------------------------------------------------------------------- from CT2

def openai_tensors(wd, matrix_type: str = "F16") -> list:
    """The tensors of the Whisper directory ``wd`` (read_whisper_dir) under OpenAI's checkpoint
    names, as float32 arrays with the ggml type each is stored in: (name, array, type). The
    matrices take ``matrix_type``, the convolutions F16 (F32 in an F32 file), the rest F32;
    the fused q/k/v projections are split (OpenAI's key has no bias: a non-zero one is an
    error)."""
    from .ct2 import dequantized

    hp, d, folder = wd.hparams, wd.hparams["n_audio_state"], wd.path
    conv_type = "F32" if matrix_type == "F32" else "F16"
    m = wd.model

    def ct2(name: str) -> np.ndarray:
        return np.asarray(dequantized(m, name), dtype=np.float32)

    out = [("encoder.conv1.weight", ct2("encoder/conv1/weight"), conv_type),
           ("encoder.conv1.bias", ct2("encoder/conv1/bias"), "F32"),
           ("encoder.conv2.weight", ct2("encoder/conv2/weight"), conv_type),
           ("encoder.conv2.bias", ct2("encoder/conv2/bias"), "F32"),
           ("encoder.positional_embedding", ct2("encoder/position_encodings/encodings"), "F32")]

    def norm(theirs: str, ours: str):
        return [(theirs + ".weight", ct2(ours + "/gamma"), "F32"),
                (theirs + ".bias", ct2(ours + "/beta"), "F32")]

    def linear(theirs: str, w: np.ndarray, b) -> list:
        rows = [(theirs + ".weight", w, matrix_type)]
        return rows + ([(theirs + ".bias", b, "F32")] if b is not None else [])

    def split(theirs: list, ours: str) -> list:
        """A fused CT2 projection -> OpenAI's separate ones (the key's bias must be zero)."""
        w, b = ct2(ours + "/weight"), ct2(ours + "/bias")
        rows = []
        for k, (name, has_bias) in enumerate(theirs):
            part_b = b[k * d:(k + 1) * d]
            if not has_bias and np.any(part_b != 0):
                raise ConvertError(f"{folder}: {ours}/bias has a non-zero key part; whisper.cpp "
                                   f"has no key bias")
            rows += linear(name, w[k * d:(k + 1) * d], part_b if has_bias else None)
        return rows

    def weights(theirs: str, ours: str) -> list:
        return linear(theirs, ct2(ours + "/weight"), ct2(ours + "/bias"))

    def block(t: str, c: str, cross: bool) -> list:
        rows = norm(t + ".attn_ln", c + "/self_attention/layer_norm")
        rows += split([(t + ".attn.query", True), (t + ".attn.key", False),
                       (t + ".attn.value", True)], c + "/self_attention/linear_0")
        rows += weights(t + ".attn.out", c + "/self_attention/linear_1")
        if cross:
            rows += norm(t + ".cross_attn_ln", c + "/attention/layer_norm")
            rows += weights(t + ".cross_attn.query", c + "/attention/linear_0")
            rows += split([(t + ".cross_attn.key", False), (t + ".cross_attn.value", True)],
                          c + "/attention/linear_1")
            rows += weights(t + ".cross_attn.out", c + "/attention/linear_2")
        rows += norm(t + ".mlp_ln", c + "/ffn/layer_norm")
        rows += weights(t + ".mlp.0", c + "/ffn/linear_0")
        return rows + weights(t + ".mlp.2", c + "/ffn/linear_1")

    for i in range(hp["n_audio_layer"]):
        out += block(f"encoder.blocks.{i}", f"encoder/layer_{i}", cross=False)
    out += norm("encoder.ln_post", "encoder/layer_norm")
    out += [("decoder.positional_embedding", ct2("decoder/position_encodings/encodings"), "F32"),
            ("decoder.token_embedding.weight", ct2("decoder/embeddings/weight"), matrix_type)]
    for i in range(hp["n_text_layer"]):
        out += block(f"decoder.blocks.{i}", f"decoder/layer_{i}", cross=True)
    out += norm("decoder.ln", "decoder/layer_norm")

    return out


def write_ggml_whisper(folder: Union[str, os.PathLike], output: Union[str, os.PathLike],
                       matrix_type: str = "F16") -> Path:
    """Write the CTranslate2 Whisper directory ``folder`` as a whisper.cpp ggml file, its
    matrices in ``matrix_type`` (F32, F16, or a block type such as Q8_0 / Q5_0 / Q4_0, encoded
    by dasllama.formats), convolutions in F16 (F32 for an F32 file), the rest in F32: the
    types whisper.cpp's loader expects."""
    if matrix_type not in _TYPE_FTYPES:
        raise ConvertError(f"matrix type {matrix_type!r}: one of {', '.join(_TYPE_FTYPES)}")
    wd = read_whisper_dir(folder)
    hp = wd.hparams
    eot = wd.special["eot"]
    decode = {v: k for k, v in byte_encoder().items()}
    try:
        token_bytes = [bytes(decode[c] for c in t) for t in wd.tokens[:eot]]
    except KeyError as e:
        raise ConvertError(f"{folder}: a token below <|endoftext|> is not in GPT-2's byte "
                           f"spelling ({e})") from None
    if eot - (1 if hp["n_vocab"] >= MULTILINGUAL_VOCAB else 0) != ENGLISH_EOT:
        raise ConvertError(f"{folder}: <|endoftext|> is id {eot}; whisper.cpp lays out ids for "
                           f"{ENGLISH_EOT} (English) or {ENGLISH_EOT + 1} (multilingual)")
    ftype = _TYPE_FTYPES[matrix_type]
    if matrix_type not in ("F32", "F16"):
        ftype += QNT_VERSION_FACTOR * QNT_VERSION
    out = openai_tensors(wd, matrix_type)

    from .. import formats
    from .whisper import mel_filters
    filters = mel_filters(SAMPLE_RATE, N_FFT, hp["n_mels"])
    output = Path(output)
    tmp = output.with_name(output.name + ".part")
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<i", GGML_MAGIC))
            values = dict(hp, ftype=ftype)
            f.write(struct.pack("<11i", *(int(values[k]) for k in _HPARAMS)))
            f.write(struct.pack("<ii", *filters.shape))
            f.write(filters.astype("<f4").tobytes())
            f.write(struct.pack("<i", len(token_bytes)))
            for t in token_bytes:
                f.write(struct.pack("<i", len(t)) + t)
            for name, array, type_name in out:
                array = np.ascontiguousarray(array, dtype=np.float32)
                if name in _CONV_BIASES:    # whisper.cpp adds them as (channels, 1)
                    array = array.reshape(-1, 1)
                if type_name == "F32":
                    data = array.astype("<f4").tobytes()
                elif type_name == "F16":
                    data = array.astype("<f2").tobytes()
                else:
                    data = bytes(formats.quantize(type_name, array.reshape(-1)))
                encoded = name.encode("utf-8")
                dims = list(reversed(array.shape))
                f.write(struct.pack("<iii", len(dims), len(encoded), GGUF_TYPES[type_name][0]))
                f.write(struct.pack(f"<{len(dims)}i", *dims) + encoded + data)
        os.replace(tmp, output)
    finally:
        if tmp.exists():
            tmp.unlink()
    return output
