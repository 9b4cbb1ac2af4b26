"""Speech timestamps (dasllama.vad) against the packages that define them, sample for sample:

- silero-vad's (the test extra's 6.2.3) get_speech_timestamps and VADIterator, with its own
  ONNX model through its OnnxWrapper (onnxruntime), against dasllama.vad on the same weights
  (that ONNX converted by dasllama.convert.silero_vad), on the fixture clips and under
  several option sets;
- the same function fed synthetic probability patterns (runs of speech, silence and the
  hysteresis band between neg_threshold and threshold, of random lengths) through a stand-in
  model, so every rule (minimum speech and silence, padding, the cut at max_speech_duration_s)
  is compared without the model in the way;
- faster-whisper 1.2.1's get_speech_timestamps (the rules ASR's vad_filter uses: its options,
  its framing, its older cut rule), with its own model on the clips and with the stand-in on
  the patterns.

Discrete outputs: equality, no bar. Negative controls: a rule changed in a plausible way (the
padding forgotten; the cut rule of the other package) must change the chunks on the patterns.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from requires import require

FIXTURES = Path(__file__).parent / "fixtures" / "asr"
CLIPS = ["us_plain.flac", "gb_fast.flac", "long_silences.flac", "over_30s.flac",
         "noise_then_speech"]


def clip(name: str) -> np.ndarray:
    require("soundfile")
    from dasllama import audio

    if name == "noise_then_speech":
        rng = np.random.default_rng(7)
        speech = audio.load(FIXTURES / "long_silences.flac")
        noise = (0.3 * rng.standard_normal(2 * 16000 + 100)).astype(np.float32)
        return np.concatenate([noise, speech, np.zeros(5000, np.float32), speech[:40000]])
    return audio.load(FIXTURES / name)


@pytest.fixture(scope="module")
def silero():
    require("torch")
    require("onnxruntime")
    return require("silero_vad")


@pytest.fixture(scope="module")
def silero_model(silero):
    return silero.load_silero_vad(onnx=True)


@pytest.fixture(scope="module")
def package_vad(silero, tmp_path_factory):
    """dasllama.vad on the weights of the silero-vad package's ONNX (converted here)."""
    require("onnx")
    from dasllama.convert.silero_vad import convert_silero_vad
    from dasllama.vad import VAD

    return VAD(convert_silero_vad(None, tmp_path_factory.mktemp("pkg") / "package.gguf"))


@pytest.fixture(scope="module")
def vad():
    from dasllama.vad import VAD

    return VAD()


SILERO_OPTIONS = [
    {},
    {"threshold": 0.3, "min_silence_duration_ms": 300, "speech_pad_ms": 100},
    {"threshold": 0.7, "min_speech_duration_ms": 500, "speech_pad_ms": 0},
    {"max_speech_duration_s": 2.0, "min_silence_duration_ms": 50},
    {"max_speech_duration_s": 3.0, "neg_threshold": 0.2, "return_seconds": True},
    {"return_seconds": True, "time_resolution": 3, "min_silence_at_max_speech": 50},
]


@pytest.mark.parametrize("name", CLIPS)
@pytest.mark.parametrize("options", SILERO_OPTIONS, ids=lambda o: ",".join(o) or "defaults")
def test_clips_equal_silero(silero, silero_model, package_vad, name, options):
    import torch

    audio = clip(name)
    want = silero.get_speech_timestamps(torch.from_numpy(audio), silero_model, **options)
    got = package_vad.get_speech_timestamps(audio, **options)
    print(f"{name} {options}: {want}")
    assert got == want
    if not options:
        assert want, f"silero-vad finds no speech in {name}"


