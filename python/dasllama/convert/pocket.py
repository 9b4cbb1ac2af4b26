"""Pocket TTS (Kyutai's ``pocket-tts``) checkpoints to GGUF.

::

    from dasllama.convert.pocket import convert_pocket
    convert_pocket("model.safetensors", "tokenizer.json", "pocket.gguf", lane="q8_0")

The input is a ``TTSModel`` state dict (the released ``model.safetensors``, or
``TTSModel.state_dict()`` of a config-built model saved with safetensors: the names are the
same), the tokenizer the model's config names (a ``tokenizers`` JSON or a SentencePiece
``.model``), and the model's config (the package's YAML layout as a dict or file; the English
config by default). Every tensor's shape is checked against the config before anything is
written; a missing, misshapen or unexpected tensor raises :class:`ConvertError` naming it.

This layout is a contract: the NumPy reference (:mod:`dasllama.reference.pocket`) and the C++
chain read it. Change it only together with them.

Tensors (NumPy order, outermost first; GGUF stores the dimensions reversed)
---------------------------------------------------------------------------
D = lm d_model, A = attention width (lm.num_heads * lm.head_dim), Kv = lm.num_kv_heads *
lm.head_dim, F = lm.ffn_dim, Z = z_dim or D, L = latent_dim, N = text.n_bins, R = text.rank,
W = flow.dim, Fq = flow.freq_dim. ``i`` a layer, ``j`` a time condition, ``k`` a flow block,
``s`` a SEANet stage, ``r`` a residual block of that stage. Source names are the package's.

    text.embd.weight                (N+1, R or D)   flow_lm.conditioner.embed.weight (N: padding)
    text.proj.weight                (D, R)          flow_lm.conditioner.proj.weight        [rank]
    lm.bos.weight                   (L,)            flow_lm.bos_emb (the first frame's input)
    lm.bos_voice.weight             (D,)            flow_lm.bos_before_voice (1,1,D)  [bos_voice]
    lm.speaker_proj.weight          (D, Ci)         flow_lm.speaker_proj_weight            [voice]
    lm.latent_mean, lm.latent_std   (L,)            flow_lm.emb_mean, flow_lm.emb_std
    lm.input.weight                 (D, L)          flow_lm.input_linear.weight
    lm.blk.i.attn_norm.weight/bias  (D,)            flow_lm.transformer.layers.i.norm1
    lm.blk.i.attn_qkv.weight        (A+2Kv, D)  M   ...layers.i.self_attn.in_proj.weight (q; k; v)
    lm.blk.i.attn_out.weight        (D, A)      M   ...layers.i.self_attn.out_proj.weight
    lm.blk.i.ffn_norm.weight/bias   (D,)            ...layers.i.norm2
    lm.blk.i.ffn_up.weight          (F, D)      M   ...layers.i.linear1.weight
    lm.blk.i.ffn_down.weight        (D, F)      M   ...layers.i.linear2.weight
    lm.out_norm.weight/bias         (D,)            flow_lm.out_norm
    lm.z_proj.weight                (Z, D)          flow_lm.z_proj.weight                  [z_dim]
    lm.eos.weight (1, Z), lm.eos.bias (1,)          flow_lm.out_eos
    flow.time.j.freqs               (Fq/2,)         flow_lm.flow_net.time_embed.j.freqs
    flow.time.j.in.weight/bias      (W, Fq), (W,)   ...time_embed.j.mlp.0
    flow.time.j.out.weight/bias     (W, W), (W,)    ...time_embed.j.mlp.2
    flow.time.j.norm.weight         (W,)            ...time_embed.j.mlp.3.alpha
    flow.cond.weight/bias           (W, Z), (W,)    flow_lm.flow_net.cond_embed
    flow.input.weight/bias          (W, L), (W,)    flow_lm.flow_net.input_proj
    flow.res.k.norm.weight/bias     (W,)            ...res_blocks.k.in_ln
    flow.res.k.mlp_in.weight/bias   (W, W), (W,)    ...res_blocks.k.mlp.0
    flow.res.k.mlp_out.weight/bias  (W, W), (W,)    ...res_blocks.k.mlp.2
    flow.res.k.ada.weight/bias      (3W, W), (3W,)  ...res_blocks.k.adaLN_modulation.1
                                                    (rows: shift; scale; gate)
    flow.final.ada.weight/bias      (2W, W), (2W,)  ...final_layer.adaLN_modulation.1 (shift, scale)
    flow.final.out.weight/bias      (L, W), (L,)    ...final_layer.linear
    mimi.quant_proj.weight          (Co, L)         mimi.quantizer.output_proj.weight (Co,L,1)
    mimi.upsample.weight            (Co, 1, 2u)     mimi.upsample.convtr.convtr.weight (depthwise
                                                    ConvTranspose1d, stride u)       [u > 1]
    mimi.downsample.weight          (Ci, Ce, 2u)    mimi.downsample.conv.conv.weight (Conv1d,
                                                    stride u, replicate pad)  [voice, u > 1]
    mimi.dec_tf.in_proj.weight      (d, in)         mimi.decoder_transformer.input_proj.weight
                                                                                      [in != d]
    mimi.dec_tf.out_proj.weight     (out, d)        ...output_projs.0.weight          [out != d]
    mimi.dec_tf.blk.i.attn_norm.weight/bias, attn_qkv.weight (3d, d) M, attn_out.weight
        (d, d) M, attn_scale (d,) [layer scale], ffn_norm.weight/bias, ffn_up.weight M,
        ffn_down.weight M, ffn_scale (d,) [layer scale]
                                                    mimi.decoder_transformer.transformer
                                                    .layers.i.* (scales: layer_scale_1/2)
    mimi.enc_tf.*                   as dec_tf, from mimi.encoder_transformer.*             [voice]
    mimi.dec.in.weight/bias         (C0, Cd, K)     mimi.decoder.model.0.conv
    mimi.dec.up.s.weight/bias       (Cs, Cs/2, 2q)  decoder ConvTranspose1d of stage s, stride q
                                                    (weights: in, out, kernel)
    mimi.dec.res.s.r.conv1.weight/bias  (h, c, Kr)  the residual block's first conv (dilation
                                                    dilation_base^r), h = c / compress
    mimi.dec.res.s.r.conv2.weight/bias  (c, h, 1)   its second conv
    mimi.dec.out.weight/bias        (channels, n_filters, Kl)
    mimi.enc.in / enc.res.s.r.conv1|conv2 / enc.down.s (stride q, kernel 2q) / enc.out   [voice]
                                                    mimi.encoder.model.* (stages in encoder order,
                                                    i.e. reversed seanet ratios)

M marks the transformer linears: F16 in the f16 lane, Q8_0 in the q8_0 lane (a matrix whose
rows are not a multiple of 32 stays F32). Everything else (norms, biases, convolutions, the
text table, the flow head, small tensors) is F32 in every lane. Conv weights keep PyTorch's
layouts: Conv1d (out, in, kernel), ConvTranspose1d (in, out / groups, kernel).

[voice]: present only when the checkpoint has the voice encoder (``pocket.voice_cloning``);
all of those tensors or none. [bos_voice], [rank], [z_dim], [u > 1], [layer scale]: present
when the config has them.

Metadata
--------
    general.architecture = "pocket", general.name, general.file_type (0 f32, 1 f16, 7 q8_0)
    pocket.sample_rate u32, pocket.frame_rate f32, pocket.latent_dim u32 (L)
    pocket.temperature f32 (0.3), pocket.lsd_decode_steps u32 (1), pocket.eos_threshold f32
    (-4.0), pocket.chunk_tokens u32 (50), pocket.min_frames_before_eos u32 (6),
    pocket.frames_after_eos i32 (-1: the package's guess from the word count),
    pocket.tokens_per_second f32 (3.0), pocket.gen_seconds_padding f32 (2.0): the length cap
    is ceil((tokens / tokens_per_second + gen_seconds_padding) * frame_rate) frames.
    pocket.voice_cloning bool
    pocket.text.n_bins u32, pocket.text.dim u32, pocket.text.rank u32 (0: full table),
    pocket.text.pad_with_spaces bool, .remove_semicolons bool, .append_terminal_punctuation
    bool, .capitalize_first_letter bool, .replace_from str[], .replace_to str[]
    pocket.tokenizer.kind str: "tokenizers" (the JSON in tokenizer.huggingface.json, a string)
    or "sentencepiece" (the model proto in pocket.tokenizer.sentencepiece, a uint8 array)
    pocket.lm.d_model, .num_heads, .num_kv_heads, .head_dim, .num_layers, .ffn_dim, .z_dim
    (0: none) u32; pocket.lm.rope_max_period f32; pocket.lm.norm_eps f32 (1e-5);
    pocket.lm.insert_bos_before_voice bool
    pocket.flow.type str (lsd | flow_matching | drifting | pointwise), pocket.flow.dim,
    .depth, .num_time_conds, .freq_dim u32; pocket.flow.norm_eps f32 (1e-6, the LayerNorms),
    pocket.flow.time_norm_eps f32 (1e-5, the time embedders' RMSNorm)
    pocket.mimi.encoder_frame_rate f32, .channels u32, .inner_dim u32 (Ci), .outer_dim u32
    (Co), .upsample_stride u32 (u)
    pocket.mimi.enc.* and pocket.mimi.dec.* (the SEANet encoder and decoder): dimension,
    n_filters, n_residual_layers, kernel_size, residual_kernel_size, last_kernel_size,
    dilation_base, compress u32; ratios u32[] (as in the config, decoder order); pad_mode str
    pocket.mimi.enc_tf.* and pocket.mimi.dec_tf.*: d_model, num_heads, num_layers, ffn_dim,
    context (0: unlimited), input_dim, output_dim u32; rope_max_period f32; norm_eps f32
    (1e-5); layer_scale bool
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np

from . import ConvertError, GGUFWriter, _iter_names, read_safetensors

__all__ = ["convert_pocket", "english_config", "load_config", "tensor_plan", "LANES",
           "PlanEntry"]

LANES = {"f32": ("F32", 0), "f16": ("F16", 1), "q8_0": ("Q8_0", 7)}

# The package's defaults (pocket_tts/default_parameters.py, models/tts_model.py).
DEFAULTS = dict(temperature=0.3, lsd_decode_steps=1, eos_threshold=-4.0, chunk_tokens=50,
                min_frames_before_eos=6, tokens_per_second=3.0, gen_seconds_padding=2.0)
LM_NORM_EPS = 1e-5          # nn.LayerNorm(eps=1e-5) in the transformers and out_norm
FLOW_NORM_EPS = 1e-6        # the flow head's LayerNorms
FLOW_TIME_NORM_EPS = 1e-5   # the time embedder's RMSNorm
FLOW_FREQ_DIM = 256         # TimestepEmbedder frequency_embedding_size
_SEANET_KEYS = ("dimension", "n_filters", "n_residual_layers", "kernel_size",
                "residual_kernel_size", "last_kernel_size", "dilation_base", "compress")


def english_config() -> dict[str, Any]:
    """The package's English config (config/english.yaml of pocket-tts 4.0.1), with the
    package's defaults for the fields it leaves out."""
    seanet = dict(dimension=512, channels=1, n_filters=64, n_residual_layers=1, ratios=[6, 5, 4],
                  kernel_size=7, residual_kernel_size=3, last_kernel_size=3, dilation_base=2,
                  pad_mode="constant", compress=2)
    transformer = dict(d_model=512, num_heads=8, num_layers=2, layer_scale=0.01, context=250,
                       dim_feedforward=2048, input_dimension=512, output_dimensions=[512],
                       max_period=10000.0)
    return dict(
        default_temperature=0.3, default_eos_threshold=-4.0,
        replace_characters={"\u2019": "'", "\u2018": "'"},
        pad_with_spaces_for_short_inputs=False, remove_semicolons=False,
        append_terminal_punctuation=True, capitalize_first_letter=True,
        model_recommended_frames_after_eos=None,
        flow_lm=dict(
            insert_bos_before_voice=True, dtype="float32", z_dim=None,
            flow=dict(depth=6, dim=512, type="lsd"),
            transformer=dict(d_model=1024, hidden_scale=4, max_period=10000, num_heads=16,
                             num_layers=6, attn_dim=None, num_kv_heads=None,
                             dim_feedforward=None),
            lookup_table=dict(dim=1024, n_bins=4000, tokenizer="tokenizers", rank=None),
        ),
        mimi=dict(dtype="float32", sample_rate=24000, inner_dim=32, outer_dim=512, channels=1,
                  frame_rate=12.5, seanet=seanet, transformer=transformer,
                  quantizer=dict(dimension=32, output_dimension=512),
                  decoder_seanet=None, decoder_transformer=None),
    )


