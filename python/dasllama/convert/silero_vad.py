"""Silero VAD: the 16 kHz model of an ONNX export -> the small GGUF that dasllama ships.

::

    python -m dasllama.convert.silero_vad [MODEL.onnx] [-o silero_vad_v6.gguf]

Run once, when the shipped weights change; the package never reads ONNX at run time (the
``onnx`` package is needed here only). Without a path it reads the ``silero_vad.onnx`` of the
installed ``silero-vad`` package. The shipped file, python/dasllama/data/silero_vad_v6.gguf,
was written from silero-vad 6.0.0's ONNX (PyPI, MIT license; the wheel's and the ONNX file's
sha256 are in data/README.md), whose weights are also the ones faster-whisper 1.2.1 ships as
``assets/silero_vad_v6.onnx``; tests/test_vad_convert.py converts that copy again and checks
the tensors are the shipped ones exactly.

Two graph forms are read:

- silero-vad's ``silero_vad.onnx``: the graph is ``If(sr == 16000)`` with one branch per
  sample rate; the 16 kHz branch holds the weights as Constant nodes and the LSTM weights in
  PyTorch's layout (``decoder.rnn.weight_ih`` ...), which the graph slices into ONNX's order.
- a flat graph with initializers and an ``LSTM`` node whose W, R, B are initializers in ONNX's
  gate order (faster-whisper's ``silero_vad_v6.onnx``).

The tensors are found by the graph's structure, not by their names: the Conv nodes of the
chosen graph, in order, must be the STFT (kernel 256, stride 128, no bias), four encoder
convolutions (kernel 3, padding 1, strides 1, 2, 2, 1, with bias) and the output convolution
(kernel 1, with bias). Anything else fails with :class:`SileroGraphError` naming the node or
tensor.

Written tensors (float32, NumPy order; GGUF lists dimensions innermost first):

==================  ============  ==========================================================
stft.basis          [258, 256]    rows 0..128: real parts of the 129 rfft bins of a 256-sample
                                  frame (windowed), rows 129..257: imaginary parts
enc.{0..3}.weight   [Co, Ci, 3]   129->128 (stride 1), 128->64 (2), 64->64 (2), 64->128 (1)
enc.{0..3}.bias     [Co]
lstm.weight_ih      [512, 128]    gate blocks of 128 rows in PyTorch's order: i, f, g, o
lstm.weight_hh      [512, 128]
lstm.bias_ih        [512]
lstm.bias_hh        [512]
out.weight          [1, 128]      the 1x1 output convolution
out.bias            [1]
==================  ============  ==========================================================

Metadata: ``general.architecture = "silero_vad"``, the license and source, and
``silero_vad.{sample_rate, window, context, n_fft, hop, hidden}``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import numpy as np

from . import ConvertError, GGUFWriter

__all__ = ["SileroGraphError", "convert_silero_vad", "read_silero_onnx", "package_onnx_path",
           "SAMPLE_RATE", "WINDOW", "CONTEXT", "N_FFT", "HOP", "HIDDEN"]

SAMPLE_RATE = 16000
WINDOW = 512     # samples per probability at 16 kHz
CONTEXT = 64     # samples of the previous window the model sees before each window
N_FFT = 256      # STFT frame
HOP = 128        # STFT hop
HIDDEN = 128     # LSTM width
N_BINS = N_FFT // 2 + 1

# (kernel, stride, pad, has bias) of the Conv nodes, in graph order.
_CONVS = [(N_FFT, HOP, 0, False), (3, 1, 1, True), (3, 2, 1, True), (3, 2, 1, True),
          (3, 1, 1, True), (1, 1, 0, True)]
# Expected shapes by written name.
_SHAPES = {
    "stft.basis": (2 * N_BINS, N_FFT),
    "enc.0.weight": (128, N_BINS, 3), "enc.0.bias": (128,),
    "enc.1.weight": (64, 128, 3), "enc.1.bias": (64,),
    "enc.2.weight": (64, 64, 3), "enc.2.bias": (64,),
    "enc.3.weight": (128, 64, 3), "enc.3.bias": (128,),
    "lstm.weight_ih": (4 * HIDDEN, 128), "lstm.weight_hh": (4 * HIDDEN, HIDDEN),
    "lstm.bias_ih": (4 * HIDDEN,), "lstm.bias_hh": (4 * HIDDEN,),
    "out.weight": (1, HIDDEN), "out.bias": (1,),
}
TENSOR_NAMES = list(_SHAPES)


class SileroGraphError(ConvertError):
    """The ONNX graph is not a Silero VAD v5/v6 graph this converter knows; the message names
    the node or tensor that did not fit."""


def package_onnx_path() -> Path:
    """The ``silero_vad.onnx`` of the installed silero-vad package (found without importing
    it: its ``__init__`` imports torch)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise ConvertError("the silero-vad package is not installed: pass an ONNX path")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise ConvertError(f"{path}: the silero-vad package has no silero_vad.onnx")
    return path


