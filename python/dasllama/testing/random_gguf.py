"""Random-weight GGUF test models, written with the metadata keys and tensor layout of llama.cpp.

``write_random_model(path, arch, ...)`` writes a small model of one supported architecture
(llama, qwen2, qwen3, qwen3moe, gemma3) with seeded random weights and a built-in tokenizer
(see tokenizer_vocab.py), optionally split into several files like llama.cpp's gguf-split.
``write_gguf_version`` rewrites a file's version field; ``write_all_types_gguf`` writes a file
that holds every metadata value type, nested arrays and a few tiny tensors, through the small
hand-rolled writer ``write_gguf`` (gguf.GGUFWriter cannot declare the element type of an
empty or nested array).

Shapes here are NumPy order, outermost first. GGUF stores dimensions innermost first, so
llama.cpp's ``attn_q`` of ``{n_embd, n_head*head_dim}`` is the NumPy array
``(n_head*head_dim, n_embd)``: one row per output feature, rows of ``n_embd`` (the fan-in).
Quantized types need that row length to be a multiple of their block size (32, or 256 for
the K-quants); a model that breaks this raises ValueError naming the tensor.

Layout per architecture (llama.cpp src/llama-model.cpp, gguf-py constants.MODEL_TENSORS):

    token_embd.weight              (n_vocab, n_embd)
    blk.N.attn_norm.weight         (n_embd,)
    blk.N.attn_q.weight            (n_head*head_dim, n_embd)     + .bias (qwen2)
    blk.N.attn_k.weight            (n_head_kv*head_dim, n_embd)  + .bias (qwen2)
    blk.N.attn_v.weight            (n_head_kv*head_dim, n_embd)  + .bias (qwen2)
    blk.N.attn_q_norm.weight       (head_dim,)                   qwen3, qwen3moe, gemma3
    blk.N.attn_k_norm.weight       (head_dim,)                   qwen3, qwen3moe, gemma3
    blk.N.attn_output.weight       (n_embd, n_head*head_dim)
    blk.N.post_attention_norm.weight (n_embd,)                   gemma3
    blk.N.ffn_norm.weight          (n_embd,)
    blk.N.ffn_gate/up.weight       (n_ff, n_embd)                dense
    blk.N.ffn_down.weight          (n_embd, n_ff)                dense
    blk.N.ffn_gate_inp.weight      (n_expert, n_embd)            qwen3moe router, kept F32
    blk.N.ffn_gate/up_exps.weight  (n_expert, n_ff_exp, n_embd)  qwen3moe
    blk.N.ffn_down_exps.weight     (n_expert, n_embd, n_ff_exp)  qwen3moe
    blk.N.post_ffw_norm.weight     (n_embd,)                     gemma3
    output_norm.weight             (n_embd,)
    output.weight                  (n_vocab, n_embd)             absent when tied

gemma3: llama.cpp reads only ``gemma3.attention.sliding_window`` and ``gemma3.rope.freq_base``
(1e6, the global layers) from the file; the local layers' rope base (10000) and the pattern
(layers with ``il % 6 < 5`` are sliding, every sixth is global) are fixed by the architecture,
not stored. Its norm weights are stored with Gemma's ``1 +`` already added (as the converter
does), so they sit near 1 like every other norm here.
"""

from __future__ import annotations

import fnmatch
import os
import struct
from pathlib import Path
from typing import Any, Sequence

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT, GGUFValueType as V

from .tokenizer_vocab import CHATML_TEMPLATE, make_vocab

ARCHS = ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3")

