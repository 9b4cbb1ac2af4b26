"""Long audio in bounded memory (dasllama.asr_stream, dasllama.audio.AudioStream): the streamed
samples and log-mel frames are the one-pass ones bit for bit, and a transcription of a 20 min
file grows the process by a few MB rather than by the file's samples.

The random-weight model keeps Whisper's front end (80 bins, 30 s windows) with small widths,
so a 20 min transcription takes seconds.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dasllama import _core, asr_stream, audio
from dasllama.convert.whisper import convert_whisper

RATE, HOP, N_FFT = 16000, 160, 400
STRETCH = asr_stream.STRETCH_FRAMES


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    from dasllama.testing.whisper import write_random_whisper_dir

    folder = write_random_whisper_dir(tmp_path_factory.mktemp("rw") / "model", seed=7)
    return convert_whisper(folder, folder.parent / "random-whisper.gguf")


@pytest.fixture(scope="module")
def model(model_path):
    return _core.WhisperModel(str(model_path), 2)


def long_clip(seconds_quiet=40, seconds_loud=35, tail=3 * RATE + 77) -> np.ndarray:
    """Faint noise, then loud noise (the clip's maximum is in the second stretch), then zeros
    ending inside the third stretch."""
    rng = np.random.default_rng(3)
    return np.concatenate([0.01 * rng.standard_normal(seconds_quiet * RATE),
                           0.3 * rng.standard_normal(seconds_loud * RATE),
                           np.zeros(tail)]).astype(np.float32)


def streamed_mel(model, stream, step=1234, top=None) -> np.ndarray:
    """All frames of the stream's clip through scan + MelFrames, asked for `step` at a time
    (as seeks do); `top` overrides the scan's maximum (for the control)."""
    clip = asr_stream.scan(model, stream, HOP, N_FFT)
    if top is not None:
        clip = asr_stream.Scan(clip.n_samples, top)
    mel = asr_stream.MelFrames(model, stream, clip, HOP, N_FFT)
    parts, start = [], 0
    while start < mel.n_frames:
        count = min(step, mel.n_frames - start)
        parts.append(np.array(mel.frames(start, count)))
        start += count
    return np.concatenate(parts, axis=1)


@pytest.mark.parametrize("block", [1000, 65536, 2_000_000])
def test_streamed_mel_is_the_one_pass_mel(model, block):
    samples = long_clip()
    want = model.log_mel(samples)
    assert want.shape[1] > 2 * STRETCH          # three stretches, the last one partial
    got = streamed_mel(model, audio.AudioStream(samples, RATE, block=block))
    assert got.shape == want.shape
    assert np.array_equal(got, want)


def test_streamed_mel_control_clamp_of_the_first_stretch_differs(model):
    """The clamp must see the clip's maximum, which only the second stretch holds: frames
    clamped with the first stretch's maximum are not the one-pass frames."""
    samples = long_clip()
    want = model.log_mel(samples)
    first = float(model.log_mel_frames(samples, 0, samples.size, 0, STRETCH).max())
    got = streamed_mel(model, audio.AudioStream(samples, RATE), top=first)
    assert np.abs(got - want).max() > 0.1


def test_frames_outside_the_span_are_refused(model):
    samples = long_clip()
    span = samples[10 * RATE:40 * RATE]
    with pytest.raises(ValueError, match="outside the"):   # needs samples before the span
        model.log_mel_frames(span, 10 * RATE, samples.size, 0, 100)
    with pytest.raises(ValueError, match="frames"):
        model.log_mel_frames(span, 10 * RATE, samples.size, 8000, 10**6)


def test_short_clips_scan_and_stream(model):
    """A clip shorter than a hop has no frame to decode (scan says so); one stretch or less
    equals log_mel."""
    assert asr_stream.scan(model, audio.AudioStream(np.zeros(100, np.float32)), HOP,
                           N_FFT).top is None
    rng = np.random.default_rng(4)
    for n in (161, 5 * RATE + 3, (STRETCH - 1) * HOP + 10):
        x = (0.1 * rng.standard_normal(n)).astype(np.float32)
        assert np.array_equal(streamed_mel(model, audio.AudioStream(x, RATE, block=999)),
                              model.log_mel(x))


@pytest.fixture(scope="module")
def stereo_flac(tmp_path_factory):
    rng = np.random.default_rng(5)
    x = (0.2 * rng.standard_normal((44100 * 9 + 17, 2))).astype(np.float32)
    path = tmp_path_factory.mktemp("a") / "stereo.flac"
    import soundfile
    soundfile.write(path, x, 44100, subtype="PCM_16")   # audio.write writes mono only
    return path


class _Pipe(io.RawIOBase):
    """A file object that cannot seek (an upload read from a socket)."""

    def __init__(self, data: bytes):
        self._b = io.BytesIO(data)

    def readable(self):
        return True

    def seekable(self):
        return False

    def readinto(self, buf):
        chunk = self._b.read(len(buf))
        buf[:len(chunk)] = chunk
        return len(chunk)


@pytest.mark.parametrize("block", [1000, 65536, 44100 * 9 + 17])
def test_audio_stream_is_load_sample_for_sample(stereo_flac, block):
    """Decoded and resampled block by block (44.1 kHz stereo -> 16 kHz mono), every pass."""
    want = audio.load(stereo_flac, RATE)
    data = stereo_flac.read_bytes()
    seekable = io.BytesIO(data)
    for source in (stereo_flac, data, seekable, _Pipe(data)):
        stream = audio.AudioStream(source, RATE, block=block)
        for _ in range(2):
            got = np.concatenate(list(stream.blocks()))
            assert got.shape == want.shape and np.array_equal(got, want)
    assert not seekable.closed


def test_audio_stream_errors_name_the_source(tmp_path):
    with pytest.raises(audio.AudioError, match="no such file"):
        audio.AudioStream(tmp_path / "missing.wav")
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF not really")
    with pytest.raises(audio.AudioError, match="bad.wav: cannot be decoded"):
        audio.AudioStream(bad)
    x = np.zeros(70000, np.float32)
    x[66000] = np.nan
    with pytest.raises(audio.AudioError, match="sample 66000 is nan"):
        list(audio.AudioStream(x, RATE).blocks())
    nan_file = tmp_path / "nan.wav"
    import soundfile
    soundfile.write(nan_file, x, RATE, subtype="FLOAT")
    with pytest.raises(audio.AudioError, match="sample 66000 is nan"):
        list(audio.AudioStream(nan_file, RATE, block=4096).blocks())


def test_speech_stream_is_collect_chunks():
    from dasllama import vad

    x = long_clip()
    chunks = [{"start": 5, "end": 900}, {"start": 1000, "end": 1001},
              {"start": 65000, "end": 140000}, {"start": 200000, "end": 1_000_000},
              {"start": x.size - 10, "end": x.size}]
    want = vad.collect_chunks(x, chunks)
    for block in (1000, 65536, x.size):
        s = asr_stream.SpeechStream(audio.AudioStream(x, RATE, block=block), chunks)
        got = np.concatenate(list(s.blocks()))
        assert s.n_samples == want.size and np.array_equal(got, want)
    assert list(asr_stream.SpeechStream(audio.AudioStream(x), []).blocks()) == []


def test_streamed_vad_chunks_are_the_whole_clip_ones():
    """Speech probabilities from a VAD stream fed block by block give faster-whisper's chunks
    of the whole clip (the fixture with long silences, and its length a multiple of 512)."""
    from pathlib import Path

    from dasllama import vad

    clip = audio.load(Path(__file__).parent / "fixtures" / "asr" / "long_silences.flac", RATE)
    v = vad.default_vad()
    for x in (clip, clip[:clip.size - clip.size % 512]):
        want = v.speech_chunks(x, None)
        assert len(want) >= 2
        got, n = asr_stream.speech_chunks(v, audio.AudioStream(x, RATE, block=7000), None)
        assert n == x.size and got == want


_RSS_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from dasllama import ASR, audio
    path, model, mode = sys.argv[1:4]
    def mib(key):                     # the process's resident (VmRSS) or peak (VmHWM) size
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    asr = ASR(model, n_threads=2)
    short = np.zeros(16000 * 40, np.float32)            # warm-up: every buffer of a window
    short[::97] = 0.1
    list(asr.transcribe(short, temperature=0.0)[0])
    del short
    with open("/proc/self/clear_refs", "w") as f:       # the peak starts again from here
        f.write("5")
    before = mib("VmRSS")
    source = path if mode == "file" else audio.load(path, 16000)
    segments, info = asr.transcribe(source, temperature=0.0)
    n = sum(1 for _ in segments)
    print(json.dumps(dict(grown_mib=mib("VmHWM") - before, duration=info.duration,
                          windows=asr.stats["windows"], segments=n)))
""")


def _peak_growth(path, model_path, mode) -> dict:
    out = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(path), str(model_path), mode],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="reads the peak resident size from Linux's /proc/self/status")
def test_twenty_minute_file_in_bounded_memory(tmp_path, model_path):
    """20 min of tone and noise in an 8 kHz WAV (resampled on the way): its 16 kHz samples
    are 73 MiB and its log-mel 37 MiB, the streamed transcription's peak grows by a few MiB.
    Control: the same measurement of a transcription of the samples loaded whole sees them
    (the bar is far below what it measures)."""
    seconds, rate = 20 * 60, 8000
    t = np.arange(seconds * rate) / rate
    rng = np.random.default_rng(6)
    x = (0.2 * np.sin(2 * np.pi * 440 * t) * (np.sin(2 * np.pi * t / 17) > 0)
         + 0.02 * rng.standard_normal(t.size)).astype(np.float32)
    path = tmp_path / "long.wav"
    audio.write(path, x, rate)
    del t, x
    streamed = _peak_growth(path, model_path, "file")
    assert streamed["duration"] == pytest.approx(seconds, abs=0.01)
    assert streamed["windows"] >= 40                 # every 30 s window was decoded
    bar_mib = 24
    assert streamed["grown_mib"] < bar_mib, streamed
    held = _peak_growth(path, model_path, "array")
    assert held["windows"] == streamed["windows"]
    assert held["grown_mib"] > 3 * bar_mib, held    # control: 73 MiB of samples in memory


def test_a_file_transcribes_as_its_samples_do(tmp_path, model_path):
    """A 65 s file at 22.05 kHz, streamed (path, bytes), gives the segments of its samples
    loaded whole (the window loop, seeks and prompts on the streamed frames); with the VAD
    filter too."""
    from dasllama import ASR

    rng = np.random.default_rng(8)
    rate = 22050
    x = np.concatenate([0.2 * rng.standard_normal(30 * rate), np.zeros(10 * rate),
                        0.1 * rng.standard_normal(25 * rate)]).astype(np.float32)
    path = tmp_path / "clip.flac"
    audio.write(path, x, rate)
    asr = ASR(model_path, n_threads=2)
    samples = audio.load(path, RATE)

    def run(source, **kw):
        segments, info = asr.transcribe(source, temperature=0.0, **kw)
        return [(s.seek, s.start, s.end, s.tokens) for s in segments], info.duration

    for kw in ({}, {"vad_filter": True, "vad_parameters": {"min_silence_duration_ms": 500}}):
        windows = asr.stats["windows"]
        want, duration = run(samples, **kw)
        assert duration == pytest.approx(65.0, abs=1e-3)
        if not kw:
            assert asr.stats["windows"] - windows >= 3      # 65 s: three windows at least
        for source in (path, path.read_bytes()):
            assert run(source, **kw) == (want, duration)
