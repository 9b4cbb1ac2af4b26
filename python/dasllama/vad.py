"""Voice activity detection: Silero VAD v6 on dasllama's C++ core, with silero-vad's rules.

::

    from dasllama.vad import VAD
    vad = VAD()                                        # the shipped weights: no setup
    probs = vad.probabilities(samples)                 # one float32 per 512 samples (32 ms)
    speech = vad.get_speech_timestamps("talk.flac")    # [{"start": 12800, "end": 40448}, ...]

The model (csrc/asr/vad; the weights ship in dasllama/data/silero_vad_v6.gguf, MIT, converted
once from silero-vad 6.0.0 by :mod:`dasllama.convert.silero_vad`) reads 16 kHz audio in windows
of 512 samples, each with the previous window's last 64 samples, and carries an LSTM state
from window to window. Audio given as a path, bytes or a file object is decoded and resampled
to 16 kHz by :mod:`dasllama.audio`; an array must be at 16 kHz or a multiple of it (then
decimated, as silero-vad does).

Speech timestamps follow silero-vad's ``get_speech_timestamps`` (same names, defaults and
sample positions): a window at or above ``threshold`` starts speech; speech ends at the first
window below ``neg_threshold`` (default threshold - 0.15) once ``min_silence_duration_ms`` of
such windows have passed; chunks not longer than ``min_speech_duration_ms`` are dropped;
chunks reaching ``max_speech_duration_s`` are cut at the longest silence over
``min_silence_at_max_speech`` ms inside them (``use_max_poss_sil_at_max_speech=True``) or at
the last one (False: silero's older rule, the one faster-whisper keeps), else where the limit
falls; then each chunk is padded by ``speech_pad_ms`` (halving the gap when two chunks are
closer than twice that).

:class:`VadOptions` carries faster-whisper 1.2.1's names and defaults, which differ from
silero-vad's: ``min_speech_duration_ms`` 0 (silero 250), ``min_silence_duration_ms`` 2000
(100), ``speech_pad_ms`` 400 (30). ``ASR.transcribe(vad_filter=True, vad_parameters=...)``
uses them, with faster-whisper's framing (a whole window of zeros is appended when the length
is a multiple of 512) and its cut rule at the maximum speech length.

Thread-safety: a VAD may be shared by threads (the C++ model serializes its windows); a
stream or iterator belongs to one caller at a time.
"""

from __future__ import annotations

import bisect
import math
import os
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import _core, audio as _audio
from .errors import DasllamaError

__all__ = ["VAD", "VADError", "VadOptions", "VadStream", "VADIterator", "default_vad",
           "speech_timestamps_from_probs", "collect_chunks", "SpeechTimestampsMap",
           "SHIPPED_MODEL", "SAMPLE_RATE", "WINDOW"]

SAMPLE_RATE = 16000
WINDOW = 512          # samples per probability
SHIPPED_MODEL = Path(__file__).resolve().parent / "data" / "silero_vad_v6.gguf"


class VADError(DasllamaError, ValueError):
    """Audio or an option the VAD cannot use; the message names it."""


@dataclass
class VadOptions:
    """faster-whisper 1.2.1's VAD options (its names and defaults), as ASR takes them."""
    threshold: float = 0.5
    neg_threshold: Optional[float] = None
    min_speech_duration_ms: int = 0
    max_speech_duration_s: float = float("inf")
    min_silence_duration_ms: int = 2000
    speech_pad_ms: int = 400


def vad_options(value) -> VadOptions:
    """``value`` (None, a dict, a VadOptions or an object with its attribute names, such as
    faster-whisper's) as a checked :class:`VadOptions`."""
    names = [f.name for f in fields(VadOptions)]
    if value is None:
        opts = VadOptions()
    elif isinstance(value, dict):
        unknown = sorted(set(value) - set(names))
        if unknown:
            raise VADError(f"vad_parameters: unknown option(s) {', '.join(unknown)} "
                           f"(known: {', '.join(names)})")
        opts = VadOptions(**value)
    elif all(hasattr(value, n) for n in names):
        opts = VadOptions(**{n: getattr(value, n) for n in names})
    else:
        raise VADError(f"vad_parameters: expected a dict or VadOptions, got "
                       f"{type(value).__name__}")
    _check_rules(opts.threshold, opts.neg_threshold, opts.min_speech_duration_ms,
                 opts.max_speech_duration_s, opts.min_silence_duration_ms, opts.speech_pad_ms)
    return opts


