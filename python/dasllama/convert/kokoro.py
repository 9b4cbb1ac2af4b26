"""Kokoro (StyleTTS2 / iSTFTNet) ONNX graphs to GGUF: Kokoro-82M and Kitten TTS.

::

    from dasllama.convert.kokoro import convert_kokoro
    convert_kokoro("kokoro-v1.0.int8.onnx", "voices_ja.npz", "kokoro.gguf", vocab="vocab.json")

The input is the graph kokoro-onnx exports (float or dynamically quantized int8), the voice
packs (.npz of (510, 1, 256) arrays, a .pt dict of tensors, or a .bin that is an .npz) and the
phoneme vocabulary (kokoro's config.json or a {"vocab": {symbol: id}} file). The converter
walks every node: each weight-bearing node (MatMulInteger, ConvInteger, DynamicQuantizeLSTM,
Gather of an embedding, LayerNormalization, SkipLayerNormalization, float Conv, ConvTranspose,
MatMul and Gemm, the float graph's LSTM and float embedding Gather, the Snake alphas, the STFT
window) becomes named tensors (a float graph's InstanceNormalization must carry AdaIN's identity
affine part and is checked, not stored); every other op must be
one of the structural ops the family uses, and every initializer must be claimed by a rule or be
a small constant of a structural op. Anything else raises :class:`ConvertError` naming it.

This layout is a contract with :mod:`dasllama.reference.kokoro` (and the C++ chain after it).

Weights: the int8 lane, kept as the graph holds it
-------------------------------------------------
Integer weights stay integers (GGUF I8) with their scales and zero points (F32), so the
reference can do the graph's integer arithmetic exactly (an int8 weight dequantized to f32
would make the reference re-derive the integers it needs, and doubles the file). The graph's
ConvInteger weights are uint8; they are stored as int8 minus 128 with the zero point shifted
alike, which leaves every product (q - zero_point) unchanged. Float weights stay F32.

Tensor names are the PyTorch state-dict names of hexgrad's KModel (``bert.*``,
``bert_encoder``, ``predictor.*``, ``text_encoder.*``, ``decoder.*``), taken from the
exporter's node names; the weight-norm products the exporter folded are stored under the
module that uses them. For a module M:

    M.weight (I8 (in, out)), M.weight_scale (F32 (out,) or (1,)), M.weight_zp (F32, same),
    M.bias (F32 (out,))                                   a MatMulInteger linear (y = x W + b)
    M.weight (I8 (out, in/groups, k)), M.weight_scale (1,), M.weight_zp (1,), M.bias [opt]
                                                          a ConvInteger convolution
    M.weight_ih (I8 (dirs, in, 4H)), M.weight_hh (I8 (dirs, H, 4H)), M.weight_ih_scale,
    M.weight_ih_zp, M.weight_hh_scale, M.weight_hh_zp (F32 (dirs,)), M.bias (F32 (dirs, 8H))
                                                          a DynamicQuantizeLSTM (gates i o f c)
    M.weight_ih (F32 (dirs, in, 4H)), M.weight_hh (F32 (dirs, H, 4H)), M.bias (F32 (dirs, 8H))
                                                          a float ONNX LSTM (ONNX's W and R
                                                          transposed; gates i o f c)
    M.weight (I8 (rows, dim)), M.weight_scale (1,), M.weight_zp (1,)   a quantized embedding
    M.weight, M.bias (F32)                                a LayerNorm, float conv, linear
                                                          (MatMul (in, out); a Gemm's weight
                                                          transposed to (in, out) when transB)
                                                          or embedding table
    decoder.generator.*.alphaK.J (F32 (1, C, 1))          Snake alphas
    decoder.generator.stft.window (F32 (n_fft,))          the STFT analysis window
    decoder.generator.stft.inverse_basis, .window_sum     the exporter's iSTFT basis and sum
        (a file without .window_sum holds the exact inverse basis: the envelope is the
        overlap-added squared window, as torch.istft divides by; convert/kokoro_torch.py)
    voice.NAME (F32 (510, 256))                           the voice packs, one row per length

Metadata
--------
    general.architecture = "kokoro", general.name, general.file_type (0 f32 graph, 7 int8)
    kokoro.quantized bool; kokoro.sample_rate u32; kokoro.n_fft u32; kokoro.hop u32
    kokoro.bert.layers u32, kokoro.bert.heads u32 (ALBERT: one layer applied `layers` times)
    kokoro.bert.activation str (ALBERT's feed-forward activation: "gelu_new", the tanh form,
        or "gelu", the erf form; absent means gelu_new)
    kokoro.style_split u32[] ([decoder part, predictor part] of the 256-wide style row)
    kokoro.harmonics u32, kokoro.sine_amp f32, kokoro.voiced_threshold f32,
    kokoro.upsample_scale u32 (samples per F0 frame)
    kokoro.eps.NAME f32 (each LayerNormalization's epsilon, by module)
    kokoro.conv.NAME i32[] [stride, pad_left, pad_right, dilation, groups, output_padding]
    kokoro.vocab.symbols str[], kokoro.vocab.ids i32[]; kokoro.voices str[]
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from . import ConvertError, GGUFWriter
from .onnx_graph import OnnxGraph, module_path

__all__ = ["convert_kokoro", "read_graph", "read_voices", "read_vocab", "write_kokoro",
           "STRUCTURAL_OPS"]

# Ops that move, reshape or combine activations without weights of their own. Their constant
# inputs must be small (shapes, axes, scalars).
STRUCTURAL_OPS = {
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Sin", "Cos", "Atan", "Tanh", "Sigmoid",
    "Floor", "Round", "Clip", "Cast", "Reshape", "Transpose", "Unsqueeze", "Squeeze", "Concat",
    "Split", "Slice", "Gather", "Shape", "Expand", "ConstantOfShape", "Equal", "Where",
    "Greater", "GreaterOrEqual", "Less", "And", "NonZero", "ScatterND", "Range", "CumSum",
    "ReduceMean", "ReduceSum", "Softmax", "LeakyRelu", "Resize", "Pad", "MatMul",
    "FusedMatMul", "DynamicQuantizeLinear", "DequantizeLinear", "FastGelu",
    # a float export's: ALBERT's id buffers (GatherElements, Flatten) and its softmax guard
    # (IsNaN)
    "GatherElements", "Flatten", "IsNaN",
}
# The largest constant a structural op may carry (the sine generator's 9 harmonic factors,
# a 4-d shape, ...); a bigger one is a weight no rule claimed.
_SMALL_CONST = 16

ADAIN_EPS = 1e-5   # AdaIN's instance norm (the reference's and the C++ chain's)

_PREDICTOR_PARTS = ("F0", "N", "F0_proj", "N_proj", "shared")


def state_name(path: str) -> str:
    """hexgrad's state-dict name for an exporter module path or initializer name:
    "encoder.F0.1.conv1" -> "predictor.F0.1.conv1", "decoder.decoder.encode" -> "decoder.encode",
    "encoder.bert.encoder.albert_layer_groups.0..." -> "bert.encoder.albert_layer_groups.0..."."""
    if path.startswith("decoder.decoder."):
        return "decoder." + path[len("decoder.decoder."):]
    if path.startswith("encoder."):
        path = path[len("encoder."):]
        head = path.split(".")[0]
        if head in _PREDICTOR_PARTS:
            return "predictor." + path
        return path
    raise ConvertError(f"{path!r} is not under the exporter's encoder or decoder")


def _node_module(node) -> tuple[str, int]:
    """The module path (state-dict name) and call index of a node; fused nodes without a path
    in their name are named by their output."""
    name = node.name if "/" in node.name else node.output[0]
    path, call = module_path(name)
    return state_name(path), call


class _Tensors:
    """Collected tensors: name -> (GGUF type, values); a name met twice must hold the same
    initializer (ALBERT's shared layer), or the graph is not the family's."""

    def __init__(self) -> None:
        self.items: dict[str, tuple[str, np.ndarray]] = {}
        self.sources: dict[str, str] = {}

    def add(self, name: str, gtype: str, values: np.ndarray, source: str) -> None:
        if name in self.items:
            if self.sources[name] != source:
                raise ConvertError(f"tensor {name} comes from both {self.sources[name]!r} and "
                                   f"{source!r}: shared weights must be one initializer")
            return
        self.items[name] = (gtype, values)
        self.sources[name] = source


def _as_i8(values: np.ndarray, zp: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """int8 weights as they are; uint8 ones shifted by -128 with their zero point."""
    if values.dtype == np.int8:
        return values, zp.astype(np.float32)
    if values.dtype == np.uint8:
        return (values.astype(np.int16) - 128).astype(np.int8), zp.astype(np.float32) - 128.0
    raise ConvertError(f"{what}: integer weights of type {values.dtype} (expected int8 or uint8)")


class _Reader:
    """One pass over the graph, claiming initializers rule by rule."""

    def __init__(self, g: OnnxGraph) -> None:
        self.g = g
        self.t = _Tensors()
        self.meta: dict[str, tuple[str, Any]] = {}
        self.claimed: set[str] = set()
        self.calls: dict[str, int] = {}

    # ------------------------------------------------------------------ helpers
    def fail(self, node, why: str) -> ConvertError:
        return ConvertError(f"{self.g.path}: node {node.name!r} ({node.op_type}): {why}")

    def const(self, name: str) -> np.ndarray:
        self.claimed.add(name)
        return self.g.array(name)

    def consumer(self, tensor: str, op: str, node) -> Any:
        hit = self.g.only_consumer(tensor, op)
        if hit is None:
            raise self.fail(node, f"expected its output {tensor!r} to feed one {op}")
        return hit

    def scale_after(self, node, out: str) -> tuple[Any, np.ndarray]:
        """Follow an integer result to the Mul by (x_scale * w_scale): that Mul and w_scale."""
        cast = self.consumer(out, "Cast", node)
        mul = self.consumer(cast.output[0], "Mul", node)
        other = [x for x in mul.input if x != cast.output[0]][0]
        smul = self.g.producer.get(other)
        if smul is None or smul.op_type != "Mul":
            raise self.fail(node, "its scale is not x_scale * w_scale")
        w_scale = self.g.const_input(smul)
        if w_scale is None:
            raise self.fail(node, "its weight scale is not a constant")
        return mul, self.const(w_scale)

    def conv_attrs(self, name: str, node) -> None:
        a = self.g.attrs(node)
        pads = list(a.get("pads", [0, 0]))
        row = [int(a.get("strides", [1])[0]), int(pads[0]), int(pads[1]),
               int(a.get("dilations", [1])[0]), int(a.get("group", 1)),
               int(a.get("output_padding", [0])[0])]
        if a.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
            raise self.fail(node, f"auto_pad {a['auto_pad']!r} is not supported")
        self.meta[f"kokoro.conv.{name}"] = ("i32[]", row)

    # ------------------------------------------------------------------ rules
    def matmul_integer(self, node) -> None:
        w_name = node.input[1]
        if not self.g.is_const(w_name):
            raise self.fail(node, "its B input is not a weight")
        name, call = _node_module(node)
        w = self.const(w_name)
        zp = self.const(node.input[3]) if len(node.input) > 3 and node.input[3] else \
            np.zeros(1, w.dtype)
        mul, scale = self.scale_after(node, node.output[0])
        w8, zp8 = _as_i8(w, np.asarray(zp), name)
        self.t.add(f"{name}.weight", "I8", w8, w_name)
        self.t.add(f"{name}.weight_scale", "F32", np.atleast_1d(scale).astype(np.float32),
                   w_name + ":scale")
        self.t.add(f"{name}.weight_zp", "F32", np.atleast_1d(zp8), w_name + ":zp")
        self.calls[name] = max(self.calls.get(name, 0), call + 1)
        nxt = self.g.consumers.get(mul.output[0], [])
        if len(nxt) == 1 and nxt[0].op_type in ("Add", "FastGelu"):
            b = self.g.const_input(nxt[0])
            if b is not None:
                self.t.add(f"{name}.bias", "F32", self.const(b).astype(np.float32), b)

    def conv_integer(self, node) -> None:
        w_name = node.input[1]
        if not self.g.is_const(w_name):
            raise self.fail(node, "its weight is not a constant")
        name, _ = _node_module(node)
        w = self.const(w_name)
        zp = self.const(node.input[3]) if len(node.input) > 3 and node.input[3] else \
            np.zeros(1, w.dtype)
        out = node.output[0]
        bias = None
        adds = [n for n in self.g.consumers.get(out, []) if n.op_type == "Add"]
        if adds:
            add = adds[0]
            other = [x for x in add.input if x != out][0]
            chain = self.g.producer.get(other)   # Reshape <- Cast <- Floor <- Div(bias, scale)
            while chain is not None and chain.op_type in ("Reshape", "Cast", "Floor"):
                chain = self.g.producer.get(chain.input[0])
            if chain is None or chain.op_type != "Div" or not self.g.is_const(chain.input[0]):
                raise self.fail(node, "its bias is not quantized as floor(b / scale)")
            bias = self.const(chain.input[0]).astype(np.float32)
            out = add.output[0]
        _, scale = self.scale_after(node, out)
        w8, zp8 = _as_i8(w, np.asarray(zp), name)
        self.t.add(f"{name}.weight", "I8", w8, w_name)
        self.t.add(f"{name}.weight_scale", "F32", np.atleast_1d(scale).astype(np.float32),
                   w_name + ":scale")
        self.t.add(f"{name}.weight_zp", "F32", np.atleast_1d(zp8), w_name + ":zp")
        if bias is not None:
            self.t.add(f"{name}.bias", "F32", bias, w_name + ":bias")
        self.conv_attrs(name, node)

    def lstm(self, node) -> None:
        name, _ = _node_module(node)
        a = self.g.attrs(node)
        ins = self._lstm_inputs(node, a, 12, (("W_scale", 8), ("W_zero_point", 9),
                                              ("R_scale", 10), ("R_zero_point", 11)))
        w, r, b = ins[1], ins[2], ins[3]
        w8, wzp = _as_i8(self.const(w), self.const(ins[9]), name)
        r8, rzp = _as_i8(self.const(r), self.const(ins[11]), name)
        self.t.add(f"{name}.weight_ih", "I8", w8, w)
        self.t.add(f"{name}.weight_hh", "I8", r8, r)
        self.t.add(f"{name}.weight_ih_scale", "F32", self.const(ins[8]).astype(np.float32),
                   ins[8])
        self.t.add(f"{name}.weight_ih_zp", "F32", np.atleast_1d(wzp), ins[9])
        self.t.add(f"{name}.weight_hh_scale", "F32", self.const(ins[10]).astype(np.float32),
                   ins[10])
        self.t.add(f"{name}.weight_hh_zp", "F32", np.atleast_1d(rzp), ins[11])
        self.t.add(f"{name}.bias", "F32", self.const(b).astype(np.float32), b)
        self.meta[f"kokoro.lstm.{name}.hidden"] = ("u32", int(a["hidden_size"]))

    def _lstm_inputs(self, node, a: dict, n_inputs: int, extra_constants) -> list:
        """The inputs of an LSTM node (quantized or float), padded to ``n_inputs``, after the
        checks both forms share: bidirectional without input_forget, W / R / B and the
        ``extra_constants`` ((role, index) pairs) constant, a zero initial state, no
        sequence_lens or peepholes."""
        if a.get("direction") != "bidirectional" or a.get("input_forget", 0):
            raise self.fail(node, f"expected a plain bidirectional LSTM, got {a}")
        ins = list(node.input) + [""] * (n_inputs - len(node.input))
        for role, i in (("W", 1), ("R", 2), ("B", 3)) + tuple(extra_constants):
            if not ins[i] or not self.g.is_const(ins[i]):
                raise self.fail(node, f"its {role} input is not a constant")
        for x in (ins[5], ins[6]):   # initial_h, initial_c: zeros, constant or built
            if x and self.g.is_const(x):
                if np.any(self.const(x)):
                    raise self.fail(node, "its initial state is not zero")
        if ins[4] or ins[7]:
            raise self.fail(node, "sequence_lens and peepholes are not supported")
        return ins

    def lstm_float(self, node) -> None:
        """The float graph's ONNX LSTM: W (dirs, 4H, in) and R (dirs, 4H, H) in ONNX's gate order
        i, o, f, c, B (dirs, 8H) = [Wb | Rb]; stored in the int8 layout's (dirs, in, 4H) and
        (dirs, H, 4H) as F32 (the C++ chain and the reference pick the float lane from it)."""
        name, _ = _node_module(node)
        a = self.g.attrs(node)
        acts = [x.decode() if isinstance(x, bytes) else str(x) for x in a.get("activations", [])]
        if "clip" in a or acts not in ([], ["Sigmoid", "Tanh", "Tanh"] * 2):
            raise self.fail(node, f"LSTM attributes clip / activations {a.get('clip')!r} "
                                  f"{acts!r} are not supported (plain sigmoid / tanh only)")
        ins = self._lstm_inputs(node, a, 8, ())
        w, r, b = ins[1], ins[2], ins[3]
        wv, rv, bv = self.const(w), self.const(r), self.const(b)
        hidden = int(a["hidden_size"])
        if wv.ndim != 3 or wv.shape[0] != 2 or wv.shape[1] != 4 * hidden or \
                rv.shape != (2, 4 * hidden, hidden) or bv.shape != (2, 8 * hidden):
            raise self.fail(node, f"W {list(wv.shape)}, R {list(rv.shape)}, B {list(bv.shape)} "
                                  f"are not a bidirectional LSTM's of hidden {hidden}")
        self.t.add(f"{name}.weight_ih", "F32",
                   np.ascontiguousarray(wv.transpose(0, 2, 1), np.float32), w)
        self.t.add(f"{name}.weight_hh", "F32",
                   np.ascontiguousarray(rv.transpose(0, 2, 1), np.float32), r)
        self.t.add(f"{name}.bias", "F32", bv.astype(np.float32), b)
        self.meta[f"kokoro.lstm.{name}.hidden"] = ("u32", hidden)

    def gemm(self, node) -> None:
        """A float Gemm with a constant weight (a Linear on 2-d input): y = x W^T + b for
        transB = 1 (PyTorch's (out, in)), x W + b for transB = 0; stored (in, out)."""
        name, _ = _node_module(node)
        a = self.g.attrs(node)
        if a.get("transA", 0) or float(a.get("alpha", 1.0)) != 1.0 or \
                float(a.get("beta", 1.0)) != 1.0:
            raise self.fail(node, f"only y = x W (+ b) Gemms are supported, got {a}")
        w = self.const(node.input[1]).astype(np.float32)
        if w.ndim != 2:
            raise self.fail(node, f"weight of shape {list(w.shape)} is not a matrix")
        self.t.add(f"{name}.weight", "F32", np.ascontiguousarray(w.T if a.get("transB", 0)
                                                                  else w), node.input[1])
        if len(node.input) > 2 and node.input[2]:
            if not self.g.is_const(node.input[2]):
                raise self.fail(node, "its bias is not a constant")
            self.t.add(f"{name}.bias", "F32", np.atleast_1d(self.const(node.input[2])).astype(
                np.float32), node.input[2])

    def embedding_float(self, node) -> None:
        """A float embedding table read by a Gather (the float graph's)."""
        table = node.input[0]
        if not table.endswith(".weight"):
            raise self.fail(node, f"embedding table {table!r} is not a module's weight")
        name = state_name(table[:-len(".weight")])
        self.t.add(f"{name}.weight", "F32", self.const(table).astype(np.float32), table)

    def embedding(self, node) -> None:
        table = node.input[0]
        deq = self.consumer(node.output[0], "DequantizeLinear", node)
        name = state_name(table[:-len(".weight_quantized")]) if table.endswith(
            ".weight_quantized") else None
        if name is None:
            raise self.fail(node, f"embedding table {table!r} is not a module's weight")
        w8, zp = _as_i8(self.const(table), self.const(deq.input[2]), name)
        self.t.add(f"{name}.weight", "I8", w8, table)
        self.t.add(f"{name}.weight_scale", "F32", np.atleast_1d(self.const(deq.input[1])).astype(
            np.float32), deq.input[1])
        self.t.add(f"{name}.weight_zp", "F32", np.atleast_1d(zp), table + ":zp")

    def layer_norm(self, node, gamma: str, beta: str) -> None:
        name, _ = _node_module(node)
        for role, x in ((".weight", gamma), (".bias", beta)):
            if not self.g.is_const(x):
                raise self.fail(node, f"its {role[1:]} is not a constant")
            self.t.add(name + role, "F32", self.const(x).astype(np.float32), x)
        eps = float(self.g.attrs(node).get("epsilon", 1e-5))
        self.meta[f"kokoro.eps.{name}"] = ("f32", eps)

    def float_weights(self, node) -> None:
        """Conv, ConvTranspose and MatMul with float weights (and the bias after a MatMul)."""
        name, call = _node_module(node)
        w = node.input[1]
        if not self.g.is_const(w):
            if node.op_type == "MatMul":
                return   # attention scores and the alignment: activations only
            raise self.fail(node, "its weight is not a constant")
        self.calls[name] = max(self.calls.get(name, 0), call + 1)   # ALBERT's shared layer
        if name == "decoder.generator.istft.stft":
            name = "decoder.generator.stft"
            self.t.add(f"{name}.inverse_basis", "F32", self.const(w).astype(np.float32), w)
        else:
            self.t.add(f"{name}.weight", "F32", self.const(w).astype(np.float32), w)
        if len(node.input) > 2 and node.input[2]:
            self.t.add(f"{name}.bias", "F32", self.const(node.input[2]).astype(np.float32),
                       node.input[2])
        if node.op_type == "MatMul":   # the bias: an Add, or FastGelu's (ALBERT's ffn)
            add = self.g.only_consumer(node.output[0], "Add") or \
                self.g.only_consumer(node.output[0], "FastGelu")
            b = self.g.const_input(add) if add is not None else None
            if b is not None:
                self.t.add(f"{name}.bias", "F32", np.atleast_1d(self.const(b)).astype(
                    np.float32), b)
        else:
            self.conv_attrs(name, node)

    def structural(self, node) -> None:
        for x in node.input:
            if not x or not self.g.is_const(x) or x in self.claimed:
                continue
            v = self.g.array(x)
            base = x.rsplit(".", 1)[-1]
            if v.size <= _SMALL_CONST and ".alpha" not in x:   # (a narrow stage's alphas
                self.claimed.add(x)                              # are small too)
            elif node.op_type == "Mul" and v.ndim == 3 and v.shape[0] == 1 and v.shape[2] == 1:
                # Snake: alpha * x (a named alpha), or (1 / alpha) * sin^2 (folded; the
                # reference divides alike)
                if ".alpha" in x:
                    name = state_name(x)
                    self.t.add(name, "F32", self.const(x).astype(np.float32), x)
                elif "Reciprocal" in x:
                    self.claimed.add(x)
                else:
                    raise self.fail(node, f"unknown per-channel constant {x!r} {v.shape}")
            elif v.dtype == np.int64 and v.ndim <= 2 and (
                    (node.op_type == "Slice" and x.startswith("onnx::Slice")) or
                    (node.op_type in ("Expand", "Slice", "GatherElements") and
                     "/bert/embeddings/" in node.name)):
                flat = v.reshape(-1)
                if np.array_equal(flat, np.arange(v.size)):   # ALBERT's position ids
                    self.meta["kokoro.bert.max_positions"] = ("u32", int(v.size))
                elif np.any(flat):                           # else its token types: zeros
                    raise self.fail(node, f"{x!r} is neither the position ids 0..{v.size - 1} "
                                          "nor zero token types")
                self.claimed.add(x)
            elif node.op_type == "Slice" and base == "window_sum":
                self.t.add("decoder.generator.stft.window_sum", "F32",
                           self.const(x).astype(np.float32), x)
            else:
                raise self.fail(node, f"constant input {x!r} of shape {list(v.shape)} is not "
                                      "one this graph family has")

    def instance_norm(self, node) -> None:
        """AdaIN's InstanceNormalization as a float export writes it: its affine part must be the
        identity (ones, zeros; the model was trained without one) and its epsilon AdaIN's."""
        for role, x, want in (("scale", node.input[1], 1.0), ("bias", node.input[2], 0.0)):
            if not self.g.is_const(x) or not np.all(self.const(x) == want):
                raise self.fail(node, f"its {role} is not the identity's ({want:g} everywhere)")
        eps = float(self.g.attrs(node).get("epsilon", 1e-5))
        if abs(eps - ADAIN_EPS) > 1e-9:
            raise self.fail(node, f"epsilon {eps:g} is not AdaIN's {ADAIN_EPS:g}")

    def stft(self, node) -> None:
        ins = list(node.input)
        step = int(self.const(ins[1]))
        window = self.const(ins[2]).astype(np.float32)
        length = int(self.const(ins[3]))
        if window.shape != (length,):
            raise self.fail(node, f"window of shape {window.shape} for frames of {length}")
        self.t.add("decoder.generator.stft.window", "F32", window, ins[2])
        self.meta["kokoro.n_fft"] = ("u32", length)
        self.meta["kokoro.hop"] = ("u32", step)

    # ------------------------------------------------------------------ the pass
    def run(self) -> None:
        g = self.g
        structural = []
        for node in g.nodes:
            op = node.op_type
            if op == "MatMulInteger":
                self.matmul_integer(node)
            elif op == "ConvInteger":
                self.conv_integer(node)
            elif op == "DynamicQuantizeLSTM":
                self.lstm(node)
            elif op == "LSTM":
                self.lstm_float(node)
            elif op == "Gemm" and g.is_const(node.input[1]):
                self.gemm(node)
            elif op == "Gather" and g.is_const(node.input[0]) and \
                    g.array(node.input[0]).ndim == 2 and \
                    g.array(node.input[0]).dtype in (np.float32, np.float16) and \
                    g.array(node.input[0]).size > _SMALL_CONST:
                self.embedding_float(node)
            elif op == "Gather" and g.is_const(node.input[0]) and \
                    g.array(node.input[0]).ndim == 2 and g.array(node.input[0]).dtype in (
                        np.int8, np.uint8):
                self.embedding(node)
            elif op == "LayerNormalization":
                self.layer_norm(node, node.input[1], node.input[2])
            elif op == "SkipLayerNormalization":
                if len(node.input) > 4 and node.input[4]:
                    raise self.fail(node, "a SkipLayerNormalization bias is not supported")
                self.layer_norm(node, node.input[2], node.input[3])
            elif op in ("Conv", "ConvTranspose") or (op == "MatMul" and g.is_const(
                    node.input[1])):
                self.float_weights(node)
            elif op == "STFT":
                self.stft(node)
            elif op == "InstanceNormalization":
                self.instance_norm(node)
            elif op in STRUCTURAL_OPS:
                structural.append(node)
            else:
                raise self.fail(node, "this op is not one the Kokoro/Kitten family uses")
        for node in structural:   # after the rules, so their constants are claimed
            self.structural(node)
        unclaimed = [n for n in g.initializers if n not in self.claimed and g.consumers.get(n)]
        if unclaimed:
            n = unclaimed[0]
            users = ", ".join(f"{u.name} ({u.op_type})" for u in g.consumers[n][:3])
            raise ConvertError(f"{g.path}: initializer {n!r} {list(g.array(n).shape)} is not "
                               f"claimed by any rule (read by {users})")


def _scalar_after(g: OnnxGraph, node_path: str, op: str) -> Optional[float]:
    """The constant operand of the first node of ``op`` whose name starts with node_path."""
    for node in g.nodes:
        if node.op_type == op and node.name.startswith(node_path):
            c = g.const_input(node)
            if c is not None and g.array(c).size == 1:
                return float(g.array(c).reshape(()))
    return None


def _sine_amplitude(g: OnnxGraph, sg: str) -> Optional[float]:
    """The sine generator's amplitude: the scalar its sines (the output of its Sin) are
    multiplied by first; found by structure, since exporters number the Muls differently."""
    sin = next((n for n in g.nodes if n.op_type == "Sin" and n.name.startswith(sg)), None)
    if sin is None:
        return None
    for node in g.consumers.get(sin.output[0], []):
        c = g.const_input(node) if node.op_type == "Mul" else None
        if c is not None and g.array(c).size == 1:
            return float(g.array(c).reshape(()))
    return None


def _config(g: OnnxGraph, r: _Reader) -> None:
    """Model-level settings read from the graph (shapes come with the tensors)."""
    meta = r.meta
    meta["kokoro.quantized"] = ("bool", any(n.op_type == "MatMulInteger" for n in g.nodes))
    layers = r.calls.get("bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query")
    if not layers:
        raise ConvertError(f"{g.path}: no ALBERT attention (query) found")
    meta["kokoro.bert.layers"] = ("u32", layers)
    heads = None
    for node in g.nodes:   # the (batch, time, heads, head_dim) reshape of the query
        if node.op_type == "Concat" and "albert_layers.0/attention/Concat" in node.name:
            consts = [g.array(x) for x in node.input if g.is_const(x)]
            if len(consts) == 2:
                # [heads, head_dim], or [-1, head_dim] where the exporter infers the heads
                heads, head_dim = int(consts[0].reshape(-1)[0]), int(consts[1].reshape(-1)[0])
                if heads <= 0 and head_dim > 0:
                    query = r.t.items.get("bert.encoder.albert_layer_groups.0.albert_layers.0."
                                          "attention.query.weight")
                    if query is not None and query[1].shape[-1] % head_dim == 0:
                        heads = query[1].shape[-1] // head_dim
                break
    if heads is None or heads <= 0:
        raise ConvertError(f"{g.path}: the attention's head count is not in the graph")
    meta["kokoro.bert.heads"] = ("u32", heads)
    if any(n.op_type == "FastGelu" for n in g.nodes):   # the exporter's tanh-form GELU
        meta["kokoro.bert.activation"] = ("str", "gelu_new")
    split = next((n for n in g.nodes if n.op_type == "Split" and "style" in n.input), None)
    if split is None:
        raise ConvertError(f"{g.path}: the style input is not split into two halves")
    meta["kokoro.style_split"] = ("u32[]", [int(v) for v in g.array(split.input[1])])
    sg = "/decoder/decoder/generator/m_source/l_sin_gen/"
    harmonics = next((g.array(c).size for n in g.nodes if n.name == sg + "Mul"
                      for c in n.input if g.is_const(c)), None)
    rate = _scalar_after(g, sg + "Div", "Div")
    thr = _scalar_after(g, sg + "Greater", "Greater")
    amp = _sine_amplitude(g, sg)
    up = next((g.array(n.input[2]).reshape(-1)[-1] for n in g.nodes
               if n.name == "/decoder/decoder/generator/f0_upsamp/Resize"), None)
    for what, v in (("harmonics", harmonics), ("sample rate", rate), ("voiced threshold", thr),
                    ("sine amplitude", amp), ("F0 upsampling", up)):
        if v is None:
            raise ConvertError(f"{g.path}: the harmonic source's {what} is not in the graph")
    meta["kokoro.harmonics"] = ("u32", int(harmonics))
    meta["kokoro.sample_rate"] = ("u32", int(rate))
    meta["kokoro.voiced_threshold"] = ("f32", float(thr))
    meta["kokoro.sine_amp"] = ("f32", float(amp))
    meta["kokoro.upsample_scale"] = ("u32", int(round(float(up))))


def read_graph(path: Union[str, os.PathLike]) -> tuple[dict, dict]:
    """(tensors, metadata) of a Kokoro/Kitten ONNX graph: {name: (gguf type, array)} and
    {key: (value type, value)}. Raises ConvertError naming an unknown node or initializer."""
    g = OnnxGraph(path)
    r = _Reader(g)
    r.run()
    _config(g, r)
    return r.t.items, r.meta


# =============================================================================================
# Voices and vocabulary
# =============================================================================================

VOICE_ROWS = 510   # one style row per phoneme count (the model takes at most 510 phonemes)


def read_voices(path: Union[str, os.PathLike]) -> dict[str, np.ndarray]:
    """Voice packs by name as float32 (rows, style) arrays from .npz (also kokoro-onnx's
    .bin, which is an npz) or .pt (a dict of tensors, or one tensor named by the file)."""
    path = Path(path)
    packs: dict[str, np.ndarray] = {}
    if zipfile.is_zipfile(path) and path.suffix != ".pt":
        with np.load(path) as z:
            packs = {k: np.asarray(z[k]) for k in z.files}
    elif path.suffix == ".pt":
        try:
            import torch
        except ImportError as e:
            raise ConvertError(f"{path}: reading .pt voice packs needs torch: {e}") from None
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
        if hasattr(obj, "numpy"):
            obj = {path.stem: obj}
        packs = {k: v.float().numpy() for k, v in obj.items()}
    else:
        raise ConvertError(f"{path}: voice packs must be .npz, .bin (npz) or .pt")
    out = {}
    for name, v in packs.items():
        v = np.asarray(v, np.float32)
        if v.ndim == 3 and v.shape[1] == 1:
            v = v[:, 0, :]
        if v.ndim != 2 or v.shape[0] < 1:
            raise ConvertError(f"{path}: voice {name!r} has shape {list(v.shape)}; expected "
                               f"(rows, 1, style) or (rows, style)")
        out[name] = np.ascontiguousarray(v)
    if not out:
        raise ConvertError(f"{path}: no voice packs")
    return out


def read_vocab(path: Union[str, os.PathLike]) -> dict[str, int]:
    """The phoneme vocabulary {symbol: id} from kokoro's config.json or {"vocab": {...}}."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConvertError(f"{path}: not a JSON vocabulary: {e}") from None
    vocab = data.get("vocab") if isinstance(data, dict) else None
    if not isinstance(vocab, dict) or not vocab:
        raise ConvertError(f"{path}: no 'vocab' object of symbol -> id")
    out = {}
    for sym, i in vocab.items():
        if not isinstance(sym, str) or len(sym) != 1 or not isinstance(i, int) or i <= 0:
            raise ConvertError(f"{path}: vocab entry {sym!r}: {i!r} is not one symbol -> id > 0")
        out[sym] = i
    return out


# =============================================================================================
# Writing
# =============================================================================================

def convert_kokoro(model: Union[str, os.PathLike], voices: Union[str, os.PathLike],
                   output: Union[str, os.PathLike], *,
                   vocab: Optional[Union[str, os.PathLike]] = None,
                   name: str = "kokoro") -> Path:
    """Convert an ONNX graph, its voice packs and vocabulary into one GGUF at ``output``.
    vocab: the vocabulary JSON (default: vocab.json or config.json beside the model or the
    voices). Raises ConvertError naming what it does not recognize."""
    model, voices = Path(model), Path(voices)
    if vocab is None:
        near = [d / f for d in (model.parent, voices.parent) for f in ("vocab.json",
                                                                      "config.json")]
        vocab = next((p for p in near if p.is_file()), None)
        if vocab is None:
            raise ConvertError(f"no vocab.json or config.json beside {model} or {voices}; "
                               "pass vocab=")
    tensors, meta = read_graph(model)
    return write_kokoro(tensors, meta, read_voices(voices), read_vocab(vocab), output,
                        name=name, sources=(voices, vocab))


def write_kokoro(tensors: dict, meta: dict, packs: dict[str, np.ndarray],
                 table: dict[str, int], output: Union[str, os.PathLike], *, name: str = "kokoro",
                 sources: tuple = ("voices", "vocab"), kind: str = "graph") -> Path:
    """Write read tensors ({name: (gguf type, array)}), metadata ({key: (value type, value)}),
    voice packs and vocabulary as one Kokoro GGUF (the layout above). Checks that the
    vocabulary fits the embedding and that every pack's rows are the style's width; sources
    names the voices and vocabulary inputs in those errors, kind the model's source ("graph",
    "checkpoint")."""
    voices, vocab = sources
    n_tokens = tensors["text_encoder.embedding.weight"][1].shape[0]
    bad = {s: i for s, i in table.items() if i >= n_tokens}
    if bad:
        raise ConvertError(f"{vocab}: ids {sorted(bad.values())[:5]} exceed the embedding's "
                           f"{n_tokens} rows")
    style = sum(meta["kokoro.style_split"][1])
    for vname, v in packs.items():
        if v.shape[1] != style:
            raise ConvertError(f"{voices}: voice {vname!r} rows of {v.shape[1]} values; the "
                               f"{kind}'s style is {style}")
    w = GGUFWriter()
    w.add("general.architecture", "str", "kokoro")
    w.add("general.name", "str", name)
    w.add("general.file_type", "u32", 7 if meta["kokoro.quantized"][1] else 0)
    for key in sorted(meta):
        vtype, value = meta[key]
        w.add(key, vtype, value)
    symbols = sorted(table, key=lambda s: table[s])
    w.add("kokoro.vocab.symbols", "str[]", symbols)
    w.add("kokoro.vocab.ids", "i32[]", [table[s] for s in symbols])
    w.add("kokoro.voices", "str[]", sorted(packs))
    items = [(n, t, v) for n, (t, v) in sorted(tensors.items())]
    items += [(f"voice.{k}", "F32", packs[k]) for k in sorted(packs)]
    for tensor_name, gtype, values in items:
        values = np.asarray(values)
        shape = values.shape if values.ndim else (1,)
        if gtype == "I8":   # integers as they are: the writer's encoders are for floats
            w.add_encoded_tensor(tensor_name, shape, "I8",
                                 lambda v=values: np.ascontiguousarray(v, np.int8).tobytes())
        else:
            w.add_tensor(tensor_name, shape, gtype, lambda v=values, s=shape: v.reshape(s))
    return w.write(output)
