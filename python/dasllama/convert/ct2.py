"""A reader of CTranslate2's ``model.bin``: the variables of a converted model, memory-mapped.

The layout (little-endian; binary versions 3 to 6 as CTranslate2 writes them)::

    u32 binary_version
    [version >= 2]  string spec_name; u32 spec_revision
    u32 n_variables
    n_variables x:  string name
                    u8 rank; u32 dims[rank]
                    [version >= 4]  u8 type_id; u32 n_bytes
                    [version <  4]  u8 item_size; u32 n_items   (float32 / int8 / int16 by size)
                    bytes data
    [version >= 3]  u32 n_aliases; n_aliases x: string alias; string variable_name

A string is a u16 length that counts a trailing NUL, then that many bytes. Type ids follow
CTranslate2's DataType: 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16.

Quantized weights (int8 / int16) come with a ``NAME_scale`` variable: one float per output row,
the factor the weight was multiplied by before rounding, so ``weight = q / scale``.
:func:`dequantized` applies it. Every count, size and offset is checked against the bytes that
are really there; a violation raises :class:`Ct2FormatError` naming the file, the field and
its byte offset.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import numpy as np

from ..errors import ConvertError

__all__ = ["Ct2FormatError", "Ct2Model", "read_ct2_model", "dequantized"]

# DataType ids of CTranslate2 (include/ctranslate2/types.h). bfloat16 is kept as its raw
# 16 bits and widened by dequantized().
_TYPES = {0: ("float32", np.dtype("<f4")), 1: ("int8", np.dtype("i1")),
          2: ("int16", np.dtype("<i2")), 3: ("int32", np.dtype("<i4")),
          4: ("float16", np.dtype("<f2")), 5: ("bfloat16", np.dtype("<u2"))}
# Version-3 files name a type by its item size alone.
_ITEM_SIZE_TYPES = {4: 0, 1: 1, 2: 2}
_SUPPORTED_VERSIONS = range(3, 7)
# A real model has a few hundred variables; far more means the count field is garbage.
_MAX_VARIABLES = 1_000_000
_MAX_RANK = 8   # CTranslate2's tensors have at most 4 dimensions; allow some room


class Ct2FormatError(ConvertError):
    """A CTranslate2 model file that does not follow the layout; the message names the file,
    the field and its byte offset."""


@dataclass
class Ct2Model:
    """The variables of a model.bin (NumPy arrays viewing the mapped file), by name."""

    path: Path
    binary_version: int
    spec: str
    spec_revision: int
    variables: dict = field(default_factory=dict)   # name -> np.ndarray
    types: dict = field(default_factory=dict)       # name -> CTranslate2 type name
    aliases: dict = field(default_factory=dict)     # alias -> variable name

    def get(self, name: str) -> np.ndarray:
        """The variable ``name`` (an alias resolves to its variable); Ct2FormatError if absent."""
        target = self.aliases.get(name, name)
        if target not in self.variables:
            raise Ct2FormatError(f"{self.path}: variable {name!r} is missing")
        return self.variables[target]

    def has(self, name: str) -> bool:
        return self.aliases.get(name, name) in self.variables

    def scalar(self, name: str) -> int:
        """An integer scalar variable (the spec's attributes, e.g. ``encoder/num_heads``)."""
        v = self.get(name)
        if v.size != 1 or v.dtype.kind not in "iu":
            raise Ct2FormatError(f"{self.path}: variable {name!r} is not an integer scalar "
                                 f"(shape {v.shape}, {v.dtype})")
        return int(v.reshape(-1)[0])


class _Cursor:
    def __init__(self, path: Path, data) -> None:
        self.path, self.data, self.pos = path, data, 0

    def fail(self, what: str, why: str, at: int) -> Ct2FormatError:
        return Ct2FormatError(f"{self.path}: {what} at byte {at}: {why}")

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail(what, f"needs {n} bytes, the file has {len(self.data) - self.pos} "
                                  "left", self.pos)
        view = memoryview(self.data)[self.pos:self.pos + n]
        self.pos += n
        return view

    def unpack(self, fmt: str, what: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        at = self.pos
        n = self.unpack("H", what + " length")
        if n == 0:
            raise self.fail(what, "has length 0 (the length counts a trailing NUL)", at)
        raw = bytes(self.take(n, what))
        if raw[-1] != 0:
            raise self.fail(what, "does not end with a NUL byte", at)
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(what, f"is not UTF-8 ({e})", at) from None


def read_ct2_model(path: Union[str, os.PathLike]) -> Ct2Model:
    """Map ``path`` (a CTranslate2 model.bin) and return its variables, checked."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    except OSError as e:
        raise Ct2FormatError(f"{path}: cannot be read: {e.strerror or e}") from None
    c = _Cursor(path, data)
    version = c.unpack("I", "binary_version")
    if version not in _SUPPORTED_VERSIONS:
        raise c.fail("binary_version", f"is {version}; this reader knows versions "
                     f"{_SUPPORTED_VERSIONS.start} to {_SUPPORTED_VERSIONS.stop - 1}", 0)
    spec = c.string("spec name")
    revision = c.unpack("I", "spec revision")
    at = c.pos
    count = c.unpack("I", "variable count")
    if count > _MAX_VARIABLES:
        raise c.fail("variable count", f"is {count} (more than {_MAX_VARIABLES})", at)
    model = Ct2Model(path, version, spec, revision)
    for i in range(count):
        name = c.string(f"name of variable {i}")
        what = f"variable {name!r}"
        at = c.pos
        rank = c.unpack("B", what + " rank")
        if rank > _MAX_RANK:
            raise c.fail(what + " rank", f"is {rank} (more than {_MAX_RANK})", at)
        dims = tuple(c.unpack("I", f"{what} dimension {d}") for d in range(rank))
        at = c.pos
        if version >= 4:
            type_id = c.unpack("B", what + " type")
            n_bytes = c.unpack("I", what + " byte count")
        else:
            item = c.unpack("B", what + " item size")
            if item not in _ITEM_SIZE_TYPES:
                raise c.fail(what + " item size", f"is {item} (known: 1, 2, 4)", at)
            type_id = _ITEM_SIZE_TYPES[item]
            n_bytes = c.unpack("I", what + " item count") * item
        if type_id not in _TYPES:
            raise c.fail(what + " type", f"is {type_id} (known: "
                         + ", ".join(f"{k} {v[0]}" for k, v in _TYPES.items()) + ")", at)
        type_name, dtype = _TYPES[type_id]
        n_items = int(np.prod(dims, dtype=np.int64)) if dims else 1
        if n_items * dtype.itemsize != n_bytes:
            raise c.fail(what + " byte count", f"is {n_bytes}, but shape {dims} of {type_name} "
                         f"needs {n_items * dtype.itemsize}", at)
        if name in model.variables:
            raise c.fail(what, "appears twice", at)
        start = c.pos
        c.take(n_bytes, what + " data")
        model.variables[name] = np.ndarray(dims, dtype, buffer=data, offset=start)
        model.types[name] = type_name
    if version >= 3:
        n_alias = c.unpack("I", "alias count")
        for i in range(n_alias):
            alias = c.string(f"alias {i}")
            at = c.pos
            target = c.string(f"target of alias {alias!r}")
            if target not in model.variables:
                raise c.fail(f"target of alias {alias!r}", f"names no variable ({target!r})", at)
            model.aliases[alias] = target
    if c.pos != len(data):
        raise c.fail("end of file", f"{len(data) - c.pos} bytes follow the last record", c.pos)
    return model


def dequantized(model: Ct2Model, name: str) -> np.ndarray:
    """Variable ``name`` as float32 (float16 is widened; bfloat16 widened from its high half;
    int8 / int16 divided by its per-row ``NAME_scale``)."""
    v = model.get(name)
    t = model.types[model.aliases.get(name, name)]
    if t == "float32":
        return np.asarray(v, dtype=np.float32)
    if t == "float16":
        return v.astype(np.float32)
    if t == "bfloat16":
        return (v.astype(np.uint32) << 16).view(np.float32)
    if t in ("int8", "int16"):
        scale_name = name + "_scale"
        if not model.has(scale_name):
            raise Ct2FormatError(f"{model.path}: {t} variable {name!r} has no {scale_name!r}")
        scale = dequantized(model, scale_name).reshape(-1)
        rows = v.shape[0] if v.ndim else 1
        if scale.size not in (1, rows):
            raise Ct2FormatError(f"{model.path}: {scale_name!r} has {scale.size} values for "
                                 f"{rows} rows of {name!r}")
        q = v.astype(np.float32).reshape(rows, -1)
        return (q / scale.reshape(-1, 1)).reshape(v.shape).astype(np.float32)
    raise Ct2FormatError(f"{model.path}: variable {name!r} of type {t} is not a float tensor")