def _number(name: str, value, low: float = 0.0, high: float = math.inf,
            inf_ok: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise VADError(f"{name} {value!r} is not a number")
    v = float(value)
    if math.isnan(v) or v < low or v > high or (math.isinf(v) and not inf_ok):
        raise VADError(f"{name} {value!r} is outside [{low}, {high}]")


def _check_rules(threshold, neg_threshold, min_speech_duration_ms, max_speech_duration_s,
                 min_silence_duration_ms, speech_pad_ms, min_silence_at_max_speech=98) -> None:
    _number("threshold", threshold, 0.0, 1.0)
    if neg_threshold is not None:
        _number("neg_threshold", neg_threshold, 0.0, 1.0)
    _number("min_speech_duration_ms", min_speech_duration_ms)
    _number("max_speech_duration_s", max_speech_duration_s, inf_ok=True)
    if float(max_speech_duration_s) <= 0:
        raise VADError(f"max_speech_duration_s {max_speech_duration_s!r} is not positive")
    _number("min_silence_duration_ms", min_silence_duration_ms)
    _number("speech_pad_ms", speech_pad_ms)
    _number("min_silence_at_max_speech", min_silence_at_max_speech)


# =============================================================================================
# The rules: probabilities -> speech chunks (silero-vad's get_speech_timestamps)
# =============================================================================================

def speech_timestamps_from_probs(probs: Sequence[float], audio_length_samples: int,
                                 threshold: float = 0.5, min_speech_duration_ms: int = 250,
                                 max_speech_duration_s: float = float("inf"),
                                 min_silence_duration_ms: int = 100, speech_pad_ms: int = 30,
                                 neg_threshold: Optional[float] = None,
                                 min_silence_at_max_speech: float = 98,
                                 use_max_poss_sil_at_max_speech: bool = True,
                                 sample_rate: int = SAMPLE_RATE) -> List[Dict[str, int]]:
    """Speech chunks {"start", "end"} in samples from per-window probabilities (window i
    covers samples 512 i .. 512 i + 511), by the rules of the module text."""
    _check_rules(threshold, neg_threshold, min_speech_duration_ms, max_speech_duration_s,
                 min_silence_duration_ms, speech_pad_ms, min_silence_at_max_speech)
    sr, win = sample_rate, WINDOW
    min_speech = sr * min_speech_duration_ms / 1000
    pad = sr * speech_pad_ms / 1000
    max_speech = sr * max_speech_duration_s - win - 2 * pad
    min_silence = sr * min_silence_duration_ms / 1000
    min_silence_at_max = sr * min_silence_at_max_speech / 1000
    if neg_threshold is None:
        neg_threshold = max(threshold - 0.15, 0.01)

    speeches: List[Dict[str, int]] = []
    current: Dict[str, int] = {}
    triggered = False
    temp_end = 0                 # where the silence under way began (0: none)
    prev_end = next_start = 0    # the last long silence, for the cut at max_speech (older rule)
    possible_ends = []           # (start, length) of silences over min_silence_at_max
    for i, p in enumerate(probs):
        cur = win * i
        if p >= threshold and temp_end:          # speech again after a silence
            if cur - temp_end > min_silence_at_max:
                possible_ends.append((temp_end, cur - temp_end))
            temp_end = 0
            if next_start < prev_end:
                next_start = cur
        if p >= threshold and not triggered:     # speech starts
            triggered = True
            current["start"] = cur
            continue
        if triggered and cur - current["start"] > max_speech:   # too long: cut it
            if use_max_poss_sil_at_max_speech and possible_ends:
                prev_end, length = max(possible_ends, key=lambda e: e[1])
                current["end"] = prev_end
                speeches.append(current)
                current = {}
                next_start = prev_end + length
                if next_start < prev_end + cur:
                    current["start"] = next_start
                else:
                    triggered = False
                prev_end = next_start = temp_end = 0
                possible_ends = []
            elif prev_end:
                current["end"] = prev_end
                speeches.append(current)
                current = {}
                if next_start < prev_end:
                    triggered = False
                else:
                    current["start"] = next_start
                prev_end = next_start = temp_end = 0
                possible_ends = []
            else:
                current["end"] = cur
                speeches.append(current)
                current = {}
                prev_end = next_start = temp_end = 0
                triggered = False
                possible_ends = []
                continue
        if p < neg_threshold and triggered:      # silence while in speech
            if not temp_end:
                temp_end = cur
            silence = cur - temp_end
            if not use_max_poss_sil_at_max_speech and silence > min_silence_at_max:
                prev_end = temp_end
            if silence < min_silence:
                continue
            current["end"] = temp_end
            if current["end"] - current["start"] > min_speech:
                speeches.append(current)
            current = {}
            prev_end = next_start = temp_end = 0
            triggered = False
            possible_ends = []
            continue
    if current and audio_length_samples - current["start"] > min_speech:
        current["end"] = audio_length_samples
        speeches.append(current)

    for i, s in enumerate(speeches):
        if i == 0:
            s["start"] = int(max(0, s["start"] - pad))
        if i != len(speeches) - 1:
            gap = speeches[i + 1]["start"] - s["end"]
            if gap < 2 * pad:
                s["end"] += int(gap // 2)
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - gap // 2))
            else:
                s["end"] = int(min(audio_length_samples, s["end"] + pad))
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - pad))
        else:
            s["end"] = int(min(audio_length_samples, s["end"] + pad))
    return speeches


