"""hexgrad's Kokoro PyTorch checkpoint (the `kokoro` package's KModel) to the Kokoro GGUF layout.

::

    from dasllama.convert.kokoro_torch import convert_kokoro_torch
    convert_kokoro_torch("kokoro-v1_0.pth", "config.json", ["af_heart.pt"], "kokoro-f32.gguf")

The checkpoint is what KModel loads: a dict of state dicts by part, {"bert": ..., "bert_encoder":
..., "predictor": ..., "text_encoder": ..., "decoder": ...} (a part's keys may carry a "module."
prefix, as the package tolerates). Weight-norm pairs (weight_g / weight_v, or
parametrizations.weight.original0 / original1) are folded into plain weights, g * v / ||v||
over every axis but the first. The config is the package's config.json (n_token, hidden_dim,
style_dim, n_layer, max_dur, text_encoder_kernel_size, plbert {...}, istftnet {...}, vocab);
voice packs are .pt files (one tensor each, named by the file, or a dict of tensors).

The output is the layout written by :mod:`.kokoro` (tensor names are the state-dict names) with
float32 weights: general.file_type 0, kokoro.quantized false. What differs from the int8 graph:
linear weights are stored (in, out) as the layout wants (PyTorch keeps (out, in)); LSTM weights
are (dirs, in, 4H) and (dirs, H, 4H) with the gates reordered from PyTorch's i, f, g, o to the
layout's i, o, f, c, and the bias is [b_ih | b_hh] per direction; the AdaLayerNorms, which have
no affine weights, get ones and zeros; the iSTFT basis is the exact one-sided inverse DFT times
the window, with no exported window sum (the reference then divides by the overlap-added squared
window, as torch.istft does). Convolution strides, paddings and dilations are not in a state
dict: they come from the config and the package's module structure, per module name.
Dimensions come from the tensors and the config, which must agree; any key that no rule claims
raises :class:`ConvertError` naming it.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any, Sequence, Union

import numpy as np

from . import ConvertError
from .kokoro import read_voices, read_vocab, write_kokoro

__all__ = ["convert_kokoro_torch", "read_checkpoint", "read_torch_model"]

F32 = np.float32
PARTS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")

# transformers' AlbertConfig defaults, which the package's plbert config leaves out.
_ALBERT_DEFAULTS = {"embedding_size": 128, "hidden_act": "gelu_new", "layer_norm_eps": 1e-12,
                    "num_hidden_groups": 1, "inner_group_num": 1}
# ALBERT activations by transformers' name -> the layout's name (tanh form or erf form).
_ACTIVATIONS = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu": "gelu"}
# hexgrad's Generator fixes its harmonic source instead of reading the config.
SAMPLE_RATE = 24000
HARMONICS = 9              # harmonic_num 8 overtones plus the fundamental
SINE_AMP = 0.1
VOICED_THRESHOLD = 10.0    # Hz
NOISE_RES_DILATIONS = (1, 3, 5)   # the generator's noise_res blocks, fixed in the package
NORM_EPS = 1e-5            # the text encoder's LayerNorm and the AdaLayerNorms
# torch's LSTM gate blocks (i, f, g, o) in the layout's order (i, o, f, c).
_GATES_TO_LAYOUT = (0, 3, 1, 2)

_LSTM_KEYS = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
_DROPPED = re.compile(r"^bert\.(pooler\..*|embeddings\.(position_ids|token_type_ids))$")
_ADAIN_AFFINE = re.compile(r"\.(norm1|norm2|adain[12]\.\d+)\.norm\.(weight|bias)$")
_EMBEDDINGS = re.compile(r"^(bert\.embeddings\.(word|position|token_type)_embeddings|"
                         r"text_encoder\.embedding)\.weight$")
_BERT_NORM = re.compile(r"^bert\..*(LayerNorm|full_layer_layer_norm)\.(weight|bias)$")
_TEXT_NORM = re.compile(r"^(text_encoder\.cnn\.\d+\.1)\.(gamma|beta)$")
_ALPHA = re.compile(r"^decoder\.generator\.(resblocks|noise_res)\.\d+\.alpha[12]\.\d+$")
_ALBERT_LAYER = re.compile(r"^bert\.encoder\.albert_layer_groups\.(\d+)\.albert_layers\.(\d+)\.")
_ADA_LAYER_NORM = re.compile(r"^predictor\.text_encoder\.lstms\.\d+$")


# =============================================================================================
# Reading
# =============================================================================================

def read_checkpoint(path: Union[str, os.PathLike]) -> dict[str, np.ndarray]:
    """The checkpoint's tensors as float32 arrays named part.key, weight norms folded."""
    try:
        import torch
    except ImportError as e:
        raise ConvertError(f"{path}: reading a PyTorch checkpoint needs torch: {e}") from None
    try:
        obj = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    except Exception as e:   # torch raises many kinds for a file that is not a checkpoint
        raise ConvertError(f"{path}: not a PyTorch checkpoint: {e}") from None
    if not isinstance(obj, dict) or not obj:
        raise ConvertError(f"{path}: expected a dict of state dicts by part {PARTS}")
    flat: dict[str, np.ndarray] = {}
    for part, sd in obj.items():
        if part not in PARTS:
            raise ConvertError(f"{path}: part {part!r} is not one of KModel's {PARTS}")
        if not isinstance(sd, dict):
            raise ConvertError(f"{path}: part {part!r} is not a state dict")
        strip = all(k.startswith("module.") for k in sd)
        for key, value in sd.items():
            if not hasattr(value, "detach"):
                raise ConvertError(f"{path}: {part}.{key} is not a tensor")
            name = f"{part}.{key[len('module.'):] if strip else key}"
            flat[name] = value.detach().float().cpu().numpy()
    missing = [p for p in PARTS if not any(n.startswith(p + ".") for n in flat)]
    if missing:
        raise ConvertError(f"{path}: no tensors for the part(s) {missing}")
    return fold_weight_norm(flat, path)


