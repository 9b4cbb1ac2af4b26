"""Random-weight Kokoro and Kitten-like models built from the `kokoro` package's own modules
(hexgrad's KModel parts), saved as the checkpoint KModel loads, for the PyTorch parity tests.

No hub is reachable: weights are torch.manual_seed random, with the parts the package
initializes to constants (LayerNorm gains, Snake alphas, weight-norm magnitudes) moved off
them so that a converter that mixed them up would be seen. AdaIN's instance-norm affine stays
the identity, as in the released model (it was trained without one).
"""

from __future__ import annotations

import copy
import math
import importlib.util
import json
import sys
import types
from contextlib import contextmanager

from requires import require

from dasllama.bench.tts_kokoro_gpu import KOKORO_82M  # Kokoro-82M's published config

# Kitten-like: the same family at small widths, ALBERT with its own embedding size and the
# tanh-form GELU named explicitly. The package's Decoder fixes its widths (1024 channels, a
# 512-wide text input), so the Kitten-like decoder is assembled from the package's
# AdainResBlk1d at the widths in "decoder" below (not a config field of the package).
KITTEN_LIKE = {
    "istftnet": {"upsample_kernel_sizes": [20, 12], "upsample_rates": [10, 6],
                 "gen_istft_hop_size": 5, "gen_istft_n_fft": 20,
                 "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5]],
                 "resblock_kernel_sizes": [3, 7], "upsample_initial_channel": 64},
    "dropout": 0.2, "hidden_dim": 128, "max_dur": 50, "n_layer": 2, "n_mels": 80,
    "n_token": 178, "style_dim": 64, "text_encoder_kernel_size": 5,
    "plbert": {"hidden_size": 96, "embedding_size": 48, "num_attention_heads": 4,
               "intermediate_size": 192, "max_position_embeddings": 128,
               "num_hidden_layers": 3, "dropout": 0.1, "hidden_act": "gelu_new"},
}
KITTEN_DECODER = {"width": 192, "asr_res": 32}   # the decoder blocks' width, the text residual's

FFN_PREACT = 2.0   # the std of ALBERT's feed-forward pre-activations (tanh and erf GELU differ
                   # by up to ~2e-4 there; at the package's init, std ~0.2, they agree to 1e-6)

# Phoneme symbols for a test vocabulary (ids 1..), one character each.
# Hz: an F0_proj bias that makes a random model's source voiced. Its own F0 is near zero, an
# unvoiced source whose near-zero STFT bins carry rounding-noise phases; the generator's
# instance norms amplify those, so two float32 sides of one chain then differ by 5e-4..5e-3
# (by CPU) instead of ~1e-5.
VOICED_F0 = 150.0
SYMBOLS = "abcdefghijklmnopqrstuvwxyzəɪɛæʌʊɔɑɚɹðθʃʒŋˈˌː,.!?"


def vocab() -> dict:
    return {s: i + 1 for i, s in enumerate(SYMBOLS)}


def kokoro_modules():
    """(kokoro.modules, kokoro.istftnet, kokoro.model) from the installed package, without
    running its __init__, which imports the G2P pipeline (misaki, spacy) these tests do not
    use."""
    require("torch")
    require("transformers")
    if "kokoro.model" not in sys.modules:
        spec = importlib.util.find_spec("kokoro")
        if spec is None or not spec.submodule_search_locations:
            require("kokoro")   # fails under CI, skips elsewhere, with the install line
        pkg = types.ModuleType("kokoro")
        pkg.__path__ = list(spec.submodule_search_locations)
        pkg.__spec__ = spec
        sys.modules["kokoro"] = pkg
    import kokoro.istftnet as istftnet
    import kokoro.model as model
    import kokoro.modules as modules
    return modules, istftnet, model


def _kitten_decoder(istftnet, cfg: dict):
    """The package's Decoder with its fixed-width blocks replaced by Kitten-like ones."""
    import torch.nn as nn
    from torch.nn.utils import weight_norm

    width, res = KITTEN_DECODER["width"], KITTEN_DECODER["asr_res"]
    hidden, style = cfg["hidden_dim"], cfg["style_dim"]
    ist = cfg["istftnet"]
    dec = istftnet.Decoder(dim_in=512, style_dim=style, dim_out=cfg["n_mels"], **ist)
    block = istftnet.AdainResBlk1d
    dec.encode = block(hidden + 2, width, style)
    dec.decode = nn.ModuleList([block(width + 2 + res, width, style) for _ in range(3)]
                               + [block(width + 2 + res, ist["upsample_initial_channel"], style,
                                        upsample=True)])
    dec.asr_res = nn.Sequential(weight_norm(nn.Conv1d(hidden, res, kernel_size=1)))
    return dec


