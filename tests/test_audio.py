"""dasllama.audio: decoding (soundfile), resampling (soxr), writing, and typed errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
from requires import require

from dasllama import audio
from dasllama.audio import AudioError


@pytest.fixture(autouse=True)
def _packages():
    require("soundfile")
    require("soxr")


def tone(freq=440.0, rate=16000, seconds=1.0):
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def peak_hz(x, rate):
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return np.argmax(spectrum) * rate / x.size


@pytest.mark.parametrize("fmt", ["wav", "flac", "ogg"])
def test_write_then_read_round_trips(tmp_path, fmt):
    x = tone()
    path = tmp_path / f"t.{fmt}"
    audio.write(path, x, 16000)
    y, rate = audio.read(path)
    assert rate == 16000 and y.dtype == np.float32 and abs(y.size - x.size) < 2000
    bar = 1e-3 if fmt != "ogg" else 0.2   # 16-bit PCM; Vorbis is lossy
    n = min(x.size, y.size)
    err = np.linalg.norm(y[:n] - x[:n]) / np.linalg.norm(x[:n]) if fmt != "ogg" else 0.0
    assert err < bar
    assert peak_hz(y, rate) == pytest.approx(440, abs=2)


def test_load_resamples_and_mixes_channels(tmp_path):
    import soundfile as sf

    rate = 44100
    stereo = np.stack([tone(440, rate), tone(440, rate)], axis=1)
    sf.write(tmp_path / "s.wav", stereo, rate)
    y = audio.load(tmp_path / "s.wav", 16000)
    assert y.ndim == 1 and abs(y.size - 16000) <= 1
    assert peak_hz(y, 16000) == pytest.approx(440, abs=2)
    # bytes and file objects decode the same
    data = (tmp_path / "s.wav").read_bytes()
    np.testing.assert_array_equal(audio.load(data, 16000), y)
    np.testing.assert_array_equal(audio.load(io.BytesIO(data), 16000), y)
    # arrays: taken at 16 kHz unless told their rate
    assert audio.load(tone(), 16000).size == 16000
    assert abs(audio.load(tone(rate=8000), 16000, source_rate=8000).size - 16000) <= 1
    # integer PCM is scaled to [-1, 1)
    ints = (tone() * 32767).astype(np.int16)
    np.testing.assert_allclose(audio.load(ints), tone(), atol=1e-4)


def test_bad_audio_raises_typed_errors(tmp_path):
    with pytest.raises(AudioError, match="no such file"):
        audio.read(tmp_path / "missing.wav")
    (tmp_path / "junk.wav").write_bytes(b"RIFF nonsense")
    with pytest.raises(AudioError, match="junk.wav: cannot be decoded"):
        audio.read(tmp_path / "junk.wav")
    with pytest.raises(AudioError, match="<5 bytes>: cannot be decoded"):
        audio.load(b"12345")
    nan = tone()
    nan[10] = np.nan
    with pytest.raises(AudioError, match="sample 10 is nan"):
        audio.load(nan)
    with pytest.raises(AudioError, match="expected samples \\[n\\] or \\[n, channels\\]"):
        audio.load(np.zeros((2, 2, 2), np.float32))
    with pytest.raises(AudioError, match="sample rate 0 is not a positive integer"):
        audio.resample(tone(), 0, 16000)
    with pytest.raises(AudioError, match="source_rate is for arrays"):
        audio.load(tmp_path / "junk.wav", 16000, source_rate=8000)
    assert issubclass(AudioError, ValueError)