# =============================================================================================
# Chunks for ASR: faster-whisper's collect_chunks and SpeechTimestampsMap
# =============================================================================================

def collect_chunks(audio: np.ndarray, chunks: List[Dict[str, int]]) -> np.ndarray:
    """The samples of ``chunks`` one after another (empty when there are none)."""
    if not chunks:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate([audio[c["start"]:c["end"]] for c in chunks]).astype(np.float32)


class SpeechTimestampsMap:
    """Maps times in the concatenated speech back to times in the original audio (seconds,
    rounded to ``time_precision`` digits), as faster-whisper 1.2.1 does."""

    def __init__(self, chunks: List[Dict[str, int]], sample_rate: int = SAMPLE_RATE,
                 time_precision: int = 2):
        self.sample_rate = sample_rate
        self.time_precision = time_precision
        self.chunk_end_sample: List[int] = []      # chunk ends in the concatenation
        self.total_silence_before: List[float] = []
        previous_end = silent = 0
        for c in chunks:
            silent += c["start"] - previous_end
            previous_end = c["end"]
            self.chunk_end_sample.append(c["end"] - silent)
            self.total_silence_before.append(silent / sample_rate)

    def chunk_index(self, time: float, is_end: bool = False) -> int:
        sample = int(time * self.sample_rate)
        if is_end and sample in self.chunk_end_sample:
            return self.chunk_end_sample.index(sample)
        return min(bisect.bisect(self.chunk_end_sample, sample), len(self.chunk_end_sample) - 1)

    def original_time(self, time: float, chunk_index: Optional[int] = None,
                      is_end: bool = False) -> float:
        if chunk_index is None:
            chunk_index = self.chunk_index(time, is_end)
        return round(self.total_silence_before[chunk_index] + time, self.time_precision)


# =============================================================================================
# The model
# =============================================================================================

def _mono(samples, what: str) -> np.ndarray:
    """``samples`` as finite float32 mono (dasllama.audio's rules), errors as VADError."""
    try:
        return _audio.as_mono_float32(samples, what)
    except _audio.AudioError as e:
        raise VADError(str(e)) from None


class VadStream:
    """One audio stream's state: feed samples of any length; each call returns the
    probabilities of the windows it completed (a remainder waits for the next call)."""

    def __init__(self, core_stream):
        self._s = core_stream
        self._pending = np.zeros(0, dtype=np.float32)

    def process(self, samples) -> np.ndarray:
        x = _mono(samples, "samples")
        buf = np.concatenate([self._pending, x]) if self._pending.size else x
        n = buf.size - buf.size % WINDOW
        self._pending = np.array(buf[n:], dtype=np.float32)
        return self._s.process(np.ascontiguousarray(buf[:n]))

    def reset(self) -> None:
        """Back to the start of a clip (zero context and LSTM state)."""
        self._s.reset()
        self._pending = np.zeros(0, dtype=np.float32)

    @property
    def windows(self) -> int:
        return int(self._s.windows)


