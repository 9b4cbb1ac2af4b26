"""Kokoro (and Kitten TTS, the same design at other widths): text to 24 kHz speech.

::

    from dasllama.kokoro import KokoroTTS
    tts = KokoroTTS("kokoro")                          # a pulled model, or a converted .gguf
    audio, sr = tts.speak("Hello world.", voice="jf_alpha", speed=1.0)
    for piece in tts.stream(long_text, voice="af_bella(2)+af_sky(1)"):
        play(piece)                                    # one chunk's audio as soon as it is done
    tts.stats["words"]                                 # [WordTime(word, start, end), ...]

The text goes through dasllama.text (normalization, espeak-ng phonemes, chunks under 510
phonemes, the voice row per chunk); the C++ chain (csrc/tts/kokoro) turns each chunk's ids,
style row and speed into audio and the frames per phoneme it predicted, from which the word
timestamps come (dasllama.text.words). Voices: see dasllama.kokoro_voices.

A model name or folder (``dasllama pull kokoro``: the ONNX file, its voices and vocabulary)
is converted once into the cache; a .gguf written by ``dasllama convert kokoro`` is read as it
is. A KokoroTTS object is not thread-safe: use one per thread.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterator, Optional, Union

import numpy as np

from . import _core, gguf, models
from .errors import DasllamaError, TTSInputError
from .kokoro_voices import Voice, resolve_voice

__all__ = ["KokoroTTS", "SPEED_RANGE", "FRAME_SAMPLES", "resolve_model", "is_kokoro"]

SPEED_RANGE = (0.25, 4.0)    # outside it the predicted durations collapse to 1 or explode
FRAME_SAMPLES = 600          # samples per predicted duration frame (hop 300, upsampled x2)
# A text of several sentences or chunks starts with a chunk of at most this many phonemes
# (dasllama.text.plan's first_limit rule: whole sentences, else a clause, else words; about
# 1.5 s of speech), so a stream's first audio waits for a phrase's synthesis, not a sentence's.
FIRST_CHUNK_PHONEMES = 25


def resolve_model(name_or_path: Union[str, os.PathLike]) -> Path:
    """The GGUF of a Kokoro model: a .gguf as it is; a model folder or packaged name
    converted once into the cache."""
    from .convert.kokoro import convert_kokoro

    found = Path(name_or_path) if os.path.isdir(name_or_path) else \
        models.find_or_pull(name_or_path)
    if found.is_file():
        return found
    onnx = sorted(found.glob("*.onnx"))
    voices = sorted(found.glob("voices*.npz")) + sorted(found.glob("voices*.bin"))
    if not onnx or not voices:
        raise TTSInputError(f"{found}: a Kokoro model folder holds an .onnx graph and a "
                            "voices .npz/.bin pack (dasllama pull kokoro)")
    target = models.converted_path(found)
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        convert_kokoro(onnx[0], voices[0], target)
    return target


def is_kokoro(name_or_path: Union[str, os.PathLike]) -> bool:
    """Whether a model name or path is a Kokoro/Kitten model (a folder with an .onnx graph, or
    a GGUF of architecture kokoro); False for anything else, including what cannot be found."""
    try:
        found = Path(name_or_path) if os.path.isdir(name_or_path) else \
            models.find(name_or_path)
    except (DasllamaError, OSError):   # not found: not ours to judge here
        return False
    if found.is_dir():
        return any(found.glob("*.onnx"))
    if found.suffix.lower() != ".gguf":
        return False
    try:
        with gguf.open(found) as f:
            return f.architecture == "kokoro"
    except (DasllamaError, OSError):   # unreadable: the caller's loader reports it
        return False


class KokoroTTS:
    """A Kokoro or Kitten model on the CPU, or with its decoder and generator on a GPU.

    model: a .gguf from ``dasllama convert kokoro``, a model folder, or a packaged name.
    device: "cpu", or "vulkan" / "vulkan:N" / "vulkan:NAME" / "metal": the decoder and generator
    run there (the vocoder seat: ``stats["seats"]``), the predictor on the CPU; a call the seat
    declines runs on the CPU. n_threads: 0 uses the physical cores. language: the espeak-ng voice for text
    ("en-us" or "en-gb")."""

    def __init__(self, model: Union[str, os.PathLike], device: Optional[str] = "cpu",
                 n_threads: int = 0, language: str = "en-us", *, _chain=None):
        device = "cpu" if device is None else str(device)
        if device != "cpu" and not device.startswith(("vulkan", "metal")):
            raise TTSInputError(f"device {device!r}: Kokoro runs on 'cpu' or a GPU "
                                "('vulkan', 'vulkan:N', 'vulkan:NAME', 'metal')")
        if not hasattr(_core, "KokoroModel") and _chain is None:
            raise TTSInputError("this build of dasllama has no Kokoro chain")
        self.path = resolve_model(model)
        with gguf.open(self.path) as f:
            meta = f.metadata
            if meta.get("general.architecture") != "kokoro":
                raise TTSInputError(f"{self.path}: general.architecture is "
                                    f"{meta.get('general.architecture')!r}, not 'kokoro'")
            self.vocab = dict(zip(meta["kokoro.vocab.symbols"], meta["kokoro.vocab.ids"]))
            self.sample_rate = int(meta["kokoro.sample_rate"])
            width = int(sum(meta["kokoro.style_split"]))
            self._packs = {}
            for n in meta["kokoro.voices"]:
                pack = np.asarray(f.tensor(f"voice.{n}"), np.float32)
                if pack.ndim == 3 and pack.shape[1] == 1:
                    pack = pack[:, 0, :]
                if pack.ndim != 2 or pack.shape[1] != width:
                    raise TTSInputError(f"{self.path}: voice.{n} has shape {pack.shape}; the "
                                        f"model's style rows are {width} wide")
                self._packs[n] = pack
        self.language = language
        from .text.phonemize import EspeakPhonemizer

        self._phonemizer = EspeakPhonemizer(language, self.vocab)
        if _chain is not None:
            self.model = _chain
        elif device == "cpu":
            self.model = _core.KokoroModel(str(self.path), int(n_threads))
        else:   # the decoder and generator on the GPU (the vocoder seat), the predictor here
            self.model = _core.KokoroModel(str(self.path), int(n_threads), device)
        self.device = device
        self.stats: dict = {}

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        close = getattr(self.model, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> "KokoroTTS":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ voices
    @property
    def voices(self) -> list:
        """The voice packs by name (blends and custom styles need no registration)."""
        return sorted(self._packs)

    def voice_pack(self, voice: Voice) -> np.ndarray:
        """The (510, 256) pack a voice stands for (dasllama.kokoro_voices); TTSInputError
        naming the known voices for one it does not know."""
        return resolve_voice(voice, self._packs)

    def register_voice(self, name: str, style: Union[Voice, os.PathLike]) -> np.ndarray:
        """Store a blend, a style array or a .npy file of one under ``name`` for later calls;
        returns its pack."""
        if not isinstance(name, str) or not name or "+" in name or "(" in name:
            raise TTSInputError(f"voice name {name!r}: a non-empty name without '+' or '('")
        if isinstance(style, (str, os.PathLike)) and os.fspath(style).endswith(".npy"):
            try:
                style = np.load(os.fspath(style), allow_pickle=False)
            except (OSError, ValueError) as e:
                raise TTSInputError(f"{os.fspath(style)}: not a style array ({e})") from None
        pack = resolve_voice(style, self._packs)
        self._packs[name] = pack
        return pack

    # ------------------------------------------------------------------ speaking
    def plan(self, text: str, phonemes: bool = False) -> list:
        """The chunks ``text`` is spoken in (dasllama.text.plan)."""
        from .text import plan

        return plan(text, self.vocab, language=self.language, phonemes=phonemes,
                    first_limit=FIRST_CHUNK_PHONEMES)

    def stream(self, text: str, voice: Optional[Voice] = None, speed: float = 1.0, *,
               phonemes: bool = False, word_timestamps: bool = True) -> Iterator[np.ndarray]:
        """Yields each chunk's float32 audio (mono, ``sample_rate``) as it is decoded.

        voice: a pack's name, a blend ("a(2)+b(1)" or [(name, weight), ...]) or a style
        array (None: the first of :attr:`voices`). speed in [0.25, 4] (above 1 faster). phonemes: ``text`` is a phoneme string.
        ``stats`` holds audio_seconds, wall_seconds, first_audio_ms, chunks, durations (frames
        per id, per chunk) and, with word_timestamps, ``words`` ([WordTime]) when the text is
        done."""
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or \
                not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
            raise TTSInputError(f"speed {speed!r} is outside [{SPEED_RANGE[0]}, "
                                f"{SPEED_RANGE[1]}]")
        pack = self.voice_pack(self.voices[0] if voice is None else voice)
        chunks = self.plan(text, phonemes)
        start = time.perf_counter()
        stats = dict(audio_seconds=0.0, wall_seconds=0.0, first_audio_ms=None,
                     chunks=len(chunks), durations=[])
        self.stats = stats
        samples = 0
        for c in chunks:
            out = self.model.synthesize(c.ids, pack[c.style_row], float(speed))
            audio = np.asarray(out["audio"], np.float32)
            stats["durations"].append(np.asarray(out["durations"], np.int64))
            samples += len(audio)
            if stats["first_audio_ms"] is None:
                stats["first_audio_ms"] = 1000.0 * (time.perf_counter() - start)
            stats.update(audio_seconds=samples / self.sample_rate,
                         wall_seconds=time.perf_counter() - start)
            yield audio
        if word_timestamps and not phonemes:
            from .text.words import align_words, word_phonemes

            stats["words"] = align_words(word_phonemes(text, self._phonemizer),
                                         [c.phonemes for c in chunks], stats["durations"],
                                         FRAME_SAMPLES / self.sample_rate)
        stats["wall_seconds"] = time.perf_counter() - start
        seat_stats = getattr(self.model, "seat_stats", None)
        if seat_stats is not None and self.device != "cpu":
            stats["seats"] = seat_stats()

    def speak(self, text: str, voice: Optional[Voice] = None, speed: float = 1.0,
              **options) -> tuple:
        """(audio float32 mono, sample rate) for ``text``; options as :meth:`stream`."""
        pieces = list(self.stream(text, voice, speed, **options))
        return np.concatenate(pieces).astype(np.float32, copy=False), self.sample_rate

    def save_wav(self, path: Union[str, os.PathLike], audio: np.ndarray,
                 sample_rate: Optional[int] = None) -> Path:
        """Writes mono audio as a 16-bit PCM .wav file."""
        from .audio import write

        write(path, audio, int(sample_rate or self.sample_rate))
        return Path(path)