def _tensor(value) -> np.ndarray:
    from onnx import numpy_helper
    return numpy_helper.to_array(value)


def _branch_16k(graph, where: str):
    """The graph to read: the 16 kHz branch of ``If(sr == 16000)`` when there is one."""
    import onnx
    ifs = [n for n in graph.node if n.op_type == "If"]
    if not ifs:
        return graph, where
    consts = {n.output[0]: n for n in graph.node if n.op_type == "Constant"}
    for node in ifs:
        cond = next((n for n in graph.node if node.input[0] in n.output), None)
        if cond is None or cond.op_type != "Equal":
            continue
        values = [_tensor(consts[i].attribute[0].t) for i in cond.input if i in consts]
        if "sr" not in cond.input or len(values) != 1:
            continue
        rate = int(np.asarray(values[0]).reshape(-1)[0])
        branches = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
        if rate != SAMPLE_RATE:
            raise SileroGraphError(f"{where}: If node {node.name or node.output[0]!r} tests "
                                   f"sr == {rate}, expected {SAMPLE_RATE}")
        return branches["then_branch"], f"{where}: then_branch of If {node.name!r}"
    raise SileroGraphError(f"{where}: no If node tests sr == {SAMPLE_RATE} "
                           f"(If nodes: {', '.join(n.name or n.output[0] for n in ifs)})")