def _merge(base: dict, over: Mapping) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) \
            else copy.deepcopy(v)
    return out


def load_config(config: Union[None, str, os.PathLike, Mapping]) -> dict[str, Any]:
    """The config as a dict in the package's layout: None gives the English config; a dict or a
    YAML / JSON file (the package's format) is laid over it, so a partial one changes only what
    it names. Reading YAML needs PyYAML."""
    if config is None:
        return english_config()
    if not isinstance(config, Mapping):
        path = Path(config)
        text = path.read_text(encoding="utf-8")
        if path.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise ConvertError(f"{path}: reading a YAML config needs PyYAML "
                                   f"(pip install pyyaml), or pass the config as JSON") from None
            config = yaml.safe_load(text)
        else:
            try:
                config = json.loads(text)
            except json.JSONDecodeError as e:
                raise ConvertError(f"{path}: not JSON ({e}); YAML configs end in .yaml") from None
        if not isinstance(config, Mapping):
            raise ConvertError(f"{path}: the config is not a mapping")
    return _merge(english_config(), config)


# =============================================================================================
# Hyperparameters and the tensor plan
# =============================================================================================

def _tf_params(t: Mapping) -> dict[str, Any]:
    return dict(d_model=int(t["d_model"]), num_heads=int(t["num_heads"]),
                num_layers=int(t["num_layers"]), ffn_dim=int(t["dim_feedforward"]),
                context=int(t.get("context") or 0), input_dim=int(t["input_dimension"]),
                output_dim=int(t["output_dimensions"][0]),
                rope_max_period=float(t.get("max_period", 10000.0)),
                layer_scale=t.get("layer_scale") is not None)


