"""Long audio in bounded memory for :mod:`dasllama.asr`: a clip's log-mel windows from a stream.

A transcription never holds its whole clip. The samples come from a
:class:`dasllama.audio.AudioStream` (a file decoded and resampled block by block, or an array
sliced), and the log-mel frames are computed a stretch at a time, as the window loop asks for
them, and let go once the loop has seeked past them. Whisper clamps the log-mel to the clip's
maximum - 8 (csrc/asr/whisper/mel.h), which the clip's first window already depends on, so the
front end takes two passes over the stream: :func:`scan` for the clip's length and its largest
log-mel value, then :class:`MelFrames` for the frames themselves. Both compute the same
stretches of :data:`STRETCH_FRAMES` frames that ``WhisperModel.log_mel`` computes in one pass
over a whole clip, with the same samples, so the frames are the same numbers.

With the VAD filter, a first pass gives Silero's speech chunks (:func:`speech_chunks`, the
probabilities from a VAD stream), and :class:`SpeechStream` yields only the samples inside
them: the concatenated speech that faster-whisper transcribes, never concatenated in memory.

Memory: a stretch of samples (30 s, 1.9 MB at 16 kHz), a decoded block, and at most three
stretches of frames (0.96 MB each for 80 bins), however long the clip.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional

import numpy as np

__all__ = ["STRETCH_FRAMES", "Scan", "scan", "MelFrames", "SpeechStream", "speech_chunks"]

# Frames per stretch of the front end: csrc/asr/whisper/mel.h's kChunkFrames (one 30 s window).
# The same stretches as the one-pass front end keep the frames bit for bit the same.
STRETCH_FRAMES = 3000


class Scan:
    """What the first pass over a clip found: its sample count and its largest (unclamped)
    log-mel value (None for a clip with no frames to decode)."""

    def __init__(self, n_samples: int, top: Optional[float]):
        self.n_samples = n_samples
        self.top = top


class _Frames:
    """Stretch k of a clip's frames, [k * STRETCH_FRAMES, ...), from its samples in order: the
    samples a stretch needs are kept (the stretch's frames reach half an FFT window on each
    side) and those no later stretch needs are dropped."""

    def __init__(self, model, blocks: Iterator[np.ndarray], hop: int, n_fft: int):
        self._model = model
        self._blocks = blocks
        self._hop = hop
        self._half = n_fft // 2
        self._parts: List[np.ndarray] = []   # samples [start, end) not yet dropped
        self.start = 0
        self.end = 0
        self.ended = False

    def read_until(self, sample: int) -> None:
        """Reads blocks until sample `sample` is at hand or the stream ends."""
        while self.end <= sample and not self.ended:
            block = next(self._blocks, None)
            if block is None:
                self.ended = True
            else:
                self._parts.append(block)
                self.end += block.size

    def needs(self, k: int) -> int:
        """The last sample index stretch k reads, when the clip is longer."""
        return ((k + 1) * STRETCH_FRAMES - 1) * self._hop + self._half - 1

    def stretch(self, k: int, n_samples: int, top: Optional[float]) -> np.ndarray:
        """Stretch k's frames [n_mels, frames], clamped with `top` (raw log10 when None), of
        a clip of n_samples samples (or more: a stretch that ends before the clip's last
        samples does not depend on its length)."""
        n_frames = n_samples // self._hop + 1
        f0 = k * STRETCH_FRAMES
        nf = min(STRETCH_FRAMES, n_frames - f0)
        if len(self._parts) > 1:
            self._parts = [np.concatenate(self._parts)]
        held = self._parts[0] if self._parts else np.zeros(0, np.float32)
        out = self._model.log_mel_frames(held, self.start, n_samples, f0, nf, top)
        keep_from = max(0, (f0 + nf) * self._hop - self._half)   # the next stretch's first
        if keep_from > self.start:
            self._parts = [held[keep_from - self.start:]] if keep_from < self.end else []
            self.start = min(keep_from, self.end)
        return out


def scan(model, stream, hop: int, n_fft: int, lock=None) -> Scan:
    """The first pass over ``stream`` (an object with ``blocks()``): the clip's sample count and
    the largest of its log-mel values before the clamp, computed a stretch at a time. ``model``
    is the C++ WhisperModel; ``lock`` (optional) is held around each of its calls."""
    frames = _Frames(model, iter(stream.blocks()), hop, n_fft)
    top = -np.inf
    k = 0
    while True:
        frames.read_until(frames.needs(k) + 1)   # one sample past: the stretch is not the end
        if frames.ended:
            break
        top = max(top, float(_locked(lock, frames.stretch, k, frames.end, None).max()))
        k += 1
    n = frames.end
    if n // hop == 0:   # no frame to decode: the window loop stops before the front end
        return Scan(n, None)
    while k * STRETCH_FRAMES < n // hop + 1:
        top = max(top, float(_locked(lock, frames.stretch, k, n, None).max()))
        k += 1
    return Scan(n, top)


def _locked(lock, fn, *args):
    if lock is None:
        return fn(*args)
    with lock:
        return fn(*args)


class MelFrames:
    """The second pass: a clip's log-mel frames, clamped to the scan's maximum, handed out in
    order of the window loop's seeks. ``frames(start, count)`` gives frames [start, start +
    count) as [n_mels, count]; a later call may not start before an earlier one (the frames
    before it are gone)."""

    def __init__(self, model, stream, clip: Scan, hop: int, n_fft: int, lock=None):
        self._frames = _Frames(model, iter(stream.blocks()), hop, n_fft)
        self._clip = clip
        self._lock = lock
        self.n_frames = clip.n_samples // hop + 1   # the front end's frames, the last included
        self._stretches: Dict[int, np.ndarray] = {}
        self._next = 0          # the next stretch to compute
        self._floor = 0         # no frame before this one is asked for again

    def _stretch(self, k: int) -> np.ndarray:
        while self._next <= k:
            f = self._frames
            f.read_until(f.needs(self._next))
            self._stretches[self._next] = _locked(self._lock, f.stretch, self._next,
                                                  self._clip.n_samples, self._clip.top)
            self._next += 1
        return self._stretches[k]

    def frames(self, start: int, count: int) -> np.ndarray:
        if start < self._floor or count < 0 or start + count > self.n_frames:
            raise ValueError(f"log-mel frames [{start}, {start + count}) of a clip of "
                             f"{self.n_frames} frames, after frame {self._floor}")
        self._floor = start
        for k in [k for k in self._stretches if (k + 1) * STRETCH_FRAMES <= start]:
            del self._stretches[k]
        if count == 0:
            return np.zeros((0, 0), np.float32)
        k0, k1 = start // STRETCH_FRAMES, (start + count - 1) // STRETCH_FRAMES
        parts = [self._stretch(k) for k in range(k0, k1 + 1)]
        joined = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        offset = start - k0 * STRETCH_FRAMES
        return joined[:, offset:offset + count]


class SpeechStream:
    """The samples of ``stream`` inside ``chunks`` ([{"start", "end"}] sample ranges, in order,
    not overlapping), one after another: the VAD filter's concatenated speech, as
    :func:`dasllama.vad.collect_chunks` would join them, a block at a time."""

    def __init__(self, stream, chunks: List[Dict[str, int]]):
        self._stream = stream
        self._chunks = [(int(c["start"]), int(c["end"])) for c in chunks]
        self.n_samples = sum(b - a for a, b in self._chunks)

    def blocks(self) -> Iterator[np.ndarray]:
        if not self._chunks:
            return
        i, pos = 0, 0
        for block in self._stream.blocks():
            end = pos + block.size
            while i < len(self._chunks) and self._chunks[i][0] < end:
                a, b = self._chunks[i]
                part = block[max(a, pos) - pos:min(b, end) - pos]
                if part.size:
                    yield part
                if b > end:
                    break       # the chunk goes on in the next block
                i += 1
            if i == len(self._chunks):
                return
            pos = end


def speech_chunks(vad, stream, options) -> tuple:
    """faster-whisper 1.2.1's speech chunks of ``stream`` (the VAD's ``speech_chunks`` on the
    whole clip, computed from the stream): (chunks, the clip's sample count). The
    probabilities come from one VAD stream fed block by block, with faster-whisper's
    framing (the clip padded to whole windows, plus a window of zeros when its length is a
    multiple of the window already)."""
    from . import vad as _vad

    s = vad.stream()
    probs: List[np.ndarray] = []
    n = 0
    for block in stream.blocks():
        probs.append(s.process(block))
        n += block.size
    probs.append(s.process(np.zeros(_vad.WINDOW - n % _vad.WINDOW, np.float32)))
    return vad.chunks_from_probabilities(np.concatenate(probs), n, options), n
