"""A random-weight Pocket TTS for tests: the pocket-tts package's English model, its GGUFs.

``PocketFixture.build(folder)`` trains a small tokenizer offline, builds the package's
``TTSModel`` from its English config with seeded random weights, saves its state dict with
safetensors and converts it to GGUF in the lanes asked for. Files already in ``folder`` are
reused, so a test session builds them once. Needs ``torch`` and ``pocket-tts`` (4.0.1).

Random weights: the package initializes norms to 1 and 0, the latent statistics to 1 and 0,
the speaker projection to 0 and Mimi's layer scales to 0.01. Parity tests would not see a
dropped norm weight, statistic or projection then, so those are redrawn here: norm weights
1 + 0.1 N(0,1), norm biases 0.1 N(0,1), latent std exp(0.2 N(0,1)), latent mean 0.3 N(0,1),
the speaker projection N(0, 1/fan_in) and layer scales 0.2 (1 + 0.2 N(0,1)).

The tokenizer is a byte-pair model (``tokenizers``) with SentencePiece's Metaspace word
boundaries, trained on seeded random sentences of made-up syllable words to exactly
``N_BINS`` tokens: the real model's tokenizer is a converted SentencePiece model of that size.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

N_BINS = 4000
SEED = 1234
_SYLLABLES = ("ka to ri ne sa mo lu pe di fa go hi ju ba ze wo qu xi ye vo th sh ch st ar "
              "en in on er al").split()
_ENGLISH = ("hello world this is a short test of the speech model it reads text aloud and "
            "we hope you like it very much today".split())


def tokenizer_corpus(seed: int = SEED, n_lines: int = 4000) -> list[str]:
    """Seeded sentences of made-up words (and a few English ones), with punctuation."""
    rng = random.Random(seed)
    words = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4)))
             for _ in range(6000)] + _ENGLISH * 20
    lines = []
    for _ in range(n_lines):
        s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 14)))
        lines.append(s[0].upper() + s[1:] + rng.choice([".", ".", "!", "?", "...", ","]))
    return lines


def train_tokenizer(path: str | os.PathLike, n_bins: int = N_BINS, seed: int = SEED) -> Path:
    """Train the test tokenizer and save it as a tokenizers JSON file."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    alphabet = [chr(c) for c in range(32, 127)] + ["\u2019", "\u2018", "\u2026"]
    trainer = trainers.BpeTrainer(vocab_size=n_bins, special_tokens=["<unk>"],
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(tokenizer_corpus(seed), trainer)
    if tok.get_vocab_size() != n_bins:
        raise RuntimeError(f"the test tokenizer has {tok.get_vocab_size()} tokens, not {n_bins}")
    path = Path(path)
    tok.save(str(path))
    return path


def _randomize(model, seed: int) -> None:
    """Redraw the parameters the package initializes to constants (see the module docstring)."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def randn(t):
        return torch.randn(t.shape, generator=g, dtype=t.dtype)

    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            module = name.rsplit(".", 2)[-2] if name.count(".") >= 2 else ""
            is_norm = any(k in name for k in ("norm", "in_ln", "mlp.3.alpha"))
            if leaf == "scale" and "layer_scale" in module:
                p.copy_(0.2 * (1 + 0.2 * randn(p)))
            elif is_norm and leaf in ("weight", "alpha"):
                p.copy_(1 + 0.1 * randn(p))
            elif is_norm and leaf == "bias":
                p.copy_(0.1 * randn(p))
            elif name == "flow_lm.speaker_proj_weight":
                p.copy_(randn(p) / p.shape[1] ** 0.5)
        model.flow_lm.emb_std.copy_(torch.exp(0.2 * randn(model.flow_lm.emb_std)))
        model.flow_lm.emb_mean.copy_(0.3 * randn(model.flow_lm.emb_mean))


def build_model(tokenizer_path: str | os.PathLike, seed: int = SEED, language: str = "english"):
    """The package's TTSModel for ``language``'s config, weights random (torch.manual_seed(seed),
    then :func:`_randomize`), the given tokenizer. Returns the model."""
    import torch
    from pocket_tts.models.tts_model import TTSModel
    from pocket_tts.utils.config import CONFIGS_DIR, load_config

    cfg = load_config(CONFIGS_DIR / f"{language}.yaml")
    cfg.weights_path = None
    cfg.weights_path_without_voice_cloning = None
    cfg.flow_lm.weights_path = None
    cfg.mimi.weights_path = None
    cfg.flow_lm.lookup_table.tokenizer_path = str(tokenizer_path)
    cfg.flow_lm.lookup_table.tokenizer = "tokenizers"
    torch.manual_seed(seed)
    import logging
    quiet = logging.getLogger("pocket_tts.models.tts_model")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "model is uninitialized!": intended here
    try:
        model = TTSModel._from_pydantic_config_with_weights(
            cfg, cfg.default_temperature, 1, None, cfg.default_eos_threshold)
    finally:
        quiet.setLevel(level)
    _randomize(model, seed + 1)
    model.eval()
    return model


@dataclass
class PocketFixture:
    """The test model's files and the package model itself."""
    folder: Path
    tokenizer: Path
    checkpoint: Path
    model: Any                                   # pocket_tts TTSModel
    language: str = "english"
    gguf: dict[str, Path] = field(default_factory=dict)

    @classmethod
    def build(cls, folder: str | os.PathLike, lanes: Iterable[str] = ("f32",),
              seed: int = SEED, language: str = "english") -> "PocketFixture":
        """language: the package config (config/LANGUAGE.yaml) the model is built from."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tok = folder / "tokenizer.json"
        if not tok.exists():
            train_tokenizer(tok)
        model = build_model(tok, seed, language)
        ckpt = folder / f"pocket-{language}-random-{seed}.safetensors"
        if not ckpt.exists():
            save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(ckpt))
        fx = cls(folder, tok, ckpt, model, language)
        for lane in lanes:
            fx.gguf_path(lane)
        return fx

    def gguf_path(self, lane: str) -> Path:
        """The checkpoint converted in ``lane`` (made on first use)."""
        from pocket_tts.utils.config import CONFIGS_DIR

        from ..convert.pocket import convert_pocket

        if lane not in self.gguf:
            path = self.folder / f"{self.checkpoint.stem}-{lane}.gguf"
            if not path.exists():
                config = None if self.language == "english" \
                    else CONFIGS_DIR / f"{self.language}.yaml"
                convert_pocket(self.checkpoint, self.tokenizer, path, lane=lane, config=config)
            self.gguf[lane] = path
        return self.gguf[lane]


_SHARED: dict[str, PocketFixture] = {}


def shared_fixture(lanes: Iterable[str] = ("f32",), language: str = "english") -> PocketFixture:
    """One PocketFixture per language and process, in a temporary folder removed at exit: test
    files share it instead of building the model twice."""
    if language not in _SHARED:
        import atexit
        import shutil
        import tempfile

        folder = tempfile.mkdtemp(prefix="dasllama-pocket-")
        atexit.register(shutil.rmtree, folder, True)
        _SHARED[language] = PocketFixture.build(folder, (), language=language)
    fx = _SHARED[language]
    for lane in lanes:
        fx.gguf_path(lane)
    return fx


# =============================================================================================
# Recording what the package computes
# =============================================================================================

@dataclass
class PackageRun:
    """What the package computed in one ``generate_audio`` call, captured by hooks, as float64
    NumPy arrays. Per FlowLM call (a chunk's prompt, then one per frame, including the frame on
    which the loop stopped): ``prompt`` (whether it was a prompt call), ``noise`` (the draw of
    torch.nn.init.normal_, already times sqrt(temperature)), ``conditioning`` (out_eos's input
    [Z]), ``eos_logits``, ``latents`` [L]. Per decoder call: ``mimi_inputs`` (de-normalized
    latents [n, L]), ``mimi_outputs`` (audio [n * frame_size], before the fade-in) and
    ``mimi_chunk`` (which chunk's decoder state it used)."""
    temperature: float
    prompt: list = field(default_factory=list)
    noise: list = field(default_factory=list)
    conditioning: list = field(default_factory=list)
    eos_logits: list = field(default_factory=list)
    latents: list = field(default_factory=list)
    mimi_inputs: list = field(default_factory=list)
    mimi_outputs: list = field(default_factory=list)
    mimi_chunk: list = field(default_factory=list)
    audio: Any = None

    def chunk_calls(self) -> list[list[int]]:
        """The frame calls of each chunk (indices into the per-call lists)."""
        out: list[list[int]] = []
        for i, is_prompt in enumerate(self.prompt):
            if is_prompt:
                out.append([])
            else:
                out[-1].append(i)
        return out

    def chunk_frames(self) -> list[int]:
        """Frames kept (handed to the decoder) per chunk."""
        counts: dict[int, int] = {}
        for chunk, x in zip(self.mimi_chunk, self.mimi_inputs):
            counts[chunk] = counts.get(chunk, 0) + len(x)
        return [counts.get(c, 0) for c in range(len(self.chunk_calls()))]

    def frame_calls(self) -> list[int]:
        """The calls of the kept frames, all chunks in order."""
        return [i for calls, n in zip(self.chunk_calls(), self.chunk_frames()) for i in calls[:n]]

    def frame_noise(self):
        """The reference's noise: standard-normal rows, one per kept frame."""
        import numpy as np

        std = self.temperature ** 0.5
        rows = [self.noise[i] for i in self.frame_calls()]
        return np.array(rows) / std if std > 0 else np.zeros((len(rows), len(self.noise[0])))


def record_package_run(model, text: str, model_state=None, *, frames_after_eos=None,
                       eos_threshold=None, temperature=None, seed: int = 0) -> PackageRun:
    """Run ``model.generate_audio`` (torch.manual_seed(seed) first) and capture every stage.
    eos_threshold / temperature temporarily replace the model's. model_state None: the empty
    state of a model without a voice prompt."""
    import torch
    from pocket_tts.modules.stateful_module import init_states

    run = PackageRun(model.temp if temperature is None else float(temperature))
    flow_lm, mimi = model.flow_lm, model.mimi

    def numpy(t):
        return t.detach().double().numpy().copy()

    def on_eos(module, inputs, output):  # a forward hook returning None leaves the output alone
        run.conditioning.append(numpy(inputs[0][0]))
        run.eos_logits.append(float(output[0, 0]))

    def on_flow_lm(module, args, kwargs, output):
        run.prompt.append(kwargs["sequence"].shape[1] == 0)
        run.latents.append(numpy(output[0][0]))

    hooks = [flow_lm.out_eos.register_forward_hook(on_eos),
             flow_lm.register_forward_hook(on_flow_lm, with_kwargs=True)]
    normal = torch.nn.init.normal_

    def recording_normal(tensor, *args, **kwargs):
        result = normal(tensor, *args, **kwargs)
        run.noise.append(numpy(tensor.reshape(-1)))
        return result

    decode = mimi.decode_from_latent
    states: list = []

    def recording_decode(latent, state):
        if not any(s is state for s in states):
            states.append(state)
        run.mimi_chunk.append(next(i for i, s in enumerate(states) if s is state))
        run.mimi_inputs.append(numpy(latent[0]))
        out = decode(latent, state)
        run.mimi_outputs.append(numpy(out[0, 0]))
        return out

    saved = (model.eos_threshold, model.temp)
    if eos_threshold is not None:
        model.eos_threshold = eos_threshold
    model.temp = run.temperature
    torch.nn.init.normal_ = recording_normal
    mimi.decode_from_latent = recording_decode
    try:
        if model_state is None:
            model_state = init_states(flow_lm, batch_size=1, sequence_length=0)
        torch.manual_seed(seed)
        run.audio = model.generate_audio(model_state, text,
                                         frames_after_eos=frames_after_eos).double().numpy()
    finally:
        torch.nn.init.normal_ = normal
        del mimi.decode_from_latent
        model.eos_threshold, model.temp = saved
        for h in hooks:
            h.remove()
    if len(run.noise) != len(run.prompt):
        raise RuntimeError(f"{len(run.noise)} noise draws for {len(run.prompt)} FlowLM calls: "
                           f"the package no longer draws once per call")
    return run


def package_voice(model, wav):
    """The package's voice state and its speaker-projected rows for a 1-D float32 wav at the
    model's sample rate: (model_state, rows [T', D] without bos_voice)."""
    import torch
    from pocket_tts.data.audio_utils import end_on_pause

    audio = torch.from_numpy(wav)[None]
    with torch.no_grad():
        rows = model._encode_audio(end_on_pause(audio, model.sample_rate)[None])[0]
        state = model.get_state_for_audio_prompt(audio)
    return state, rows.double().numpy()


def voice_wav(seconds: float = 0.9, sample_rate: int = 24000, seed: int = 5):
    """A deterministic voice-like float32 wav: a 220 Hz tone under a sine envelope, a little
    noise, nearly silent for its last 0.2 s (so end_on_pause has a pause to find)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    wav = 0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(np.pi * t / seconds) \
        + 0.05 * rng.standard_normal(t.size)
    wav[int((seconds - 0.2) * sample_rate):] *= 0.001
    return wav.astype(np.float32)
