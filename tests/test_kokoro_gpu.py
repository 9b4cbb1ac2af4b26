"""Kokoro's vocoder seat (csrc/tts/kokoro/gpu_vocoder.h): the decoder and generator on the test
device (lavapipe in CI), the predictor on the CPU, against the CPU chain on the same ids, style
and speed; its admission rule without a model; its declines falling back to the CPU.

Bar: the seat computes in float32 with the int8 weights dequantized once, where the CPU chain
quantizes every convolution's activations to int8 on the fly; the audio differs from the CPU's
by that quantization noise carried through ~60 convolutions. Measured on lavapipe (real int8
model): rel-l2 0.078 on the 6-frame call below (the CPU chain's own distance to onnxruntime's
audio, two int8 chains that differ only in rounding, is 0.05 .. 0.07: tests/test_kokoro_cpp_back.py).
Another voice's audio is 1.23 away. Durations are the CPU predictor's: exact.

On devices with cooperative matrices the dense convolutions, plain and transposed, run
conv1d_coopmat with float16 operands: the seat's audio against the same seat with the knob
vulkan.conv.coopmat 0 (float32 stamps), within COOPMAT_BAR. Measured on an H200 with the
bench's Kokoro-82M-shaped file (real predictor, decoder and generator drawn from the real
int8 values' histograms, which amplify rounding more than real weights do): 2.6e-3 to 5.6e-3.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from gpu_helpers import SPEC, _unavailable, open_gpu
from parity import rel_l2

CONTROL = 10
AUDIO_BAR = 0.1
COOPMAT_BAR = 2e-2
PHRASE = "kˈoʊ"    # 4 ids: with the boundaries, 6 frames at one frame per id

# Kokoro-82M's widths (the real file's): the decoder's stacked input 1024 + 64 + 1 + 1, two
# upsampling stages of 256 and 128 channels (x10, x6), three resblocks each, n_fft 20 / hop 5.
KOKORO_DIMS = dict(decoder_rows=1090, decoder_out=512, stage_channels=[256, 128],
                   stage_strides=[10, 6], resblocks=3, bins=11, hop=5, harmonics=9,
                   upsample=300, largest_weight=1090 * 1024 * 3)
MIB = 1 << 20


# --- admission (no model, no device) -----------------------------------------------------------

def test_admission_fits_and_names_the_limit():
    from dasllama import _core

    unfit = _core.kokoro_gpu_unfit
    assert unfit(KOKORO_DIMS, 100, 128 * MIB) == ""
    # The last stage holds 128 x (120 F + 1) floats: past 128 MiB from about 2185 frames.
    assert unfit(KOKORO_DIMS, 2180, 128 * MIB) == ""
    why = unfit(KOKORO_DIMS, 2200, 128 * MIB)
    assert "generator activations" in why and "storage binding" in why and "2200" in why
    assert unfit(KOKORO_DIMS, 2200, 4096 * MIB) == ""
    assert "32-bit" in unfit(KOKORO_DIMS, 200000, 1 << 40)
    assert "0 frames" in unfit(KOKORO_DIMS, 0, 128 * MIB)
    assert "the mean kernel takes 1 to 4" in unfit(dict(KOKORO_DIMS, resblocks=5), 10, 128 * MIB)
    assert "stages" in unfit(dict(KOKORO_DIMS, stage_strides=[10]), 10, 128 * MIB)
    # A weight tensor alone over the binding range.
    assert "weight" in unfit(dict(KOKORO_DIMS, largest_weight=40 * MIB), 10, 128 * MIB)


# --- the seat on the real model ----------------------------------------------------------------
# Lavapipe runs the real decoder and generator at a few seconds of CPU per frame: the calls pin
# the durations (one frame per id) so each decodes only a handful of frames.

@pytest.fixture(scope="module")
def models(real_model):
    """(CPU model, GPU model, ids, style row, pinned durations, another voice's row)."""
    from dasllama import _core
    from dasllama.errors import DeviceError
    from dasllama.kokoro import resolve_model

    path = str(resolve_model(real_model("kokoro")))
    cpu = _core.KokoroModel(path, 2)
    try:
        gpu = _core.KokoroModel(path, 2, SPEC)
    except DeviceError as e:
        _unavailable(f"no Vulkan device matches {SPEC!r}: {e}")
    vocab = cpu.vocab
    ids = np.array([vocab[ch] for ch in PHRASE if ch in vocab], np.int64)
    width = sum(cpu.config["style_split"])
    packs = [np.asarray(cpu.voice(v), np.float32).reshape(-1, width) for v in cpu.voices[:2]]
    durations = np.ones(len(ids) + 2, np.int64)
    return cpu, gpu, ids, packs[0][len(ids) - 1], durations, packs[1][len(ids) - 1]


def _vocoder(model) -> dict:
    return model.seat_stats()["vocoder"]


def test_seat_serves_within_the_bar(models):
    cpu, gpu, ids, style, durations, other = models
    before = dict(_vocoder(gpu))
    c = cpu.synthesize(ids, style, 1.0, durations=durations)
    g = gpu.synthesize(ids, style, 1.0, durations=durations)
    after = _vocoder(gpu)
    # The predictor is the CPU's on both: its durations are the same, exactly.
    assert np.array_equal(g["durations"], c["durations"])
    assert g["frames"] == c["frames"] == len(durations)
    assert len(g["audio"]) == len(c["audio"]) == 600 * len(durations)
    assert np.all(np.isfinite(g["audio"]))
    err = rel_l2(g["audio"], c["audio"])
    # Control: the CPU chain's audio for another voice's style row, same ids and durations.
    ctrl = rel_l2(g["audio"], cpu.synthesize(ids, other, 1.0, durations=durations)["audio"])
    print(f"{len(ids)} ids, {c['frames']} frames: audio rel-l2 {err:.3g} (bar {AUDIO_BAR}); "
          f"another voice {ctrl:.3g}; {after['dispatches'] - before['dispatches']} dispatches")
    assert err < AUDIO_BAR
    assert ctrl > CONTROL * AUDIO_BAR
    # The counters prove the device served the call: one served call, its dispatches, the
    # inputs up and exactly the audio's bytes down.
    assert after["served"] == before["served"] + 1
    assert after["dispatches"] - before["dispatches"] > 100
    assert after["bytes_down"] - before["bytes_down"] == 4 * len(g["audio"])
    assert after["bytes_up"] > before["bytes_up"]
    assert after["reason"] == ""
    assert after["weight_bytes"] > 100 * MIB   # the decoder and generator, float32


def test_declines_fall_back_to_the_cpu(models):
    from dasllama import _core

    cpu, gpu, ids, style, durations, _ = models
    c = cpu.synthesize(ids, style, 1.0, durations=durations)
    base = _vocoder(gpu)
    # knob: the seat off; the CPU chain serves, bit for bit the CPU model's audio.
    gpu.set_seat_enabled("vocoder", False)
    try:
        off = gpu.synthesize(ids, style, 1.0, durations=durations)
    finally:
        gpu.set_seat_enabled("vocoder", True)
    st = _vocoder(gpu)
    assert st["declined"]["knob"] == base["declined"]["knob"] + 1
    assert st["served"] == base["served"]
    assert np.array_equal(off["audio"], c["audio"])
    # shape: SineGen's seeded noise has no GPU path.
    noisy_cpu = cpu.synthesize(ids, style, 1.0, durations=durations, noise_seed=3)
    noisy = gpu.synthesize(ids, style, 1.0, durations=durations, noise_seed=3)
    st = _vocoder(gpu)
    assert st["declined"]["shape"] == base["declined"]["shape"] + 1
    assert "noise" in st["reason"]
    assert np.array_equal(noisy["audio"], noisy_cpu["audio"])
    # gpu_error: the device fails at submit; the CPU takes the call with nothing lost.
    _core.gpu_inject_submit_fault(1)
    try:
        failed = gpu.synthesize(ids, style, 1.0, durations=durations)
    finally:
        _core.gpu_inject_submit_fault(0)
    st = _vocoder(gpu)
    assert st["declined"]["gpu_error"] == base["declined"]["gpu_error"] + 1
    assert "injected fault" in st["reason"]
    assert st["served"] == base["served"]
    assert np.array_equal(failed["audio"], c["audio"])


def test_cpu_model_has_no_seats_and_bad_seats_are_named(models):
    cpu, gpu, *_ = models
    assert cpu.seat_stats() == {}
    assert cpu.device_name == "cpu" and gpu.device_name != "cpu"
    with pytest.raises(ValueError, match="vocoder"):
        gpu.set_seat_enabled("frames", False)


def test_unknown_device_names_the_spec(real_model):
    from dasllama import _core
    from dasllama.errors import DeviceError
    from dasllama.kokoro import resolve_model

    path = str(resolve_model(real_model("kokoro")))
    with pytest.raises(DeviceError, match="no-such-gpu"):
        _core.KokoroModel(path, 1, "vulkan:no-such-gpu")


def test_tts_device_argument(real_model):
    """KokoroTTS takes a GPU spec and names what it accepts for anything else."""
    from dasllama.errors import TTSInputError
    from dasllama.kokoro import KokoroTTS

    with pytest.raises(TTSInputError, match="vulkan"):
        KokoroTTS(real_model("kokoro"), device="tpu")
    try:
        tts = KokoroTTS(real_model("kokoro"), device=SPEC, n_threads=1)
    except Exception as e:  # noqa: BLE001 - a missing device is a skip (a failure under CI)
        from dasllama.errors import DeviceError
        if isinstance(e, DeviceError):
            _unavailable(f"no Vulkan device matches {SPEC!r}: {e}")
        raise
    assert tts.device == SPEC
    assert tts.model.seat_stats()["vocoder"]["served"] == 0


def test_env_knob_turns_the_seat_off(models, real_model, monkeypatch):
    """DASLLAMA_SEAT_VOCODER=0 at construction: every call declines with `knob`."""
    from dasllama import _core
    from dasllama.kokoro import resolve_model

    cpu, _, ids, style, durations, _ = models
    monkeypatch.setenv("DASLLAMA_SEAT_VOCODER", "0")
    off = _core.KokoroModel(str(resolve_model(real_model("kokoro"))), 1, SPEC)
    out = off.synthesize(ids, style, 1.0, durations=durations)
    st = off.seat_stats()["vocoder"]
    assert st["served"] == 0 and st["declined"]["knob"] == 1
    assert np.array_equal(out["audio"], cpu.synthesize(ids, style, 1.0,
                                                       durations=durations)["audio"])


def test_coopmat_convolutions_against_the_float32_seat(real_model):
    """The model: DASLLAMA_TEST_KOKORO (a converted Kokoro file: the bench's filled skeleton
    where the real one is not) or the real model. Both seats serve; the profiles say which
    stamps did (the depthwise pool stays on conv_tr1d); the audio is within COOPMAT_BAR of
    the float32 seat's, and another voice's row is far from it."""
    from dasllama import _core
    from dasllama.kokoro import resolve_model

    info = open_gpu().info
    if not info.get("coopmat_khr"):
        pytest.skip(f"{info.get('name')!r} has no cooperative matrices: the float32 stamps serve")
    path = os.environ.get("DASLLAMA_TEST_KOKORO") or str(resolve_model(real_model("kokoro")))
    fast = _core.KokoroModel(path, 2, SPEC)
    _core.tuning_set("vulkan.conv.coopmat", 0)
    try:
        portable = _core.KokoroModel(path, 2, SPEC)
    finally:
        _core.tuning_reset("vulkan.conv.coopmat")
    vocab = fast.vocab
    ids = np.array([vocab[ch] for ch in PHRASE if ch in vocab], np.int64)
    width = sum(fast.config["style_split"])
    packs = [np.asarray(fast.voice(v), np.float32).reshape(-1, width) for v in fast.voices[:2]]
    style, other = packs[0][len(ids) - 1], packs[-1][len(ids) - 1][::-1].copy()
    durations = np.full(len(ids) + 2, 3, np.int64)
    audio, stamps = {}, {}
    for name, m in (("coopmat", fast), ("float32", portable)):
        m.set_profiling(True)
        try:
            audio[name] = m.synthesize(ids, style, 1.0, durations=durations)["audio"]
            stamps[name] = [k for k, _ in m.last_profile()]
        finally:
            m.set_profiling(False)
        assert m.seat_stats()["vocoder"]["served"] == 1
    assert "conv1d_coopmat" in stamps["coopmat"] and "conv1d_coopmat" not in stamps["float32"]
    assert stamps["coopmat"].count("conv_tr1d") == 1 < stamps["float32"].count("conv_tr1d")
    err = rel_l2(audio["coopmat"], audio["float32"])
    ctrl = rel_l2(portable.synthesize(ids, other, 1.0, durations=durations)["audio"],
                  audio["float32"])
    print(f"vocoder seat, coopmat convolutions: audio rel-l2 {err:.3g} against the float32 seat "
          f"(bar {COOPMAT_BAR}); another style row {ctrl:.3g}")
    assert err < COOPMAT_BAR
    assert ctrl > CONTROL * COOPMAT_BAR
