"""Whisper's encoder seat (csrc/asr/whisper/gpu_encoder.h) on the test device (lavapipe in CI):
the encoder output against the CPU encoder on the same window, the transcript of ASR(device=...)
against the CPU's, its declines falling back to the CPU, its admission rule without a model,
and the gelu_erf stamp (shaders/kernels/gelu_erf.gk.h) against float64.

Bars (rel = ||gpu - cpu|| / ||cpu||). f32 lane: both chains are float32 over the same float32
weights; they differ in summation order (tiled products, the attention's two-pass softmax, the
norms' float32 sums where the CPU sums in double) and in erf's approximation (1.2e-7), so the
error is float32 rounding carried through the layers: measured 3.4e-7 (random model), 1.5e-6
(tiny.en, the us_plain clip's window). int8 lane: the seat multiplies float32 activations
where the CPU rounds its activations to 8 bits per block (on devices with cooperative matrices
its weights, activations and attention round to float16 instead): measured 9.9e-3 on lavapipe,
1.34e-2 on an H200 (random model; the roundings are deterministic, so the bar is 1.1x the
larger; measured before the conv stem there took float16 operands too, with which it passed). The coopmat attention against attention_f32 on one seat: BAR_HALF_ATTENTION; the
staged products against the unstaged ones on one seat: BAR_STAGED; the conv stem on
cooperative matrices against conv1d_tiled on one seat: BAR_CONV_COOPMAT. Negative
controls, each past its bar at least tenfold: f32, the model with one weight matrix scaled by
1.01 (its other weights unchanged); int8, the output of another window (a stale input).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from gpu_helpers import SPEC, _unavailable, nan_filled, open_gpu, pack_args
from parity import check, rel_l2

from dasllama import _core
from dasllama.convert.whisper import convert_whisper

BAR_F32 = 4e-6
BAR_INT8 = 1.5e-2
BAR_HALF_ATTENTION = 1e-3   # float16 queries, keys, values and weights [2.3e-4 on an H200]
# Staged against unstaged float16 products: both round the input to float16; the staged panel
# forms the LayerNorm in mm_stage, its sums in another order than layernorm's [1.0e-4 on an
# H200].
BAR_STAGED = 1e-3
# The conv stem's float16 operands against float32 ones (conv1d_coopmat: float32 sums), carried
# through the layers; the kernel alone is 2e-4 from float32 operands (test_gpu_conv_coopmat.py).
BAR_CONV_COOPMAT = 1e-3
BAR_GELU = 1e-6       # gelu_erf against float64: erfc's fit is good to 1.2e-7 [measured 3.5e-8]
PERTURBED = "enc.blk.0.mlp.fc2.weight"
MIB = 1 << 20
TINY = dict(n_mels=80, n_ctx=1500, d=384, heads=6, ff=1536, layers=4)
LARGE = dict(n_mels=128, n_ctx=1500, d=1280, heads=20, ff=5120, layers=32)


# --- admission (no model, no device) -----------------------------------------------------------

def test_admission_fits_and_names_the_limit():
    unfit = _core.whisper_gpu_unfit
    assert unfit(**TINY, max_binding_bytes=128 * MIB) == ""
    assert unfit(**LARGE, max_binding_bytes=128 * MIB) == ""
    # large-v3's MLP rows are 5120 x 1500 floats (30.7 MB): over a 16 MiB binding.
    why = unfit(**LARGE, max_binding_bytes=16 * MIB)
    assert "MLP" in why and "binding range" in why
    assert "head dimension 160" in unfit(**dict(TINY, heads=4, d=640), max_binding_bytes=1 << 40)
    assert "4096 keys" in unfit(**dict(TINY, n_ctx=5000), max_binding_bytes=1 << 40)
    assert "workgroups" in unfit(**dict(TINY, n_ctx=4096, d=4096, heads=32),
                                 max_binding_bytes=1 << 40)
    assert "not a multiple" in unfit(**dict(TINY, heads=5), max_binding_bytes=1 << 40)
    assert "32-bit" in unfit(**dict(TINY, ff=1 << 21), max_binding_bytes=1 << 40)
    assert "positive" in unfit(**dict(TINY, layers=0), max_binding_bytes=128 * MIB)


# --- the gelu_erf stamp ------------------------------------------------------------------------

def _gelu64(v):
    v = np.asarray(v, np.float64)
    return 0.5 * v * (1.0 + np.vectorize(math.erf)(v / math.sqrt(2.0)))


@pytest.mark.parametrize("transpose", [0, 1], ids=["in-order", "transposed"])
def test_gelu_erf_matches_float64(transpose):
    from gpu_helpers import open_gpu

    gpu = open_gpu()
    rng = np.random.default_rng(7)
    rows, cols, x_off, y_off, a_off = 37, 53, 3, 5, 2
    x = (3.0 * rng.standard_normal(x_off + rows * cols)).astype(np.float32)
    x[x_off:x_off + 4] = [0.0, -12.0, 12.0, -0.5]   # zero and both tails
    a = rng.standard_normal(a_off + rows * cols).astype(np.float32)
    args = pack_args("IIIIIIII", rows, cols, x_off, y_off, a_off, transpose, 1, 1)
    out = gpu.run("gelu_erf", [x, nan_filled(y_off + rows * cols + 4), a], args, (3, 1, 1))
    y = np.asarray(out[1], np.float32)
    assert np.isnan(y[:y_off]).all() and np.isnan(y[y_off + rows * cols:]).all()
    got = y[y_off:y_off + rows * cols]
    g = _gelu64(x[x_off:x_off + rows * cols]).reshape(rows, cols)
    if transpose:
        g = g.T
    ref = g.reshape(-1) + a[a_off:a_off + rows * cols]
    # Control: the tanh form of GELU (what rows_gelu computes), a plausible mix-up.
    v = x[x_off:x_off + rows * cols].astype(np.float64)
    tanh_form = 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    t = tanh_form.reshape(rows, cols)
    ctrl = (t.T if transpose else t).reshape(-1) + a[a_off:a_off + rows * cols]
    check(f"gelu_erf transpose={transpose}", rel_l2(got, ref), BAR_GELU, rel_l2(ctrl, ref))


# --- the seat on a random-weight model ---------------------------------------------------------

def _perturbed_copy(path, out):
    """The GGUF at `path` with PERTURBED's values scaled by 1.01 (found by its bytes)."""
    f = _core.GGUFFile.open(str(path))
    raw = bytes(f.raw(PERTURBED))
    data = bytearray(path.read_bytes())
    at = data.find(raw)
    assert at > 0 and data.find(raw, at + 1) < 0
    scaled = (np.frombuffer(raw, np.float32) * np.float32(1.01)).astype(np.float32).tobytes()
    data[at:at + len(raw)] = scaled
    out.write_bytes(bytes(data))
    return out