# Per-architecture facts: rope base, RMS epsilon, whether output is tied by default, and
# which optional parts the architecture has.
_ARCH = {
    "llama":    dict(rope_base=10000.0, eps=1e-5, tied=False, qk_norm=False, qkv_bias=False, moe=False, gemma=False),
    "qwen2":    dict(rope_base=1e6, eps=1e-6, tied=False, qk_norm=False, qkv_bias=True, moe=False, gemma=False),
    "qwen3":    dict(rope_base=1e6, eps=1e-6, tied=False, qk_norm=True, qkv_bias=False, moe=False, gemma=False),
    "qwen3moe": dict(rope_base=1e6, eps=1e-6, tied=False, qk_norm=True, qkv_bias=False, moe=True, gemma=False),
    "gemma3":   dict(rope_base=1e6, eps=1e-6, tied=True, qk_norm=True, qkv_bias=False, moe=False, gemma=True),
}
GEMMA3_SLIDING_WINDOW = 32
GEMMA3_ROPE_BASE_LOCAL = 10000.0   # fixed by llama.cpp, not written
GEMMA3_SWA_PERIOD = 6              # fixed by llama.cpp, not written: il % 6 < 5 -> sliding

# Types the gguf package quantizes itself; others go through dasllama.formats.quantize.
_GGUF_QUANTIZES = {"BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"}
_FILE_TYPE = {
    "F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
    "BF16": gguf.LlamaFileType.MOSTLY_BF16, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
    "Q5_0": gguf.LlamaFileType.MOSTLY_Q5_0, "Q5_1": gguf.LlamaFileType.MOSTLY_Q5_1,
    "Q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_M, "Q5_K": gguf.LlamaFileType.MOSTLY_Q5_K_M,
    "Q6_K": gguf.LlamaFileType.MOSTLY_Q6_K,
}


# ---------------------------------------------------------------------------------------------
# The tensor plan
# ---------------------------------------------------------------------------------------------