def fold_weight_norm(sd: dict[str, np.ndarray], where: Any = "checkpoint") -> dict:
    """weight = g * v / ||v||, the norm over the axes where g has size 1 (all but the first
    for torch's weight_norm(dim=0)); both spellings of the pair are read."""
    out = {}
    pairs: dict[str, dict[str, np.ndarray]] = {}
    for name, v in sd.items():
        for g_suffix, v_suffix in ((".weight_g", ".weight_v"),
                                   (".parametrizations.weight.original0",
                                    ".parametrizations.weight.original1")):
            if name.endswith(g_suffix):
                pairs.setdefault(name[:-len(g_suffix)], {})["g"] = v
                break
            if name.endswith(v_suffix):
                pairs.setdefault(name[:-len(v_suffix)], {})["v"] = v
                break
        else:
            out[name] = v
    for module, pair in pairs.items():
        if set(pair) != {"g", "v"}:
            raise ConvertError(f"{where}: {module} has a weight-norm "
                               f"{'magnitude' if 'g' in pair else 'direction'} without its pair")
        g, v = pair["g"].astype(np.float64), pair["v"].astype(np.float64)
        if g.ndim != v.ndim and g.size != 1:
            raise ConvertError(f"{where}: {module}: weight-norm g {list(g.shape)} does not fit "
                               f"v {list(v.shape)}")
        axes = tuple(i for i in range(v.ndim) if g.size == 1 or g.shape[i] == 1)
        norm = np.sqrt((v * v).sum(axis=axes, keepdims=True))
        out[f"{module}.weight"] = (g * v / norm).astype(F32)
    return out


