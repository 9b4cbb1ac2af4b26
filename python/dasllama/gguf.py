"""Reading GGUF files: validated, memory-mapped, with metadata as Python values.

::

    with dasllama.gguf.open("model.gguf") as f:
        f.metadata["general.architecture"]     # 'llama'
        info = f.tensors["blk.0.attn_q.weight"]
        info.shape, info.type, info.nbytes      # NumPy order, e.g. (576, 576), 'Q4_1', ...
        w = f.tensor("blk.0.attn_q.weight")     # float32 array of that shape
        b = f.raw("blk.0.attn_q.weight")        # the stored bytes, a read-only view (no copy)

Shapes are in NumPy order: GGUF lists dimensions innermost first, dasllama reverses them.
A split model (``name-00001-of-00003.gguf``) opens as one file. Every problem with a file
raises :class:`dasllama.errors.GGUFError` naming the field and its byte offset.

Arrays returned by ``raw`` keep the mapping alive on their own; ``close()`` only drops the
file's reference. A GGUFFile may be read from several threads at once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Union

import numpy as np

from . import _core

__all__ = ["GGUFFile", "TensorInfo", "open", "open_buffer"]


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple       # NumPy order (outermost first)
    type: str          # ggml type name, e.g. "Q4_K"
    nbytes: int
    offset: int        # absolute byte offset of the data in its file
    file: int = 0      # which part of a split model holds it

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class GGUFFile:
    """An open GGUF file (or split model). Use :func:`open` to make one."""

    def __init__(self, core: "_core.GGUFFile"):
        self._core = core

    @property
    def path(self) -> str:
        return self._core.path

    @property
    def version(self) -> int:
        return self._core.version

    @property
    def alignment(self) -> int:
        return self._core.alignment

    @property
    def file_count(self) -> int:
        return self._core.file_count

    @cached_property
    def metadata(self) -> dict[str, Any]:
        """Every metadata entry as a Python value (arrays as lists, nested arrays nested)."""
        return self._core.metadata()

    @cached_property
    def tensors(self) -> dict[str, TensorInfo]:
        """Tensor infos by name, in file order."""
        return {row[0]: TensorInfo(*row) for row in self._core.tensor_infos()}

    @property
    def architecture(self) -> str | None:
        return self.metadata.get("general.architecture")

    def tensor(self, name: str) -> np.ndarray:
        """The tensor dequantized to a new float32 array of its NumPy shape."""
        return self._core.tensor(name)

    def raw(self, name: str) -> np.ndarray:
        """The tensor's stored bytes as a read-only uint8 view into the mapping."""
        return self._core.raw(name)

    def close(self) -> None:
        self._core = None

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._core is None:
            return "<dasllama.gguf.GGUFFile closed>"
        return (f"<dasllama.gguf.GGUFFile {self.path!r} v{self.version} "
                f"{len(self.tensors)} tensors>")


def open(path: Union[str, os.PathLike]) -> GGUFFile:  # noqa: A001 - mirrors builtins.open
    """Open a GGUF file read-only. Raises GGUFError for a malformed file, FileNotFoundError
    for a missing one."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    return GGUFFile(_core.GGUFFile.open(path))


def open_buffer(data, name: str = "<memory>") -> GGUFFile:
    """Parse GGUF bytes already in memory (bytes, bytearray, memoryview, uint8 array). The
    buffer must not change while the returned file is in use."""
    return GGUFFile(_core.GGUFFile.open_buffer(data, name))
