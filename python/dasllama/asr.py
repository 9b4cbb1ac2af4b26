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
no-speech skip, on English-only models (language "en"). Language detection, translation, word
timestamps, the VAD filter and a prefix with beams are not in it yet: asking for them raises
:class:`ASRError` saying so.

A CTranslate2 directory is converted once to a GGUF in the cache (its name carries the
source's path, size and modification time), then read from there.

Thread-safety: an ASR may be shared by threads; a lock serializes its windows (each window's
encode and decode run as one step), so transcriptions take turns window by window. Use one ASR
per thread for parallel work. Several segment iterators of one ASR may be consumed in turns.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core, audio as _audio, models
from .errors import DasllamaError

__all__ = ["ASR", "ASRError", "Segment", "TranscriptionInfo", "TranscriptionOptions",
           "compression_ratio", "decode_with_fallback", "DEFAULT_TEMPERATURES"]

SAMPLE_RATE = 16000
TIME_PRECISION = 0.02     # seconds a timestamp token stands for
INPUT_STRIDE = 2          # mel frames per encoder row (conv2's stride)
MAX_PROMPT_TOKENS = 223   # earlier text in a prompt: n_text_ctx // 2 - 1 tokens at most
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
    words: Optional[list] = None
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


@dataclass
class TranscriptionInfo:
    language: str
    language_probability: float
    duration: float
    duration_after_vad: float
    all_language_probs: Optional[list] = None
    transcription_options: TranscriptionOptions = field(default_factory=TranscriptionOptions)


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


def _converted_path(folder: Path) -> Path:
    """Where the GGUF of a CTranslate2 directory lives in the cache. The key covers the
    folder's path and every file's size and modification time, so an edited model converts
    again."""
    h = hashlib.sha256(str(folder.resolve()).encode())
    for f in sorted(folder.iterdir()):
        if f.is_file():
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return models.cache_dir() / "converted" / f"{folder.name}.{h.hexdigest()[:16]}.gguf"


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
            return found
    target = _converted_path(folder)
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
    """Whisper speech recognition on the CPU.

    name_or_path: a packaged model ("whisper-tiny.en"; pulled on first use), a .gguf written by
    ``dasllama convert whisper``, or a CTranslate2 Whisper directory.
    device: "cpu" (GPU seats come later). compute_type: "float32" (also "default", "auto":
    float32 linears, the parity lane) or "int8" (weights quantized to Q8_0 at load, 8-bit
    activations: about 4x less weight traffic; transcripts may differ from float32's).
    n_threads: CPU threads (default: the physical cores).
    """

    def __init__(self, name_or_path: Union[str, os.PathLike], device: str = "cpu",
                 compute_type: str = "default", n_threads: Optional[int] = None):
        if device != "cpu":
            raise ASRError(f"device {device!r}: this version runs Whisper on the CPU only "
                           "(device='cpu')")
        if compute_type not in _COMPUTE_TYPES:
            raise ASRError(f"compute_type {compute_type!r} is not one of "
                           f"{', '.join(_COMPUTE_TYPES)}")
        self.path = _resolve(name_or_path)
        self.compute_type = _COMPUTE_TYPES[compute_type]
        self.model = _core.WhisperModel(str(self.path), int(n_threads or 0), self.compute_type)
        self.config = self.model.config
        self.tokens = self.config["tokens"]
        self._tokenizer = _core.Tokenizer.from_gguf(_core.GGUFFile.open(str(self.path)))
        self._lock = threading.Lock()
        self._stats = dict(audio_seconds=0.0, wall_seconds=0.0, windows=0, tokens=0,
                           mel_seconds=0.0, encode_seconds=0.0, decode_seconds=0.0)
        if self.config["multilingual"]:
            # language tokens, detection and the task tokens are the next step
            raise ASRError(f"{self.path}: multilingual Whisper models are not supported yet "
                           "(English-only models such as whisper-tiny.en are)")

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
        decode_seconds). ``dict(asr.stats)`` is a snapshot."""
        return dict(self._stats)

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
                   sample_rate: Optional[int] = None, seed: int = 0,
                   ) -> Tuple[Iterator[Segment], TranscriptionInfo]:
        """Transcribe ``audio`` (a path, bytes, a binary file object, or float32 samples at
        ``sample_rate``, default 16 kHz). Returns (segments, info): a lazy iterator of
        :class:`Segment` and a :class:`TranscriptionInfo`. Options keep faster-whisper's
        names and defaults where this version runs them (see the module text); ``seed``
        (not one of faster-whisper's) seeds the sampling of the temperature fallback."""
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
        if task != "transcribe":
            unsupported.append(f"task={task!r}")
        if language not in (None, "en"):
            unsupported.append(f"language={language!r} (the model is English-only)")
        if word_timestamps:
            unsupported.append("word_timestamps=True")
        if vad_filter:
            unsupported.append("vad_filter=True")
        if unsupported:
            raise ASRError("not supported by this version: " + "; ".join(unsupported))
        samples = _audio.load(audio, SAMPLE_RATE, source_rate=sample_rate)
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
            max_initial_timestamp=max_initial_timestamp)
        duration = samples.size / SAMPLE_RATE
        info = TranscriptionInfo(language="en", language_probability=1.0, duration=duration,
                                 duration_after_vad=duration, transcription_options=options)
        return self._segments(samples, options), info

    def _prompt(self, previous: List[int], o: TranscriptionOptions) -> List[int]:
        t = self.tokens
        prompt = []
        if previous:
            prompt = [t["sot_prev"]] + previous[-MAX_PROMPT_TOKENS:]
        prompt.append(t["sot"])   # English-only: the sot sequence is <|startoftranscript|>
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

    def _segments(self, samples: np.ndarray, o: TranscriptionOptions) -> Iterator[Segment]:
        start = time.perf_counter()
        try:
            yield from self._window_loop(samples, o)
        finally:
            self._stats["wall_seconds"] += time.perf_counter() - start
            self._stats["audio_seconds"] += samples.size / SAMPLE_RATE

    def _window_loop(self, samples: np.ndarray, o: TranscriptionOptions) -> Iterator[Segment]:
        # The model's state (its window) lives from an encode to the generate after it; the
        # lock covers that pair and nothing across a yield, so several transcriptions may be
        # iterated in turns, and threads take turns window by window.
        cfg = self.config
        hop = cfg["hop_length"]
        content_frames = samples.size // hop   # the mel's last frame is the appended hop's
        if content_frames == 0:
            return
        clock = time.perf_counter()
        with self._lock:
            mel = self.model.log_mel(samples)
        self._stats["mel_seconds"] += time.perf_counter() - clock
        n_window = cfg["n_frames"]
        max_initial = int(round(o.max_initial_timestamp / TIME_PRECISION))
        all_tokens: List[int] = []
        if o.initial_prompt is not None:
            all_tokens += (self.encode_text(" " + o.initial_prompt.strip())
                           if isinstance(o.initial_prompt, str) else list(o.initial_prompt))
        prompt_reset_since = 0
        seek, idx = 0, 0
        while seek < content_frames:
            time_offset = seek * hop / SAMPLE_RATE
            segment_size = min(n_window, content_frames - seek)
            window = np.zeros((cfg["n_mels"], n_window), dtype=np.float32)
            window[:, :segment_size] = mel[:, seek:seek + segment_size]
            prompt = self._prompt(all_tokens[prompt_reset_since:], o)
            prefix = self._prefix(o, seek == 0)
            with self._lock:
                clock = time.perf_counter()
                self.model.encode(window)
                self._stats["encode_seconds"] += time.perf_counter() - clock
                clock = time.perf_counter()
                tokens, avg_logprob, no_speech, temperature, ratio = self._decode_with_fallback(
                    prompt, prefix, max_initial, o, window_seed=seek)
                self._stats["decode_seconds"] += time.perf_counter() - clock
            self._stats["windows"] += 1
            if o.no_speech_threshold is not None and no_speech > o.no_speech_threshold and not (
                    o.log_prob_threshold is not None and avg_logprob > o.log_prob_threshold):
                seek += segment_size
                continue
            previous_seek = seek
            parts, seek = self._split(tokens, time_offset, segment_size, seek)
            for start, end, part in parts:
                text = self.decode_tokens(part)
                if start == end or not text.strip():
                    continue
                all_tokens += part
                idx += 1
                yield Segment(id=idx, seek=previous_seek, start=start, end=end, text=text,
                              tokens=part, avg_logprob=avg_logprob, compression_ratio=ratio,
                              no_speech_prob=no_speech, temperature=temperature)
            if (not o.condition_on_previous_text or
                    temperature > o.prompt_reset_on_temperature):
                prompt_reset_since = len(all_tokens)