def _read_config(config: Union[str, os.PathLike, dict]) -> dict:
    if isinstance(config, dict):
        return config
    try:
        data = json.loads(Path(config).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConvertError(f"{config}: not a JSON config: {e}") from None
    if not isinstance(data, dict):
        raise ConvertError(f"{config}: the config is not a JSON object")
    return data


def _field(cfg: dict, key: str, kind=int, where: str = "config") -> Any:
    if key not in cfg:
        raise ConvertError(f"{where}: field {key!r} is missing")
    value = cfg[key]
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok:
        raise ConvertError(f"{where}: field {key!r} = {value!r} is not {kind.__name__}")
    return value


class _Model:
    """The config's settings that shape the layout, checked against the tensors."""

    def __init__(self, cfg: dict, sd: dict[str, np.ndarray]) -> None:
        self.hidden = _field(cfg, "hidden_dim")
        self.style = _field(cfg, "style_dim")
        self.n_token = _field(cfg, "n_token")
        bert = dict(_ALBERT_DEFAULTS)
        bert.update(_field(cfg, "plbert", dict))
        self.bert = bert
        for key in ("hidden_size", "num_attention_heads", "num_hidden_layers",
                    "max_position_embeddings", "embedding_size"):
            _field(bert, key, int, "config plbert")
        _field(bert, "layer_norm_eps", float, "config plbert")
        act = _field(bert, "hidden_act", str, "config plbert")
        if act not in _ACTIVATIONS:
            raise ConvertError(f"config plbert: hidden_act {act!r} is not one of "
                               f"{sorted(_ACTIVATIONS)}")
        self.activation = _ACTIVATIONS[act]
        for key in ("num_hidden_groups", "inner_group_num"):
            if bert[key] != 1:
                raise ConvertError(f"config plbert: {key} = {bert[key]!r}; the family shares "
                                   "one ALBERT layer (1)")
        if bert["hidden_size"] % bert["num_attention_heads"]:
            raise ConvertError(f"config plbert: hidden_size {bert['hidden_size']} is not a "
                               f"multiple of num_attention_heads {bert['num_attention_heads']}")
        ist = _field(cfg, "istftnet", dict)
        self.rates = [int(r) for r in _field(ist, "upsample_rates", list, "config istftnet")]
        self.up_kernels = [int(k) for k in _field(ist, "upsample_kernel_sizes", list,
                                                  "config istftnet")]
        self.res_dilations = _field(ist, "resblock_dilation_sizes", list, "config istftnet")
        self.res_kernels = _field(ist, "resblock_kernel_sizes", list, "config istftnet")
        self.n_fft = _field(ist, "gen_istft_n_fft", int, "config istftnet")
        self.hop = _field(ist, "gen_istft_hop_size", int, "config istftnet")
        if len(self.rates) != len(self.up_kernels) or not self.rates:
            raise ConvertError("config istftnet: upsample_rates and upsample_kernel_sizes differ "
                               "in length")
        if len(self.res_dilations) != len(self.res_kernels):
            raise ConvertError("config istftnet: resblock_dilation_sizes and "
                               "resblock_kernel_sizes differ in length")
        self._check(sd)

    def _check(self, sd: dict[str, np.ndarray]) -> None:
        """The config's widths against the tensors: a mismatch names both."""
        def need(name: str) -> np.ndarray:
            if name not in sd:
                raise ConvertError(f"checkpoint: tensor {name} is missing")
            return sd[name]

        b = self.bert
        checks = (
            ("n_token", self.n_token, need("text_encoder.embedding.weight").shape[0]),
            ("n_token", self.n_token, need("bert.embeddings.word_embeddings.weight").shape[0]),
            ("plbert.embedding_size", b["embedding_size"],
             need("bert.embeddings.word_embeddings.weight").shape[1]),
            ("plbert.hidden_size", b["hidden_size"],
             need("bert.encoder.embedding_hidden_mapping_in.weight").shape[0]),
            ("plbert.max_position_embeddings", b["max_position_embeddings"],
             need("bert.embeddings.position_embeddings.weight").shape[0]),
            ("hidden_dim", self.hidden, need("bert_encoder.weight").shape[0]),
            ("style_dim", self.style, need("predictor.F0.0.norm1.fc.weight").shape[1]),
            ("style_dim", self.style, need("decoder.encode.norm1.fc.weight").shape[1]),
        )
        for field, value, tensor in checks:
            if value != tensor:
                raise ConvertError(f"config {field} = {value} but the checkpoint's tensors "
                                   f"have {tensor}")

    def conv_attrs(self, module: str, w: np.ndarray) -> list[int]:
        """[stride, pad_left, pad_right, dilation, groups, output_padding] of a convolution,
        from the package's structure for that module name."""
        k = int(w.shape[2])
        same = [1, (k - 1) // 2, (k - 1) // 2, 1, 1, 0]
        if re.fullmatch(r"text_encoder\.cnn\.\d+\.0|predictor\.(F0|N)_proj|decoder\.asr_res\.0|"
                        r"decoder\.generator\.conv_post|"
                        r"(predictor\.(F0|N)\.\d+|decoder\.(encode|decode\.\d+))\."
                        r"(conv1|conv2|conv1x1)", module):
            return same
        if re.fullmatch(r"(predictor\.(F0|N)\.\d+|decoder\.decode\.\d+)\.pool", module):
            if w.shape[1] != 1 or k != 3:
                raise ConvertError(f"checkpoint: {module} {list(w.shape)} is not the depthwise "
                                   "x2 upsampling (k 3)")
            return [2, 1, 1, 1, int(w.shape[0]), 1]
        if re.fullmatch(r"decoder\.(F0|N)_conv", module):
            return [2, 1, 1, 1, 1, 0]
        m = re.fullmatch(r"decoder\.generator\.ups\.(\d+)", module)
        if m:
            i = int(m.group(1))
            if i >= len(self.rates) or k != self.up_kernels[i]:
                raise ConvertError(f"checkpoint: {module} (k {k}) does not match the config's "
                                   f"upsample_kernel_sizes {self.up_kernels}")
            u = self.rates[i]
            return [u, (k - u) // 2, (k - u) // 2, 1, 1, 0]
        m = re.fullmatch(r"decoder\.generator\.noise_convs\.(\d+)", module)
        if m:
            i = int(m.group(1))
            if i + 1 >= len(self.rates):
                return same
            s = math.prod(self.rates[i + 1:])
            return [s, (s + 1) // 2, (s + 1) // 2, 1, 1, 0]
        m = re.fullmatch(r"decoder\.generator\.(resblocks|noise_res)\.(\d+)\.convs([12])\.(\d+)",
                         module)
        if m:
            kind, block, which, j = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
            if which == "2":
                d = 1
            elif kind == "noise_res":
                d = NOISE_RES_DILATIONS[j]
            else:
                d = int(self.res_dilations[block % len(self.res_kernels)][j])
            pad = (k * d - d) // 2
            return [1, pad, pad, d, 1, 0]
        raise ConvertError(f"checkpoint: {module} is a convolution the Kokoro family does not have")


def _lstm(sd: dict[str, np.ndarray], module: str, used: set) -> dict[str, tuple[str, np.ndarray]]:
    """One bidirectional single-layer torch LSTM in the layout's (dirs, in, 4H) form."""
    ws, rs, bs = [], [], []
    for suffix in ("", "_reverse"):
        names = [f"{module}.{k}{suffix}" for k in _LSTM_KEYS]
        for n in names[:2]:
            if n not in sd:
                raise ConvertError(f"checkpoint: {n} is missing (the family's LSTMs are "
                                   "bidirectional)")
        w, r = sd[names[0]], sd[names[1]]
        hidden = r.shape[1]
        if w.shape[0] != 4 * hidden or r.shape != (4 * hidden, hidden):
            raise ConvertError(f"checkpoint: {module} weights {list(w.shape)}, {list(r.shape)} "
                               "are not an LSTM's (4H, in), (4H, H)")
        b_ih = sd.get(names[2], np.zeros(4 * hidden, F32))
        b_hh = sd.get(names[3], np.zeros(4 * hidden, F32))
        used.update(names)

        def order(a: np.ndarray) -> np.ndarray:
            blocks = a.reshape(4, hidden, *a.shape[1:])
            return blocks[list(_GATES_TO_LAYOUT)].reshape(a.shape)

        ws.append(order(w).T)
        rs.append(order(r).T)
        bs.append(np.concatenate([order(b_ih), order(b_hh)]))
    return {f"{module}.weight_ih": ("F32", np.ascontiguousarray(np.stack(ws), F32)),
            f"{module}.weight_hh": ("F32", np.ascontiguousarray(np.stack(rs), F32)),
            f"{module}.bias": ("F32", np.stack(bs).astype(F32))}


def _istft_basis(n_fft: int) -> tuple[np.ndarray, np.ndarray]:
    """(window, basis): the periodic Hann window and the (2 bins, 1, n_fft) basis whose
    transposed convolution of [re; im] frames is the one-sided inverse DFT times the window
    (bins 1..n/2-1 counted twice, the imaginary parts of DC and Nyquist ignored)."""
    j = np.arange(n_fft)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * j / n_fft)
    bins = n_fft // 2 + 1
    k = np.arange(bins)[:, None]
    weight = np.full((bins, 1), 2.0)
    weight[0] = 1.0
    if n_fft % 2 == 0:
        weight[-1] = 1.0
    angle = 2 * np.pi * k * j[None, :] / n_fft
    re_part = weight * np.cos(angle) / n_fft * window
    im_part = -weight * np.sin(angle) / n_fft * window
    basis = np.concatenate([re_part, im_part], axis=0)[:, None, :]
    return window.astype(F32), basis.astype(F32)


def read_torch_model(checkpoint: Union[str, os.PathLike],
                     config: Union[str, os.PathLike, dict]) -> tuple[dict, dict]:
    """(tensors, metadata) as :func:`dasllama.convert.kokoro.read_graph` returns them, from a
    KModel checkpoint and its config. Raises ConvertError naming a key no rule claims."""
    sd = read_checkpoint(checkpoint)
    return tensors_from_state_dict(sd, _read_config(config))


def tensors_from_state_dict(sd: dict[str, np.ndarray], cfg: dict) -> tuple[dict, dict]:
    """The layout's tensors and metadata from a flat, folded state dict (part.key names)."""
    model = _Model(cfg, sd)
    tensors: dict[str, tuple[str, np.ndarray]] = {}
    meta: dict[str, tuple[str, Any]] = {}
    used: set[str] = set()
    for name in sorted(sd):
        if name in used:
            continue
        v = sd[name]
        module, leaf = name.rsplit(".", 1)
        m = _ALBERT_LAYER.match(name)
        if m and (m.group(1), m.group(2)) != ("0", "0"):
            raise ConvertError(f"checkpoint: {name}: the family shares one ALBERT layer "
                               "(group 0, layer 0)")
        if leaf.startswith(("weight_ih_l", "weight_hh_l", "bias_ih_l", "bias_hh_l")):
            base = leaf[:-len("_reverse")] if leaf.endswith("_reverse") else leaf
            if not base.endswith("_l0"):
                raise ConvertError(f"checkpoint: {name}: the family's LSTMs have one layer")
            tensors.update(_lstm(sd, module, used))
            meta[f"kokoro.lstm.{module}.hidden"] = ("u32", int(sd[f"{module}.weight_hh_l0"]
                                                               .shape[1]))
        elif _DROPPED.match(name):
            pass   # ALBERT's pooler and id buffers: the model reads the last hidden state
        elif _ADAIN_AFFINE.search(name):
            identity = np.ones_like(v) if leaf == "weight" else np.zeros_like(v)
            if not np.array_equal(v, identity):
                raise ConvertError(f"checkpoint: {name}: AdaIN's instance norm must have no "
                                   f"affine part ({'ones' if leaf == 'weight' else 'zeros'})")
        elif _EMBEDDINGS.match(name) or _ALPHA.match(name):
            tensors[name] = ("F32", v)
        elif _BERT_NORM.match(name):
            tensors[name] = ("F32", v)
            meta[f"kokoro.eps.{module}"] = ("f32", float(model.bert["layer_norm_eps"]))
        elif _TEXT_NORM.match(name):
            tensors[f"{module}.{'weight' if leaf == 'gamma' else 'bias'}"] = ("F32", v)
            meta[f"kokoro.eps.{module}"] = ("f32", NORM_EPS)
        elif leaf == "weight" and v.ndim == 2:      # a Linear: (out, in) -> (in, out)
            tensors[name] = ("F32", np.ascontiguousarray(v.T))
            if _ADA_LAYER_NORM.match(module[:-len(".fc")] if module.endswith(".fc") else ""):
                norm = module[:-len(".fc")]
                width = v.shape[0] // 2
                tensors[f"{norm}.weight"] = ("F32", np.ones(width, F32))
                tensors[f"{norm}.bias"] = ("F32", np.zeros(width, F32))
                meta[f"kokoro.eps.{norm}"] = ("f32", NORM_EPS)
        elif leaf == "weight" and v.ndim == 3:      # a Conv1d / ConvTranspose1d as torch has it
            tensors[name] = ("F32", v)
            meta[f"kokoro.conv.{module}"] = ("i32[]", model.conv_attrs(module, v))
        elif leaf == "bias" and v.ndim == 1 and f"{module}.weight" in sd:
            tensors[name] = ("F32", v)
        else:
            raise ConvertError(f"checkpoint: tensor {name} {list(v.shape)} is not one the "
                               "Kokoro family has")
    window, basis = _istft_basis(model.n_fft)
    stft = "decoder.generator.stft"
    tensors[f"{stft}.window"] = ("F32", window)
    tensors[f"{stft}.inverse_basis"] = ("F32", basis)
    b = model.bert
    meta.update({
        "kokoro.quantized": ("bool", False),
        "kokoro.sample_rate": ("u32", SAMPLE_RATE),
        "kokoro.n_fft": ("u32", model.n_fft),
        "kokoro.hop": ("u32", model.hop),
        f"kokoro.conv.{stft}": ("i32[]", [model.hop, 0, 0, 1, 1, 0]),
        "kokoro.bert.layers": ("u32", b["num_hidden_layers"]),
        "kokoro.bert.heads": ("u32", b["num_attention_heads"]),
        "kokoro.bert.activation": ("str", model.activation),
        "kokoro.bert.max_positions": ("u32", b["max_position_embeddings"]),
        "kokoro.style_split": ("u32[]", [model.style, model.style]),
        "kokoro.harmonics": ("u32", HARMONICS),
        "kokoro.sine_amp": ("f32", SINE_AMP),
        "kokoro.voiced_threshold": ("f32", VOICED_THRESHOLD),
        "kokoro.upsample_scale": ("u32", math.prod(model.rates) * model.hop),
    })
    return tensors, meta


# =============================================================================================
# Converting
# =============================================================================================

def convert_kokoro_torch(checkpoint: Union[str, os.PathLike],
                         config: Union[str, os.PathLike],
                         voices: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]],
                         output: Union[str, os.PathLike], *, name: str = "kokoro") -> Path:
    """Convert a KModel checkpoint (.pth), its config.json (which holds the vocabulary) and
    voice packs (.pt or .npz; one path or several) into one float32 GGUF at ``output``."""
    tensors, meta = read_torch_model(checkpoint, config)
    paths = [voices] if isinstance(voices, (str, os.PathLike)) else list(voices)
    if not paths:
        raise ConvertError("no voice packs given")
    packs: dict[str, np.ndarray] = {}
    for p in paths:
        for vname, v in read_voices(p).items():
            if vname in packs:
                raise ConvertError(f"{p}: voice {vname!r} is given twice")
            packs[vname] = v
    return write_kokoro(tensors, meta, packs, read_vocab(config), output, name=name,
                        sources=(", ".join(str(p) for p in paths), config), kind="checkpoint")
