"""Silero VAD v6 on the C++ core (dasllama.vad) and the NumPy reference against onnxruntime,
window by window as silero-vad's OnnxWrapper feeds the model (the previous window's last 64
samples before each window, the LSTM state carried), on two ONNX files:

- faster-whisper 1.2.1's assets/silero_vad_v6.onnx, whose weights are the shipped ones
  (tests/test_vad_convert.py checks them tensor for tensor): the shipped model's parity;
- the silero-vad package's own silero_vad.onnx (the test extra's 6.2.3, retrained weights in
  the If-per-sample-rate graph), converted here by dasllama.convert.silero_vad: the converter
  and the C++ chain on the package's graph.

Clips: the ASR fixtures (tests/fixtures/asr: espeak-ng speech, one with long silences), 3 s
of digital silence, faint white noise, and loud noise followed by speech.

Bar: the largest absolute difference of a probability, 1e-5 (the issue's bar). Measured here
against onnxruntime's float32 on the shipped weights: C++ 1e-7 (silence, noise) to 2.9e-6 (the
35 s clip), the float64 reference 1.6e-6 to 2.3e-6. The package's retrained weights are more
sensitive to float32 rounding: there onnxruntime itself is up to 1.8e-5 from the float64
reference while C++ is within 4.6e-6 of it, so on that file C++ is held to 1e-5 against the
reference and to 5e-5 against onnxruntime (measured 1.6e-5). Negative controls (they must exceed ten times the bar):
the LSTM state and context reset at every window, and the LSTM's f and g gate blocks swapped
in the weights file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from requires import require

FIXTURES = Path(__file__).parent / "fixtures" / "asr"
SPEECH = ["us_plain.flac", "gb_fast.flac", "long_silences.flac", "over_30s.flac"]
SYNTHETIC = ["silence", "faint_noise", "noise_then_speech"]
BAR = 1e-5   # max |p - p_onnxruntime|  [measured <= 2.9e-6 C++, <= 2.3e-6 reference]
# The package's retrained weights, C++ against onnxruntime: onnxruntime's float32 is itself
# 1.8e-5 from the float64 reference there.  [measured 1.6e-5]
BAR_RETRAINED_ORT = 5e-5


def clip(name: str) -> np.ndarray:
    require("soundfile")
    from dasllama import audio

    if name == "silence":
        return np.zeros(3 * 16000, dtype=np.float32)
    rng = np.random.default_rng(7)
    if name == "faint_noise":
        return (0.003 * rng.standard_normal(4 * 16000)).astype(np.float32)
    if name == "noise_then_speech":
        speech = audio.load(FIXTURES / "us_plain.flac")
        noise = (0.3 * rng.standard_normal(2 * 16000 + 100)).astype(np.float32)
        return np.concatenate([noise, speech[:5 * 16000]])
    return audio.load(FIXTURES / name)


@pytest.fixture(scope="module")
def onnx_path():
    """The ONNX file of the shipped weights: faster-whisper's copy of Silero VAD v6."""
    require("onnxruntime")
    fw = require("faster_whisper")
    return Path(fw.__file__).parent / "assets" / "silero_vad_v6.onnx"


@pytest.fixture(scope="module")
def package_model(tmp_path_factory):
    """(the silero-vad package's ONNX, its conversion by dasllama.convert.silero_vad)."""
    require("onnxruntime")
    require("onnx")
    require("silero_vad")
    from dasllama.convert.silero_vad import convert_silero_vad, package_onnx_path

    out = convert_silero_vad(None, tmp_path_factory.mktemp("pkg") / "package.gguf")
    return package_onnx_path(), out


def onnxruntime_probs(onnx_path, audio: np.ndarray) -> np.ndarray:
    """silero-vad's OnnxWrapper loop: zero-padded last window, 64 samples of context. Both
    graph forms: inputs (input, state, sr) or (input, h, c)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(onnx_path), sess_options=opts,
                                providers=["CPUExecutionProvider"])
    split_state = "h" in [i.name for i in sess.get_inputs()]
    n = -(-audio.size // 512)
    padded = np.zeros(n * 512, np.float32)
    padded[:audio.size] = audio
    state = np.zeros((2, 1, 128), np.float32)
    context = np.zeros((1, 64), np.float32)
    out = []
    for i in range(n):
        x = np.concatenate([context, padded[None, i * 512:(i + 1) * 512]], axis=1)
        if split_state:
            p, h, c = sess.run(None, {"input": x, "h": state[:1], "c": state[1:]})
            state = np.concatenate([h, c])
        else:
            p, state = sess.run(None, {"input": x, "state": state,
                                       "sr": np.array(16000, np.int64)})
        context = x[:, -64:]
        out.append(np.asarray(p).reshape(-1)[0])
    return np.array(out, np.float32)


@pytest.fixture(scope="module")
def vad():
    from dasllama.vad import VAD

    return VAD()


@pytest.fixture(scope="module")
def swapped_gates_model(tmp_path_factory):
    """The shipped file with the LSTM's f and g blocks exchanged (a plausible converter bug)."""
    require("gguf")
    from dasllama.convert import GGUFWriter
    from dasllama.reference.silero_vad import load_weights
    from dasllama.vad import SHIPPED_MODEL
    from gguf import GGUFReader

    tensors = load_weights(SHIPPED_MODEL)
    w = GGUFWriter()
    for key, field in GGUFReader(str(SHIPPED_MODEL)).fields.items():
        if key.startswith("GGUF."):
            continue
        value = field.contents()
        w.add(key, "str" if isinstance(value, str) else "u32", value)
    for name, t in tensors.items():
        if name.startswith("lstm."):
            i, f, g, o = np.split(t, 4, axis=0)
            t = np.concatenate([i, g, f, o], axis=0)
        w.add_tensor(name, t.shape, "F32", lambda t=t: t.astype(np.float32))
    return w.write(tmp_path_factory.mktemp("vad") / "swapped.gguf")