def _open_gpu_model(path, lane="f32"):
    from dasllama.errors import DeviceError

    try:
        return _core.WhisperModel(str(path), 2, lane, SPEC)
    except DeviceError as e:
        _unavailable(f"no Vulkan device matches {SPEC!r}: {e}")


@pytest.fixture(scope="module")
def random_models(tmp_path_factory):
    """(gguf path, CPU model, GPU model, a window)."""
    from dasllama.testing.whisper import write_random_whisper_dir

    folder = write_random_whisper_dir(tmp_path_factory.mktemp("wgpu") / "model", seed=11)
    path = convert_whisper(folder, folder.parent / "random.gguf")
    cpu = _core.WhisperModel(str(path), 2)
    gpu = _open_gpu_model(path)
    c = cpu.config
    rng = np.random.default_rng(1)
    window = (0.5 * rng.standard_normal((c["n_mels"], c["n_frames"]))).astype(np.float32)
    return path, cpu, gpu, window


def _seat(model) -> dict:
    return model.seat_stats()["encoder"]


def test_encoder_seat_serves_within_the_bar(random_models, tmp_path):
    path, cpu, gpu, window = random_models
    base = _seat(gpu)
    ref = cpu.encode(window)
    got = gpu.encode(window)
    assert np.isfinite(got).all()   # the seat's activations start as NaN
    st = _seat(gpu)
    assert st["served"] == base["served"] + 1 and st["dispatches"] > base["dispatches"]
    assert st["reason"] == "" and st["weight_bytes"] > 0
    assert st["bytes_down"] - base["bytes_down"] == got.size * 4
    perturbed = _open_gpu_model(_perturbed_copy(path, tmp_path / "perturbed.gguf"))
    ctrl = perturbed.encode(window)
    assert _seat(perturbed)["served"] == 1
    check("encoder seat f32 (random)", rel_l2(got, ref), BAR_F32, rel_l2(ctrl, ref))
    # The next window replays the recording: same bar on another input.
    other = np.roll(window, 37, axis=1)
    again = gpu.encode(other)
    st2 = _seat(gpu)
    assert st2["served"] == st["served"] + 1 and st2["replays"] == st["replays"] + 1
    check("encoder seat replay (random)", rel_l2(again, cpu.encode(other)), BAR_F32,
          rel_l2(again, ref))


