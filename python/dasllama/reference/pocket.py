"""Pocket TTS in plain NumPy: the reference for the fast paths.

::

    from dasllama.reference.pocket import ReferencePocket
    m = ReferencePocket("pocket.gguf")
    audio = m.synthesize("Hello world.", temperature=0.3, seed=0)      # float32, 24 kHz
    voice = m.encode_voice(wav, sample_rate=24000)                      # rows for the prompt
    audio = m.synthesize("Hello world.", voice=voice, temperature=0)   # deterministic

Pocket TTS (Kyutai, pocket-tts 4.0.1; the file layout is dasllama.convert.pocket's) speaks text
in three parts, each exposed as a stage so a fast path can be compared stage by stage:

1. The prompt (``prompt_kv``): a voice's rows (``bos_voice`` + speaker-projected Mimi latents)
   and the text rows (a lookup table of the tokens) go through the FlowLM backbone, a causal
   pre-norm transformer, filling its K/V cache. Their outputs are not used.
2. The frame loop (``frame_step``, ``eos_logit``, ``flow_head``): one backbone step per frame
   on the previous latent (``lm.bos`` for the first) gives the conditioning c = out_norm(h)
   (then z_proj when present). The EOS head reads c; the flow head turns noise
   x0 = sqrt(temperature) * eps into the frame's latent with Lagrangian Self Distillation
   (LSD, arXiv:2505.18825: x1 = x0 + v(c, s=0, t=1, x0) in one step). The EOS rule: the
   first frame g >= min_frames_before_eos whose EOS logit exceeds the threshold is the EOS
   frame; frames_after_eos more follow, then the loop stops. A length cap of
   ceil((tokens / tokens_per_second + gen_seconds_padding) * frame_rate) frames (3 and 2 s)
   ends it otherwise.
3. The codec (``mimi_decode``): latents * latent_std + latent_mean go through the Mimi decoder
   (:mod:`.pocket_mimi`). Each chunk's first 5 ms are faded in (the package does so to hide the
   fresh decoder's step).

Long text is cut into chunks of at most ``chunk_tokens`` tokens (:mod:`.pocket_text`); each
chunk starts again from the voice's state and a fresh decoder, and the audio is concatenated.

Noise: ``noise`` is an array [n, latent_dim] of standard-normal draws eps, row g for the g-th
generated frame (a later chunk's frames follow an earlier one's). The package draws the same
way (torch.nn.init.normal_ with std sqrt(temperature)), except that it also draws, and
discards, one row for every prompt call and one for the frame on which the loop stops.
Temperature 0 needs no noise and is deterministic.

Precision: weights are read through the ``gguf`` package and dequantized to float32 by
:mod:`dasllama.reference.quants` (:mod:`.gguf_file`), then the arithmetic is done in
``dtype`` (float64 by default); outputs are float32.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from . import gguf_file as gguf
from ..errors import GGUFError, ShapeError
from ..pocket_config import read_config
from .pocket_blocks import KVRows, flow_rms_norm, layer_norm, silu, transformer
from .pocket_mimi import end_on_pause, mimi_decode, mimi_encode
from .pocket_text import TextRules, Tokenizer, prepare_text, split_into_chunks

__all__ = ["ReferencePocket", "PocketChunk", "PocketResult", "read_config", "read_wav"]

FADE_IN_SECONDS = 1 / 200   # the package fades in each chunk's first sample_rate // 200 samples


def read_wav(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """(float32 mono samples in [-1, 1), sample rate) of a 16-bit PCM .wav file, channels
    averaged, as the package's audio_read (samples / 32768)."""
    import wave

    with wave.open(os.fspath(path), "rb") as f:
        if f.getsampwidth() != 2:
            raise ShapeError(f"{path}: {8 * f.getsampwidth()}-bit samples; read_wav takes "
                             f"16-bit PCM (decode other files yourself and pass the samples)")
        channels, rate = f.getnchannels(), f.getframerate()
        samples = np.frombuffer(f.readframes(-1), dtype="<i2").astype(np.float32) / 32768.0
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1)
    return samples, rate


# =============================================================================================
# Results
# =============================================================================================

@dataclass
class PocketChunk:
    """One chunk's generation: the text spoken, its token ids, and per generated frame the
    conditioning c [n, Z], the EOS logits [n], the latents [n, L] (normalized, as the backbone
    reads them back), the EOS frame (None when the cap ended it) and the audio."""
    text: str
    tokens: list[int]
    conditioning: np.ndarray
    eos_logits: np.ndarray
    latents: np.ndarray
    eos_frame: Optional[int]
    frames_cap: int
    audio: np.ndarray = field(repr=False)