def hyperparameters(cfg: Mapping) -> dict[str, Any]:
    """Every dimension the forward needs, from a config in the package's layout."""
    lm, mimi = cfg["flow_lm"], cfg["mimi"]
    t, lut, flow = lm["transformer"], lm["lookup_table"], lm["flow"]
    d = int(t["d_model"])
    heads = int(t["num_heads"])
    attn_dim = int(t.get("attn_dim") or d)
    kv_heads = int(t.get("num_kv_heads") or heads)
    if attn_dim % heads or heads % kv_heads:
        raise ConvertError(f"flow_lm.transformer: attn_dim {attn_dim}, num_heads {heads}, "
                           f"num_kv_heads {kv_heads} do not divide")
    flow_type = flow.get("type", "lsd")
    time_conds = {"lsd": 2, "flow_matching": 1, "drifting": 0, "pointwise": 0}.get(flow_type)
    if time_conds is None:
        raise ConvertError(f"flow_lm.flow.type {flow_type!r} is unknown")
    enc = dict(mimi["seanet"])
    dec = dict(mimi.get("decoder_seanet") or mimi["seanet"])
    enc_tf = _tf_params(mimi["transformer"])
    dec_tf = _tf_params(mimi.get("decoder_transformer") or mimi["transformer"])
    sample_rate = int(mimi["sample_rate"])
    hop = int(np.prod(enc["ratios"]))
    encoder_frame_rate = sample_rate / hop
    frame_rate = float(mimi["frame_rate"])
    up = encoder_frame_rate / frame_rate
    if up != int(up) or up < 1:
        raise ConvertError(f"mimi: encoder frame rate {encoder_frame_rate} is not an integer "
                           f"multiple of frame_rate {frame_rate}")
    frames_after = cfg.get("model_recommended_frames_after_eos")
    return dict(
        sample_rate=sample_rate, frame_rate=frame_rate,
        latent_dim=int(mimi["quantizer"]["dimension"]),
        temperature=float(cfg.get("default_temperature", DEFAULTS["temperature"])),
        eos_threshold=float(cfg.get("default_eos_threshold", DEFAULTS["eos_threshold"])),
        frames_after_eos=-1 if frames_after is None else int(frames_after),
        text=dict(n_bins=int(lut["n_bins"]), dim=int(lut["dim"]), rank=int(lut.get("rank") or 0),
                  tokenizer=lut.get("tokenizer", "sentencepiece"),
                  pad_with_spaces=bool(cfg.get("pad_with_spaces_for_short_inputs", False)),
                  remove_semicolons=bool(cfg.get("remove_semicolons", False)),
                  append_terminal_punctuation=bool(cfg.get("append_terminal_punctuation", True)),
                  capitalize_first_letter=bool(cfg.get("capitalize_first_letter", True)),
                  replace=dict(cfg.get("replace_characters") or {})),
        lm=dict(d_model=d, num_heads=heads, num_kv_heads=kv_heads, head_dim=attn_dim // heads,
                num_layers=int(t["num_layers"]),
                ffn_dim=int(t.get("dim_feedforward") or d * int(t["hidden_scale"])),
                z_dim=int(lm.get("z_dim") or 0), rope_max_period=float(t["max_period"]),
                insert_bos_before_voice=bool(lm.get("insert_bos_before_voice", False))),
        flow=dict(type=flow_type, dim=int(flow["dim"]), depth=int(flow["depth"]),
                  num_time_conds=time_conds, freq_dim=FLOW_FREQ_DIM),
        mimi=dict(encoder_frame_rate=encoder_frame_rate, channels=int(mimi["channels"]),
                  inner_dim=int(mimi.get("inner_dim") or enc["dimension"]),
                  outer_dim=int(mimi.get("outer_dim") or dec["dimension"]),
                  quant_out_dim=int(mimi["quantizer"]["output_dimension"]),
                  upsample_stride=int(up), enc=enc, dec=dec, enc_tf=enc_tf, dec_tf=dec_tf),
    )


