"""Speech to text: Whisper on dasllama's C++ core, with faster-whisper's names.

::

    from dasllama import ASR
    asr = ASR("whisper-tiny.en")                  # a packaged model, a .gguf or a CTranslate2 dir
    segments, info = asr.transcribe("talk.flac")  # a path, bytes, a file object or 16 kHz samples
    for s in segments:                            # decoded lazily, window by window
        print(f"[{s.start:.2f} -> {s.end:.2f}] {s.text}")

The C++ chain (csrc/asr/whisper) computes the log-mel spectrogram, encodes each 30 s window
and decodes it greedily under Whisper's logit rules. This module runs the window loop as
faster-whisper 1.2.1 does (``WhisperModel.generate_segments``): windows start at a seek frame;
a window's tokens are split into segments at consecutive timestamps; the next window starts at
the last complete segment's end (or after the whole window when the output ends on a lone
timestamp or has none); a window whose no-speech probability is above ``no_speech_threshold``
while its average log-probability is at most ``log_prob_threshold`` is skipped; the text of
earlier windows (up to 223 tokens) is the next window's prompt unless
``condition_on_previous_text`` is off.

What this version runs: greedy decoding (``beam_size=1``) or beam search (``beam_size`` > 1
with ``patience`` and ``length_penalty``, as CTranslate2 runs it) at temperature 0, and the
temperature fallback of faster-whisper 1.2.1 (``generate_with_fallback``): the temperatures are
tried in order; above 0, ``best_of`` candidates are sampled (beam size 1) and the best by
length-normalized log-probability is taken; a result is kept unless its compression ratio
(zlib) is above ``compression_ratio_threshold`` or its average log-probability is below
``log_prob_threshold`` (a window that looks silent, no-speech probability above
``no_speech_threshold`` with a low log-probability, is kept as it is); when every temperature
fails, the result with the best average log-probability among those under the compression
threshold (else among all) is kept, with the last temperature; a window decoded above
``prompt_reset_on_temperature`` resets the prompt of the next. Sampling is seeded (``seed``):
the same call gives the same text. Also with or without timestamps, ``initial_prompt``,
``prefix`` (forced as the first window's first outputs, after <|0.00|> when timestamps are on,
as CTranslate2 does), ``suppress_blank``, ``suppress_tokens``, ``max_initial_timestamp``, the
no-speech skip, and the VAD filter (``vad_filter=True``: Silero VAD's speech chunks,
:mod:`dasllama.vad`, are transcribed as one concatenated clip, the language detected on it,
and the segment times mapped back, as faster-whisper does), and word timestamps
(``word_timestamps=True``: each segment's ``words``, :class:`Word` items from the
cross-attention alignment, with faster-whisper's punctuation merging, duration clamps and seeking
to the last word's end; ``hallucination_silence_threshold`` skips silence before segments that
look hallucinated; :mod:`dasllama.asr_words`). A prefix with beams is not in it yet: asking for
it raises :class:`ASRError` saying so.

Multilingual models (whisper-base) start every window with <|startoftranscript|>, the
language's token and the task's (<|transcribe|> or <|translate|>: speech in any language to
English text). Without ``language`` the language is detected as faster-whisper 1.2.1 does it
(:meth:`ASR.detect_language`): the first 30 s of the log-mel (all its frames, padded to a
window) are encoded, the decoder takes one step on <|startoftranscript|>, and the softmax of its
logits over the language tokens alone gives ``info.all_language_probs`` (most probable first),
``info.language`` and ``info.language_probability``. ``language_detection_segments`` windows are
tried in turn until one's best language beats ``language_detection_threshold``; if none does,
the language that was best in most windows wins, with its highest probability.
``multilingual=True`` detects the language again on every window, and that window is decoded
in it. English-only models (whisper-tiny.en) know no language or task tokens: ``language`` must
be None or "en" and ``task`` "transcribe".

Long files run in bounded memory (:mod:`dasllama.asr_stream`): the audio is decoded and
resampled block by block, and the log-mel computed a 30 s stretch at a time as the windows
need it, in two passes over the stream (the clamp to the clip's maximum needs the maximum
first; a file is decoded twice, three times with the VAD filter). A 3-hour file takes a few
MB beyond the model, not its samples (a gigabyte) and its log-mel (350 MB).

A CTranslate2 directory is converted once to a GGUF in the cache (its name carries the
source's path, size and modification time), then read from there.

Thread-safety: an ASR may be shared by threads; a lock serializes its windows (each window's
encode and decode run as one step), so transcriptions take turns window by window. Use one ASR
per thread for parallel work. Several segment iterators of one ASR may be consumed in turns.
"""

from __future__ import annotations

import os
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core, asr_stream as _stream, asr_words as _words, audio as _audio, models
from .asr_words import Word
from .errors import DasllamaError

