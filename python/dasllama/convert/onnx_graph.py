"""Reading ONNX graphs for the converters: initializers as NumPy arrays, who produces and who
consumes each tensor, and PyTorch module paths from the exporter's node names.

The ``onnx`` package parses the file (``pip install onnx``); nothing here runs the graph.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from typing import Optional, Union

import numpy as np

from ..errors import ConvertError

__all__ = ["OnnxGraph", "module_path"]

# The exporter numbers a module's second and later calls with a suffix ("query_3" is the
# fourth call of "query"); ALBERT's shared layer is called once per layer.
_CALL_SUFFIX = re.compile(r"_(\d+)$")


def module_path(node_name: str) -> tuple[str, int]:
    """The module path of an exporter's node name and the call index of its last module:
    "/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/attention/query_3/MatMul_quant"
    -> ("encoder.bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query", 3).
    The last segment (the op) is dropped."""
    parts = [p for p in node_name.split("/") if p][:-1]
    # A Sequential inside a ModuleList is scoped twice ("cnn.0/cnn.0.1"): keep the full one.
    parts = [p for i, p in enumerate(parts)
             if not (i + 1 < len(parts) and parts[i + 1].startswith(p + "."))]
    call = 0
    if parts:
        m = _CALL_SUFFIX.search(parts[-1])
        if m:
            call = int(m.group(1))
            parts[-1] = parts[-1][:m.start()]
    return ".".join(parts), call


class OnnxGraph:
    """An ONNX model's main graph with lookups by tensor name."""

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        try:
            import onnx
            from onnx import numpy_helper
        except ImportError as e:   # pragma: no cover - the test extra has onnx
            raise ConvertError(f"reading ONNX needs the onnx package (pip install onnx): {e}")
        self.path = os.fspath(path)
        try:
            model = onnx.load(self.path)
        except Exception as e:   # onnx raises DecodeError, OSError, ...; name the file
            raise ConvertError(f"{self.path}: not a readable ONNX model: {e}") from None
        self._numpy_helper = numpy_helper
        self._onnx = onnx
        self.graph = model.graph
        self.nodes = list(self.graph.node)
        self.initializers = {t.name: t for t in self.graph.initializer}
        self._arrays: dict[str, np.ndarray] = {}
        self.producer = {}
        self.consumers = defaultdict(list)
        for node in self.nodes:
            for out in node.output:
                self.producer[out] = node
            for name in node.input:
                if name:
                    self.consumers[name].append(node)
        self.inputs = {i.name: i for i in self.graph.input}
        self.outputs = [o.name for o in self.graph.output]

    def is_const(self, name: str) -> bool:
        return name in self.initializers

    def array(self, name: str) -> np.ndarray:
        """An initializer's values (read once, cached)."""
        if name not in self._arrays:
            if name not in self.initializers:
                raise ConvertError(f"{self.path}: {name!r} is not an initializer")
            self._arrays[name] = self._numpy_helper.to_array(self.initializers[name])
        return self._arrays[name]

    def attrs(self, node) -> dict:
        """A node's attributes as Python values (strings decoded)."""
        out = {}
        for a in node.attribute:
            v = self._onnx.helper.get_attribute_value(a)
            if isinstance(v, bytes):
                v = v.decode()
            out[a.name] = v
        return out

    def only_consumer(self, tensor: str, op_type: str) -> Optional[object]:
        """The one node of ``op_type`` that reads ``tensor``, or None."""
        hits = [n for n in self.consumers.get(tensor, []) if n.op_type == op_type]
        return hits[0] if len(hits) == 1 else None

    def const_input(self, node, skip: str = "") -> Optional[str]:
        """The name of the one initializer among a node's inputs (other than ``skip``)."""
        names = [x for x in node.input if x and x != skip and self.is_const(x)]
        return names[0] if len(names) == 1 else None

    def shape_of(self, name: str) -> Optional[list]:
        """A graph input's declared shape (ints, or strings for symbolic dimensions)."""
        if name not in self.inputs:
            return None
        dims = self.inputs[name].type.tensor_type.shape.dim
        return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]