@dataclass(frozen=True)
class PlanEntry:
    name: str               # GGUF tensor name
    source: str             # state-dict name
    source_shape: tuple     # its shape in the state dict
    shape: tuple            # its shape in the GGUF (NumPy order)
    matrix: bool            # a transformer linear: quantized in the f16 / q8_0 lanes
    voice: bool             # part of the voice encoder (all present or all absent)


def _transformer_plan(out: list, gname: str, sname: str, tf: Mapping, d_attn: int, kv: int,
                      voice: bool, flow_lm: bool) -> None:
    """The layers of a StreamingTransformer (the FlowLM backbone or a Mimi transformer)."""
    d, f = tf["d_model"], tf["ffn_dim"]
    for i in range(tf["num_layers"]):
        g, s = f"{gname}.blk.{i}.", f"{sname}.layers.{i}."
        out += [PlanEntry(g + "attn_norm.weight", s + "norm1.weight", (d,), (d,), False, voice),
                PlanEntry(g + "attn_norm.bias", s + "norm1.bias", (d,), (d,), False, voice),
                PlanEntry(g + "attn_qkv.weight", s + "self_attn.in_proj.weight",
                          (d_attn + 2 * kv, d), (d_attn + 2 * kv, d), True, voice),
                PlanEntry(g + "attn_out.weight", s + "self_attn.out_proj.weight",
                          (d, d_attn), (d, d_attn), True, voice),
                PlanEntry(g + "ffn_norm.weight", s + "norm2.weight", (d,), (d,), False, voice),
                PlanEntry(g + "ffn_norm.bias", s + "norm2.bias", (d,), (d,), False, voice),
                PlanEntry(g + "ffn_up.weight", s + "linear1.weight", (f, d), (f, d), True, voice),
                PlanEntry(g + "ffn_down.weight", s + "linear2.weight", (d, f), (d, f), True, voice)]
        if not flow_lm and tf["layer_scale"]:
            out += [PlanEntry(g + "attn_scale", s + "layer_scale_1.scale", (d,), (d,), False,
                              voice),
                    PlanEntry(g + "ffn_scale", s + "layer_scale_2.scale", (d,), (d,), False,
                              voice)]


