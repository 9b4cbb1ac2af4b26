"""GGUF files for the references, read without dasllama's own reader.

The references check the C++ chain, and the C++ GGUF reader and dequantizers are part of that
chain, so the references read files through the peer ``gguf`` package (layout and metadata)
and decode quantized tensors with :mod:`dasllama.reference.quants` (NumPy, written from the
format definitions). ``open(path)`` gives the same face dasllama.gguf does (``metadata``,
``tensors`` with NumPy-order shapes and type names, ``tensor``, ``raw``), so a reference reads
names, not readers. One file only: the references run on single-file test models.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from ..errors import GGUFError
from . import quants

__all__ = ["ReferenceGGUF", "TensorEntry", "open"]


@dataclass(frozen=True)
class TensorEntry:
    name: str
    shape: tuple      # NumPy order (GGUF lists dimensions innermost first)
    type: str         # the GGML type name: "F32", "Q4_K", ...

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


class ReferenceGGUF:
    """One GGUF file through the ``gguf`` package. Usable as a context manager."""

    def __init__(self, path: Union[str, os.PathLike]):
        try:
            from gguf import GGUFReader
        except ImportError as e:
            raise ImportError("the NumPy references read GGUF files through the gguf package "
                              f"(pip install gguf): {e}") from None
        self.path = os.fspath(path)
        try:
            reader = GGUFReader(self.path)
        except (ValueError, OSError) as e:
            raise GGUFError(f"{self.path}: the gguf package cannot read it ({e})") from None
        self._reader = reader
        self._tensors = {t.name: t for t in reader.tensors}
        self.tensors = {t.name: TensorEntry(t.name, tuple(int(d) for d in reversed(t.shape)),
                                            t.tensor_type.name) for t in reader.tensors}
        self.metadata: dict[str, Any] = {
            key: field.contents() for key, field in reader.fields.items()
            if not key.startswith("GGUF.")}

    def raw(self, name: str) -> np.ndarray:
        """The stored bytes of tensor ``name`` (uint8, flat; for F32 and friends, their bytes)."""
        return np.asarray(self._entry(name).data).reshape(-1).view(np.uint8)

    def tensor(self, name: str) -> np.ndarray:
        """Tensor ``name`` decoded to float32, in NumPy order."""
        info = self.tensors.get(name) or self._entry(name)
        if info.type == "F32":
            values = np.asarray(self._entry(name).data, dtype=np.float32).reshape(-1)
        else:
            values = quants.dequantize(info.type, self.raw(name), info.n_elements)
        return np.asarray(values, dtype=np.float32).reshape(info.shape)

    def _entry(self, name: str):
        t = self._tensors.get(name)
        if t is None:
            raise GGUFError(f"{self.path}: tensor {name!r} is missing")
        return t

    def close(self) -> None:
        self._tensors = {}
        self._reader = None

    def __enter__(self) -> "ReferenceGGUF":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open(path: Union[str, os.PathLike]) -> ReferenceGGUF:  # noqa: A001 - mirrors gguf.open
    return ReferenceGGUF(path)