@pytest.mark.parametrize("name", SPEECH + SYNTHETIC)
def test_probabilities_match_onnxruntime(vad, onnx_path, name):
    audio = clip(name)
    want = onnxruntime_probs(onnx_path, audio)
    got = vad.probabilities(audio)
    assert got.dtype == np.float32 and got.shape == want.shape
    err = float(np.abs(got - want).max())
    print(f"{name}: {want.size} windows, C++ max |dp| {err:.2e} (bar {BAR:.0e}); "
          f"speech windows {(want >= 0.5).sum()}")
    assert err <= BAR
    if name in SPEECH:
        assert (want >= 0.5).any() and (want < 0.5).any(), "the clip should hold both"
        # Control: no state carried across windows (each window from zeros, no context).
        s = vad.stream()
        fresh = []
        for i in range(want.size):
            s.reset()
            window = np.zeros(512, np.float32)
            part = audio[i * 512:(i + 1) * 512]
            window[:part.size] = part
            fresh.append(s.process(window)[0])
        control = float(np.abs(np.array(fresh) - want).max())
        print(f"  control: state reset every window: {control:.2e} (must be > {10 * BAR:.0e})")
        assert control > 10 * BAR


@pytest.mark.parametrize("name", ["long_silences.flac", "over_30s.flac", "noise_then_speech",
                                  "faint_noise"])
def test_package_onnx_converted_matches_onnxruntime(package_model, name):
    from dasllama.vad import VAD

    require("gguf")
    from dasllama.reference.silero_vad import ReferenceSileroVad

    onnx_file, gguf = package_model
    audio = clip(name)
    want = onnxruntime_probs(onnx_file, audio)
    got = VAD(gguf).probabilities(audio)
    ref = ReferenceSileroVad(gguf).probabilities(audio)
    err, err_ref = float(np.abs(got - want).max()), float(np.abs(got - ref).max())
    print(f"{name}: silero-vad package ONNX, converted: C++ max |dp| {err:.2e} against "
          f"onnxruntime (bar {BAR_RETRAINED_ORT:.0e}), {err_ref:.2e} against the reference "
          f"(bar {BAR:.0e}); onnxruntime against the reference {np.abs(ref - want).max():.2e}")
    assert err <= BAR_RETRAINED_ORT
    assert err_ref <= BAR


@pytest.mark.parametrize("name", ["long_silences.flac", "noise_then_speech"])
def test_swapped_gates_bite(onnx_path, swapped_gates_model, name):
    from dasllama.vad import VAD

    audio = clip(name)
    want = onnxruntime_probs(onnx_path, audio)
    err = float(np.abs(VAD(swapped_gates_model).probabilities(audio) - want).max())
    print(f"{name}: control: LSTM gates f and g swapped: {err:.2e} (must be > {10 * BAR:.0e})")
    assert err > 10 * BAR


@pytest.mark.parametrize("name", ["us_plain.flac", "long_silences.flac", "noise_then_speech"])
def test_reference_matches_onnxruntime(onnx_path, name):
    require("gguf")
    from dasllama.reference.silero_vad import ReferenceSileroVad
    from dasllama.vad import SHIPPED_MODEL

    audio = clip(name)
    want = onnxruntime_probs(onnx_path, audio)
    ref = ReferenceSileroVad(SHIPPED_MODEL)
    got = ref.probabilities(audio)
    err = float(np.abs(got - want).max())
    print(f"{name}: reference max |dp| {err:.2e} (bar {BAR:.0e})")
    assert err <= BAR
    # Control: the reference's own state carried wrongly (reset before every window).
    fresh = []
    for i in range(want.size):
        ref.reset()
        window = np.zeros(512)
        part = audio[i * 512:(i + 1) * 512]
        window[:part.size] = part
        fresh.append(ref.step(window))
    control = float(np.abs(np.array(fresh) - want).max())
    print(f"  control: reset every window: {control:.2e} (must be > {10 * BAR:.0e})")
    assert control > 10 * BAR


