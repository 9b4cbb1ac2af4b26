"""Reading, resampling and writing audio, shared by speech recognition, synthesis and the
server.

::

    from dasllama import audio
    samples = audio.load("talk.mp3", sample_rate=16000)   # float32 mono at 16 kHz
    samples, rate = audio.read("talk.flac")                # float32 mono at the file's rate
    audio.write("out.wav", samples, 24000)

Decoding goes through soundfile (libsndfile): WAV, FLAC, OGG Vorbis/Opus and MP3 (libsndfile
1.1 and later, which soundfile's wheels bundle), from a path or a file-like object (an upload),
straight to float32, in a wheel of about a megabyte with no FFmpeg. (PyAV, which faster-whisper
uses, reads every container FFmpeg knows, at 60+ MB of libraries.) Resampling goes through
soxr (the SoX resampler, "HQ" quality), the same family of filter sox itself applies.
Both packages are imported on first use, so the rest of dasllama does not need them.

Several channels are averaged to one. Every problem (an unreadable or undecodable file, a
sample rate that is not a positive integer, NaN or infinite samples, an array of the wrong
shape) raises :class:`AudioError` naming the source and what is wrong.
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO, Optional, Tuple, Union

import numpy as np

from .errors import DasllamaError

__all__ = ["AudioError", "read", "load", "resample", "write", "as_mono_float32"]

Source = Union[str, os.PathLike, bytes, BinaryIO]


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


def as_mono_float32(samples, what: str = "audio") -> np.ndarray:
    """``samples`` as a 1-D float32 array: [n] stays, [n, channels] is averaged over channels.
    Raises AudioError for other shapes and for NaN or infinite values."""
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
        raise AudioError(f"{what}: sample {bad} is {a[bad]} (samples must be finite)")
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


def resample(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """``samples`` (float32 mono) from ``rate_in`` to ``rate_out`` Hz with soxr, HQ."""
    for what, r in (("input", rate_in), ("output", rate_out)):
        if not isinstance(r, (int, np.integer)) or isinstance(r, bool) or r <= 0:
            raise AudioError(f"the {what} sample rate {r!r} is not a positive integer")
    samples = as_mono_float32(samples)
    if rate_in == rate_out or samples.size == 0:
        return samples
    try:
        import soxr
    except ImportError as e:  # pragma: no cover - the asr extra installs it
        raise AudioError(f"resampling needs the soxr package (pip install soxr): {e}") from None
    return np.ascontiguousarray(soxr.resample(samples, int(rate_in), int(rate_out), "HQ"),
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