def _perturb(parts: dict, torch) -> None:
    """Move the constant-initialized parameters off their constants (see the module doc),
    shorten the predicted durations (the duration bins' bias) so that the chain stays small,
    and widen ALBERT's feed-forward pre-activations."""
    with torch.no_grad():
        for part, module in parts.items():
            for name, p in module.named_parameters():
                if name.endswith("weight_g"):
                    p.mul_(torch.empty_like(p).uniform_(0.5, 1.5))
                elif ".alpha" in name:
                    p.uniform_(0.5, 1.5)
                elif (("LayerNorm" in name or "full_layer_layer_norm" in name)
                      or name.endswith((".gamma", ".beta"))):
                    p.add_(0.1 * torch.randn_like(p))
        proj = parts["predictor"].duration_proj.linear_layer
        proj.bias.sub_(3.0)       # ~2-4 frames per phoneme
        proj.weight.mul_(4.0)     # ... that differ from phoneme to phoneme and with the style
        # ALBERT's feed-forward input is layer-normed (unit scale per value): weights of
        # std FFN_PREACT / sqrt(hidden) put its pre-activations where the two GELUs differ
        layer = parts["bert"].encoder.albert_layer_groups[0].albert_layers[0]
        hidden = layer.ffn.weight.shape[1]
        layer.ffn.weight.normal_(0.0, FFN_PREACT / math.sqrt(hidden))


def build(cfg: dict, seed: int, kitten_decoder: bool = False) -> dict:
    """KModel's five parts, as KModel.__init__ builds them from a config, random weights."""
    torch = require("torch")
    from transformers import AlbertConfig

    modules, istftnet, _ = kokoro_modules()
    torch.manual_seed(seed)
    bert = modules.CustomAlbert(AlbertConfig(vocab_size=cfg["n_token"], **cfg["plbert"]))
    parts = {
        "bert": bert,
        "bert_encoder": torch.nn.Linear(bert.config.hidden_size, cfg["hidden_dim"]),
        "predictor": modules.ProsodyPredictor(
            style_dim=cfg["style_dim"], d_hid=cfg["hidden_dim"], nlayers=cfg["n_layer"],
            max_dur=cfg["max_dur"], dropout=cfg["dropout"]),
        "text_encoder": modules.TextEncoder(
            channels=cfg["hidden_dim"], kernel_size=cfg["text_encoder_kernel_size"],
            depth=cfg["n_layer"], n_symbols=cfg["n_token"]),
        "decoder": (_kitten_decoder(istftnet, cfg) if kitten_decoder else istftnet.Decoder(
            dim_in=cfg["hidden_dim"], style_dim=cfg["style_dim"], dim_out=cfg["n_mels"],
            **cfg["istftnet"])),
    }
    _perturb(parts, torch)
    for m in parts.values():
        m.eval()
    return parts


def save(parts: dict, cfg: dict, folder, voices: int = 2, seed: int = 7) -> tuple:
    """(checkpoint.pth, config.json, [voice .pt files]) in folder, as hexgrad ships them."""
    torch = require("torch")
    ckpt = folder / "model.pth"
    torch.save({k: m.state_dict() for k, m in parts.items()}, ckpt)
    config = folder / "config.json"
    config.write_text(json.dumps(dict(cfg, vocab=vocab())), encoding="utf-8")
    g = torch.Generator().manual_seed(seed)
    packs = []
    for i in range(voices):
        p = folder / f"voice{i}.pt"
        torch.save(0.3 * torch.randn(510, 1, 2 * cfg["style_dim"], generator=g), p)
        packs.append(p)
    return ckpt, config, packs


@contextmanager
def pinned_source(torch):
    """SineGen's random initial phases and both noises drawn as zeros (the reference has
    neither), for the generator's call."""
    real_rand, real_randn_like = torch.rand, torch.randn_like

    def zeros(*shape, **kw):
        kw.pop("generator", None)
        return torch.zeros(*shape, **kw)

    torch.rand = zeros
    torch.randn_like = lambda x, **kw: torch.zeros_like(x)
    try:
        yield
    finally:
        torch.rand, torch.randn_like = real_rand, real_randn_like


def with_weights(ref, **changes):
    """A shallow copy of a ReferenceKokoro whose weights (and meta, via meta=) differ."""
    c = copy.copy(ref)
    c.w = dict(ref.w)
    c.meta = dict(ref.meta)
    c.meta.update(changes.pop("meta", {}))
    c.w.update(changes)
    return c
