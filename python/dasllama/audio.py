"""Reading, resampling and writing audio, shared by speech recognition, synthesis and the
server.

::

    from dasllama import audio
    samples = audio.load("talk.mp3", sample_rate=16000)   # float32 mono at 16 kHz
    samples, rate = audio.read("talk.flac")                # float32 mono at the file's rate
    audio.write("out.wav", samples, 24000)
    stream = audio.open_stream("three_hours.flac", 16000)  # the same samples, block by block
    for block in stream.blocks(): ...                      # each pass decodes from the start

Decoding goes through soundfile (libsndfile): WAV, FLAC, OGG Vorbis/Opus and MP3 (libsndfile
1.1 and later, which soundfile's wheels bundle), from a path or a file-like object (an upload),
straight to float32, in a wheel of about a megabyte with no FFmpeg. (PyAV, which faster-whisper
uses, reads every container FFmpeg knows, at 60+ MB of libraries.) Resampling goes through
soxr (the SoX resampler, "HQ" quality), the same family of filter sox itself applies.
Both packages are imported on first use, so the rest of dasllama does not need them.

A long file need not be held whole: :func:`open_stream` decodes it a block at a time and
resamples each block through soxr's streaming resampler, whose output is the one-shot
resampling's, sample for sample; every :meth:`AudioStream.blocks` pass starts again from the
beginning (a path is reopened, bytes and seekable file objects are reread).

Several channels are averaged to one. Every problem (an unreadable or undecodable file, a
sample rate that is not a positive integer, NaN or infinite samples, an array of the wrong
shape) raises :class:`AudioError` naming the source and what is wrong.
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO, Iterator, Optional, Tuple, Union

import numpy as np

from .errors import DasllamaError

__all__ = ["AudioError", "AudioStream", "read", "load", "open_stream", "resample", "write",
           "as_mono_float32"]

Source = Union[str, os.PathLike, bytes, BinaryIO]
# Frames per block a stream decodes at a time: 2^16 frames is 1.4-4 s of audio, a few hundred
# KB however long the file.
STREAM_BLOCK = 1 << 16


class AudioError(DasllamaError, ValueError):
    """Audio that cannot be decoded or used; the message names the source and the problem."""


def _name(source) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    if isinstance(source, (bytes, bytearray)):
        return f"<{len(source)} bytes>"
    return getattr(source, "name", None) or "<file object>"


def _soundfile():
    try:
        import soundfile
    except ImportError as e:  # pragma: no cover - the asr extra installs it
        raise AudioError(f"decoding audio files needs the soundfile package "
                         f"(pip install soundfile): {e}") from None
    return soundfile


def as_mono_float32(samples, what: str = "audio", first: int = 0) -> np.ndarray:
    """``samples`` as a 1-D float32 array: [n] stays, [n, channels] is averaged over channels.
    Raises AudioError for other shapes and for NaN or infinite values (naming the sample's
    index, counted from ``first``: a block's place in a stream)."""
    a = np.asarray(samples)
    if a.dtype.kind not in "fiu":
        raise AudioError(f"{what}: samples of dtype {a.dtype} are not numbers")
    if a.dtype.kind in "iu":   # integer PCM: scale to [-1, 1)
        a = a.astype(np.float32) / float(np.iinfo(a.dtype).max + 1)
    if a.ndim == 2:
        a = a.mean(axis=1)
    elif a.ndim != 1:
        raise AudioError(f"{what}: expected samples [n] or [n, channels], got shape {a.shape}")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if a.size and not np.isfinite(a).all():
        bad = int(np.flatnonzero(~np.isfinite(a))[0])
        raise AudioError(f"{what}: sample {first + bad} is {a[bad]} (samples must be finite)")
    return a


def read(source: Source) -> Tuple[np.ndarray, int]:
    """Decode ``source`` (a path, bytes or a binary file object) to float32 mono samples and
    the file's sample rate."""
    sf = _soundfile()
    name = _name(source)
    data = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source
    if isinstance(source, (str, os.PathLike)) and not os.path.isfile(source):
        raise AudioError(f"{name}: no such file")
    try:
        samples, rate = sf.read(data, dtype="float32", always_2d=True)
    except FileNotFoundError:
        raise AudioError(f"{name}: no such file") from None
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError, OSError) as e:
        raise AudioError(f"{name}: cannot be decoded as audio ({e})") from None
    return as_mono_float32(samples, name), int(rate)


def _soxr():
    try:
        import soxr
    except ImportError as e:  # pragma: no cover - the asr extra installs it
        raise AudioError(f"resampling needs the soxr package (pip install soxr): {e}") from None
    return soxr


def _check_rate(what: str, r) -> None:
    if not isinstance(r, (int, np.integer)) or isinstance(r, bool) or r <= 0:
        raise AudioError(f"the {what} sample rate {r!r} is not a positive integer")