@dataclass
class PocketResult:
    audio: np.ndarray          # float32 [samples], all chunks
    chunks: list[PocketChunk]


# =============================================================================================
# The model
# =============================================================================================

class ReferencePocket:
    """A Pocket TTS GGUF evaluated in NumPy. Not thread-safe (one weight cache)."""

    def __init__(self, path: str | os.PathLike, dtype=np.float64):
        self.path = os.fspath(path)
        self.dtype = np.dtype(dtype)
        self._file = gguf.open(self.path)
        self.config = read_config(self._file.metadata, self.path)
        self.tokenizer = Tokenizer(*self.config["tokenizer"])
        t = self.config["text"]
        self.text_rules = TextRules(
            pad_with_spaces=t["pad_with_spaces"], remove_semicolons=t["remove_semicolons"],
            append_terminal_punctuation=t["append_terminal_punctuation"],
            capitalize_first_letter=t["capitalize_first_letter"],
            replace=dict(zip(t["replace_from"], t["replace_to"])))
        self._weights: dict[str, np.ndarray] = {}

    def close(self) -> None:
        self._weights.clear()
        self._file = None

    def __enter__(self) -> "ReferencePocket":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def w(self, name: str) -> np.ndarray:
        """Tensor ``name`` (NumPy order) in the compute dtype, cached."""
        v = self._weights.get(name)
        if v is None:
            if name not in self._file.tensors:
                raise GGUFError(f"{self.path}: tensor {name!r} is missing")
            v = self._file.tensor(name).astype(self.dtype)
            self._weights[name] = v
        return v

    # -----------------------------------------------------------------------------------------
    # Text
    # -----------------------------------------------------------------------------------------

    def chunks(self, text: str, max_tokens: Optional[int] = None) -> list[tuple[str, int]]:
        """(prepared chunk text, frames after EOS) for each chunk the package would speak; the
        second is the package's guess (+2) unless the file fixes pocket.frames_after_eos."""
        max_tokens = max_tokens or self.config["chunk_tokens"]
        out = []
        for chunk in split_into_chunks(text, self.tokenizer, self.text_rules, max_tokens):
            prepared, guess = prepare_text(chunk, self.text_rules)
            fixed = self.config["frames_after_eos"]
            out.append((prepared, fixed if fixed >= 0 else guess + 2))
        return out

    def tokenize(self, prepared: str) -> list[int]:
        return self.tokenizer.encode(prepared)

    def text_rows(self, tokens: Sequence[int]) -> np.ndarray:
        """The lookup table's rows [T, D] (then the low-rank projection when present)."""
        ids = np.asarray(tokens, dtype=np.int64)
        n_rows = self.config["text"]["n_bins"] + 1
        if ids.size and (ids.min() < 0 or ids.max() >= n_rows):
            raise ShapeError(f"token id out of range 0..{n_rows - 1}: {ids.min()}..{ids.max()}")
        rows = self.w("text.embd.weight")[ids]
        if self.config["text"]["rank"]:
            rows = rows @ self.w("text.proj.weight").T
        return rows

    # -----------------------------------------------------------------------------------------
    # Voices
    # -----------------------------------------------------------------------------------------

    def mimi_encode(self, audio: np.ndarray) -> np.ndarray:
        """Audio [channels, N] (or [N]) at the model's rate -> Mimi latents [T', Ci]."""
        a = np.asarray(audio, dtype=self.dtype)
        a = a[None] if a.ndim == 1 else a
        return mimi_encode(a, self.w, self.config["mimi"], self.config["frame_size"])

    def voice_rows(self, latents: np.ndarray) -> np.ndarray:
        """Latents [T', Ci] -> prompt rows [1 + T', D]: lm.bos_voice (when the model inserts
        it), then the speaker projection of every latent."""
        rows = np.asarray(latents, self.dtype) @ self.w("lm.speaker_proj.weight").T
        if self.config["lm"]["insert_bos_before_voice"]:
            rows = np.concatenate([self.w("lm.bos_voice.weight")[None], rows])
        return rows

    def encode_voice(self, audio, sample_rate: Optional[int] = None) -> np.ndarray:
        """A voice prompt's rows from its audio: a 16-bit PCM .wav path (see :func:`read_wav`)
        or samples ([N] or [channels, N], averaged to mono) at ``sample_rate`` (default: the
        model's). Resampled to the model's rate (scipy's resample_poly, as the package), ended
        on a pause (end_on_pause), encoded by Mimi and projected."""
        if not self.config["voice_cloning"]:
            raise ShapeError(f"{self.path}: this model has no voice encoder "
                             f"(pocket.voice_cloning is false)")
        if isinstance(audio, (str, os.PathLike)):
            audio, sample_rate = read_wav(audio)
        a = np.asarray(audio, dtype=np.float64)
        a = a[None] if a.ndim == 1 else a.mean(axis=0, keepdims=True)
        sr = self.config["sample_rate"]
        if sample_rate is not None and sample_rate != sr:
            from scipy.signal import resample_poly
            g = math.gcd(int(sample_rate), int(sr))
            a = resample_poly(a, sr // g, int(sample_rate) // g, axis=-1)
        a = end_on_pause(a.astype(np.float32).astype(self.dtype), sr)
        return self.voice_rows(self.mimi_encode(a))

    # -----------------------------------------------------------------------------------------
    # The backbone
    # -----------------------------------------------------------------------------------------

    def new_state(self) -> KVRows:
        lm = self.config["lm"]
        return KVRows(lm["num_layers"], lm["num_kv_heads"], lm["head_dim"], self.dtype)

    def backbone(self, state: KVRows, rows: np.ndarray) -> np.ndarray:
        """Rows [T, D] through the transformer at positions state.n.., appending their K/V;
        returns the conditioning of every row [T, Z]: out_norm, then z_proj when present."""
        lm = self.config["lm"]
        x = transformer(np.asarray(rows, self.dtype), self.w, "lm.", n_layers=lm["num_layers"],
                        num_heads=lm["num_heads"], kv_heads=lm["num_kv_heads"],
                        head_dim=lm["head_dim"], rope_max_period=lm["rope_max_period"],
                        eps=lm["norm_eps"], cache=state)
        x = layer_norm(x, self.w("lm.out_norm.weight"), self.w("lm.out_norm.bias"),
                       lm["norm_eps"])
        if lm["z_dim"]:
            x = x @ self.w("lm.z_proj.weight").T
        return x

    def prompt_kv(self, state: KVRows, rows: np.ndarray) -> KVRows:
        """The prompt stage: rows (a voice's, then a chunk's text rows) into the K/V cache.
        state.k[i], state.v[i] [P, Hkv, Dh] are then the rotated keys and the values of every
        prompt position in layer i. Returns the state."""
        self.backbone(state, rows)
        return state

    def frame_step(self, state: KVRows, latent: Optional[np.ndarray]) -> np.ndarray:
        """One frame: the previous latent [L] (None: the first frame, lm.bos) through
        lm.input and the backbone; returns the conditioning c [Z]."""
        x = self.w("lm.bos.weight") if latent is None else np.asarray(latent, self.dtype)
        row = x @ self.w("lm.input.weight").T
        return self.backbone(state, row[None])[0]

    def eos_logit(self, c: np.ndarray) -> float:
        return float(c @ self.w("lm.eos.weight")[0] + self.w("lm.eos.bias")[0])

    # -----------------------------------------------------------------------------------------
    # The flow head (SimpleMLPAdaLN, pocket_tts modules/mlp.py)
    # -----------------------------------------------------------------------------------------

    def _time_embedding(self, j: int, t: float) -> np.ndarray:
        """TimestepEmbedder j at time t: [cos(t f), sin(t f)] -> linear, SiLU, linear, the
        flow RMSNorm. f = flow.time.j.freqs (max_period^(-i / half))."""
        b = f"flow.time.{j}."
        args = t * self.w(b + "freqs")
        h = np.concatenate([np.cos(args), np.sin(args)])
        h = silu(h @ self.w(b + "in.weight").T + self.w(b + "in.bias"))
        h = h @ self.w(b + "out.weight").T + self.w(b + "out.bias")
        return flow_rms_norm(h, self.w(b + "norm.weight"), self.config["flow"]["time_norm_eps"])

    def flow_net(self, c: np.ndarray, times: Sequence[float], x: np.ndarray) -> np.ndarray:
        """The head's output for condition c [Z], its time conditions and x [L].

        y = cond(c) + mean_j time_j(t_j); x = input(x); per block (DiT-style adaLN-Zero,
        Peebles & Xie 2023): shift, scale, gate = ada(SiLU(y));
        x += gate * mlp(LN(x) * (1 + scale) + shift); final: shift, scale = ada(SiLU(y)),
        out(LN(x) * (1 + scale) + shift), its LayerNorm without weights."""
        f = self.config["flow"]
        eps = f["norm_eps"]
        y = c @ self.w("flow.cond.weight").T + self.w("flow.cond.bias")
        if f["num_time_conds"]:
            y = y + sum(self._time_embedding(j, t) for j, t in enumerate(times)) \
                / f["num_time_conds"]
        x = x @ self.w("flow.input.weight").T + self.w("flow.input.bias")
        sy = silu(y)
        for k in range(f["depth"]):
            b = f"flow.res.{k}."
            ada = sy @ self.w(b + "ada.weight").T + self.w(b + "ada.bias")
            shift, scale, gate = np.split(ada, 3)
            h = layer_norm(x, self.w(b + "norm.weight"), self.w(b + "norm.bias"), eps)
            h = h * (1 + scale) + shift
            h = silu(h @ self.w(b + "mlp_in.weight").T + self.w(b + "mlp_in.bias"))
            h = h @ self.w(b + "mlp_out.weight").T + self.w(b + "mlp_out.bias")
            x = x + gate * h
        shift, scale = np.split(sy @ self.w("flow.final.ada.weight").T
                                + self.w("flow.final.ada.bias"), 2)
        h = layer_norm(x, None, None, eps) * (1 + scale) + shift
        return h @ self.w("flow.final.out.weight").T + self.w("flow.final.out.bias")

    def flow_head(self, c: np.ndarray, eps: Optional[np.ndarray], temperature: float,
                  steps: Optional[int] = None) -> np.ndarray:
        """A frame's latent [L] from its conditioning c and standard-normal eps [L] (None or
        temperature 0: no noise). x0 = sqrt(temperature) * eps, then by flow type:
        lsd: `steps` Euler steps x += v(c, s_i, t_i, x) / n, s_i = i/n, t_i = (i+1)/n;
        flow_matching: x += v(c, i/n, x) / n; drifting: v(c, x0); pointwise: x0 + v(c, x0)."""
        L = self.config["latent_dim"]
        n = steps or self.config["lsd_decode_steps"]
        x = np.zeros(L, self.dtype)
        if eps is not None and temperature > 0:
            x = math.sqrt(temperature) * np.asarray(eps, self.dtype)
        kind = self.config["flow"]["type"]
        if kind == "lsd":
            for i in range(n):
                x = x + self.flow_net(c, (i / n, (i + 1) / n), x) / n
        elif kind == "flow_matching":
            for i in range(n):
                x = x + self.flow_net(c, (i / n,), x) / n
        elif kind == "drifting":
            x = self.flow_net(c, (), x)
        else:
            x = x + self.flow_net(c, (), x)
        return x

    # -----------------------------------------------------------------------------------------
    # The codec
    # -----------------------------------------------------------------------------------------

    def denormalize(self, latents: np.ndarray) -> np.ndarray:
        """Latents [T, L] in the backbone's space -> Mimi's: * latent_std + latent_mean."""
        return np.asarray(latents, self.dtype) * self.w("lm.latent_std") + self.w("lm.latent_mean")

    def mimi_decode(self, latents: np.ndarray) -> np.ndarray:
        """De-normalized latents [T, L] -> audio [channels, T * frame_size] (no fade-in)."""
        return mimi_decode(np.asarray(latents, self.dtype), self.w, self.config["mimi"])

    # -----------------------------------------------------------------------------------------
    # End to end
    # -----------------------------------------------------------------------------------------

    def frames_cap(self, token_count: int) -> int:
        """The package's length cap (TTSModel._estimate_max_gen_len)."""
        c = self.config
        seconds = token_count / c["tokens_per_second"] + c["gen_seconds_padding"]
        return math.ceil(seconds * c["frame_rate"])

    def generate_chunk(self, prepared: str, frames_after_eos: int, voice: Optional[np.ndarray],
                       temperature: float, eos_threshold: float, noise: np.ndarray,
                       noise_row: int = 0) -> PocketChunk:
        """One chunk: prompt, frame loop, decode. ``noise`` rows from ``noise_row`` on serve its
        frames (see the module docstring)."""
        tokens = self.tokenize(prepared)
        state = self.new_state()
        if voice is not None:
            self.prompt_kv(state, voice)
        self.prompt_kv(state, self.text_rows(tokens))
        cap = self.frames_cap(len(tokens))
        min_frames = self.config["min_frames_before_eos"]
        conds, logits, latents = [], [], []
        eos_frame, latent = None, None
        for g in range(cap):
            c = self.frame_step(state, latent)
            logit = self.eos_logit(c)
            if logit > eos_threshold and eos_frame is None and g >= min_frames:
                eos_frame = g
            if eos_frame is not None and g >= eos_frame + frames_after_eos:
                break
            eps = None
            if temperature > 0:
                if noise_row + g >= len(noise):
                    raise ShapeError(f"noise has {len(noise)} rows; frame {g} of this chunk "
                                     f"needs row {noise_row + g}")
                eps = noise[noise_row + g]
            latent = self.flow_head(c, eps, temperature)
            conds.append(c)
            logits.append(logit)
            latents.append(latent)
        L = self.config["latent_dim"]
        lat = np.array(latents, self.dtype).reshape(-1, L)
        audio = self.mimi_decode(self.denormalize(lat))[0] if len(lat) else np.zeros(0, self.dtype)
        fade = np.linspace(0, 1, int(self.config["sample_rate"] * FADE_IN_SECONDS))
        n = min(len(fade), len(audio))
        audio[:n] *= fade[:n]
        Z = self.config["lm"]["z_dim"] or self.config["lm"]["d_model"]
        return PocketChunk(prepared, tokens, np.array(conds, self.dtype).reshape(-1, Z),
                           np.array(logits), lat, eos_frame, cap, audio.astype(np.float32))

    def generate(self, text: str, voice: Optional[np.ndarray] = None,
                 temperature: Optional[float] = None, noise: Optional[np.ndarray] = None,
                 seed: int = 0, eos_threshold: Optional[float] = None,
                 frames_after_eos: Optional[int] = None,
                 max_tokens: Optional[int] = None) -> PocketResult:
        """Speak ``text`` (every chunk); see :meth:`synthesize`. Returns the audio and, per
        chunk, what each stage produced."""
        c = self.config
        temperature = c["temperature"] if temperature is None else float(temperature)
        eos_threshold = c["eos_threshold"] if eos_threshold is None else float(eos_threshold)
        plan = self.chunks(text, max_tokens)
        if noise is None:
            budget = sum(self.frames_cap(len(self.tokenize(p))) for p, _ in plan)
            noise = np.random.default_rng(seed).standard_normal((budget, c["latent_dim"]))
        noise = np.asarray(noise, dtype=np.float64)
        if temperature > 0 and (noise.ndim != 2 or noise.shape[1] != c["latent_dim"]):
            raise ShapeError(f"noise must be [n, {c['latent_dim']}], got {noise.shape}")
        if voice is not None:
            voice = np.asarray(voice, self.dtype)
            if voice.ndim != 2 or voice.shape[1] != c["lm"]["d_model"]:
                raise ShapeError(f"voice rows must be [n, {c['lm']['d_model']}] "
                                 f"(from encode_voice), got {voice.shape}")
        chunks, row = [], 0
        for prepared, after in plan:
            fae = after if frames_after_eos is None else int(frames_after_eos)
            ch = self.generate_chunk(prepared, fae, voice, temperature, eos_threshold, noise, row)
            row += len(ch.latents)
            chunks.append(ch)
        audio = np.concatenate([ch.audio for ch in chunks]) if chunks else np.zeros(0, np.float32)
        return PocketResult(audio.astype(np.float32), chunks)

    def synthesize(self, text: str, voice: Optional[np.ndarray] = None,
                   temperature: Optional[float] = None, noise: Optional[np.ndarray] = None,
                   seed: int = 0, eos_threshold: Optional[float] = None,
                   frames_after_eos: Optional[int] = None) -> np.ndarray:
        """Audio (float32, mono, the model's sample rate) for ``text``.

        voice: rows from :meth:`encode_voice` (None: no voice prompt, as the package with an
        empty state). temperature: default pocket.temperature; 0 is deterministic. noise:
        standard-normal rows (see the module docstring); None draws them from
        numpy.random.default_rng(seed). eos_threshold, frames_after_eos: default from the file
        (frames after EOS: the package's guess from the word count when the file has none)."""
        return self.generate(text, voice, temperature, noise, seed, eos_threshold,
                             frames_after_eos).audio
