"""Converters from upstream checkpoints to GGUF, and the parts they share.

- :mod:`dasllama.convert.pocket` -- Pocket TTS (Kyutai's ``pocket-tts`` checkpoints).
- :mod:`dasllama.convert.cli` -- ``dasllama convert ...`` on the command line.

The shared parts live here: :class:`ConvertError`, a reader for ``.safetensors`` files
(:func:`read_safetensors`, memory-mapped, no ``safetensors`` or ``torch`` package needed) and
a small GGUF v3 writer (:class:`GGUFWriter`) that writes tensors one at a time, so a converter
never holds a whole encoded model in memory. Tensor encodings other than F32 go through
:func:`dasllama.formats.quantize`.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Union

import numpy as np

from ..errors import ConvertError

__all__ = ["ConvertError", "read_safetensors", "GGUFWriter", "GGUF_TYPES", "encoded_nbytes"]


# =============================================================================================
# Reading .safetensors
# =============================================================================================

# safetensors dtype -> (NumPy dtype of the stored values, widen to float32?)
_SAFETENSORS_DTYPES = {
    "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8"),
    "BF16": np.dtype("<u2"),  # bfloat16: the high half of a float32, widened below
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_MAX_HEADER = 100 * 1024 * 1024


def read_safetensors(path: Union[str, os.PathLike]) -> dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file, by name, as float32 NumPy arrays (integer and
    bool tensors keep their type). F32 tensors are read-only views into a memory map.

    The format: an 8-byte little-endian header length N, N bytes of JSON mapping each name to
    ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the end of the
    header), then the data. Raises ConvertError naming the file and field at fault."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ConvertError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", head)
        if n > min(_MAX_HEADER, size - 8):
            raise ConvertError(f"{path}: safetensors header length {n} exceeds the file "
                               f"({size} bytes)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConvertError(f"{path}: safetensors header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise ConvertError(f"{path}: safetensors header is not a JSON object")
    data_start, data_size = 8 + n, size - 8 - n
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=data_start, shape=(data_size,)) \
        if data_size > 0 else np.zeros(0, np.uint8)
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = _SAFETENSORS_DTYPES[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise ConvertError(f"{path}: tensor {name!r}: bad header entry {info!r} "
                               f"({e})") from None
        count = int(np.prod(shape, dtype=np.int64))
        if not (0 <= begin <= end <= data_size) or end - begin != count * dtype.itemsize:
            raise ConvertError(f"{path}: tensor {name!r}: data_offsets [{begin}, {end}] do not "
                               f"hold {count} {info['dtype']} values within {data_size} data "
                               f"bytes")
        values = mm[begin:end].view(dtype).reshape(shape)
        if info["dtype"] == "BF16":
            values = (values.astype(np.uint32) << 16).view(np.float32)
        elif dtype.kind == "f" and dtype != np.float32:
            values = values.astype(np.float32)
        out[name] = values
    return out


# =============================================================================================
# Writing GGUF
# =============================================================================================

# ggml tensor types the converters write: name -> (ggml id, block size, bytes per block)
# name -> (ggml type id, values per block, bytes per block): the types a converter writes or
# copies from another ggml file.
GGUF_TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20),
              "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34),
              "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110), "Q4_K": (12, 256, 144),
              "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210), "I8": (24, 1, 1),
              "BF16": (30, 1, 2)}

# GGUF metadata value types
_U8, _I8, _U16, _I16, _U32, _I32, _F32, _BOOL, _STR, _ARR, _U64, _I64, _F64 = range(13)
_PACK = {_U8: "<B", _I8: "<b", _U16: "<H", _I16: "<h", _U32: "<I", _I32: "<i", _F32: "<f",
         _BOOL: "<?", _U64: "<Q", _I64: "<q", _F64: "<d"}
VALUE_TYPES = {"u8": _U8, "i8": _I8, "u16": _U16, "i16": _I16, "u32": _U32, "i32": _I32,
               "f32": _F32, "bool": _BOOL, "str": _STR, "u64": _U64, "i64": _I64, "f64": _F64}


def encoded_nbytes(type_name: str, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of ``shape`` (NumPy order) stored as ``type_name``."""
    _, block, size = GGUF_TYPES[type_name]
    n = int(np.prod(shape, dtype=np.int64))
    return n // block * size


def _string(s: Union[str, bytes]) -> bytes:
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _value(vtype: int, value: Any) -> bytes:
    if vtype == _STR:
        return _string(value)
    return struct.pack(_PACK[vtype], value)


class _Encoded:
    """Bytes already in a tensor type's layout (see GGUFWriter.add_encoded_tensor)."""

    def __init__(self, data) -> None:
        self.data = bytes(data)