__all__ = ["ASR", "ASRError", "Segment", "Word", "TranscriptionInfo", "TranscriptionOptions",
           "compression_ratio", "decode_with_fallback", "DEFAULT_TEMPERATURES"]

SAMPLE_RATE = 16000
TIME_PRECISION = 0.02     # seconds a timestamp token stands for
INPUT_STRIDE = 2          # mel frames per encoder row (conv2's stride)
MAX_PROMPT_TOKENS = 223   # earlier text in a prompt: n_text_ctx // 2 - 1 tokens at most
TASKS = ("transcribe", "translate")
# The log-mel of digital silence, (log10(1e-10) + 4) / 4: faster-whisper's one feature frame
# of an empty clip (what it detects the language on when the VAD filter keeps nothing).
SILENT_MEL = -1.5
# compute_type -> the C++ lane: float32 linears, or Q8_0 weights with 8-bit activations.
_COMPUTE_TYPES = {"default": "f32", "auto": "f32", "float32": "f32", "f32": "f32",
                  "int8": "int8"}


class ASRError(DasllamaError, ValueError):
    """A transcription option or model that this version cannot use; the message names it."""


@dataclass
class Segment:
    """One transcribed segment (faster-whisper's fields)."""
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: List[int]
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: Optional[List[Word]] = None   # with word_timestamps=True
    temperature: Optional[float] = 0.0


# faster-whisper's default temperatures: 0 first, then sampling ever hotter on a fallback
DEFAULT_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


@dataclass
class TranscriptionOptions:
    beam_size: int = 1
    best_of: int = 5
    seed: int = 0
    patience: float = 1.0
    length_penalty: float = 1.0
    temperatures: Tuple[float, ...] = (0.0,)
    compression_ratio_threshold: Optional[float] = 2.4
    log_prob_threshold: Optional[float] = -1.0
    no_speech_threshold: Optional[float] = 0.6
    condition_on_previous_text: bool = True
    prompt_reset_on_temperature: float = 0.5
    initial_prompt: Optional[Union[str, Sequence[int]]] = None
    prefix: Optional[str] = None
    suppress_blank: bool = True
    suppress_tokens: Tuple[int, ...] = ()
    without_timestamps: bool = False
    max_initial_timestamp: float = 1.0
    multilingual: bool = False
    word_timestamps: bool = False
    prepend_punctuations: str = _words.DEFAULT_PREPEND_PUNCTUATIONS
    append_punctuations: str = _words.DEFAULT_APPEND_PUNCTUATIONS
    hallucination_silence_threshold: Optional[float] = None


@dataclass
class TranscriptionInfo:
    language: str
    language_probability: float
    duration: float
    duration_after_vad: float
    all_language_probs: Optional[list] = None
    transcription_options: TranscriptionOptions = field(default_factory=TranscriptionOptions)
    vad_options: Optional[object] = None


def _temperatures(temperature) -> Tuple[float, ...]:
    """One temperature or a sequence of them, each a finite number >= 0 (ASRError else)."""
    temps = ((temperature,) if isinstance(temperature, (int, float, np.floating)) else
             tuple(temperature) if isinstance(temperature, (list, tuple)) else None)
    if not temps or not all(isinstance(t, (int, float, np.floating)) and not isinstance(t, bool)
                            and np.isfinite(t) and t >= 0 for t in temps):
        raise ASRError(f"temperature {temperature!r}: expected a number >= 0 or a non-empty "
                       "sequence of them")
    return tuple(float(t) for t in temps)


def compression_ratio(text: str) -> float:
    """len(text) / len(zlib(text)) in UTF-8 bytes: high for repetitive text."""
    b = text.encode("utf-8")
    return len(b) / len(zlib.compress(b))


def _resolve(name_or_path: Union[str, os.PathLike]) -> Path:
    from .convert.whisper import convert_whisper, find_whisper_dir

    text = os.fspath(name_or_path)
    if os.path.isdir(text):
        folder = find_whisper_dir(text)
        if folder is None:
            raise ASRError(f"{text}: a directory without model.bin is not a Whisper model "
                           "(a CTranslate2 model folder, or pass a .gguf)")
    else:
        found = models.find_or_pull(text)
        folder = find_whisper_dir(found)
        if folder is None:
            from .convert.whisper_ggml import is_ggml_file
            if not is_ggml_file(found):
                return found
            folder = found   # a whisper.cpp model: converted once, as a directory is
    target = models.converted_path(folder)
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        convert_whisper(folder, target)
    return target


