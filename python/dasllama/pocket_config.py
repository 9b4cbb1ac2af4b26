"""The pocket.* metadata of a Pocket TTS GGUF as nested dicts: what dasllama.TTS and the NumPy
reference both read (the keys are written by :mod:`dasllama.convert.pocket`, whose docstring
lists them)."""

from __future__ import annotations

from typing import Any, Sequence

from .errors import GGUFError

__all__ = ["read_config"]


def _section(meta: dict, prefix: str, keys: Sequence[str], path: str) -> dict[str, Any]:
    out = {}
    for k in keys:
        full = f"{prefix}{k}"
        if full not in meta:
            raise GGUFError(f"{path}: metadata {full!r} is missing")
        out[k] = meta[full]
    return out


def read_config(meta: dict, path: str = "<gguf>") -> dict[str, Any]:
    """The pocket.* metadata as nested dicts (see dasllama.convert.pocket for the keys)."""
    if meta.get("general.architecture") != "pocket":
        raise GGUFError(f"{path}: general.architecture is {meta.get('general.architecture')!r}, "
                        f"not 'pocket'")
    c = _section(meta, "pocket.", (
        "sample_rate", "frame_rate", "latent_dim", "temperature", "lsd_decode_steps",
        "eos_threshold", "chunk_tokens", "min_frames_before_eos", "frames_after_eos",
        "tokens_per_second", "gen_seconds_padding", "voice_cloning"), path)
    c["text"] = _section(meta, "pocket.text.", (
        "n_bins", "dim", "rank", "pad_with_spaces", "remove_semicolons",
        "append_terminal_punctuation", "capitalize_first_letter", "replace_from",
        "replace_to"), path)
    c["lm"] = _section(meta, "pocket.lm.", (
        "d_model", "num_heads", "num_kv_heads", "head_dim", "num_layers", "ffn_dim", "z_dim",
        "rope_max_period", "norm_eps", "insert_bos_before_voice"), path)
    c["flow"] = _section(meta, "pocket.flow.", (
        "type", "dim", "depth", "num_time_conds", "freq_dim", "norm_eps", "time_norm_eps"), path)
    m = _section(meta, "pocket.mimi.", (
        "encoder_frame_rate", "channels", "inner_dim", "outer_dim", "upsample_stride"), path)
    for side in ("enc", "dec"):
        m[side] = _section(meta, f"pocket.mimi.{side}.", (
            "dimension", "n_filters", "n_residual_layers", "kernel_size",
            "residual_kernel_size", "last_kernel_size", "dilation_base", "compress", "ratios",
            "pad_mode"), path)
        m[f"{side}_tf"] = _section(meta, f"pocket.mimi.{side}_tf.", (
            "d_model", "num_heads", "num_layers", "ffn_dim", "context", "input_dim",
            "output_dim", "rope_max_period", "norm_eps", "layer_scale"), path)
    c["mimi"] = m
    kind = meta.get("pocket.tokenizer.kind")
    if kind == "tokenizers":
        c["tokenizer"] = (kind, meta["tokenizer.huggingface.json"])
    elif kind == "sentencepiece":
        c["tokenizer"] = (kind, bytes(meta["pocket.tokenizer.sentencepiece"]))
    else:
        raise GGUFError(f"{path}: pocket.tokenizer.kind {kind!r} is not tokenizers or "
                        f"sentencepiece")
    if c["flow"]["type"] not in ("lsd", "flow_matching", "drifting", "pointwise"):
        raise GGUFError(f"{path}: pocket.flow.type {c['flow']['type']!r} is unknown")
    c["frame_size"] = int(c["sample_rate"] / c["frame_rate"])
    return c