def _named_tensors(graph) -> Dict[str, np.ndarray]:
    """Initializers and Constant-node values of one graph level, by name."""
    out = {t.name: _tensor(t) for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            out[n.output[0]] = _tensor(n.attribute[0].t)
    return out


def _walk(graph):
    """Every node of a graph and of its subgraphs (If branches)."""
    import onnx
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _walk(a.g)


def _conv_attrs(node) -> Tuple[int, int, int]:
    import onnx
    a = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
    kernel = list(a.get("kernel_shape", [0]))
    strides = list(a.get("strides", [1]))
    pads = list(a.get("pads", [0, 0]))
    if len(kernel) != 1 or len(set(pads)) != 1 or a.get("group", 1) != 1 or \
            list(a.get("dilations", [1])) != [1]:
        return -1, -1, -1
    return kernel[0], strides[0], pads[0]


def _onnx_to_torch_gates(x: np.ndarray) -> np.ndarray:
    """ONNX LSTM gate blocks (i, o, f, c) -> PyTorch's (i, f, g, o) along the first axis."""
    i, o, f, c = np.split(x, 4, axis=0)
    return np.concatenate([i, f, c, o], axis=0)


def read_silero_onnx(path: Union[str, os.PathLike]) -> Dict[str, np.ndarray]:
    """The 16 kHz model's tensors (float32, the names of the module text) from an ONNX file."""
    import onnx
    path = Path(path)
    if not path.is_file():
        raise ConvertError(f"{path}: no such file")
    try:
        model = onnx.load(str(path))
    except Exception as e:  # onnx raises DecodeError and others for a file that is not ONNX
        raise SileroGraphError(f"{path}: not an ONNX model ({type(e).__name__}: {e})") from e
    graph, where = _branch_16k(model.graph, str(path))
    tensors = _named_tensors(graph)
    out: Dict[str, np.ndarray] = {}

    convs = [n for n in graph.node if n.op_type == "Conv"]
    if len(convs) != len(_CONVS):
        raise SileroGraphError(f"{where}: {len(convs)} Conv nodes, expected {len(_CONVS)} "
                               "(STFT, four encoder convolutions, output)")
    targets = ["stft.basis"] + [f"enc.{i}" for i in range(4)] + ["out"]
    for node, (k, s, p, has_bias), target in zip(convs, _CONVS, targets):
        label = f"{where}: Conv node {node.name or node.output[0]!r}"
        if _conv_attrs(node) != (k, s, p):
            raise SileroGraphError(f"{label} has (kernel, stride, pad) {_conv_attrs(node)}, "
                                   f"expected {(k, s, p)} for {target}")
        if (len(node.input) > 2 and node.input[2] != "") != has_bias:
            raise SileroGraphError(f"{label}: expected {'a' if has_bias else 'no'} bias")
        names = list(node.input[1:3] if has_bias else node.input[1:2])
        for name in names:
            if name not in tensors:
                raise SileroGraphError(f"{label}: input {name!r} is not a constant tensor")
        w = tensors[names[0]]
        if target == "stft.basis":
            out["stft.basis"] = w.reshape(w.shape[0], -1) if w.ndim == 3 and w.shape[1] == 1 \
                else w
        elif target == "out":
            out["out.weight"] = w.reshape(w.shape[0], -1) if w.ndim == 3 and w.shape[2] == 1 \
                else w
            out["out.bias"] = tensors[names[1]]
        else:
            out[target + ".weight"] = w
            out[target + ".bias"] = tensors[names[1]]

    torch_names = {"lstm.weight_ih": "rnn.weight_ih", "lstm.weight_hh": "rnn.weight_hh",
                   "lstm.bias_ih": "rnn.bias_ih", "lstm.bias_hh": "rnn.bias_hh"}
    found = {key: [n for n in tensors if n.endswith(suffix)]
             for key, suffix in torch_names.items()}
    if all(len(v) == 1 for v in found.values()):
        for key, names in found.items():
            out[key] = tensors[names[0]]
    else:
        lstms = [n for n in _walk(graph) if n.op_type == "LSTM"]
        if len(lstms) != 1:
            raise SileroGraphError(f"{where}: {len(lstms)} LSTM nodes and no tensors named "
                                   "*rnn.weight_ih/_hh, *rnn.bias_ih/_hh: no LSTM weights")
        node = lstms[0]
        label = f"{where}: LSTM node {node.name or node.output[0]!r}"
        import onnx as _onnx
        attrs = {x.name: _onnx.helper.get_attribute_value(x) for x in node.attribute}
        if attrs.get("hidden_size") != HIDDEN or attrs.get("direction", b"forward") not in (
                b"forward", "forward"):
            raise SileroGraphError(f"{label}: hidden_size {attrs.get('hidden_size')}, "
                                   f"direction {attrs.get('direction', b'forward')!r}; "
                                   f"expected {HIDDEN}, forward")
        wrb = []
        for name in node.input[1:4]:
            if name not in tensors:
                raise SileroGraphError(f"{label}: input {name!r} is not a constant tensor")
            wrb.append(tensors[name])
        w, r, b = wrb
        if w.shape != (1, 4 * HIDDEN, 128) or r.shape != (1, 4 * HIDDEN, HIDDEN) or \
                b.shape != (1, 8 * HIDDEN):
            raise SileroGraphError(f"{label}: W {w.shape}, R {r.shape}, B {b.shape}; expected "
                                   f"(1, {4 * HIDDEN}, 128), (1, {4 * HIDDEN}, {HIDDEN}), "
                                   f"(1, {8 * HIDDEN})")
        out["lstm.weight_ih"] = _onnx_to_torch_gates(w[0])
        out["lstm.weight_hh"] = _onnx_to_torch_gates(r[0])
        out["lstm.bias_ih"] = _onnx_to_torch_gates(b[0, :4 * HIDDEN])
        out["lstm.bias_hh"] = _onnx_to_torch_gates(b[0, 4 * HIDDEN:])

    for name, shape in _SHAPES.items():
        t = out[name]
        if t.dtype != np.float32:
            raise SileroGraphError(f"{where}: tensor for {name} is {t.dtype}, expected float32")
        if tuple(t.shape) != shape:
            raise SileroGraphError(f"{where}: tensor for {name} has shape {tuple(t.shape)}, "
                                   f"expected {shape}")
        if not np.isfinite(t).all():
            raise SileroGraphError(f"{where}: tensor for {name} holds NaN or infinity")
    return {name: np.ascontiguousarray(out[name]) for name in _SHAPES}


def convert_silero_vad(onnx_path: Optional[Union[str, os.PathLike]],
                       output: Union[str, os.PathLike], source: Optional[str] = None) -> Path:
    """Write the 16 kHz Silero VAD of ``onnx_path`` (default: the installed silero-vad
    package's) to ``output``. ``source`` names the origin in the metadata (default: the file
    name); the ONNX file's sha256 is recorded with it."""
    if onnx_path is None:
        onnx_path, source = package_onnx_path(), source or SHIPPED_SOURCE
    onnx_path = Path(onnx_path)
    tensors = read_silero_onnx(onnx_path)
    digest = hashlib.sha256(onnx_path.read_bytes()).hexdigest()
    w = GGUFWriter()
    w.add("general.architecture", "str", "silero_vad")
    w.add("general.name", "str", "Silero VAD v6, 16 kHz")
    w.add("general.license", "str", "MIT")
    w.add("general.source", "str", source or onnx_path.name)
    w.add("silero_vad.source_sha256", "str", digest)
    w.add("silero_vad.lstm_gate_order", "str", "ifgo")
    for key, value in (("sample_rate", SAMPLE_RATE), ("window", WINDOW), ("context", CONTEXT),
                       ("n_fft", N_FFT), ("hop", HOP), ("hidden", HIDDEN)):
        w.add(f"silero_vad.{key}", "u32", value)
    for name, t in tensors.items():
        w.add_tensor(name, t.shape, "F32", lambda t=t: t)
    return w.write(output)


SHIPPED_SOURCE = "silero-vad 6.0.0 (PyPI), silero_vad/data/silero_vad.onnx"


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dasllama.convert.silero_vad",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("onnx", nargs="?", help="the ONNX file (default: the silero-vad package's)")
    p.add_argument("-o", "--output", default="silero_vad_v6.gguf")
    p.add_argument("--source", default=None, help="the origin named in the metadata")
    a = p.parse_args(argv)
    try:
        out = convert_silero_vad(a.onnx, a.output, a.source)
    except ConvertError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