def decode_with_fallback(decode, o: TranscriptionOptions) -> tuple:
    """faster-whisper 1.2.1's temperature fallback (``generate_with_fallback``) over
    ``decode(i, temperature)``, which decodes the window at ``o.temperatures[i]`` and returns
    (tokens, avg_logprob, no_speech_prob, temperature, compression_ratio). A result passes
    unless its compression ratio is above ``o.compression_ratio_threshold`` or its average
    log-probability below ``o.log_prob_threshold``, except that a low log-probability in a
    window that looks silent (no-speech probability above ``o.no_speech_threshold``) passes
    (the no-speech skip then decides). The first result that passes is returned; when none
    does, the one with the best average log-probability among those under the compression
    threshold (else among all; the first of equals), with the last temperature tried."""
    results, passing = [], []
    for i, temperature in enumerate(o.temperatures):
        result = decode(i, temperature)
        _, avg_logprob, no_speech, _, ratio = result
        results.append(result)
        retry = False
        if o.compression_ratio_threshold is not None:
            if ratio > o.compression_ratio_threshold:
                retry = True                        # too repetitive
            else:
                passing.append(result)
        if o.log_prob_threshold is not None and avg_logprob < o.log_prob_threshold:
            retry = True                            # too unlikely
            if o.no_speech_threshold is not None and no_speech > o.no_speech_threshold:
                retry = False                       # silence: the no-speech skip decides
        if not retry:
            return result
    best = max(passing or results, key=lambda r: r[1])
    return best[:3] + (o.temperatures[-1],) + best[4:]