def test_decoder_on_the_seat_window_gives_the_cpu_tokens(random_models):
    _, cpu, gpu, window = random_models
    t = cpu.config["tokens"]
    prompt = [t["sot"], t["sot"] + 1, t["transcribe"]]
    cpu.encode(window)
    gpu.encode(window)
    a = cpu.generate(prompt, [], max_length=24)
    b = gpu.generate(prompt, [], max_length=24)
    assert list(a[0]) == list(b[0]) and len(a[0]) > 0
    assert abs(a[1] - b[1]) <= 1e-3 * max(1.0, abs(a[1]))


def test_int8_lane_serves_within_its_bar(random_models):
    path, _, _, window = random_models
    cpu = _core.WhisperModel(str(path), 2, "int8")
    gpu = _open_gpu_model(path, "int8")
    ref = cpu.encode(window)
    got = gpu.encode(window)
    assert np.isfinite(got).all() and _seat(gpu)["served"] == 1
    # Control: the output of the previous window (a seat that kept a stale input).
    stale = cpu.encode(np.roll(window, 37, axis=1))
    check("encoder seat int8 (random)", rel_l2(got, ref), BAR_INT8, rel_l2(stale, ref))


def _knob_pair(tmp_path, monkeypatch, knob: str, otherwise: str, seed: int):
    """The int8 lane of a random model with 128-wide rows (two heads of 64, the coopmat
    attention's size) on the seat twice: as the knob's default sets it, and with the knob 0;
    and a random window. Skips on devices without cooperative matrices (saying what serves
    there: `otherwise`)."""
    from dasllama.testing import whisper as tw

    monkeypatch.setitem(tw.RANDOM_WHISPER, "d", 128)
    folder = tw.write_random_whisper_dir(tmp_path / "d128", seed=4)
    path = convert_whisper(folder, tmp_path / "d128.gguf")
    info = open_gpu().info
    if not info.get("coopmat_khr"):
        pytest.skip(f"{info.get('name')!r} has no cooperative matrices: {otherwise}")
    on = _open_gpu_model(path, "int8")
    _core.tuning_set(knob, 0)
    try:
        off = _open_gpu_model(path, "int8")
    finally:
        _core.tuning_reset(knob)
    c = on.config
    window = np.random.default_rng(seed).standard_normal((c["n_mels"], c["n_frames"]))
    return on, off, window.astype(np.float32)


def test_coopmat_attention_against_attention_f32(tmp_path, monkeypatch):
    """On a device with cooperative matrices, a model whose products round to float16 (here
    the int8 lane's Q8_0 matrices) takes the bidirectional coopmat attention: its output against
    the same seat with the knob off (attention_f32), within BAR_HALF_ATTENTION. Control: the
    output of another window."""
    fast, portable, window = _knob_pair(tmp_path, monkeypatch, "vulkan.whisper.attention_coopmat",
                                        "attention_f32 serves", seed=5)
    got, want = fast.encode(window), portable.encode(window)
    assert np.isfinite(got).all() and _seat(fast)["served"] == 1
    assert not np.array_equal(got, want), "the coopmat attention did not serve"
    other = portable.encode(np.roll(window, 37, axis=1))
    check("encoder seat, coopmat attention (random, int8)", rel_l2(got, want),
          BAR_HALF_ATTENTION, rel_l2(other, want))


def test_staged_products_against_unstaged(tmp_path, monkeypatch):
    """On a device with cooperative matrices, the int8 lane's float16 products read staged
    float16 panels (mm_stage, the LayerNorms formed on the way in) on the tiled stamps: the
    output against the same seat with vulkan.whisper.staged 0 (matmul_<fmt>_coopmat on float32
    rows, the LayerNorms their own passes), within BAR_STAGED; the profiles say which served.
    Control: the output of another window."""
    staged, unstaged, window = _knob_pair(tmp_path, monkeypatch, "vulkan.whisper.staged",
                                          "nothing is staged", seed=6)
    c = staged.config
    stamps = {}
    for name, m in (("staged", staged), ("unstaged", unstaged)):
        m.set_profiling(True)
        try:
            out = m.encode(window)
            stamps[name] = [k for k, _ in m.last_profile()]
        finally:
            m.set_profiling(False)
        assert np.isfinite(out).all()
    assert "mm_stage" in stamps["staged"] and "mm_stage" not in stamps["unstaged"]
    # the layers' LayerNorms formed by the staging: only ln_post stays a pass of its own
    assert stamps["staged"].count("layernorm") == 1
    assert stamps["unstaged"].count("layernorm") == 2 * c["n_audio_layer"] + 1
    got, want = staged.encode(window), unstaged.encode(window)
    other = unstaged.encode(np.roll(window, 37, axis=1))
    check("encoder seat, staged products (random, int8)", rel_l2(got, want), BAR_STAGED,
          rel_l2(other, want))


