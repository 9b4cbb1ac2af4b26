"""Text to speech with Pocket TTS (Kyutai): the TTS class and the ``dasllama speak`` command.

``TTS(...)`` on a Kokoro or Kitten model opens it as :class:`dasllama.kokoro.KokoroTTS`.

::

    import dasllama
    with dasllama.TTS("pocket.gguf", device="cpu") as tts:
        audio, sr = tts.speak("Hello world.", temperature=0.3, seed=0)   # float32, mono
        tts.save_wav("hello.wav", audio)
        for piece in tts.stream("A longer text, spoken as it is generated."):
            play(piece)                                                  # float32 chunks
        print(tts.stats)    # audio_seconds, wall_seconds, first_audio_ms, stages, ...

The model is a GGUF written by :mod:`dasllama.convert.pocket`. The C++ core runs the three
stages (the prompt through the FlowLM backbone, the frame loop of backbone step, EOS head and
flow head, and the streaming Mimi decoder); see csrc/tts/pocket/pocket_model.h.

Text handling is in C++ too (csrc/tts/pocket/text.h, tokenizer.h): the text is normalized and
cut into chunks of at most ``pocket.chunk_tokens`` tokens as the pocket-tts package does, and
tokenized with the tokenizer stored in the file (a ``tokenizers`` JSON or a SentencePiece
model, read without either package). The core takes the token ids of one chunk at a time.

Noise: each frame's latent starts from sqrt(temperature) times a row of standard normals
drawn in C++ by a generator seeded with ``seed`` (xoshiro256** and Box-Muller, specified in
csrc/tts/pocket/noise.h), so a fixed seed gives the same audio on every machine. seed None
draws a fresh seed (``stats["seed"]`` says which). Temperature 0 uses no noise and is
deterministic.

A TTS object is not thread-safe: use one per thread. Long calls release the GIL; a stream
returns to Python after every few frames, so Ctrl-C stops it promptly.
"""

from __future__ import annotations

import os
import secrets
import time
import wave
import zipfile
from pathlib import Path
from typing import Iterator, Optional, Union

import numpy as np

from . import _core, gguf, models
from .errors import TTSInputError

__all__ = ["TTS", "TTSInputError", "add_speak_parser", "read_voice_state", "DEVICES"]

# Device kinds this release runs Pocket TTS on ("vulkan:N" picks one; metal on Apple platforms).
DEVICES = ("cpu", "vulkan", "metal")
_FIRST_STEP_FRAMES = 1       # a stream's first piece: one frame (80 ms), for a quick start
_STEP_FRAMES = 6             # later pieces: frames decoded per call (about half a second)
_VOICE_FORMAT = "dasllama-pocket-voice"
_VOICE_VERSION = 2           # 2: the model's fingerprint and geometry are checked
VOICE_FOLDER = "voices"      # voice states by name, beside the model file