class ASR:
    """Whisper speech recognition on the CPU, its encoder optionally on a GPU (device).

    name_or_path: a packaged model ("whisper-tiny.en"; pulled on first use), a .gguf written by
    ``dasllama convert whisper``, a CTranslate2 Whisper directory, or a whisper.cpp model
    file (``ggml-*.bin``; f32, f16 or quantized).
    device: "cpu", or "vulkan" (the best GPU), "vulkan:N", "vulkan:NAME", "metal" (None:
    ``$DASLLAMA_DEVICE``, else "cpu"): on a GPU the encoder is a seat that serves each 30 s
    window (the mel front end and the decoder stay on the CPU) or declines it to the CPU
    encoder with a reason (``seat_stats()``). A device that is absent raises DeviceError naming
    the devices there are. compute_type: "float32" (also "default", "auto":
    float32 linears, the parity lane) or "int8" (weights quantized to Q8_0 at load, 8-bit
    activations: about 4x less weight traffic; transcripts may differ from float32's).
    n_threads: CPU threads (default: the physical cores).
    """

    def __init__(self, name_or_path: Union[str, os.PathLike], device: Optional[str] = "cpu",
                 compute_type: str = "default", n_threads: Optional[int] = None):
        from .gpu import resolve_device

        device = resolve_device(device)
        if compute_type not in _COMPUTE_TYPES:
            raise ASRError(f"compute_type {compute_type!r} is not one of "
                           f"{', '.join(_COMPUTE_TYPES)}")
        self.path = _resolve(name_or_path)
        self.compute_type = _COMPUTE_TYPES[compute_type]
        self.model = _core.WhisperModel(str(self.path), int(n_threads or 0), self.compute_type,
                                        device)
        self.device = device
        self.config = self.model.config
        self.tokens = self.config["tokens"]
        self._tokenizer = _core.Tokenizer.from_gguf(_core.GGUFFile.open(str(self.path)))
        self._lock = threading.Lock()
        self._stats = dict(audio_seconds=0.0, wall_seconds=0.0, windows=0, tokens=0,
                           mel_seconds=0.0, encode_seconds=0.0, decode_seconds=0.0,
                           language_seconds=0.0, align_seconds=0.0)
        self.multilingual = bool(self.config["multilingual"])
        self.languages = self._language_tokens() if self.multilingual else {}

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        self.model = None

    def __enter__(self) -> "ASR":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def stats(self) -> dict:
        """Totals over this ASR's transcriptions: audio_seconds (audio decoded), wall_seconds,
        windows, tokens, and the clocks of the stages (mel_seconds, encode_seconds,
        decode_seconds, align_seconds: word timestamps; language_seconds: language
        detection before a transcription, its
        windows' encoding included). ``dict(asr.stats)`` is a snapshot."""
        return dict(self._stats)

    @property
    def device_name(self) -> str:
        """The GPU that holds the encoder seat, or "cpu"."""
        return self.model.device_name

    def seat_stats(self) -> dict:
        """The encoder seat's counters ({} on the CPU): served, declined by reason, dispatches,
        replays, uploads, bytes_up, bytes_down, weight_bytes, and reason (why the last window
        declined, "" when it was served)."""
        return self.model.seat_stats()

    @property
    def supported_languages(self) -> List[str]:
        """The language codes this model knows ("en" alone for an English-only model)."""
        return list(self.languages) if self.multilingual else ["en"]

    # ------------------------------------------------------------------ tokens
    def _language_tokens(self) -> dict:
        """Language code -> token id, in the order of the file's lang_ids (<|de|> -> "de").
        A file without lang_ids: the tokens between <|startoftranscript|> and <|translate|>,
        where Whisper's vocabulary keeps them."""
        t = self.tokens
        ids = self.config["lang_ids"] or list(range(t["sot"] + 1, t["translate"]))
        out = {}
        for i in ids:
            piece = bytes(self._tokenizer.piece(i)).decode("utf-8", errors="replace")
            if not (piece.startswith("<|") and piece.endswith("|>")):
                raise ASRError(f"{self.path}: language token {i} is {piece!r}, not <|code|>")
            out[piece[2:-2]] = i
        return out

    def _check_task(self, language: Optional[str], task: str) -> None:
        if task not in TASKS:
            raise ASRError(f"task={task!r} is not one of {', '.join(TASKS)}")
        if self.multilingual:
            if language is not None and language not in self.languages:
                raise ASRError(f"language={language!r} is not a language code of this model "
                               f"(its codes: {', '.join(self.languages)})")
            return
        if task != "transcribe":
            raise ASRError(f"task={task!r} needs a multilingual model; {self.path.name} is "
                           "English-only (task='transcribe')")
        if language not in (None, "en"):
            raise ASRError(f"language={language!r} needs a multilingual model; "
                           f"{self.path.name} is English-only (language=None or 'en')")

    def _sot_sequence(self, language: str, task: str) -> List[int]:
        """<|startoftranscript|>, then on a multilingual model the language and task tokens."""
        if not self.multilingual:
            return [self.tokens["sot"]]
        return [self.tokens["sot"], self.languages[language], self.tokens[task]]

    # ------------------------------------------------------------------ language
    def _window(self, frames: np.ndarray) -> np.ndarray:
        """frames [n_mels, n <= a window] padded with zeros to a whole window."""
        window = np.zeros((self.config["n_mels"], self.config["n_frames"]), dtype=np.float32)
        window[:, :frames.shape[1]] = frames
        return window

    def _language_probs_of_window(self) -> List[Tuple[str, float]]:
        """(code, probability) of every language on the decoder's current window, most
        probable first: one decoder step on <|startoftranscript|>, softmax over the language
        tokens' logits. The caller holds the lock and has set the window."""
        logits = self.model.decoder_logits([self.tokens["sot"]])[0]
        codes = list(self.languages)
        z = logits[[self.languages[c] for c in codes]].astype(np.float64)
        p = np.exp(z - z.max())
        p /= p.sum()
        order = sorted(range(len(codes)), key=lambda i: -p[i])
        return [(codes[i], float(p[i])) for i in order]

    def detect_language(self, audio=None, *, features: Optional[np.ndarray] = None,
                        language_detection_segments: int = 1,
                        language_detection_threshold: float = 0.5,
                        sample_rate: Optional[int] = None,
                        ) -> Tuple[str, float, List[Tuple[str, float]]]:
        """The spoken language of ``audio`` (as transcribe takes it) or of log-mel
        ``features`` [n_mels, frames]: (language, probability, all (language, probability)
        most probable first). Windows of 30 s from the start are tried, at most
        ``language_detection_segments``, until the best language's probability is above
        ``language_detection_threshold``; else the language best in most windows wins, with
        its highest probability (faster-whisper 1.2.1's rule). Multilingual models only."""
        if self.model is None:
            raise ASRError("this ASR is closed")
        if not self.multilingual:
            raise ASRError(f"{self.path.name} is English-only: it has no language tokens to "
                           "detect a language with")
        return self._detect(self._frames_of(audio, features, sample_rate),
                            language_detection_segments, language_detection_threshold)[:3]

    def _frames_of(self, audio, features, sample_rate) -> "_ClipFrames":
        if audio is None and features is None:
            raise ASRError("detect_language: pass audio or features")
        if audio is not None:
            stream = _audio.open_stream(audio, SAMPLE_RATE, source_rate=sample_rate)
            return self._clip_frames(stream, self._scan(stream))
        mel = np.asarray(features, dtype=np.float32)
        if mel.ndim != 2 or mel.shape[0] != self.config["n_mels"]:
            raise ASRError(f"features: expected [{self.config['n_mels']}, frames], got "
                           f"{list(mel.shape)}")
        return _ClipFrames(mel.shape[1], lambda start, count: mel[:, start:start + count])

    # ------------------------------------------------------------------ the front end
    def _scan(self, stream) -> "_stream.Scan":
        """The first pass over a clip's stream (asr_stream.scan): its length and log-mel
        maximum."""
        clock = time.perf_counter()
        try:
            return _stream.scan(self.model, stream, self.config["hop_length"],
                                self.config["n_fft"], self._lock)
        finally:
            self._stats["mel_seconds"] += time.perf_counter() - clock

    def _mel_frames(self, stream, clip) -> "_stream.MelFrames":
        return _stream.MelFrames(self.model, stream, clip, self.config["hop_length"],
                                 self.config["n_fft"], self._lock)

    def _clip_frames(self, stream, clip) -> "_ClipFrames":
        """The clip's log-mel frames for language detection: a pass of their own over the
        stream (only the frames detection reads are computed). A clip too short for a frame
        (the VAD kept nothing) stands as faster-whisper's features of no audio: one frame of
        silence."""
        if clip.top is None:
            silent = np.full((self.config["n_mels"], 1), SILENT_MEL, dtype=np.float32)
            return _ClipFrames(1, lambda start, count: silent[:, start:start + count])
        mel = self._mel_frames(stream, clip)
        return _ClipFrames(mel.n_frames, mel.frames)

    def _detect(self, mel: "_ClipFrames", segments: int, threshold: float):
        """detect_language on a clip's log-mel frames; also returns the first window's encoder
        output and window, which the first decoding window may reuse."""
        if isinstance(segments, bool) or not isinstance(segments, int) or segments < 1:
            raise ASRError(f"language_detection_segments {segments!r} is not a positive "
                           "integer")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) \
                or not 0 <= threshold <= 1:
            raise ASRError(f"language_detection_threshold {threshold!r} is not a number in "
                           "[0, 1]")
        n_window = self.config["n_frames"]
        frames = min(mel.n_frames, segments * n_window)
        votes: dict = {}
        first = None
        for start in range(0, max(frames, 1), n_window):
            window = self._window(mel.frames(start, min(n_window, frames - start)))
            clock = time.perf_counter()
            with self._lock:
                enc = self.model.encode(window)
                probs = self._language_probs_of_window()
            self._stats["language_seconds"] += time.perf_counter() - clock
            if first is None:
                first = (window, enc)
            language, probability = probs[0]
            if probability > threshold:
                break
            votes.setdefault(language, []).append(probability)
        else:
            language = max(votes, key=lambda code: len(votes[code]))
            probability = max(votes[language])
        return language, probability, probs, first

    # ------------------------------------------------------------------ tokens
    def encode_text(self, text: str) -> List[int]:
        return list(self._tokenizer.encode(text, False, False))

    def decode_tokens(self, tokens: Sequence[int]) -> str:
        eot = self.tokens["eot"]
        raw = self._tokenizer.decode([t for t in tokens if t < eot])
        return bytes(raw).decode("utf-8", errors="replace")

    def suppressed_tokens(self, suppress_tokens: Sequence[int]) -> List[int]:
        """faster-whisper's expansion: -1 stands for the model's non-speech tokens (the
        file's suppress_ids), and the task and special tokens are always added."""
        ids = [t for t in suppress_tokens if t >= 0]
        if -1 in suppress_tokens:
            ids += self.config["suppress_ids"]
        t = self.tokens
        ids += [t["transcribe"], t["translate"], t["sot"], t["sot_prev"], t["sot_lm"],
                t["no_speech"]]
        return sorted(set(ids))

    # ------------------------------------------------------------------ transcribe
    def transcribe(self, audio, language: Optional[str] = None, task: str = "transcribe",
                   beam_size: int = 1, best_of: int = 5, patience: float = 1.0,
                   length_penalty: float = 1.0,
                   temperature: Union[float, Sequence[float]] = DEFAULT_TEMPERATURES,
                   compression_ratio_threshold: Optional[float] = 2.4,
                   log_prob_threshold: Optional[float] = -1.0,
                   no_speech_threshold: Optional[float] = 0.6,
                   condition_on_previous_text: bool = True,
                   prompt_reset_on_temperature: float = 0.5,
                   initial_prompt: Optional[Union[str, Sequence[int]]] = None,
                   prefix: Optional[str] = None, suppress_blank: bool = True,
                   suppress_tokens: Optional[Sequence[int]] = (-1,),
                   without_timestamps: bool = False, max_initial_timestamp: float = 1.0,
                   word_timestamps: bool = False, vad_filter: bool = False,
                   vad_parameters: Optional[Union[dict, object]] = None,
                   sample_rate: Optional[int] = None, multilingual: bool = False,
                   language_detection_threshold: float = 0.5,
                   language_detection_segments: int = 1, seed: int = 0,
                   prepend_punctuations: str = _words.DEFAULT_PREPEND_PUNCTUATIONS,
                   append_punctuations: str = _words.DEFAULT_APPEND_PUNCTUATIONS,
                   hallucination_silence_threshold: Optional[float] = None,
                   ) -> Tuple[Iterator[Segment], TranscriptionInfo]:
        """Transcribe ``audio`` (a path, bytes, a binary file object, or float32 samples at
        ``sample_rate``, default 16 kHz). Returns (segments, info): a lazy iterator of
        :class:`Segment` and a :class:`TranscriptionInfo`. Options keep faster-whisper's
        names and defaults where this version runs them (see the module text).
        language: a code of :attr:`supported_languages`, or None to detect it (multilingual
        models; the detection runs before this returns). task: "transcribe" or "translate"
        (English text; multilingual models). ``seed`` (not one of faster-whisper's) seeds the
        sampling of the temperature fallback. word_timestamps: fill each segment's ``words``
        (:mod:`dasllama.asr_words`; the model needs alignment heads); prepend_punctuations and
        append_punctuations: the marks joined to the next and the previous word;
        hallucination_silence_threshold (seconds, with word timestamps): skip a silence longer
        than this before a segment that looks hallucinated."""
        if self.model is None:
            raise ASRError("this ASR is closed")
        temps = _temperatures(temperature)
        unsupported = []
        if not isinstance(beam_size, int) or beam_size < 1:
            raise ASRError(f"beam_size {beam_size!r} is not a positive integer")
        if not isinstance(best_of, int) or best_of < 1:
            raise ASRError(f"best_of {best_of!r} is not a positive integer")
        if not isinstance(seed, int) or seed < 0:
            raise ASRError(f"seed {seed!r} is not a non-negative integer")
        if beam_size > 1 and prefix:
            unsupported.append(f"prefix with beam_size={beam_size} (use beam_size=1)")
        for name, value in (("prepend_punctuations", prepend_punctuations),
                            ("append_punctuations", append_punctuations)):
            if not isinstance(value, str):
                raise ASRError(f"{name} {value!r} is not a string")
        if hallucination_silence_threshold is not None and not (
                isinstance(hallucination_silence_threshold, (int, float))
                and not isinstance(hallucination_silence_threshold, bool)
                and np.isfinite(hallucination_silence_threshold)
                and hallucination_silence_threshold >= 0):
            raise ASRError(f"hallucination_silence_threshold {hallucination_silence_threshold!r}"
                           " is not None or a finite number of seconds >= 0")
        if word_timestamps and not self.config["alignment_heads"]:
            raise ASRError(f"word_timestamps=True: {self.path.name} has no alignment heads "
                           "(whisper.alignment_heads is empty); convert it from a model whose "
                           "config.json lists alignment_heads")
        if unsupported:
            raise ASRError("not supported by this version: " + "; ".join(unsupported))
        self._check_task(language, task)
        stream = _audio.open_stream(audio, SAMPLE_RATE, source_rate=sample_rate)
        vad_opts, speech_map, n_original = None, None, None
        if vad_filter:   # transcribe the speech chunks as one clip (faster-whisper's way)
            from . import vad as _vad
            try:
                vad_opts = _vad.vad_options(vad_parameters)
            except _vad.VADError as e:
                raise ASRError(str(e)) from None
            chunks, n_original = _stream.speech_chunks(_vad.default_vad(), stream, vad_opts)
            stream = _stream.SpeechStream(stream, chunks)
            speech_map = _vad.SpeechTimestampsMap(chunks, SAMPLE_RATE)
        clip = self._scan(stream)
        duration = (clip.n_samples if n_original is None else n_original) / SAMPLE_RATE
        options = TranscriptionOptions(
            beam_size=beam_size, best_of=best_of, seed=seed, patience=patience,
            length_penalty=length_penalty, temperatures=temps,
            compression_ratio_threshold=compression_ratio_threshold,
            log_prob_threshold=log_prob_threshold, no_speech_threshold=no_speech_threshold,
            condition_on_previous_text=condition_on_previous_text,
            prompt_reset_on_temperature=prompt_reset_on_temperature,
            initial_prompt=initial_prompt, prefix=prefix, suppress_blank=suppress_blank,
            suppress_tokens=tuple(self.suppressed_tokens(suppress_tokens or ())),
            without_timestamps=without_timestamps,
            max_initial_timestamp=max_initial_timestamp,
            multilingual=bool(multilingual) and self.multilingual,
            word_timestamps=bool(word_timestamps), prepend_punctuations=prepend_punctuations,
            append_punctuations=append_punctuations,
            hallucination_silence_threshold=(None if hallucination_silence_threshold is None
                                             else float(hallucination_silence_threshold)))
        probability, all_probs, first = 1.0, None, None
        if language is None and self.multilingual:
            # faster-whisper detects on the whole clip's mel (its last frame included), so the
            # first window differs from the first decoding window unless the clip fills it
            language, probability, all_probs, first = self._detect(
                self._clip_frames(stream, clip), language_detection_segments,
                language_detection_threshold)
        language = language or "en"
        info = TranscriptionInfo(language=language, language_probability=probability,
                                 duration=duration,
                                 duration_after_vad=clip.n_samples / SAMPLE_RATE,
                                 all_language_probs=all_probs, transcription_options=options,
                                 vad_options=vad_opts)
        task_state = _Task(self._sot_sequence(language, task), first, language)
        segments = self._segments(stream, clip, options, task_state)
        if speech_map is not None:
            segments = self._restore_times(segments, speech_map)
        return segments, info

    @staticmethod
    def _restore_times(segments: Iterator[Segment], speech_map) -> Iterator[Segment]:
        """Segment times in the concatenated speech -> times in the original audio. Words
        keep both ends in the chunk of their middle, and a segment with words spans them
        (faster-whisper's rules)."""
        for s in segments:
            if s.words:
                for w in s.words:
                    chunk = speech_map.chunk_index((w.start + w.end) / 2)
                    w.start = speech_map.original_time(w.start, chunk)
                    w.end = speech_map.original_time(w.end, chunk)
                s.start, s.end = s.words[0].start, s.words[-1].end
            else:
                s.start = speech_map.original_time(s.start)
                s.end = speech_map.original_time(s.end, is_end=True)
            yield s

    def _prompt(self, previous: List[int], o: TranscriptionOptions,
                sot_sequence: Optional[List[int]] = None) -> List[int]:
        t = self.tokens
        prompt = []
        if previous:
            prompt = [t["sot_prev"]] + previous[-MAX_PROMPT_TOKENS:]
        prompt += sot_sequence or [t["sot"]]
        if o.without_timestamps:
            prompt.append(t["no_timestamps"])
        return prompt

    def _prefix(self, o: TranscriptionOptions, first: bool) -> List[int]:
        """The tokens forced at the start of the first window's output: <|0.00|> (unless
        without_timestamps) and the prefix text."""
        if not (o.prefix and first):
            return []
        tokens = self.encode_text(" " + o.prefix.strip())[:self.config["n_text_ctx"] // 2 - 1]
        return ([] if o.without_timestamps else [self.tokens["timestamp_begin"]]) + tokens

    def _split(self, tokens: List[int], time_offset: float, segment_size: int, seek: int):
        """Segments of one window's tokens and the next seek (faster-whisper's rules)."""
        ts = self.tokens["timestamp_begin"]
        out = []
        single_ending = len(tokens) >= 2 and tokens[-2] < ts <= tokens[-1]
        cuts = [i for i in range(1, len(tokens)) if tokens[i] >= ts and tokens[i - 1] >= ts]
        if cuts:
            if single_ending:
                cuts.append(len(tokens))
            last = 0
            for cut in cuts:
                part = tokens[last:cut]
                out.append((time_offset + (part[0] - ts) * TIME_PRECISION,
                            time_offset + (part[-1] - ts) * TIME_PRECISION, part))
                last = cut
            if single_ending:
                seek += segment_size
            else:
                seek += (tokens[last - 1] - ts) * INPUT_STRIDE
        else:
            duration = segment_size / 100.0
            stamps = [x for x in tokens if x >= ts]
            if stamps and stamps[-1] != ts:
                duration = (stamps[-1] - ts) * TIME_PRECISION
            out.append((time_offset, time_offset + duration, tokens))
            seek += segment_size
        return out, seek

    def _decode_with_fallback(self, prompt: List[int], prefix: List[int], max_initial: int,
                              o: TranscriptionOptions, window_seed: int) -> tuple:
        """The window decoded under the temperature fallback (decode_with_fallback). Call with
        the lock held (the window is the model's)."""
        n_ctx = self.config["n_text_ctx"]

        def decode(i: int, temperature: float) -> tuple:
            # each (window, temperature) draws from its own seed: one window's retries do not
            # shift the next window's draws
            seed = (o.seed * 1_000_003 + window_seed * 17 + i) % 2**64
            tokens, sum_logprob, no_speech = self.model.generate(
                prompt, list(o.suppress_tokens), o.suppress_blank, max_initial, n_ctx, prefix,
                o.beam_size if temperature == 0 else 1, o.patience, o.length_penalty,
                temperature, o.best_of, seed)
            tokens = list(tokens)
            self._stats["tokens"] += len(tokens) + 1
            return (tokens, sum_logprob / (len(tokens) + 1), no_speech, temperature,
                    compression_ratio(self.decode_tokens(tokens).strip()))
        return decode_with_fallback(decode, o)

    def _segments(self, stream, clip: "_stream.Scan", o: TranscriptionOptions,
                  task: Optional["_Task"] = None) -> Iterator[Segment]:
        start = time.perf_counter()
        try:
            yield from self._window_loop(stream, clip, o, task or _Task([self.tokens["sot"]]))
        finally:
            self._stats["wall_seconds"] += time.perf_counter() - start
            self._stats["audio_seconds"] += clip.n_samples / SAMPLE_RATE

    def _window_loop(self, stream, clip: "_stream.Scan", o: TranscriptionOptions,
                     task: "_Task") -> Iterator[Segment]:
        # The model's state (its window) lives from an encode to the generate after it; the
        # lock covers that pair and nothing across a yield, so several transcriptions may be
        # iterated in turns, and threads take turns window by window.
        cfg = self.config
        hop = cfg["hop_length"]
        content_frames = clip.n_samples // hop   # the mel's last frame is the appended hop's
        if content_frames == 0:
            return
        mel = self._mel_frames(stream, clip)   # the second pass, window by window
        sot_sequence = list(task.sot_sequence)
        n_window = cfg["n_frames"]
        max_initial = int(round(o.max_initial_timestamp / TIME_PRECISION))
        all_tokens: List[int] = []
        if o.initial_prompt is not None:
            all_tokens += (self.encode_text(" " + o.initial_prompt.strip())
                           if isinstance(o.initial_prompt, str) else list(o.initial_prompt))
        prompt_reset_since = 0
        seek, idx = 0, 0
        last_speech = 0.0   # the last word's end so far (word timestamps)
        language = task.language
        while seek < content_frames:
            time_offset = seek * (hop / SAMPLE_RATE)   # faster-whisper's arithmetic
            segment_size = min(n_window, content_frames - seek)
            clock = time.perf_counter()
            window = self._window(mel.frames(seek, segment_size))
            self._stats["mel_seconds"] += time.perf_counter() - clock
            prefix = self._prefix(o, seek == 0)
            previous_seek = seek
            with self._lock:
                clock = time.perf_counter()
                if seek == 0 and task.first is not None and np.array_equal(task.first[0], window):
                    self.model.set_window(task.first[1])   # language detection encoded it
                else:
                    self.model.encode(window)
                self._stats["encode_seconds"] += time.perf_counter() - clock
                if o.multilingual:   # this window's own language
                    language = self._language_probs_of_window()[0][0]
                    sot_sequence[1] = self.languages[language]
                prompt = self._prompt(all_tokens[prompt_reset_since:], o, sot_sequence)
                clock = time.perf_counter()
                tokens, avg_logprob, no_speech, temperature, ratio = self._decode_with_fallback(
                    prompt, prefix, max_initial, o, window_seed=seek)
                self._stats["decode_seconds"] += time.perf_counter() - clock
                skip = (o.no_speech_threshold is not None and no_speech > o.no_speech_threshold
                        and not (o.log_prob_threshold is not None
                                 and avg_logprob > o.log_prob_threshold))
                if not skip:
                    parts, seek = self._split(tokens, time_offset, segment_size, seek)
                    current = [dict(seek=previous_seek, start=a, end=b, tokens=part)
                               for a, b, part in parts]
                    if o.word_timestamps:   # aligned on this window, under the same lock
                        clock = time.perf_counter()
                        _words.add_word_timestamps(
                            self.model, current, sot_sequence, segment_size,
                            self.decode_tokens, self.tokens["eot"], language,
                            o.prepend_punctuations, o.append_punctuations, last_speech)
                        self._stats["align_seconds"] += time.perf_counter() - clock
            self._stats["windows"] += 1
            if skip:
                seek += segment_size
                continue
            if o.word_timestamps:
                seek, current, jump = _words.seek_by_words(
                    tokens, self.tokens["timestamp_begin"], current, seek, previous_seek,
                    time_offset, segment_size, content_frames, hop / SAMPLE_RATE, n_window,
                    last_speech, o.hallucination_silence_threshold)
                if jump:
                    continue
                end = _words.words_end(current)
                if end is not None:
                    last_speech = end
            for seg in current:
                part = seg["tokens"]
                text = self.decode_tokens(part)
                if seg["start"] == seg["end"] or not text.strip():
                    continue
                all_tokens += part
                idx += 1
                yield Segment(id=idx, seek=previous_seek, start=seg["start"], end=seg["end"],
                              text=text, tokens=part, avg_logprob=avg_logprob,
                              compression_ratio=ratio, no_speech_prob=no_speech,
                              temperature=temperature,
                              words=([Word(start=float(w["start"]), end=float(w["end"]),
                                           word=w["word"], probability=float(w["probability"]))
                                      for w in seg["words"]] if o.word_timestamps else None))
            if (not o.condition_on_previous_text or
                    temperature > o.prompt_reset_on_temperature):
                prompt_reset_since = len(all_tokens)

@dataclass
class _Task:
    """What one transcription decodes with: its start-of-transcript sequence, and what
    language detection already computed (the first window and its encoder output), so that
    it is not computed twice."""
    sot_sequence: List[int]
    first: Optional[Tuple[np.ndarray, np.ndarray]] = None
    language: str = "en"   # how word timestamps split words


@dataclass
class _ClipFrames:
    """A clip's log-mel frames as language detection reads them: n_frames, and
    frames(start, count) -> [n_mels, count]."""
    n_frames: int
    frames: Callable[[int, int], np.ndarray]