def test_coopmat_conv_stem_against_tiled(tmp_path, monkeypatch):
    """On a device with cooperative matrices, the int8 lane's conv stem runs conv1d_coopmat
    (float16 operands): the output against the same seat with vulkan.conv.coopmat 0
    (conv1d_tiled in float32), within BAR_CONV_COOPMAT; the profiles say which served.
    Control: the output of another window."""
    fast, tiled, window = _knob_pair(tmp_path, monkeypatch, "vulkan.conv.coopmat",
                                     "conv1d_tiled serves", seed=7)
    stamps = {}
    for name, m in (("coopmat", fast), ("tiled", tiled)):
        m.set_profiling(True)
        try:
            assert np.isfinite(m.encode(window)).all()
            stamps[name] = [k for k, _ in m.last_profile()]
        finally:
            m.set_profiling(False)
    assert stamps["coopmat"].count("conv1d_coopmat") == 2 and "conv1d_tiled" not in stamps["coopmat"]
    assert stamps["tiled"].count("conv1d_tiled") == 2 and "conv1d_coopmat" not in stamps["tiled"]
    got, want = fast.encode(window), tiled.encode(window)
    other = tiled.encode(np.roll(window, 37, axis=1))
    check("encoder seat, coopmat conv stem (random, int8)", rel_l2(got, want), BAR_CONV_COOPMAT,
          rel_l2(other, want))


def test_profile_times_each_dispatch_of_a_window(random_models):
    """set_profiling records the encoder afresh with timestamps: last_profile holds one
    finite, non-negative time per dispatch the seat counted for the window, named by stamp.
    Profiling off records once more, without them. The CPU model has no profile."""
    from dasllama.errors import DeviceError

    _, cpu, gpu, window = random_models
    try:
        gpu.set_profiling(True)
    except DeviceError as e:
        pytest.skip(f"this device cannot time kernels: {e}")
    try:
        before = _seat(gpu)
        gpu.encode(window)
        after = _seat(gpu)
        prof = gpu.last_profile()
    finally:
        gpu.set_profiling(False)
    assert after["replays"] == before["replays"], "the window was recorded afresh"
    assert len(prof) == after["dispatches"] - before["dispatches"] > 20
    assert all(isinstance(k, str) and k and np.isfinite(t) and t >= 0 for k, t in prof)
    assert {"layernorm", "gelu_erf"} <= {k for k, _ in prof}
    assert {"conv1d_tiled", "conv1d_coopmat"} & {k for k, _ in prof}   # the stem, by device
    gpu.encode(window)
    assert _seat(gpu)["replays"] == after["replays"]   # recorded again, without timestamps
    cpu.set_profiling(True)
    assert cpu.last_profile() == []
    cpu.set_profiling(False)


def test_declines_fall_back_to_the_cpu(random_models):
    _, cpu, gpu, window = random_models
    ref = cpu.encode(window)
    base = _seat(gpu)
    gpu.set_seat_enabled("encoder", False)
    try:
        off = gpu.encode(window)
    finally:
        gpu.set_seat_enabled("encoder", True)
    st = _seat(gpu)
    assert st["declined"]["knob"] == base["declined"]["knob"] + 1
    assert st["served"] == base["served"] and "off" in st["reason"]
    assert np.array_equal(off, ref)
    _core.gpu_inject_submit_fault(1)
    try:
        failed = gpu.encode(window)
    finally:
        _core.gpu_inject_submit_fault(0)
    st = _seat(gpu)
    assert st["declined"]["gpu_error"] == base["declined"]["gpu_error"] + 1
    assert "injected fault" in st["reason"] and st["served"] == base["served"]
    assert np.array_equal(failed, ref)
    # After the failure the seat records afresh and serves again.
    assert np.isfinite(gpu.encode(window)).all() and _seat(gpu)["served"] == base["served"] + 1