def test_stream_in_pieces_equals_whole_clip(vad):
    audio = clip("gb_fast.flac")
    whole = vad.probabilities(audio)
    s = vad.stream()
    rng = np.random.default_rng(3)
    got, pos = [], 0
    while pos < audio.size:
        step = int(rng.integers(0, 2000))      # pieces of 0 .. 2000 samples, window-unaligned
        got.append(s.process(audio[pos:pos + step]))
        pos += step
    got = np.concatenate(got)
    full = audio.size // 512
    assert got.size == full == s.windows
    np.testing.assert_array_equal(got, whole[:full])
    # A reset starts over: the first windows again.
    s.reset()
    np.testing.assert_array_equal(s.process(audio[:512 * 4]), whole[:4])
    # Control: a stream that skips one sample drifts from the whole-clip values.
    t = vad.stream()
    shifted = t.process(audio[1:1 + 512 * 40])
    assert np.abs(shifted - whole[:40]).max() > 10 * BAR


def test_file_paths_and_bytes_decode(vad):
    path = FIXTURES / "us_plain.flac"
    from_path = vad.probabilities(path)
    np.testing.assert_array_equal(from_path, vad.probabilities(clip("us_plain.flac")))
    np.testing.assert_array_equal(vad.probabilities(path.read_bytes()), from_path)


def test_typed_errors(vad, tmp_path):
    from dasllama.errors import DasllamaError, GGUFError
    from dasllama.vad import VAD, VADError

    good = np.zeros(1600, np.float32)
    with pytest.raises(VADError, match="sample_rate 8000"):
        vad.probabilities(good, sample_rate=8000)
    with pytest.raises(VADError, match="sample_rate 44100"):
        vad.get_speech_timestamps(good, sample_rate=44100)
    bad = good.copy()
    bad[700] = np.nan
    with pytest.raises(VADError, match="sample 700"):
        vad.probabilities(bad)
    with pytest.raises(VADError, match="sample 700"):
        vad.stream().process(bad)
    with pytest.raises(VADError, match="sample 700"):
        vad.stream().process(bad.astype(np.float64))
    with pytest.raises(VADError, match="sample 0"):
        vad.iterator()(np.full(512, np.nan))
    bad[700] = np.inf
    with pytest.raises(VADError, match="sample 700"):
        vad.get_speech_timestamps(bad)
    with pytest.raises(VADError, match="no samples"):
        vad.probabilities(np.zeros(0, np.float32))
    assert vad.get_speech_timestamps(np.zeros(0, np.float32)) == []
    with pytest.raises(VADError, match="shape"):
        vad.probabilities(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(VADError, match="no such file"):
        vad.probabilities(tmp_path / "missing.wav")
    (tmp_path / "junk.wav").write_bytes(b"not audio at all")
    with pytest.raises(VADError, match="junk.wav"):
        vad.probabilities(tmp_path / "junk.wav")
    with pytest.raises(VADError, match="threshold"):
        vad.get_speech_timestamps(good, threshold=1.5)
    with pytest.raises(VADError, match="min_silence_duration_ms"):
        vad.get_speech_timestamps(good, min_silence_duration_ms=-1)
    with pytest.raises(VADError, match="max_speech_duration_s"):
        vad.get_speech_timestamps(good, max_speech_duration_s=0)
    with pytest.raises(VADError, match="window: 100 samples"):
        vad.iterator()(np.zeros(100, np.float32))
    with pytest.raises(VADError, match="n_threads"):
        VAD(n_threads=0)
    with VAD() as closing:
        s = closing.stream()
    with pytest.raises(VADError, match="closed"):
        closing.probabilities(good)
    assert s.process(good[:1024]).shape == (2,)   # a stream keeps its model alive
    # Model files: missing, not GGUF, a GGUF of another model.
    with pytest.raises(DasllamaError):
        VAD(tmp_path / "missing.gguf")
    (tmp_path / "junk.gguf").write_bytes(b"GGUF" + b"\0" * 20)
    with pytest.raises(GGUFError):
        VAD(tmp_path / "junk.gguf")
    from dasllama.convert import GGUFWriter
    w = GGUFWriter()
    w.add("general.architecture", "str", "whisper")
    w.write(tmp_path / "other.gguf")
    with pytest.raises(GGUFError, match="silero_vad"):
        VAD(tmp_path / "other.gguf")
    # The C++ binding names the array at fault.
    from dasllama.errors import ShapeError
    with pytest.raises(ShapeError, match="multiple of the window"):
        vad.model.stream().process(np.zeros(100, np.float32))


def test_threads_share_one_model(vad):
    """Calls from several threads (the GIL released in C++) give the sequential results."""
    import threading

    clips = [clip(n) for n in ("us_plain.flac", "gb_fast.flac", "noise_then_speech")]
    want = [vad.probabilities(c) for c in clips]
    got = [None] * (2 * len(clips))
    def work(i):
        got[i] = vad.probabilities(clips[i % len(clips)])
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(got))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want[i % len(clips)])


def test_stats_count_whole_clip_calls():
    from dasllama.vad import VAD

    v = VAD()
    assert v.stats == {"audio_seconds": 0.0, "wall_seconds": 0.0, "windows": 0}
    v.probabilities(np.zeros(16000, np.float32))
    v.get_speech_timestamps(np.zeros(1024, np.float32))
    st = v.stats
    assert st["windows"] == 32 + 2 and st["audio_seconds"] == pytest.approx(1.064)
    assert st["wall_seconds"] > 0
