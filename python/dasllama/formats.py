"""Tensor formats: conversions between GGUF tensor types and float32, done in C++.

``types()`` lists every type a GGUF file may name, with its block layout and whether this build
can read (dequantize) and write (quantize) it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _core

__all__ = ["TypeInfo", "types", "dequantize", "quantize"]


@dataclass(frozen=True)
class TypeInfo:
    name: str
    id: int
    block_size: int      # elements per block
    type_size: int       # bytes per block
    can_dequantize: bool
    can_quantize: bool


_TYPES = {row[0]: TypeInfo(*row) for row in _core.format_table()}


def types() -> dict[str, TypeInfo]:
    """Every known type by its ggml name ("F16", "Q4_K", ...)."""
    return dict(_TYPES)


def dequantize(type: str, raw: np.ndarray, n: int) -> np.ndarray:
    """Decode the first ``n`` elements of ``raw`` (uint8 bytes of type ``type``) to float32.

    Raises FormatError when the type is unknown or cannot be read, ``n`` is not a multiple of
    its block size, or ``raw`` is too short."""
    raw = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)  # any dtype: its bytes
    return _core.dequantize(type, raw, int(n))


def quantize(type: str, x: np.ndarray) -> np.ndarray:
    """Encode float32 values (flattened; a multiple of the block size) as bytes of ``type``."""
    return _core.quantize(type, np.ascontiguousarray(x, dtype=np.float32).reshape(-1))