def _conv(out: list, gname: str, sname: str, cout: int, cin: int, k: int, voice: bool,
          transposed: bool = False) -> None:
    shape = (cin, cout, k) if transposed else (cout, cin, k)
    out += [PlanEntry(gname + ".weight", sname + ".weight", shape, shape, False, voice),
            PlanEntry(gname + ".bias", sname + ".bias", (cout,), (cout,), False, voice)]


def _seanet_plan(out: list, p: Mapping, decoder: bool) -> None:
    """SEANet convolutions by role. Module indices follow SEANetEncoder / SEANetDecoder, whose
    nn.ModuleList interleaves ELUs: the decoder is conv, then per stage [ELU, up-conv,
    res blocks], then ELU, conv; the encoder is conv, per stage [res blocks, ELU, down-conv],
    ELU, conv."""
    g, s, voice = ("mimi.dec", "mimi.decoder.model", False) if decoder \
        else ("mimi.enc", "mimi.encoder.model", True)
    nf, dim, ch = p["n_filters"], p["dimension"], p.get("channels", 1)
    ratios = list(p["ratios"]) if decoder else list(reversed(p["ratios"]))
    mult = 2 ** len(ratios) if decoder else 1
    if decoder:
        _conv(out, g + ".in", f"{s}.0.conv", mult * nf, dim, p["kernel_size"], voice)
    else:
        _conv(out, g + ".in", f"{s}.0.conv", nf, ch, p["kernel_size"], voice)
    idx = 1

    def res_blocks(stage: int, c: int) -> None:
        nonlocal idx
        h = c // p["compress"]
        for r in range(p["n_residual_layers"]):
            b = f"{g}.res.{stage}.{r}"
            _conv(out, b + ".conv1", f"{s}.{idx}.block.1.conv", h, c, p["residual_kernel_size"],
                  voice)
            _conv(out, b + ".conv2", f"{s}.{idx}.block.3.conv", c, h, 1, voice)
            idx += 1

    for stage, ratio in enumerate(ratios):
        if decoder:
            idx += 1  # ELU
            _conv(out, f"{g}.up.{stage}", f"{s}.{idx}.convtr", mult * nf // 2, mult * nf,
                  2 * ratio, voice, transposed=True)
            idx += 1
            res_blocks(stage, mult * nf // 2)
            mult //= 2
        else:
            res_blocks(stage, mult * nf)
            idx += 1  # ELU
            _conv(out, f"{g}.down.{stage}", f"{s}.{idx}.conv", mult * nf * 2, mult * nf,
                  2 * ratio, voice)
            idx += 1
            mult *= 2
    idx += 1  # ELU
    if decoder:
        _conv(out, g + ".out", f"{s}.{idx}.conv", ch, nf, p["last_kernel_size"], voice)
    else:
        _conv(out, g + ".out", f"{s}.{idx}.conv", dim, mult * nf, p["last_kernel_size"], voice)


def tensor_plan(hp: Mapping) -> list[PlanEntry]:
    """Every tensor of the GGUF, in file order, from :func:`hyperparameters`."""
    lm, text, flow, mimi = hp["lm"], hp["text"], hp["flow"], hp["mimi"]
    D, L, W = lm["d_model"], hp["latent_dim"], flow["dim"]
    A, KV = lm["num_heads"] * lm["head_dim"], lm["num_kv_heads"] * lm["head_dim"]
    Z = lm["z_dim"] or D
    E = lambda n, s, shape, src_shape=None, voice=False: PlanEntry(  # noqa: E731
        n, s, tuple(src_shape or shape), tuple(shape), False, voice)
    out: list[PlanEntry] = []
    R = text["rank"]
    out.append(E("text.embd.weight", "flow_lm.conditioner.embed.weight",
                 (text["n_bins"] + 1, R or text["dim"])))
    if R:
        out.append(E("text.proj.weight", "flow_lm.conditioner.proj.weight", (text["dim"], R)))
    out.append(E("lm.bos.weight", "flow_lm.bos_emb", (L,)))
    if lm["insert_bos_before_voice"]:
        out.append(E("lm.bos_voice.weight", "flow_lm.bos_before_voice", (D,), (1, 1, D)))
    out.append(E("lm.speaker_proj.weight", "flow_lm.speaker_proj_weight",
                 (D, mimi["inner_dim"]), voice=True))
    out += [E("lm.latent_mean", "flow_lm.emb_mean", (L,)),
            E("lm.latent_std", "flow_lm.emb_std", (L,)),
            E("lm.input.weight", "flow_lm.input_linear.weight", (D, L))]
    _transformer_plan(out, "lm", "flow_lm.transformer",
                      dict(d_model=D, ffn_dim=lm["ffn_dim"], num_layers=lm["num_layers"]),
                      A, KV, voice=False, flow_lm=True)
    out += [E("lm.out_norm.weight", "flow_lm.out_norm.weight", (D,)),
            E("lm.out_norm.bias", "flow_lm.out_norm.bias", (D,))]
    if lm["z_dim"]:
        out.append(E("lm.z_proj.weight", "flow_lm.z_proj.weight", (Z, D)))
    out += [E("lm.eos.weight", "flow_lm.out_eos.weight", (1, Z)),
            E("lm.eos.bias", "flow_lm.out_eos.bias", (1,))]

    fq = flow["freq_dim"]
    for j in range(flow["num_time_conds"]):
        s = f"flow_lm.flow_net.time_embed.{j}."
        out += [E(f"flow.time.{j}.freqs", s + "freqs", (fq // 2,)),
                E(f"flow.time.{j}.in.weight", s + "mlp.0.weight", (W, fq)),
                E(f"flow.time.{j}.in.bias", s + "mlp.0.bias", (W,)),
                E(f"flow.time.{j}.out.weight", s + "mlp.2.weight", (W, W)),
                E(f"flow.time.{j}.out.bias", s + "mlp.2.bias", (W,)),
                E(f"flow.time.{j}.norm.weight", s + "mlp.3.alpha", (W,))]
    s = "flow_lm.flow_net."
    out += [E("flow.cond.weight", s + "cond_embed.weight", (W, Z)),
            E("flow.cond.bias", s + "cond_embed.bias", (W,)),
            E("flow.input.weight", s + "input_proj.weight", (W, L)),
            E("flow.input.bias", s + "input_proj.bias", (W,))]
    for k in range(flow["depth"]):
        b = f"{s}res_blocks.{k}."
        out += [E(f"flow.res.{k}.norm.weight", b + "in_ln.weight", (W,)),
                E(f"flow.res.{k}.norm.bias", b + "in_ln.bias", (W,)),
                E(f"flow.res.{k}.mlp_in.weight", b + "mlp.0.weight", (W, W)),
                E(f"flow.res.{k}.mlp_in.bias", b + "mlp.0.bias", (W,)),
                E(f"flow.res.{k}.mlp_out.weight", b + "mlp.2.weight", (W, W)),
                E(f"flow.res.{k}.mlp_out.bias", b + "mlp.2.bias", (W,)),
                E(f"flow.res.{k}.ada.weight", b + "adaLN_modulation.1.weight", (3 * W, W)),
                E(f"flow.res.{k}.ada.bias", b + "adaLN_modulation.1.bias", (3 * W,))]
    out += [E("flow.final.ada.weight", s + "final_layer.adaLN_modulation.1.weight", (2 * W, W)),
            E("flow.final.ada.bias", s + "final_layer.adaLN_modulation.1.bias", (2 * W,)),
            E("flow.final.out.weight", s + "final_layer.linear.weight", (L, W)),
            E("flow.final.out.bias", s + "final_layer.linear.bias", (L,))]

    # Mimi: the decoder side, then the voice encoder.
    u, Co, Ci = mimi["upsample_stride"], mimi["outer_dim"], mimi["inner_dim"]
    out.append(E("mimi.quant_proj.weight", "mimi.quantizer.output_proj.weight",
                 (mimi["quant_out_dim"], L), (mimi["quant_out_dim"], L, 1)))
    if u > 1:
        out.append(E("mimi.upsample.weight", "mimi.upsample.convtr.convtr.weight",
                     (Co, 1, 2 * u)))
    for side, voice in (("dec", False), ("enc", True)):
        tf = mimi[f"{side}_tf"]
        src = "mimi.decoder_transformer" if side == "dec" else "mimi.encoder_transformer"
        if tf["input_dim"] != tf["d_model"]:
            out.append(E(f"mimi.{side}_tf.in_proj.weight", src + ".input_proj.weight",
                         (tf["d_model"], tf["input_dim"]), voice=voice))
        _transformer_plan(out, f"mimi.{side}_tf", src + ".transformer", tf, tf["d_model"],
                          tf["d_model"], voice=voice, flow_lm=False)
        if tf["output_dim"] != tf["d_model"]:
            out.append(E(f"mimi.{side}_tf.out_proj.weight", src + ".output_projs.0.weight",
                         (tf["output_dim"], tf["d_model"]), voice=voice))
        _seanet_plan(out, mimi[side], decoder=(side == "dec"))
    if u > 1:
        out.append(E("mimi.downsample.weight", "mimi.downsample.conv.conv.weight",
                      (Ci, mimi["enc"]["dimension"], 2 * u), voice=True))
    return out


# =============================================================================================
# Metadata
# =============================================================================================

def _metadata(w: GGUFWriter, hp: Mapping, lane: str, voice: bool, tokenizer_kind: str,
              tokenizer_payload: bytes, name: str) -> None:
    lm, text, flow, mimi = hp["lm"], hp["text"], hp["flow"], hp["mimi"]
    w.add("general.architecture", "str", "pocket")
    w.add("general.name", "str", name)
    w.add("general.file_type", "u32", LANES[lane][1])
    w.add("pocket.sample_rate", "u32", hp["sample_rate"])
    w.add("pocket.frame_rate", "f32", hp["frame_rate"])
    w.add("pocket.latent_dim", "u32", hp["latent_dim"])
    w.add("pocket.temperature", "f32", hp["temperature"])
    w.add("pocket.lsd_decode_steps", "u32", DEFAULTS["lsd_decode_steps"])
    w.add("pocket.eos_threshold", "f32", hp["eos_threshold"])
    w.add("pocket.chunk_tokens", "u32", DEFAULTS["chunk_tokens"])
    w.add("pocket.min_frames_before_eos", "u32", DEFAULTS["min_frames_before_eos"])
    w.add("pocket.frames_after_eos", "i32", hp["frames_after_eos"])
    w.add("pocket.tokens_per_second", "f32", DEFAULTS["tokens_per_second"])
    w.add("pocket.gen_seconds_padding", "f32", DEFAULTS["gen_seconds_padding"])
    w.add("pocket.voice_cloning", "bool", voice)

    w.add("pocket.text.n_bins", "u32", text["n_bins"])
    w.add("pocket.text.dim", "u32", text["dim"])
    w.add("pocket.text.rank", "u32", text["rank"])
    w.add("pocket.text.pad_with_spaces", "bool", text["pad_with_spaces"])
    w.add("pocket.text.remove_semicolons", "bool", text["remove_semicolons"])
    w.add("pocket.text.append_terminal_punctuation", "bool", text["append_terminal_punctuation"])
    w.add("pocket.text.capitalize_first_letter", "bool", text["capitalize_first_letter"])
    w.add("pocket.text.replace_from", "str[]", list(text["replace"].keys()))
    w.add("pocket.text.replace_to", "str[]", list(text["replace"].values()))
    w.add("pocket.tokenizer.kind", "str", tokenizer_kind)
    if tokenizer_kind == "tokenizers":
        w.add("tokenizer.huggingface.json", "str", tokenizer_payload.decode("utf-8"))
    else:
        w.add("pocket.tokenizer.sentencepiece", "u8[]", tokenizer_payload)

    for key in ("d_model", "num_heads", "num_kv_heads", "head_dim", "num_layers", "ffn_dim",
                "z_dim"):
        w.add(f"pocket.lm.{key}", "u32", lm[key])
    w.add("pocket.lm.rope_max_period", "f32", lm["rope_max_period"])
    w.add("pocket.lm.norm_eps", "f32", LM_NORM_EPS)
    w.add("pocket.lm.insert_bos_before_voice", "bool", lm["insert_bos_before_voice"])

    w.add("pocket.flow.type", "str", flow["type"])
    for key in ("dim", "depth", "num_time_conds", "freq_dim"):
        w.add(f"pocket.flow.{key}", "u32", flow[key])
    w.add("pocket.flow.norm_eps", "f32", FLOW_NORM_EPS)
    w.add("pocket.flow.time_norm_eps", "f32", FLOW_TIME_NORM_EPS)

    w.add("pocket.mimi.encoder_frame_rate", "f32", mimi["encoder_frame_rate"])
    for key in ("channels", "inner_dim", "outer_dim", "upsample_stride"):
        w.add(f"pocket.mimi.{key}", "u32", mimi[key])
    for side in ("enc", "dec"):
        p = mimi[side]
        for key in _SEANET_KEYS:
            w.add(f"pocket.mimi.{side}.{key}", "u32", int(p[key]))
        w.add(f"pocket.mimi.{side}.ratios", "u32[]", [int(r) for r in p["ratios"]])
        w.add(f"pocket.mimi.{side}.pad_mode", "str", str(p["pad_mode"]))
        tf = mimi[f"{side}_tf"]
        for key in ("d_model", "num_heads", "num_layers", "ffn_dim", "context", "input_dim",
                    "output_dim"):
            w.add(f"pocket.mimi.{side}_tf.{key}", "u32", tf[key])
        w.add(f"pocket.mimi.{side}_tf.rope_max_period", "f32", tf["rope_max_period"])
        w.add(f"pocket.mimi.{side}_tf.norm_eps", "f32", LM_NORM_EPS)
        w.add(f"pocket.mimi.{side}_tf.layer_scale", "bool", tf["layer_scale"])


def _read_tokenizer(tokenizer: Union[str, os.PathLike, bytes], kind_hint: str,
                    n_bins: int) -> tuple[str, bytes]:
    """(kind, payload): a tokenizers JSON (text) or a SentencePiece model proto (bytes), checked
    against n_bins when the matching package is installed."""
    if isinstance(tokenizer, (bytes, bytearray)):
        payload, where = bytes(tokenizer), "<tokenizer bytes>"
        is_json = payload.lstrip()[:1] == b"{"
    else:
        path = Path(tokenizer)
        payload, where = path.read_bytes(), str(path)
        is_json = path.suffix == ".json" or payload.lstrip()[:1] == b"{"
    if is_json:
        try:
            json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConvertError(f"{where}: not a tokenizers JSON file ({e})") from None
        kind = "tokenizers"
    else:
        kind = "sentencepiece"
    size = None
    try:
        if kind == "tokenizers":
            import tokenizers
            size = tokenizers.Tokenizer.from_str(payload.decode("utf-8")).get_vocab_size()
        else:
            import sentencepiece
            sp = sentencepiece.SentencePieceProcessor()
            sp.load_from_serialized_proto(payload)
            size = sp.vocab_size()
    except ImportError:
        pass  # the size is checked where the tokenizer package is installed
    except Exception as e:  # the packages raise their own exception types
        raise ConvertError(f"{where}: not a {kind} tokenizer ({e})") from None
    if size is not None and size != n_bins:
        raise ConvertError(f"{where}: the tokenizer has {size} tokens but the config's "
                           f"flow_lm.lookup_table.n_bins is {n_bins}")
    return kind, payload


# =============================================================================================
# convert_pocket
# =============================================================================================

def check_tensors(tensors: Mapping[str, Any], plan: list[PlanEntry]) -> bool:
    """Check names and shapes; returns whether the voice encoder is present. Raises ConvertError
    naming every missing, misshapen or unexpected tensor."""
    have = set(tensors)
    voice_names = {e.source for e in plan if e.voice}
    voice = bool(voice_names & have)
    missing = [e.source for e in plan if e.source not in have and (voice or not e.voice)]
    if missing:
        what = "the voice encoder is partial: " if voice and set(missing) <= voice_names else ""
        raise ConvertError(f"{what}missing tensor(s): {_iter_names(missing)}")
    known = {e.source for e in plan}
    unexpected = have - known
    if unexpected:
        raise ConvertError(f"unexpected tensor(s) for this config (wrong config?): "
                           f"{_iter_names(unexpected)}")
    shapes = {e.source: tuple(np.shape(tensors[e.source])) for e in plan if e.source in have}
    bad = [f"{e.source} is {shapes[e.source]}, expected {e.source_shape}"
           for e in plan if e.source in shapes and shapes[e.source] != e.source_shape]
    if bad:
        raise ConvertError("misshapen tensor(s): " + "; ".join(bad))
    return voice


def convert_pocket(checkpoint: Union[str, os.PathLike, Mapping[str, Any]],
                   tokenizer: Union[str, os.PathLike, bytes],
                   out: Union[str, os.PathLike], *, lane: str = "f32",
                   config: Union[None, str, os.PathLike, Mapping] = None,
                   name: str = "Pocket TTS",
                   progress: Optional[Callable[[int, int], None]] = None) -> Path:
    """Convert a Pocket TTS checkpoint to GGUF; returns the output path.

    checkpoint: a ``.safetensors`` path or a state dict (name -> array-like; torch tensors are
    accepted). tokenizer: a tokenizers ``.json`` or a SentencePiece ``.model`` (path or bytes).
    lane: f32 | f16 | q8_0 (see the module docstring). config: see :func:`load_config`.
    progress: called with (tensors written, tensors in all) as the file is written."""
    if lane not in LANES:
        raise ConvertError(f"lane {lane!r}: expected one of {', '.join(LANES)}")
    hp = hyperparameters(load_config(config))
    if isinstance(checkpoint, Mapping):
        tensors = dict(checkpoint)
    else:
        tensors = read_safetensors(checkpoint)
    plan = tensor_plan(hp)
    voice = check_tensors(tensors, plan)
    kind, payload = _read_tokenizer(tokenizer, hp["text"]["tokenizer"], hp["text"]["n_bins"])

    w = GGUFWriter()
    _metadata(w, hp, lane, voice, kind, payload, name)
    matrix_type = LANES[lane][0]
    for e in plan:
        if e.voice and not voice:
            continue
        t = "F32"
        if e.matrix and matrix_type != "F32":
            t = matrix_type if e.shape[-1] % 32 == 0 or matrix_type == "F16" else "F32"

        def values(src=e.source, shape=e.shape):
            v = tensors[src]
            if hasattr(v, "detach"):  # a torch tensor
                v = v.detach().cpu().float().numpy()
            v = np.asarray(v, dtype=np.float32).reshape(shape)
            if not np.all(np.isfinite(v)):
                raise ConvertError(f"{src}: holds NaN or infinite values")
            return v

        w.add_tensor(e.name, e.shape, t, values)
    return w.write(out, progress)