class TTS:
    """A Pocket TTS model on the CPU or a GPU.

    model: a path to a Pocket TTS GGUF (or a name :func:`dasllama.models.find` knows).
    device: "cpu", "vulkan" (the best GPU), "vulkan:N" or "vulkan:NAME" (None:
    ``$DASLLAMA_DEVICE``, else "cpu"). On a GPU the prompt, frames and codec stages are seats
    that fall back to the CPU when they decline (``stats["seats"]`` counts both;
    ``DASLLAMA_SEAT_FRAMES=0`` and the like turn one off). n_threads: 0 uses the physical
    cores. precision: "f32" (float32 activations everywhere, the default) or "fast" (8-bit
    activations in the backbone's quantized matrices; the CPU chain's)."""

    def __new__(cls, model: Union[str, os.PathLike] = None, *args, **kwargs):
        # Kokoro and Kitten are phoneme models with a chain of their own: TTS(...) opens them
        # as dasllama.kokoro.KokoroTTS, which has the same speak/stream/save_wav/voices.
        if cls is TTS and model is not None:
            from .kokoro import KokoroTTS, is_kokoro

            if is_kokoro(model):
                if len(args) > 2 or kwargs.pop("precision", "f32") != "f32":
                    raise TTSInputError("Kokoro runs the precision of its file; precision "
                                        "is for Pocket TTS")
                return KokoroTTS(model, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, model: Union[str, os.PathLike], device: Optional[str] = "cpu",
                 n_threads: int = 0, precision: str = "f32"):
        from .gpu import resolve_device

        device = resolve_device(device)
        if device.split(":", 1)[0] not in DEVICES:
            raise TTSInputError(f"device {device!r}: Pocket TTS runs on {', '.join(DEVICES)}")
        from .pocket_config import read_config

        self.path = models.find(model)
        with gguf.open(self.path) as f:
            self.config = read_config(f.metadata, str(self.path))
        self._tokenizer = _core.PocketTokenizer.from_gguf(str(self.path))
        t = self.config["text"]
        self._rules = _core.PocketTextRules(
            pad_with_spaces=t["pad_with_spaces"], remove_semicolons=t["remove_semicolons"],
            append_terminal_punctuation=t["append_terminal_punctuation"],
            capitalize_first_letter=t["capitalize_first_letter"],
            replace=dict(zip(t["replace_from"], t["replace_to"])))
        self._unk = self._tokenizer.unk_id
        self.model = _core.PocketModel(str(self.path), n_threads, device)
        self.model.set_precision(precision)
        self.device = device
        self.sample_rate = int(self.config["sample_rate"])
        self.stats: dict = {}
        self._voice_rows: dict[str, np.ndarray] = {}

    # -----------------------------------------------------------------------------------------
    # Lifetime
    # -----------------------------------------------------------------------------------------

    def close(self) -> None:
        """Releases the weights and the file mapping; later calls raise."""
        self.model.close()

    def __enter__(self) -> "TTS":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -----------------------------------------------------------------------------------------
    # Text
    # -----------------------------------------------------------------------------------------

    def _alphabet(self) -> str:
        """The characters the tokenizer has single tokens for (for error messages)."""
        chars = set()
        for i in range(self._tokenizer.n_vocab):
            chars.update(self._tokenizer.piece(i).replace("\u2581", " "))
        return "".join(sorted(c for c in chars if c.isprintable()))

    def plan(self, text: str) -> list[tuple[str, list[int], int]]:
        """(prepared chunk text, its token ids, frames after EOS) for each chunk of ``text``.
        Raises TTSInputError for empty text or characters the tokenizer cannot encode."""
        if not isinstance(text, str):
            raise TTSInputError(f"text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise TTSInputError("text is empty: pass at least one word")
        if self._unk is not None:
            bad = sorted({c for c in text if not c.isspace()
                          and self._unk in self._tokenizer.encode(c)})
            if bad:
                shown = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in bad[:20])
                raise TTSInputError(f"text has characters the model's tokenizer cannot encode: "
                                    f"{shown}; it accepts: {self._alphabet()!r}")
        fixed = int(self.config["frames_after_eos"])
        plan = _core.pocket_plan_text(text, self._tokenizer, self._rules,
                                      int(self.config["chunk_tokens"]))
        return [(prepared, ids, fixed if fixed >= 0 else guess + 2)
                for prepared, ids, guess in plan]

    # -----------------------------------------------------------------------------------------
    # Voices
    # -----------------------------------------------------------------------------------------

    @property
    def voices(self) -> list[str]:
        """Names of the voices registered on this object, and of the voice states in the
        ``voices/`` folder beside the model file (``dasllama pull pocket`` puts its catalog
        there); those register on first use."""
        return sorted(set(self.model.voices) | set(self._voice_files()))

    def _voice_files(self) -> dict:
        folder = self.path.parent / VOICE_FOLDER
        if not folder.is_dir():
            return {}
        return {p.stem: p for p in folder.glob("*.safetensors") if p.is_file()}

    def register_voice(self, name: str, wav, sample_rate: Optional[int] = None) -> np.ndarray:
        """Registers voice ``name`` from audio: a 16-bit PCM .wav path, or float samples ([n],
        or [channels, n], averaged to mono) at ``sample_rate`` (default: the model's). Audio
        at another rate is resampled with scipy's resample_poly, as the package does. The C++
        core ends it on a pause, encodes it with Mimi and runs the speaker-projected rows
        through the backbone into the voice's own K/V state. Returns the rows."""
        if not self.config["voice_cloning"]:
            raise TTSInputError(f"{self.path}: this model has no voice encoder "
                                f"(pocket.voice_cloning is false); use a voice file "
                                f"(load_voice) or None")
        if isinstance(wav, (str, os.PathLike)):
            from .audio import read
            wav, sample_rate = read(wav)
        a = np.asarray(wav, dtype=np.float64)
        if a.ndim == 2:
            a = a.mean(axis=0)
        if a.ndim != 1 or a.size == 0:
            raise TTSInputError(f"voice audio must be [n] or [channels, n] samples, got "
                                f"shape {np.shape(wav)}")
        sr = self.sample_rate
        if sample_rate is not None and int(sample_rate) != sr:
            import math

            from scipy.signal import resample_poly
            g = math.gcd(int(sample_rate), sr)
            a = resample_poly(a, sr // g, int(sample_rate) // g)
        rows = self.model.encode_voice(np.ascontiguousarray(a, dtype=np.float32))
        self.add_voice_rows(name, rows)
        return rows

    def add_voice_rows(self, name: str, rows: np.ndarray) -> None:
        """Registers a voice from its prompt rows [n, d_model] (bos_voice and the
        speaker-projected Mimi latents, as register_voice or a voice file gives)."""
        if not isinstance(name, str) or not name:
            raise TTSInputError(f"a voice needs a non-empty name, got {name!r}")
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        d = int(self.config["lm"]["d_model"])
        if rows.ndim != 2 or rows.shape[1] != d or len(rows) == 0:
            raise TTSInputError(f"voice rows must be [n, {d}], got {rows.shape}")
        self.model.add_voice(name, rows)
        self._voice_rows[name] = rows

    def model_fingerprint(self) -> str:
        """What a voice file is checked against: a sha256 over the backbone's float32 vectors
        (norms, bos rows, latent statistics), which every lane of one model stores alike and
        another training run does not share."""
        import hashlib

        h = hashlib.sha256()
        with gguf.open(self.path) as f:
            for name in sorted(f.tensors):
                info = f.tensors[name]
                if name.startswith("lm.") and info.type == "F32" and len(info.shape) == 1:
                    h.update(name.encode() + b"\0" + np.ascontiguousarray(f.raw(name)).tobytes())
        return h.hexdigest()

    def _voice_geometry(self) -> dict:
        c = self.config
        return dict(d_model=int(c["lm"]["d_model"]), sample_rate=int(c["sample_rate"]),
                    frame_size=int(c["frame_size"]), latent_dim=int(c["latent_dim"]))

    def save_voice(self, name: str, path: Union[str, os.PathLike]) -> Path:
        """Writes a registered voice's rows to a voice file (.npz: the rows, the format's
        name and version, the model's fingerprint and its geometry: d_model, sample rate,
        codec frame size and latent width). The file loads into this model, in any lane,
        with no voice encoder."""
        self._check_voice(name)
        if name not in self._voice_rows:
            raise TTSInputError(f"voice {name!r} was registered from a voice state, not from "
                                f"prompt rows: copy its .safetensors file instead")
        path = Path(path)
        with open(path, "wb") as f:  # np.savez would append .npz to a name without it
            np.savez(f, format=np.array(_VOICE_FORMAT), version=np.array(_VOICE_VERSION),
                     model=np.array(self.model_fingerprint()),
                     **{k: np.array(v) for k, v in self._voice_geometry().items()},
                     rows=self._voice_rows[name])
        return path

    def load_voice(self, name: str, path: Union[str, os.PathLike]) -> None:
        """Registers voice ``name`` from a file written by :meth:`save_voice`, or from a
        voice state of the pocket-tts package (``.safetensors``: every layer's K/V rows, as
        its ``export-voice`` and its predefined voices store them; no voice encoder needed).
        A file that does not fit leaves the voices as they were."""
        if str(path).lower().endswith(".safetensors"):
            keys, values = read_voice_state(path, self.config["lm"])
            if not isinstance(name, str) or not name:
                raise TTSInputError(f"a voice needs a non-empty name, got {name!r}")
            self.model.add_voice_state(name, keys, values)
            self._voice_rows.pop(name, None)
            return
        try:
            with np.load(path, allow_pickle=False) as z:
                fmt, version = str(z["format"]), int(z["version"])
                if fmt != _VOICE_FORMAT or version != _VOICE_VERSION:
                    raise TTSInputError(
                        f"{path}: voice file format {fmt!r} version {version}; this release "
                        f"reads {_VOICE_FORMAT!r} version {_VOICE_VERSION}")
                model, rows = str(z["model"]), np.asarray(z["rows"])
                geometry = {k: int(z[k]) for k in self._voice_geometry()}
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
            raise TTSInputError(f"{path}: not a dasllama voice file ({e})") from None
        for field, want in self._voice_geometry().items():
            if geometry[field] != want:
                raise TTSInputError(f"{path}: a voice for a model of {field} {geometry[field]}, "
                                    f"this one has {want}")
        if model != self.model_fingerprint():
            raise TTSInputError(f"{path}: a voice for another model (fingerprint {model[:12]}, "
                                f"this one {self.model_fingerprint()[:12]}): its rows only "
                                f"make sense to the model that encoded them")
        if rows.dtype.kind != "f" or not np.all(np.isfinite(rows)):
            raise TTSInputError(f"{path}: the voice rows are not finite float values")
        d = geometry["d_model"]
        if rows.ndim != 2 or rows.shape[1] != d or len(rows) == 0:
            raise TTSInputError(f"{path}: voice rows of shape {list(rows.shape)}, expected "
                                f"[n >= 1, {d}]")
        self.add_voice_rows(name, rows)

    def _check_voice(self, voice) -> str:
        """The registered voice's name ('' for None). A path to a .wav or a voice file is
        registered under its path on first use."""
        if voice is None:
            return ""
        if isinstance(voice, os.PathLike):
            voice = os.fspath(voice)
        if isinstance(voice, str) and voice not in self.model.voices:
            stored = self._voice_files().get(voice)
            if stored is not None and not os.path.isfile(voice):
                self.load_voice(voice, stored)
        if isinstance(voice, str) and voice not in self.model.voices and os.path.isfile(voice):
            if voice.lower().endswith(".wav"):
                self.register_voice(voice, voice)
            else:
                self.load_voice(voice, voice)
        if not isinstance(voice, str) or voice not in self.model.voices:
            known = ", ".join(repr(v) for v in self.voices) or "none registered"
            raise TTSInputError(f"unknown voice {voice!r}; known voices: {known}; or a path "
                                f"to a .wav or a voice file, or None for no voice prompt")
        return voice

    # -----------------------------------------------------------------------------------------
    # Speaking
    # -----------------------------------------------------------------------------------------

    def stream(self, text: str, voice: Optional[str] = None, temperature: float = 0.3,
               seed: Optional[int] = None, *, eos_threshold: Optional[float] = None,
               frames_after_eos: Optional[int] = None, lsd_steps: int = 0,
               noise: Optional[np.ndarray] = None, max_frames: Optional[int] = None,
               eos: bool = True) -> Iterator[np.ndarray]:
        """Yields float32 audio pieces (mono, ``sample_rate``) as the frames are generated.

        voice: a registered voice's name, a path to a .wav or a voice file (registered under
        that path on first use), or None. temperature >= 0 (0: deterministic). seed:
        the noise generator's seed (None: a fresh one). eos_threshold, frames_after_eos: the
        file's defaults (frames after EOS: the package's guess from the word count) unless
        given. noise: standard-normal rows [n, latent_dim], one per generated frame over all
        chunks, instead of the generator (for comparing with the reference chain).
        max_frames: stop after that many frames over all chunks (None: no limit but the
        model's length cap). eos False: the EOS head never ends a chunk (the threshold
        becomes +inf), so a chunk runs to max_frames or to its length cap; with both, a
        one-chunk text gives exactly max_frames frames as long as its cap allows them
        (``model.frames_cap(n_tokens)``), which is how benchmarks pin the work.

        ``stats`` describes the call as it goes: audio_seconds, wall_seconds, first_audio_ms,
        frames, and ``stages``: the milliseconds the core spent per stage (prompt_ms,
        backbone_ms, flow_ms, mimi_ms; frames_gpu_ms on a GPU) with prompt_rows and frames;
        ``first_audio_stages`` is the same up to the first piece."""
        temperature = float(temperature)
        if not temperature >= 0:
            raise TTSInputError(f"temperature must be >= 0, got {temperature}")
        if max_frames is not None and (isinstance(max_frames, bool) or int(max_frames) < 1):
            raise TTSInputError(f"max_frames must be a positive frame count or None, "
                                f"got {max_frames!r}")
        voice_name = self._check_voice(voice)
        plan = self.plan(text)
        seed = secrets.randbits(63) if seed is None else int(seed)
        if noise is not None:
            self.model.set_noise(np.ascontiguousarray(noise, dtype=np.float32))
        else:
            self.model.seed_noise(seed)
        threshold = self.config["eos_threshold"] if eos_threshold is None else eos_threshold
        if not eos:
            threshold = float("inf")   # no logit exceeds it: only the frame limits end a chunk
        left = None if max_frames is None else int(max_frames)
        start = time.perf_counter()
        stages0 = self.model.stage_times()
        stats = dict(audio_seconds=0.0, wall_seconds=0.0, first_audio_ms=None, frames=0,
                     chunks=len(plan), seed=seed, chunk_frames=[])
        self.stats = stats
        samples = 0
        for prepared, ids, after in plan:
            if left == 0:
                break
            self.model.begin_chunk(ids, voice_name, temperature, float(threshold),
                                   int(after if frames_after_eos is None else frames_after_eos),
                                   int(lsd_steps))
            step = _FIRST_STEP_FRAMES if samples == 0 else _STEP_FRAMES
            frames = 0
            while left != 0:
                audio, n = self.model.step(step if left is None else min(step, left))
                if n == 0:
                    break
                frames += n
                if left is not None:
                    left -= n
                step = _STEP_FRAMES
                samples += len(audio)
                if stats["first_audio_ms"] is None:
                    stats["first_audio_ms"] = 1000.0 * (time.perf_counter() - start)
                    stats["first_audio_stages"] = _stage_share(self.model, stages0)
                stats.update(audio_seconds=samples / self.sample_rate,
                             wall_seconds=time.perf_counter() - start,
                             frames=stats["frames"] + n)
                yield audio
            stats["chunk_frames"].append(frames)
        stats["wall_seconds"] = time.perf_counter() - start
        stats["stages"] = _stage_share(self.model, stages0)
        if self.device != "cpu":
            # {"prompt"|"frames"|"codec": {"served", "declined": {reason: n}, "dispatches",
            # "uploads", "replays"}}, counted since the model was opened
            stats["seats"] = self.model.seat_stats()

    def speak(self, text: str, voice: Optional[str] = None, temperature: float = 0.3,
              seed: Optional[int] = None, **options) -> tuple[np.ndarray, int]:
        """(audio float32 mono, sample rate) for ``text``; options as :meth:`stream`."""
        pieces = list(self.stream(text, voice, temperature, seed, **options))
        audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        return audio.astype(np.float32, copy=False), self.sample_rate

    def save_wav(self, path: Union[str, os.PathLike], audio: np.ndarray,
                 sample_rate: Optional[int] = None) -> Path:
        """Writes mono audio (float in [-1, 1], clipped) as a 16-bit PCM .wav file."""
        a = np.clip(np.asarray(audio, dtype=np.float64).reshape(-1), -1.0, 1.0)
        pcm = np.round(a * 32767.0).astype("<i2")
        with wave.open(os.fspath(path), "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(int(sample_rate or self.sample_rate))
            f.writeframes(pcm.tobytes())
        return Path(path)


def read_voice_state(path: Union[str, os.PathLike], lm: dict) -> tuple:
    """(keys, values), float32 [num_layers, n, kv_heads, head_dim] each, from a pocket-tts
    voice state file (``transformer.layers.I.self_attn/cache``: [2, 1, T, kv_heads, head_dim],
    keys rotated; ``.../offset`` or the older ``.../current_end`` says how many rows are
    filled). lm: the model's ``config["lm"]``. TTSInputError names the file and the tensor
    that does not fit."""
    from .convert import ConvertError, read_safetensors

    try:
        tensors = read_safetensors(path)
    except (ConvertError, OSError) as e:
        raise TTSInputError(f"{path}: not a voice state file ({e})") from None
    layers, heads, dim = int(lm["num_layers"]), int(lm["num_kv_heads"]), int(lm["head_dim"])
    keys, values, filled = [], [], None
    for i in range(layers):
        prefix = f"transformer.layers.{i}.self_attn/"
        cache = tensors.get(prefix + "cache")
        if cache is None:
            raise TTSInputError(f"{path}: no tensor {prefix}cache (a voice state for a model of "
                                f"{layers} layers)")
        if cache.ndim != 5 or cache.shape[:2] != (2, 1) or cache.shape[3:] != (heads, dim):
            raise TTSInputError(f"{path}: {prefix}cache has shape {list(cache.shape)}, expected "
                                f"[2, 1, T, {heads}, {dim}]")
        if prefix + "offset" in tensors:
            n = int(np.asarray(tensors[prefix + "offset"]).reshape(-1)[0])
        elif prefix + "current_end" in tensors:
            n = int(tensors[prefix + "current_end"].shape[0])
        else:
            n = int(cache.shape[2])
        if not 0 < n <= cache.shape[2] or (filled is not None and n != filled):
            raise TTSInputError(f"{path}: {prefix} fills {n} rows of {cache.shape[2]}"
                                + (f", layer 0 fills {filled}" if filled is not None else ""))
        filled = n
        block = np.asarray(cache[:, 0, :n], dtype=np.float32)
        if not np.all(np.isfinite(block)):
            raise TTSInputError(f"{path}: {prefix}cache holds NaN or infinite values")
        keys.append(block[0])
        values.append(block[1])
    def layer_of(key: str) -> int:
        index = key[len("transformer.layers."):].split(".", 1)[0]
        return int(index) if index.isdigit() else -1

    extra = sorted(k for k in tensors if k.startswith("transformer.layers.") and layer_of(k) >= layers)
    if extra:
        raise TTSInputError(f"{path}: a voice state for a deeper model ({extra[0]}); this one "
                            f"has {layers} layers")
    return np.ascontiguousarray(np.stack(keys)), np.ascontiguousarray(np.stack(values))


def _stage_share(model, before: dict) -> dict:
    """The stage times (ms) and counts the core added since ``before`` (a stage_times()
    reading): prompt_ms, backbone_ms, flow_ms, frames_gpu_ms (backbone and flow head together
    on a GPU), mimi_ms, prompt_rows, frames."""
    now = model.stage_times()
    return {k: now[k] - before[k] for k in now}


# =============================================================================================
# The command line: dasllama speak
# =============================================================================================

def add_speak_parser(sub) -> None:
    """Adds ``dasllama speak -m MODEL "text" -o out.wav`` to an argparse subparsers object."""
    p = sub.add_parser("speak", help="speak text with Pocket TTS or Kokoro into a .wav file")
    p.add_argument("text", help="the text ('-' reads stdin)")
    p.add_argument("-m", "--model", required=True,
                   help="a Pocket TTS .gguf, or a Kokoro model (kokoro, a folder or a .gguf)")
    p.add_argument("-o", "--output", default="out.wav", help="the .wav to write (16-bit PCM)")
    p.add_argument("--voice", default=None,
                   help="Pocket: a .wav to clone the voice of, or a voice file "
                        "(TTS.save_voice). Kokoro: a voice pack's name or a blend such as "
                        "'af_bella(2)+af_sky(1)' (default: the first pack)")
    p.add_argument("--speed", type=float, default=1.0,
                   help="Kokoro's speaking speed in [0.25, 4] (default 1.0)")
    p.add_argument("--seed", type=int, default=None, help="Pocket's noise seed (default: random)")
    p.add_argument("--temperature", type=float, default=0.3,
                   help="Pocket's noise scale; 0 is deterministic")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: physical cores)")
    p.set_defaults(run=_cmd_speak)


def _cmd_speak(args) -> int:
    import sys

    from .kokoro import KokoroTTS

    text = sys.stdin.read() if args.text == "-" else args.text
    with TTS(args.model, n_threads=args.threads) as tts:
        if isinstance(tts, KokoroTTS):
            audio, sr = tts.speak(text, voice=args.voice, speed=args.speed)
            said = f"voice {args.voice or tts.voices[0]}"
        else:
            if args.speed != 1.0:
                raise TTSInputError(f"--speed {args.speed:g}: Pocket TTS speaks at its own "
                                    "pace (1.0 only)")
            audio, sr = tts.speak(text, voice=args.voice, temperature=args.temperature,
                                  seed=args.seed)
            said = f"seed {tts.stats['seed']}"
        path = tts.save_wav(args.output, audio, sr)
        s = tts.stats
        rtf = s["wall_seconds"] / s["audio_seconds"] if s["audio_seconds"] else float("nan")
        print(f"{path}: {s['audio_seconds']:.2f} s of audio in {s['wall_seconds']:.2f} s "
              f"(real-time factor {rtf:.3f}, first audio {s['first_audio_ms']:.0f} ms, "
              f"{said})", file=sys.stderr)
    return 0