def tensor_plan(arch: str, hp: dict[str, int], tied: bool) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, NumPy shape, kind) for every tensor, in file order. kind: embd|matrix|router|norm|bias."""
    a = _ARCH[arch]
    E, hd, H, Hkv = hp["n_embd"], hp["head_dim"], hp["n_head"], hp["n_head_kv"]
    plan = [("token_embd.weight", (hp["n_vocab"], E), "embd")]
    for i in range(hp["n_layer"]):
        b = f"blk.{i}."
        plan.append((b + "attn_norm.weight", (E,), "norm"))
        plan += [(b + "attn_q.weight", (H * hd, E), "matrix"),
                 (b + "attn_k.weight", (Hkv * hd, E), "matrix"),
                 (b + "attn_v.weight", (Hkv * hd, E), "matrix")]
        if a["qkv_bias"]:
            plan += [(b + "attn_q.bias", (H * hd,), "bias"),
                     (b + "attn_k.bias", (Hkv * hd,), "bias"),
                     (b + "attn_v.bias", (Hkv * hd,), "bias")]
        if a["qk_norm"]:
            plan += [(b + "attn_q_norm.weight", (hd,), "norm"),
                     (b + "attn_k_norm.weight", (hd,), "norm")]
        plan.append((b + "attn_output.weight", (E, H * hd), "matrix"))
        if a["gemma"]:
            plan.append((b + "post_attention_norm.weight", (E,), "norm"))
        plan.append((b + "ffn_norm.weight", (E,), "norm"))
        if a["moe"]:
            X, F = hp["n_expert"], hp["n_ff_exp"]
            plan += [(b + "ffn_gate_inp.weight", (X, E), "router"),
                     (b + "ffn_gate_exps.weight", (X, F, E), "matrix"),
                     (b + "ffn_up_exps.weight", (X, F, E), "matrix"),
                     (b + "ffn_down_exps.weight", (X, E, F), "matrix")]
        else:
            F = hp["n_ff"]
            plan += [(b + "ffn_gate.weight", (F, E), "matrix"),
                     (b + "ffn_up.weight", (F, E), "matrix"),
                     (b + "ffn_down.weight", (E, F), "matrix")]
        if a["gemma"]:
            plan.append((b + "post_ffw_norm.weight", (E,), "norm"))
    plan.append(("output_norm.weight", (E,), "norm"))
    if not tied:
        plan.append(("output.weight", (hp["n_vocab"], E), "matrix"))
    return plan


def _random_values(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    """Norm weights near 1, biases small, matrices N(0, 1/fan_in) so that activations and
    logits keep unit scale through the layers (greedy decoding then has real margins)."""
    if kind == "norm":
        v = 1.0 + 0.1 * rng.standard_normal(shape)
    elif kind == "bias":
        v = 0.02 * rng.standard_normal(shape)
    else:
        v = rng.standard_normal(shape) / np.sqrt(shape[-1])
    return v.astype(np.float32)


def _qtype(type_name: str) -> QT:
    try:
        return QT[type_name]
    except KeyError:
        raise ValueError(f"unknown ggml type {type_name!r}") from None


def encode_tensor(name: str, values: np.ndarray, type_name: str) -> tuple[np.ndarray, QT | None]:
    """Encode float32 ``values`` as ``type_name``; returns (array for GGUFWriter.add_tensor, raw_dtype)."""
    qt = _qtype(type_name)
    block, type_size = gguf.GGML_QUANT_SIZES[qt]
    if values.shape[-1] % block:
        raise ValueError(f"{name}: row length {values.shape[-1]} is not a multiple of {type_name}'s "
                         f"block size {block}; pick dimensions that are (e.g. n_embd=256, n_ff=512 "
                         f"for K-quants) or keep this tensor in another type")
    if type_name == "F32":
        return values.astype(np.float32), None
    if type_name == "F16":
        return values.astype(np.float16), None
    row_bytes = values.shape[-1] // block * type_size
    if type_name in _GGUF_QUANTIZES:
        data = gguf.quants.quantize(values, qt)
    else:
        try:
            from dasllama import formats
        except ImportError as e:
            raise RuntimeError(f"{name}: writing {type_name} needs dasllama.formats.quantize "
                               f"(the built dasllama extension): {e}") from e
        data = np.asarray(formats.quantize(type_name, np.ascontiguousarray(values, np.float32)))
    data = np.ascontiguousarray(data).view(np.uint8).reshape(*values.shape[:-1], row_bytes)
    return data, qt


# ---------------------------------------------------------------------------------------------
# write_random_model
# ---------------------------------------------------------------------------------------------

def write_random_model(
    path: str | os.PathLike, arch: str = "llama", *,
    n_layer: int = 2, n_embd: int = 64, n_head: int = 4, n_head_kv: int = 2, n_ff: int = 128,
    n_vocab: int | None = None, n_ctx: int = 256, head_dim: int | None = None,
    n_expert: int = 4, n_expert_used: int = 2, n_ff_exp: int | None = None,
    sliding_window: int | None = None, rope_freq_base: float | None = None,
    rms_eps: float | None = None, weight_type: str = "F32",
    tensor_types: dict[str, str] | None = None, seed: int = 0,
    tokenizer: str = "bpe", tokenizer_pre: str | None = None,
    chat_template: str | bool | None = None, tied_output: bool | None = None,
    split_max_tensors: int | None = None, version: int = 3,
    weights_out: dict[str, np.ndarray] | None = None,
) -> Path:
    """Write a random-weight model of ``arch`` to ``path`` and return the path of its (first) file.

    arch: llama | qwen2 | qwen3 | qwen3moe | gemma3. head_dim defaults to n_embd // n_head.
    n_vocab defaults to the tokenizer's size (512); larger pads with unused tokens.
    n_expert, n_expert_used, n_ff_exp (default n_ff // n_expert_used): qwen3moe only.
    sliding_window: gemma3 only (default 32; 0 writes no window, i.e. no sliding layers).
    rope_freq_base, rms_eps: default per architecture (llama 1e4/1e-5; others 1e6/1e-6).
    weight_type: ggml type of the matrices (token_embd, attention, feed-forward, experts,
    output): F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K. Norms, biases and the MoE
    router stay F32. tensor_types maps fnmatch patterns of tensor names to a type and wins
    over both (first matching pattern).
    tokenizer: "bpe" (gpt2 byte-level, pre = tokenizer_pre or "default") or "spm" (llama).
    chat_template: True or "chatml" for ChatML, another string as is, None for none.
    tied_output: no output.weight (llama.cpp then reuses token_embd); default per arch
    (gemma3 tied, the others untied).
    split_max_tensors: at most this many tensors per file, files named
    ``stem-00001-of-0000N.gguf`` beside ``path`` with split.no/split.count/split.tensors.count
    (as llama.cpp's gguf-split); the first file's path is returned.
    version: 3, or 2 (same layout for little-endian files).
    weights_out: if a dict, receives name -> float32 values as generated (before encoding).
    The same seed and shapes give the same values whatever the weight type.
    """
    if arch not in _ARCH:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    a = _ARCH[arch]
    if n_embd % n_head and head_dim is None:
        raise ValueError(f"n_embd={n_embd} is not divisible by n_head={n_head}; pass head_dim")
    if n_head % n_head_kv:
        raise ValueError(f"n_head={n_head} is not a multiple of n_head_kv={n_head_kv}")
    if sliding_window is not None and not a["gemma"]:
        raise ValueError(f"sliding_window applies to gemma3, not {arch}")
    if a["moe"] and not 0 < n_expert_used <= n_expert:
        raise ValueError(f"need 0 < n_expert_used <= n_expert, got {n_expert_used}, {n_expert}")
    _qtype(weight_type)

    vocab = make_vocab(tokenizer, n_vocab, tokenizer_pre)
    hd = head_dim if head_dim is not None else n_embd // n_head
    hp = dict(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_ff=n_ff,
              n_vocab=len(vocab), head_dim=hd, n_expert=n_expert,
              n_ff_exp=n_ff_exp if n_ff_exp is not None else n_ff // max(n_expert_used, 1))
    tied = a["tied"] if tied_output is None else tied_output
    plan = tensor_plan(arch, hp, tied)

    path = Path(path)
    w = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors or 0)
    w.add_name(f"dasllama-random-{arch}")
    k = arch + "."
    w.add_uint32(k + "context_length", n_ctx)
    w.add_uint32(k + "embedding_length", n_embd)
    w.add_uint32(k + "block_count", n_layer)
    w.add_uint32(k + "feed_forward_length", n_ff)
    w.add_uint32(k + "attention.head_count", n_head)
    w.add_uint32(k + "attention.head_count_kv", n_head_kv)
    w.add_float32(k + "attention.layer_norm_rms_epsilon", a["eps"] if rms_eps is None else rms_eps)
    w.add_float32(k + "rope.freq_base", a["rope_base"] if rope_freq_base is None else rope_freq_base)
    w.add_uint32(k + "rope.dimension_count", hd)
    if a["qk_norm"] or hd != n_embd // n_head:   # qwen3/gemma3 converters always write these
        w.add_uint32(k + "attention.key_length", hd)
        w.add_uint32(k + "attention.value_length", hd)
    if a["moe"]:
        w.add_uint32(k + "expert_count", n_expert)
        w.add_uint32(k + "expert_used_count", n_expert_used)
        w.add_uint32(k + "expert_feed_forward_length", hp["n_ff_exp"])
    if a["gemma"]:
        window = GEMMA3_SLIDING_WINDOW if sliding_window is None else sliding_window
        if window:
            w.add_uint32(k + "attention.sliding_window", window)
    if arch == "llama":
        w.add_uint32(k + "vocab_size", len(vocab))
    w.add_file_type(int(_FILE_TYPE.get(weight_type, gguf.LlamaFileType.GUESSED)))
    if weight_type not in ("F32", "F16", "BF16"):
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    template = CHATML_TEMPLATE if chat_template in (True, "chatml") else (chat_template or None)
    vocab.add_to(w, template)

    rng = np.random.default_rng(seed)
    for name, shape, kind in plan:
        values = _random_values(rng, shape, kind)
        if weights_out is not None:
            weights_out[name] = values
        type_name = "F32" if kind in ("norm", "bias", "router") else weight_type
        for pattern, t in (tensor_types or {}).items():
            if fnmatch.fnmatchcase(name, pattern):
                type_name = t
                break
        data, raw_dtype = encode_tensor(name, values, type_name)
        w.add_tensor(name, data, raw_dtype=raw_dtype)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    files = w.format_shard_names(path)
    if version != 3:
        for f in files:
            write_gguf_version(f, version)
    return files[0]


def split_paths(first: str | os.PathLike) -> list[Path]:
    """All files of a split given its first file (``x-00001-of-0000N.gguf``), or [first]."""
    first = Path(first)
    stem = first.name[:-len(".gguf")] if first.name.endswith(".gguf") else first.name
    parts = stem.rsplit("-", 3)
    if len(parts) == 4 and parts[1] == "00001" and parts[2] == "of" and parts[3].isdigit():
        n = int(parts[3])
        return [first.with_name(f"{parts[0]}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1)]
    return [first]


# ---------------------------------------------------------------------------------------------
# Version patching and the hand-rolled writer
# ---------------------------------------------------------------------------------------------

def write_gguf_version(path: str | os.PathLike, version: int) -> Path:
    """Overwrite the version field of an existing GGUF file in place.

    Versions 2 and 3 share one layout for little-endian files, so 2 gives a valid v2 file;
    any other value makes a file a reader should reject (version 1 used 32-bit counts).
    """
    path = Path(path)
    with open(path, "r+b") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        f.write(struct.pack("<I", version))
    return path


def _pack_value(spec: Sequence[V], value: Any) -> bytes:
    """Pack one value of type spec[0]; an ARRAY's element type is spec[1] (recursively)."""
    t = spec[0]
    if t == V.ARRAY:
        out = struct.pack("<IQ", spec[1], len(value))
        return out + b"".join(_pack_value(spec[1:], v) for v in value)
    if t == V.STRING:
        b = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return struct.pack("<Q", len(b)) + b
    return struct.pack("<" + gguf.GGUFWriter._simple_value_packing[t], value)


def write_gguf(path: str | os.PathLike, kv: Sequence[tuple[str, Sequence[V] | V, Any]],
               tensors: Sequence[tuple[str, np.ndarray, str]] = (), version: int = 3) -> Path:
    """Write a GGUF file by hand. kv: (key, type spec, value); a spec is a GGUFValueType or a
    sequence such as (ARRAY, ARRAY, INT32) for an array of arrays of int32. tensors:
    (name, float32 values in NumPy order, ggml type name). The data alignment is
    ``general.alignment`` when kv holds it, else 32."""
    path = Path(path)
    align = next((int(v) for key, _, v in kv if key == "general.alignment"), gguf.GGUF_DEFAULT_ALIGNMENT)
    head = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv)))
    for key, spec, value in kv:
        spec = (spec,) if isinstance(spec, V) else tuple(spec)
        head += _pack_value((V.STRING,), key) + struct.pack("<I", spec[0]) + _pack_value(spec, value)
    blobs, offset = [], 0
    for name, values, type_name in tensors:
        data, raw = encode_tensor(name, np.asarray(values, np.float32), type_name)
        blob = np.ascontiguousarray(data).tobytes()
        head += _pack_value((V.STRING,), name) + struct.pack("<I", values.ndim)
        head += b"".join(struct.pack("<Q", d) for d in reversed(values.shape))
        head += struct.pack("<IQ", raw if raw is not None else _qtype(type_name), offset)
        blobs.append(blob)
        offset += -(-len(blob) // align) * align
    head += bytes(-len(head) % align)
    with open(path, "wb") as f:
        f.write(head)
        for blob in blobs:
            f.write(blob + bytes(-len(blob) % align))
    return path


def _all_types_kv() -> list[tuple[str, tuple[V, ...], Any]]:
    A = V.ARRAY
    return [
        ("general.architecture", (V.STRING,), "dasllama-test"),
        ("general.alignment", (V.UINT32,), 64),
        ("test.uint8", (V.UINT8,), 200),
        ("test.int8", (V.INT8,), -100),
        ("test.uint16", (V.UINT16,), 60000),
        ("test.int16", (V.INT16,), -30000),
        ("test.uint32", (V.UINT32,), 4_000_000_000),
        ("test.int32", (V.INT32,), -2_000_000_000),
        ("test.float32", (V.FLOAT32,), 1.5),
        ("test.bool_true", (V.BOOL,), True),
        ("test.bool_false", (V.BOOL,), False),
        ("test.string", (V.STRING,), "héllo ▁wörld ✓"),
        ("test.string_empty", (V.STRING,), ""),
        ("test.uint64", (V.UINT64,), 2**63 + 5),
        ("test.int64", (V.INT64,), -(2**62) - 7),
        ("test.float64", (V.FLOAT64,), 3.141592653589793),
        ("test.arr.uint8", (A, V.UINT8), [0, 1, 255]),
        ("test.arr.int8", (A, V.INT8), [-128, 0, 127]),
        ("test.arr.uint16", (A, V.UINT16), [0, 65535]),
        ("test.arr.int16", (A, V.INT16), [-32768, 32767]),
        ("test.arr.uint32", (A, V.UINT32), [0, 4294967295]),
        ("test.arr.int32", (A, V.INT32), [-2147483648, 0, 2147483647]),
        ("test.arr.float32", (A, V.FLOAT32), [0.5, -2.25, 1e-3]),
        ("test.arr.bool", (A, V.BOOL), [True, False, True]),
        ("test.arr.string", (A, V.STRING), ["a", "", "ünï", "<|im_end|>"]),
        ("test.arr.uint64", (A, V.UINT64), [0, 2**64 - 1]),
        ("test.arr.int64", (A, V.INT64), [-(2**63), 2**63 - 1]),
        ("test.arr.float64", (A, V.FLOAT64), [1e300, -0.1]),
        ("test.arr.empty", (A, V.INT32), []),
        ("test.nested.int32", (A, A, V.INT32), [[1, 2, 3], [4], []]),
        ("test.nested.string", (A, A, V.STRING), [["x", "y"], ["z"]]),
        ("test.nested.deep", (A, A, A, V.FLOAT32), [[[1.0, 2.0], [3.0]], [[4.0]]]),
    ]


ALL_TYPES_KV = _all_types_kv()


def all_types_tensors() -> list[tuple[str, np.ndarray, str]]:
    """The tensors of write_all_types_gguf: (name, float32 values, type)."""
    rng = np.random.default_rng(1234)
    return [
        ("t.f32", np.arange(15, dtype=np.float32).reshape(3, 5) - 7.0, "F32"),   # 60 B: padded
        ("t.f16", rng.standard_normal((4, 8)).astype(np.float32), "F16"),
        ("t.q8_0", rng.standard_normal((2, 64)).astype(np.float32), "Q8_0"),
        ("t.vec", np.linspace(-1, 1, 7, dtype=np.float32), "F32"),
    ]


def write_all_types_gguf(path: str | os.PathLike, version: int = 3) -> Path:
    """A GGUF with every metadata value type (ALL_TYPES_KV: scalars, arrays of each, an empty
    array, arrays of arrays), ``general.alignment`` = 64 and the tensors of all_types_tensors()."""
    return write_gguf(path, ALL_TYPES_KV, all_types_tensors(), version=version)