def resample(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """``samples`` (float32 mono) from ``rate_in`` to ``rate_out`` Hz with soxr, HQ."""
    for what, r in (("input", rate_in), ("output", rate_out)):
        _check_rate(what, r)
    samples = as_mono_float32(samples)
    if rate_in == rate_out or samples.size == 0:
        return samples
    return np.ascontiguousarray(_soxr().resample(samples, int(rate_in), int(rate_out), "HQ"),
                                dtype=np.float32)


def load(source: Union[Source, np.ndarray], sample_rate: int = 16000,
         source_rate: Optional[int] = None) -> np.ndarray:
    """Float32 mono samples at ``sample_rate``: a file (path, bytes or file object) is decoded
    and resampled; an array is taken as samples at ``source_rate`` (default: already at
    ``sample_rate``, as faster-whisper takes arrays)."""
    if isinstance(source, np.ndarray) or (isinstance(source, (list, tuple))):
        samples = as_mono_float32(source, "the audio array")
        rate = sample_rate if source_rate is None else source_rate
    else:
        if source_rate is not None:
            raise AudioError(f"{_name(source)}: source_rate is for arrays; a file carries its "
                             "own rate")
        samples, rate = read(source)
    return resample(samples, rate, sample_rate)


class AudioStream:
    """Float32 mono samples at ``sample_rate`` from a file (a path, bytes or a binary file
    object) or an array (at ``source_rate``, default ``sample_rate``), a block at a time:
    :meth:`blocks` yields the same samples :func:`load` returns, from the start on every
    call. Opening checks that a file decodes (AudioError else) and reads its rate; a file
    object that cannot seek is read into memory once (its encoded bytes). ``name`` names the
    source as errors do."""

    def __init__(self, source: Union[Source, np.ndarray], sample_rate: int = 16000,
                 source_rate: Optional[int] = None, block: int = STREAM_BLOCK):
        _check_rate("output", sample_rate)
        self.sample_rate = int(sample_rate)
        self.block = int(block)
        self._array: Optional[np.ndarray] = None
        if isinstance(source, (np.ndarray, list, tuple)):
            self.name = "the audio array"
            self._array = as_mono_float32(source, self.name)
            rate = sample_rate if source_rate is None else source_rate
            _check_rate("input", rate)
            self.source_rate = int(rate)
            return
        self.name = _name(source)
        if source_rate is not None:
            raise AudioError(f"{self.name}: source_rate is for arrays; a file carries its own "
                             "rate")
        self._reopen = self._opener(source)
        with self._open() as f:
            self.source_rate = int(f.samplerate)

    def _opener(self, source):
        """A function giving a fresh file-like view of the source at its start."""
        if isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            if not os.path.isfile(path):
                raise AudioError(f"{self.name}: no such file")
            return lambda: path
        if isinstance(source, (bytes, bytearray)):
            data = bytes(source)
            return lambda: io.BytesIO(data)
        try:
            start = source.tell() if source.seekable() else None
        except (AttributeError, OSError, ValueError):
            start = None
        if start is None:   # a pipe or socket: its bytes read once
            data = source.read()
            if not isinstance(data, (bytes, bytearray)):
                raise AudioError(f"{self.name}: not a binary file object")
            return lambda: io.BytesIO(data)

        def rewound():
            source.seek(start)
            return source
        return rewound

    def _open(self):
        sf = _soundfile()
        try:
            return sf.SoundFile(self._reopen())
        except FileNotFoundError:
            raise AudioError(f"{self.name}: no such file") from None
        except (sf.LibsndfileError, RuntimeError, TypeError, ValueError, OSError) as e:
            raise AudioError(f"{self.name}: cannot be decoded as audio ({e})") from None

    def _source_blocks(self) -> Iterator[Tuple[np.ndarray, bool]]:
        """(mono float32 block at the source rate, whether it is the last) pairs."""
        if self._array is not None:
            n = self._array.size
            for i in range(0, max(n, 1), self.block):
                yield self._array[i:i + self.block], i + self.block >= n
            return
        sf = _soundfile()
        with self._open() as f:
            done = 0
            while True:
                try:
                    x = f.read(self.block, dtype="float32", always_2d=True)
                except (sf.LibsndfileError, RuntimeError, ValueError, OSError) as e:
                    raise AudioError(f"{self.name}: cannot be decoded as audio after sample "
                                     f"{done} ({e})") from None
                last = x.shape[0] < self.block
                yield as_mono_float32(x, self.name, first=done), last
                done += x.shape[0]
                if last:
                    return

    def blocks(self) -> Iterator[np.ndarray]:
        """The samples at ``sample_rate`` from the start, in blocks (none empty)."""
        resampler = None
        if self.source_rate != self.sample_rate:
            resampler = _soxr().ResampleStream(self.source_rate, self.sample_rate, 1,
                                               dtype="float32", quality="HQ")
        for x, last in self._source_blocks():
            if resampler is not None:
                x = np.ascontiguousarray(resampler.resample_chunk(x, last=last),
                                         dtype=np.float32)
            if x.size:
                yield x


def open_stream(source: Union[Source, np.ndarray], sample_rate: int = 16000,
                source_rate: Optional[int] = None) -> AudioStream:
    """An :class:`AudioStream` of ``source`` (as :func:`load` takes it) at ``sample_rate``."""
    return AudioStream(source, sample_rate, source_rate)


def write(path: Union[str, os.PathLike, BinaryIO], samples, sample_rate: int,
          format: Optional[str] = None) -> None:
    """Write float32 mono ``samples`` (16-bit PCM for WAV and FLAC) to ``path``; ``format``
    (WAV, FLAC, OGG, ...) defaults to the file name's extension."""
    sf = _soundfile()
    samples = as_mono_float32(samples)
    if not isinstance(sample_rate, (int, np.integer)) or sample_rate <= 0:
        raise AudioError(f"the sample rate {sample_rate!r} is not a positive integer")
    fmt = (format or os.path.splitext(_name(path))[1].lstrip(".") or "WAV").upper()
    subtype = "PCM_16" if fmt in ("WAV", "FLAC") else None
    try:
        sf.write(path, samples, int(sample_rate), format=fmt, subtype=subtype)
    except (sf.LibsndfileError, RuntimeError, TypeError, ValueError) as e:
        raise AudioError(f"{_name(path)}: cannot write {fmt} audio ({e})") from None