class GGUFWriter:
    """Collects metadata and tensor descriptions, then writes a GGUF v3 file in one pass.

    ::

        w = GGUFWriter()
        w.add("general.architecture", "str", "pocket")
        w.add("pocket.lm.ratios", "u32[]", [6, 5, 4])
        w.add_tensor("lm.eos.weight", (1, 1024), "F32", lambda: values)  # float32, NumPy order
        w.write("out.gguf")

    A tensor's values come from a callable, called once while writing, so a converter never
    holds more than one tensor. Types: F32, F16, Q8_0 (the last two encoded by
    dasllama.formats.quantize; Q8_0 needs rows of a multiple of 32 values).
    """

    ALIGNMENT = 32

    def __init__(self) -> None:
        self._kv: list[bytes] = []
        self._keys: set[str] = set()
        self._tensors: list[tuple[str, tuple[int, ...], str, Callable[[], np.ndarray]]] = []

    def add(self, key: str, vtype: str, value: Any) -> None:
        """One metadata entry. vtype: u8 i8 u16 i16 u32 i32 f32 bool str u64 i64 f64, or one of
        those followed by ``[]`` for an array (a uint8 array may be given as bytes)."""
        if key in self._keys:
            raise ConvertError(f"metadata key {key!r} written twice")
        self._keys.add(key)
        entry = _string(key)
        if vtype.endswith("[]"):
            et = VALUE_TYPES[vtype[:-2]]
            if et == _U8 and isinstance(value, (bytes, bytearray, memoryview)):
                body = bytes(value)
                entry += struct.pack("<IIQ", _ARR, et, len(body)) + body
            else:
                values = list(value)
                entry += struct.pack("<IIQ", _ARR, et, len(values))
                entry += b"".join(_value(et, v) for v in values)
        else:
            vt = VALUE_TYPES[vtype]
            entry += struct.pack("<I", vt) + _value(vt, value)
        self._kv.append(entry)

    def add_tensor(self, name: str, shape: tuple[int, ...], type_name: str,
                   values: Callable[[], np.ndarray]) -> None:
        if type_name not in GGUF_TYPES:
            raise ConvertError(f"{name}: cannot write type {type_name!r} "
                               f"(known: {', '.join(GGUF_TYPES)})")
        block = GGUF_TYPES[type_name][1]
        if shape and shape[-1] % block:
            raise ConvertError(f"{name}: rows of {shape[-1]} values do not fill {type_name} "
                               f"blocks of {block}")
        self._tensors.append((name, tuple(int(d) for d in shape), type_name, values))

    def add_encoded_tensor(self, name: str, shape: tuple[int, ...], type_name: str,
                           data: Callable[[], bytes]) -> None:
        """A tensor whose bytes are already in ``type_name``'s layout (copied from another
        file of that type, never decoded and encoded again)."""
        self.add_tensor(name, shape, type_name, lambda: _Encoded(data()))

    def _encode(self, name: str, shape: tuple[int, ...], type_name: str,
                values) -> bytes:
        if isinstance(values, _Encoded):
            want = encoded_nbytes(type_name, shape)
            if len(values.data) != want:
                raise ConvertError(f"{name}: {len(values.data)} bytes given, {type_name} "
                                   f"{list(shape)} takes {want}")
            return values.data
        values = np.ascontiguousarray(values, dtype=np.float32)
        if values.shape != shape:
            raise ConvertError(f"{name}: values of shape {values.shape}, declared {shape}")
        if type_name == "F32":
            return values.tobytes()
        from .. import formats  # the C++ encoders; only needed for the F16 and Q8_0 lanes
        return np.asarray(formats.quantize(type_name, values)).tobytes()

    def write(self, path: Union[str, os.PathLike],
              progress: Optional[Callable[[int, int], None]] = None) -> Path:
        """Write the file (to a temporary name first, renamed into place when complete).
        progress: called with (tensors written, tensors in all) after each tensor."""
        path = Path(path)
        align = self.ALIGNMENT
        head = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(self._tensors), len(self._kv)))
        for entry in self._kv:
            head += entry
        offset = 0
        for name, shape, type_name, _ in self._tensors:
            head += _string(name) + struct.pack("<I", len(shape))
            head += b"".join(struct.pack("<Q", d) for d in reversed(shape))  # innermost first
            head += struct.pack("<IQ", GGUF_TYPES[type_name][0], offset)
            offset += -(-encoded_nbytes(type_name, shape) // align) * align
        head += bytes(-len(head) % align)
        tmp = path.with_name(path.name + ".part")
        try:
            with open(tmp, "wb") as f:
                f.write(head)
                for i, (name, shape, type_name, values) in enumerate(self._tensors):
                    blob = self._encode(name, shape, type_name, values())
                    f.write(blob + bytes(-len(blob) % align))
                    if progress is not None:
                        progress(i + 1, len(self._tensors))
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
        return path

    @property
    def tensor_names(self) -> list[str]:
        return [t[0] for t in self._tensors]


def _iter_names(names: Iterable[str], limit: int = 8) -> str:
    names = sorted(names)
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")