def test_a_model_past_the_kernels_declines_with_the_reason(tmp_path, monkeypatch):
    """Two heads of 256 dimensions: over attention_f32's 128; the CPU encoder serves."""
    from dasllama.testing import whisper as tw

    monkeypatch.setitem(tw.RANDOM_WHISPER, "d", 512)
    monkeypatch.setitem(tw.RANDOM_WHISPER, "n_enc", 1)
    folder = tw.write_random_whisper_dir(tmp_path / "wide", seed=2)
    path = convert_whisper(folder, tmp_path / "wide.gguf")
    cpu = _core.WhisperModel(str(path), 2)
    gpu = _open_gpu_model(path)
    c = cpu.config
    window = np.random.default_rng(3).standard_normal((c["n_mels"], c["n_frames"])).astype(
        np.float32)
    got = gpu.encode(window)
    st = _seat(gpu)
    assert st["served"] == 0 and st["declined"]["shape"] == 1
    assert "head dimension 256" in st["reason"]
    assert np.array_equal(got, cpu.encode(window))


def test_cpu_model_has_no_seats_and_bad_devices_are_named(random_models):
    from dasllama.errors import DeviceError

    path, cpu, gpu, _ = random_models
    assert cpu.seat_stats() == {} and cpu.device_name == "cpu" and gpu.device_name != "cpu"
    with pytest.raises(ValueError, match="no seat 'decoder'"):
        gpu.set_seat_enabled("decoder", False)
    with pytest.raises(DeviceError, match="vulkan:no-such-gpu"):
        _core.WhisperModel(str(path), 1, "f32", "vulkan:no-such-gpu")


def test_env_knob_turns_the_seat_off(random_models, monkeypatch):
    path, cpu, _, window = random_models
    monkeypatch.setenv("DASLLAMA_SEAT_ENCODER", "0")
    gpu = _open_gpu_model(path)
    assert np.array_equal(gpu.encode(window), cpu.encode(window))
    st = _seat(gpu)
    assert st["served"] == 0 and st["declined"]["knob"] == 1


# --- the API -----------------------------------------------------------------------------------

def test_asr_device_argument_gives_the_cpu_transcript(random_models):
    from dasllama.asr import ASR
    from dasllama.errors import DeviceError

    path = random_models[0]
    rng = np.random.default_rng(4)
    samples = (0.05 * rng.standard_normal(16000 * 3)).astype(np.float32)
    cpu = ASR(path, n_threads=2)
    try:
        gpu = ASR(path, device=SPEC, n_threads=2)
    except DeviceError as e:
        _unavailable(f"no Vulkan device matches {SPEC!r}: {e}")
    a = [(s.text, s.tokens) for s in cpu.transcribe(samples, no_speech_threshold=None)[0]]
    b = [(s.text, s.tokens) for s in gpu.transcribe(samples, no_speech_threshold=None)[0]]
    assert a == b and a
    st = gpu.seat_stats()["encoder"]
    assert st["served"] >= 1 and sum(st["declined"].values()) == 0
    assert cpu.seat_stats() == {} and gpu.device_name != "cpu"
    with pytest.raises(DeviceError, match="'cuda' is not a device"):
        ASR(path, device="cuda")
    with pytest.raises(DeviceError, match="vulkan:no-such-gpu"):
        ASR(path, device="vulkan:no-such-gpu")


# --- the real tiny.en --------------------------------------------------------------------------
# Lavapipe takes about four minutes for one tiny.en window on two cores, so this check runs
# when DASLLAMA_TEST_WHISPER_GPU_REAL=1 (and on a real GPU, DASLLAMA_TEST_VULKAN=vulkan:NAME).

def test_real_tiny_en_transcript_equals_the_cpu(real_model, tmp_path):
    if os.environ.get("DASLLAMA_TEST_WHISPER_GPU_REAL") != "1":
        pytest.skip("one tiny.en window takes minutes on lavapipe: set "
                    "DASLLAMA_TEST_WHISPER_GPU_REAL=1 to run it")
    from requires import require

    require("soundfile")
    from pathlib import Path

    from dasllama import audio
    from dasllama.asr import ASR
    from dasllama.errors import DeviceError

    path = convert_whisper(real_model("whisper-tiny.en"), tmp_path / "tiny.en.gguf")
    samples = audio.load(Path(__file__).parent / "fixtures" / "asr" / "us_plain.flac")
    cpu = ASR(path, n_threads=2)
    try:
        gpu = ASR(path, device=SPEC, n_threads=2)
    except DeviceError as e:
        _unavailable(f"no Vulkan device matches {SPEC!r}: {e}")
    a = [(s.text, s.tokens) for s in cpu.transcribe(samples)[0]]
    b = [(s.text, s.tokens) for s in gpu.transcribe(samples)[0]]
    print("tiny.en on the seat:", b)
    assert a == b and a
    st = gpu.seat_stats()["encoder"]
    assert st["served"] >= 1 and sum(st["declined"].values()) == 0