class VADIterator:
    """Speech start and end events over a stream of 512-sample windows, as silero-vad's
    VADIterator reports them: ``it(window)`` returns {"start": sample}, {"end": sample} or
    None. (Its end rule is simpler than get_speech_timestamps': no minimum speech length.)"""

    def __init__(self, vad: "VAD", threshold: float = 0.5, min_silence_duration_ms: int = 100,
                 speech_pad_ms: int = 30):
        _check_rules(threshold, None, 0, math.inf, min_silence_duration_ms, speech_pad_ms)
        self.vad = vad
        self.threshold = threshold
        self.min_silence_samples = SAMPLE_RATE * min_silence_duration_ms / 1000
        self.speech_pad_samples = SAMPLE_RATE * speech_pad_ms / 1000
        self.stream = vad.stream()
        self.reset_states()

    def reset_states(self) -> None:
        self.stream.reset()
        self.triggered = False
        self.temp_end = 0
        self.current_sample = 0

    def __call__(self, window, return_seconds: bool = False, time_resolution: int = 1):
        x = _mono(window, "window")
        if x.size != WINDOW:
            raise VADError(f"window: {x.size} samples, expected {WINDOW}")
        self.current_sample += WINDOW
        p = float(self.stream.process(x)[0])
        return self._event(p, return_seconds, time_resolution)

    def _event(self, p: float, return_seconds: bool, time_resolution: int):
        def when(sample):
            return round(sample / SAMPLE_RATE, time_resolution) if return_seconds else int(sample)
        if p >= self.threshold and self.temp_end:
            self.temp_end = 0
        if p >= self.threshold and not self.triggered:
            self.triggered = True
            return {"start": when(max(0, self.current_sample - self.speech_pad_samples - WINDOW))}
        if p < self.threshold - 0.15 and self.triggered:
            if not self.temp_end:
                self.temp_end = self.current_sample
            if self.current_sample - self.temp_end < self.min_silence_samples:
                return None
            end = self.temp_end + self.speech_pad_samples - WINDOW
            self.temp_end = 0
            self.triggered = False
            return {"end": when(end)}
        return None