@pytest.mark.parametrize("options", [{}, {"return_seconds": True}])
def test_multiple_rate_equals_silero(silero, silero_model, package_vad, options):
    """An array at 48 kHz: decimated to 16 kHz, positions given at 48 kHz (silero's rule)."""
    import torch
    import warnings

    audio = np.repeat(clip("long_silences.flac"), 3) + np.float32(1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = silero.get_speech_timestamps(torch.from_numpy(audio), silero_model,
                                            sampling_rate=48000, **options)
    assert package_vad.get_speech_timestamps(audio, sample_rate=48000, **options) == want
    assert want and max(s["end"] for s in want) > (audio.size / 3 if not options else 0)


# ---------------------------------------------------------------------------------------------
# Synthetic probability patterns through a stand-in model
# ---------------------------------------------------------------------------------------------

def pattern(seed: int, n_windows: int = 600) -> np.ndarray:
    """Runs of speech (>= 0.5), silence (< 0.35) and the band between, 1..120 windows long."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n_windows:
        kind = rng.choice(3, p=[0.45, 0.4, 0.15])
        length = int(rng.integers(1, 120)) if kind != 2 else int(rng.integers(1, 6))
        lo, hi = [(0.5, 1.0), (0.0, 0.349), (0.35, 0.499)][kind]
        out += list(rng.uniform(lo, hi, length))
    p = np.array(out[:n_windows], dtype=np.float32)
    p[rng.integers(0, n_windows, 5)] = 0.5      # exactly at the threshold: counts as speech
    return p


class StandIn:
    """A model that answers a fixed probability per window (silero-vad's model interface)."""

    def __init__(self, probs):
        self.probs = probs
        self.i = 0

    def reset_states(self):
        self.i = 0

    def __call__(self, x, sr):
        import torch

        p = self.probs[self.i]
        self.i += 1
        return torch.tensor([[float(p)]])


RULE_OPTIONS = [
    {},
    {"min_speech_duration_ms": 0, "min_silence_duration_ms": 0, "speech_pad_ms": 0},
    {"min_speech_duration_ms": 500, "min_silence_duration_ms": 300, "speech_pad_ms": 100},
    {"min_silence_duration_ms": 2000, "speech_pad_ms": 400},
    {"max_speech_duration_s": 1.0},
    {"max_speech_duration_s": 3.0, "min_silence_duration_ms": 500, "speech_pad_ms": 60},
    {"max_speech_duration_s": 2.5, "min_silence_at_max_speech": 200, "threshold": 0.6,
     "neg_threshold": 0.3},
    {"threshold": 0.4},
    {"max_speech_duration_s": 1.0, "use_max_poss_sil_at_max_speech": False},
    {"max_speech_duration_s": 3.0, "use_max_poss_sil_at_max_speech": False,
     "min_silence_at_max_speech": 300},
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("options", RULE_OPTIONS, ids=lambda o: ",".join(o) or "defaults")
def test_patterns_equal_silero(silero, seed, options):
    import torch
    from dasllama.vad import speech_timestamps_from_probs

    probs = pattern(seed)
    for tail in (0, 200):    # whole windows, and a last window 200 samples short
        n = probs.size * 512 - tail
        want = silero.get_speech_timestamps(torch.zeros(n), StandIn(probs), **options)
        got = speech_timestamps_from_probs(probs.tolist(), n, **options)
        assert got == want, (seed, tail)
        assert want


def test_pattern_controls_bite(silero):
    """The comparison can fail: padding forgotten, or the other cut rule, change the chunks."""
    import torch
    from dasllama.vad import speech_timestamps_from_probs

    probs = pattern(1)
    n = probs.size * 512
    want = silero.get_speech_timestamps(torch.zeros(n), StandIn(probs))
    unpadded = speech_timestamps_from_probs(probs.tolist(), n, speech_pad_ms=0)
    assert unpadded != want
    # Two silences inside one long chunk, the longer first: the cut rules pick different ones.
    probs = np.array([0.9] * 20 + [0.1] * 20 + [0.9] * 20 + [0.1] * 8 + [0.9] * 60, np.float32)
    n = probs.size * 512
    cut = {"max_speech_duration_s": 2.5, "min_silence_duration_ms": 1000}
    want = silero.get_speech_timestamps(torch.zeros(n), StandIn(probs), **cut)
    assert want == speech_timestamps_from_probs(probs.tolist(), n, **cut)
    other = speech_timestamps_from_probs(probs.tolist(), n, use_max_poss_sil_at_max_speech=False,
                                         **cut)
    print(want, other)
    assert other != want


# ---------------------------------------------------------------------------------------------
# faster-whisper's rules (ASR's vad_filter)
# ---------------------------------------------------------------------------------------------

FW_OPTIONS = [
    {},
    {"min_silence_duration_ms": 500, "speech_pad_ms": 100},
    {"min_speech_duration_ms": 250, "min_silence_duration_ms": 100, "speech_pad_ms": 30},
    {"max_speech_duration_s": 2.0, "min_silence_duration_ms": 100, "speech_pad_ms": 30},
    {"max_speech_duration_s": 4.0, "threshold": 0.6, "neg_threshold": 0.2},
]


@pytest.mark.parametrize("name", CLIPS)
@pytest.mark.parametrize("options", FW_OPTIONS, ids=lambda o: ",".join(o) or "defaults")
def test_clips_equal_faster_whisper(vad, name, options):
    require("faster_whisper")
    from dasllama.vad import VadOptions
    from faster_whisper.vad import VadOptions as FwOptions
    from faster_whisper.vad import get_speech_timestamps

    audio = clip(name)
    want = get_speech_timestamps(audio, FwOptions(**options))
    assert vad.speech_chunks(audio, options) == want
    assert vad.speech_chunks(audio, FwOptions(**options)) == want
    assert vad.speech_chunks(audio, VadOptions(**options)) == want
    # Its framing: a length that is a whole number of windows gets one more (zero) window.
    whole = audio[:audio.size // 512 * 512]
    assert vad.speech_chunks(whole, options) == get_speech_timestamps(whole, FwOptions(**options))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("options", FW_OPTIONS + [{"max_speech_duration_s": 1.0}],
                         ids=lambda o: ",".join(o) or "defaults")
def test_patterns_equal_faster_whisper(monkeypatch, seed, options):
    require("faster_whisper")
    import faster_whisper.vad as fwv
    from dasllama.vad import VadOptions, speech_timestamps_from_probs

    probs = pattern(100 + seed)
    monkeypatch.setattr(fwv, "get_vad_model",
                        lambda: (lambda padded: probs[:padded.size // 512]))
    for tail in (1, 300):
        n = probs.size * 512 - tail
        want = fwv.get_speech_timestamps(np.zeros(n, np.float32), fwv.VadOptions(**options))
        o = VadOptions(**options)
        got = speech_timestamps_from_probs(
            probs[:-(-n // 512)].tolist(), n, threshold=o.threshold,
            neg_threshold=o.neg_threshold, min_speech_duration_ms=o.min_speech_duration_ms,
            max_speech_duration_s=o.max_speech_duration_s,
            min_silence_duration_ms=o.min_silence_duration_ms, speech_pad_ms=o.speech_pad_ms,
            use_max_poss_sil_at_max_speech=False)
        assert got == want, (seed, tail)


def test_faster_whisper_defaults_differ_from_silero():
    require("faster_whisper")
    from dasllama.vad import VAD, VadOptions
    from faster_whisper.vad import VadOptions as FwOptions
    import inspect

    assert VadOptions() == VadOptions(**vars(FwOptions()))
    sig = inspect.signature(VAD.get_speech_timestamps).parameters
    assert (sig["min_speech_duration_ms"].default, sig["min_silence_duration_ms"].default,
            sig["speech_pad_ms"].default) == (250, 100, 30)
    assert (VadOptions().min_speech_duration_ms, VadOptions().min_silence_duration_ms,
            VadOptions().speech_pad_ms) == (0, 2000, 400)


# ---------------------------------------------------------------------------------------------
# The streaming iterator
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["long_silences.flac", "noise_then_speech"])
@pytest.mark.parametrize("options", [{}, {"threshold": 0.3, "min_silence_duration_ms": 500,
                                          "speech_pad_ms": 64}])
def test_iterator_equals_silero(silero, silero_model, package_vad, name, options):
    import torch

    audio = clip(name)
    theirs = silero.VADIterator(silero_model, **options)
    ours = package_vad.iterator(**options)
    events = []
    for i in range(audio.size // 512):
        w = audio[i * 512:(i + 1) * 512]
        want = theirs(torch.from_numpy(w.copy()))
        assert ours(w) == want, i
        if want:
            events.append(want)
    print(name, events)
    assert any("start" in e for e in events) and any("end" in e for e in events)


def test_vad_options_checked():
    from dasllama.vad import VADError, vad_options

    with pytest.raises(VADError, match="min_silence_ms"):
        vad_options({"min_silence_ms": 100})
    with pytest.raises(VADError, match="threshold"):
        vad_options({"threshold": float("nan")})
    with pytest.raises(VADError, match="expected a dict"):
        vad_options(42)
    assert vad_options({"speech_pad_ms": 10}).speech_pad_ms == 10


def test_timestamps_map_back():
    """SpeechTimestampsMap against faster-whisper's on the chunks of a pattern."""
    require("faster_whisper")
    from dasllama.vad import SpeechTimestampsMap
    from faster_whisper.vad import SpeechTimestampsMap as FwMap

    chunks = [{"start": 8000, "end": 40000}, {"start": 96000, "end": 100000},
              {"start": 180000, "end": 260000}]
    ours, theirs = SpeechTimestampsMap(chunks, 16000), FwMap(chunks, 16000)
    for t, is_end in itertools.product(np.arange(0, 8.0, 0.01), (False, True)):
        assert ours.original_time(float(t), is_end=is_end) == \
            theirs.get_original_time(float(t), is_end=is_end)
    assert ours.original_time(2.0) != 2.0   # the control: the map moves times