class VAD:
    """Silero VAD v6 (16 kHz). ``path``: a GGUF written by dasllama.convert.silero_vad
    (default: the shipped one). ``n_threads``: the C++ pool (one is plenty)."""

    sample_rate = SAMPLE_RATE
    window = WINDOW

    def __init__(self, path: Optional[Union[str, os.PathLike]] = None, n_threads: int = 1):
        self.path = Path(path) if path is not None else SHIPPED_MODEL
        if not isinstance(n_threads, int) or isinstance(n_threads, bool) or n_threads < 1:
            raise VADError(f"n_threads {n_threads!r} is not a positive integer")
        self._model = _core.SileroVad(str(self.path), n_threads)
        self._stats = {"audio_seconds": 0.0, "wall_seconds": 0.0, "windows": 0}
        self._stats_lock = threading.Lock()

    @property
    def stats(self) -> dict:
        """Whole-clip calls so far (streams not counted): audio_seconds, wall_seconds,
        windows."""
        with self._stats_lock:
            return dict(self._stats)

    def _probabilities(self, x: np.ndarray) -> np.ndarray:
        model = self.model
        start = time.perf_counter()
        out = model.probabilities(x)
        with self._stats_lock:
            self._stats["wall_seconds"] += time.perf_counter() - start
            self._stats["audio_seconds"] += x.size / SAMPLE_RATE
            self._stats["windows"] += int(out.size)
        return out

    @property
    def model(self):
        """The C++ model (_core.SileroVad)."""
        if self._model is None:
            raise VADError("this VAD is closed")
        return self._model

    def _samples(self, audio, sample_rate: int):
        """(16 kHz samples, step): a file is decoded and resampled (step 1); an array at a
        multiple of 16 kHz is decimated by keeping every step-th sample, as silero-vad does
        (its timestamps are then multiplied back by step); other rates raise VADError."""
        if isinstance(audio, (np.ndarray, list, tuple)):
            if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)):
                raise VADError(f"sample_rate {sample_rate!r} is not an integer")
            if sample_rate <= 0 or sample_rate % SAMPLE_RATE:
                raise VADError(f"sample_rate {sample_rate}: the model reads {SAMPLE_RATE} Hz "
                               "samples or a multiple of that rate (resample with "
                               "dasllama.audio.resample, or pass a file)")
            step = int(sample_rate) // SAMPLE_RATE
            x = _mono(audio, "audio")
            return (np.ascontiguousarray(x[::step]) if step > 1 else x), step
        try:
            return _audio.load(audio, SAMPLE_RATE), 1   # a path, bytes or a file object
        except _audio.AudioError as e:
            raise VADError(str(e)) from None

    def probabilities(self, audio, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
        """One float32 speech probability per window of 512 samples (the last partial window
        padded with zeros), from a fresh state. Empty audio raises VADError. An array at a
        multiple of 16 kHz is decimated first (silero-vad's rule)."""
        x, _ = self._samples(audio, sample_rate)
        if x.size == 0:
            raise VADError("audio: no samples")
        return self._probabilities(x)

    def stream(self) -> VadStream:
        """A fresh stream for audio that arrives in pieces (see :class:`VadStream`)."""
        return VadStream(self.model.stream())

    def iterator(self, threshold: float = 0.5, min_silence_duration_ms: int = 100,
                 speech_pad_ms: int = 30) -> VADIterator:
        """Start/end events window by window (silero-vad's VADIterator)."""
        return VADIterator(self, threshold, min_silence_duration_ms, speech_pad_ms)

    def get_speech_timestamps(self, audio, threshold: float = 0.5,
                              sample_rate: int = SAMPLE_RATE,
                              min_speech_duration_ms: int = 250,
                              max_speech_duration_s: float = float("inf"),
                              min_silence_duration_ms: int = 100, speech_pad_ms: int = 30,
                              return_seconds: bool = False, time_resolution: int = 1,
                              neg_threshold: Optional[float] = None,
                              min_silence_at_max_speech: float = 98,
                              use_max_poss_sil_at_max_speech: bool = True
                              ) -> List[Dict[str, Union[int, float]]]:
        """Speech chunks [{"start", "end"}] in samples (seconds with ``return_seconds``,
        rounded to ``time_resolution`` digits), silero-vad's names, defaults and rules. Empty
        audio gives no chunks. An array at a multiple of 16 kHz is decimated to 16 kHz and the
        sample positions given at its own rate (silero-vad's rule)."""
        x, step = self._samples(audio, sample_rate)
        _check_rules(threshold, neg_threshold, min_speech_duration_ms, max_speech_duration_s,
                     min_silence_duration_ms, speech_pad_ms, min_silence_at_max_speech)
        probs = self._probabilities(x) if x.size else np.zeros(0, np.float32)
        speeches = speech_timestamps_from_probs(
            probs.tolist(), x.size, threshold=threshold,
            min_speech_duration_ms=min_speech_duration_ms,
            max_speech_duration_s=max_speech_duration_s,
            min_silence_duration_ms=min_silence_duration_ms, speech_pad_ms=speech_pad_ms,
            neg_threshold=neg_threshold, min_silence_at_max_speech=min_silence_at_max_speech,
            use_max_poss_sil_at_max_speech=use_max_poss_sil_at_max_speech)
        if return_seconds:
            length = x.size / SAMPLE_RATE
            for s in speeches:
                s["start"] = max(round(s["start"] / SAMPLE_RATE, time_resolution), 0)
                s["end"] = min(round(s["end"] / SAMPLE_RATE, time_resolution), length)
        elif step > 1:
            for s in speeches:
                s["start"] *= step
                s["end"] *= step
        return speeches

    def speech_chunks(self, samples: np.ndarray, options=None) -> List[Dict[str, int]]:
        """faster-whisper 1.2.1's get_speech_timestamps on 16 kHz samples: its options
        (:class:`VadOptions`, a dict or None), its framing (the audio is padded to a whole
        number of windows plus one when the length is already a multiple of 512) and its cut
        rule at the maximum speech length (the last silence over 98 ms)."""
        o = vad_options(options)
        x = _mono(samples, "audio")
        padded = np.pad(x, (0, WINDOW - x.size % WINDOW))
        return self.chunks_from_probabilities(self._probabilities(padded), x.size, o)

    def chunks_from_probabilities(self, probs: Sequence[float], n_samples: int,
                                  options=None) -> List[Dict[str, int]]:
        """speech_chunks' rules on probabilities already computed (those of a clip of
        ``n_samples`` samples in faster-whisper's framing, e.g. from a stream)."""
        o = vad_options(options)
        return speech_timestamps_from_probs(
            np.asarray(probs).tolist(), n_samples, threshold=o.threshold,
            min_speech_duration_ms=o.min_speech_duration_ms,
            max_speech_duration_s=o.max_speech_duration_s,
            min_silence_duration_ms=o.min_silence_duration_ms, speech_pad_ms=o.speech_pad_ms,
            neg_threshold=o.neg_threshold, min_silence_at_max_speech=98,
            use_max_poss_sil_at_max_speech=False)

    def close(self) -> None:
        """Let the weights go; later calls raise VADError. Streams already made keep them."""
        self._model = None

    def __enter__(self) -> "VAD":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_DEFAULT: Optional[VAD] = None


def default_vad() -> VAD:
    """One shared VAD on the shipped weights (made on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = VAD()
    return _DEFAULT
