"""The vocoder stamps of Kokoro's decoder and generator (shaders/kernels: adain, snake, conv1d,
conv_tr1d, harmonic_source, stft, istft, mean_rows) on the test device, against the CPU ops of
the chain they stand in for (csrc/nn's transposed convolution, the instance norm of onnx_math,
the model's harmonic source, STFT, inverse STFT and AdaIN) or, where the CPU op is an int8 one
(the convolutions, whose activations it quantizes), against float64 NumPy.

Every output buffer starts NaN with room on both sides, so a kernel that leaves a value unwritten
or writes outside its window fails; the grid-stride stamps run on fewer workgroups than items
where it matters. Each test prints its error next to its bar and carries a negative control (a
plausible bug) that must miss the bar tenfold. Bars are a few times the error measured on
lavapipe (the comments give it).

The harmonic source, STFT, inverse STFT and AdaIN tests read the real model's parameters (its
window, basis, merge weights and style projections) and compare with that model's CPU ops.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from gpu_helpers import gpu, nan_filled, pack_args, rel_l2  # noqa: F401

CONTROL = 10
PAD = 5            # NaN elements before and after each output window


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _window(out, off: int, n: int) -> np.ndarray:
    """The n values at off of a kernel's output, after checking the rest stayed NaN."""
    y = np.asarray(out, np.float32)
    assert np.all(np.isnan(y[:off])), "a kernel wrote before its window"
    assert np.all(np.isnan(y[off + n:])), "a kernel wrote past its window"
    w = y[off:off + n]
    assert not np.any(np.isnan(w)), "a kernel left part of its window unwritten"
    return w


def _report(what: str, err: float, bar: float, control: float) -> None:
    print(f"{what}: rel-l2 {err:.3g} (bar {bar:g}); negative control {control:.3g}")
    assert err < bar
    assert control > CONTROL * bar


# --- AdaIN -------------------------------------------------------------------------------------

# Float32 fc dot products and instance-norm sums (workgroup order) against float64: measured
# 4e-8 .. 8e-8 on lavapipe (snake after it: 1e-7).
ADAIN_BAR = 1e-6


def _adain_ref(x, fcw, fcb, style, act, slope, alpha, one_plus=True):
    x = x.astype(np.float64)
    c = x.shape[0]
    h = style.astype(np.float64) @ fcw.astype(np.float64) + fcb
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    norm = (x - mean) / np.sqrt(var + 1e-5)
    gain = (1.0 + h[:c]) if one_plus else h[:c]
    y = gain[:, None] * norm + h[c:, None]
    if act == 1:
        y = np.where(y >= 0, y, y * slope)
    elif act == 2:
        a = alpha.astype(np.float64)[:, None]
        y = y + np.sin(a * y) ** 2 / a
    return y


@pytest.mark.parametrize("act", [0, 1, 2], ids=["none", "leaky", "snake"])
def test_adain_matches_float64(gpu, act):  # noqa: F811
    rng = _rng(f"adain {act}")
    c, l, s = 19, 301, 40
    x_off, y_off = 3, PAD
    x = (0.5 + 2.0 * rng.standard_normal(x_off + c * l + 2)).astype(np.float32)
    fcw = (0.2 * rng.standard_normal((s, 2 * c))).astype(np.float32)
    fcb = (0.1 * rng.standard_normal(2 * c)).astype(np.float32)
    style = rng.standard_normal(s + 4).astype(np.float32)
    alpha = (0.3 + rng.random(c + 2)).astype(np.float32)
    args = pack_args("IIIIIIIIff", c, l, x_off, y_off, s, 2, act, 1, 1e-5, 0.2)
    out = gpu.run("adain", [x, nan_filled(y_off + c * l + PAD), fcw, fcb, style, alpha], args,
                  (c, 1, 1))
    got = _window(out[1], y_off, c * l).reshape(c, l)
    xs = x[x_off:x_off + c * l].reshape(c, l)
    ref = _adain_ref(xs, fcw, fcb, style[2:2 + s], act, 0.2, alpha[1:1 + c])
    ctrl = _adain_ref(xs, fcw, fcb, style[2:2 + s], act, 0.2, alpha[1:1 + c], one_plus=False)
    _report(f"adain act={act}", rel_l2(got, ref), ADAIN_BAR, rel_l2(got, ctrl))


def test_adain_norm_matches_the_cpu_instance_norm(gpu):  # noqa: F811
    """With a zero projection AdaIN is the instance norm alone: against the CPU's (onnx_math)."""
    from dasllama import _core

    rng = _rng("adain norm")
    c, l, s = 7, 1000, 8
    x = (3.0 + rng.standard_normal(c * l)).astype(np.float32)
    zeros = np.zeros((s, 2 * c), np.float32)
    args = pack_args("IIIIIIIIff", c, l, 0, 0, s, 0, 0, 0, 1e-5, 0.2)
    out = gpu.run("adain", [x, nan_filled(c * l), zeros, np.zeros(2 * c, np.float32),
                            np.ones(s, np.float32), np.ones(1, np.float32)], args, (c, 1, 1))
    got = np.asarray(out[1], np.float32).reshape(c, l)
    cpu = np.asarray(_core.kokoro_instance_norm(x.reshape(c, l), 1e-5))
    cpu_eps = np.asarray(_core.kokoro_instance_norm(x.reshape(c, l), 1e-1))
    # Float32 sums in two orders: measured 4e-8.
    _report("adain vs instance_norm", rel_l2(got, cpu), ADAIN_BAR, rel_l2(got, cpu_eps))


# --- Snake -------------------------------------------------------------------------------------

# The kernel's result against float64 from the same float32 product alpha x (the CPU's first
# rounding): a reduced sine, then three roundings, measured 2e-8 of the values.
SNAKE_BAR = 2e-7


def test_snake_matches_float64_at_large_arguments(gpu):  # noqa: F811
    rng = _rng("snake")
    c, l, off = 6, 777, 4
    # alpha x up to ~2e3: where the native sine would be off by 1e-3.
    x = (40.0 * rng.standard_normal(off + c * l + 3)).astype(np.float32)
    alpha = np.array([0.5, 1.0, 2.0, 3.5, 0.25, 5.0, 9.0], np.float32)
    before = x.copy()
    out = gpu.run("snake", [x, alpha], pack_args("IIII", c, l, off, 1), (3, 1, 1))
    y = np.asarray(out[0], np.float32)
    assert np.array_equal(y[:off], before[:off]) and np.array_equal(y[off + c * l:],
                                                                    before[off + c * l:])
    xs = before[off:off + c * l].reshape(c, l)
    a = alpha[1:1 + c][:, None]
    ax = (a * xs).astype(np.float32).astype(np.float64)
    ref = xs + np.sin(ax) ** 2 / a.astype(np.float64)
    ctrl = xs + np.sin(ax) ** 2   # 1 / alpha dropped
    got = y[off:off + c * l].reshape(c, l)
    _report("snake", rel_l2(got, ref), SNAKE_BAR, rel_l2(got, ctrl))


# --- conv1d ------------------------------------------------------------------------------------

CONV_BAR = 1e-6    # float32 tap sums against float64: measured 5e-8 .. 1.5e-7


def _conv_ref(x, w, b, stride, dilation, pad_l, pad_r, groups, in_up=1, slope=None):
    x = x.astype(np.float64)
    if slope is not None:
        x = np.where(x >= 0, x, x * slope)
    if in_up > 1:
        x = np.repeat(x, in_up, axis=1)
    c_in, l = x.shape
    c_out, cig, k = w.shape
    xp = np.pad(x, ((0, 0), (pad_l, pad_r)))
    l_out = (l + pad_l + pad_r - (k - 1) * dilation - 1) // stride + 1
    cog = c_out // groups
    y = np.zeros((c_out, l_out))
    for o in range(c_out):
        g = o // cog
        for t in range(l_out):
            cols = t * stride + dilation * np.arange(k)
            y[o, t] = np.sum(w[o].astype(np.float64) * xp[g * cig:(g + 1) * cig][:, cols])
    if b is not None:
        y += b[:, None]
    return y


CONV_CASES = {
    # name: c_in, c_out, l, k, stride, dilation, pad_l, pad_r, groups, in_up, slope
    "dilated": (12, 10, 97, 3, 1, 5, 5, 5, 1, 1, None),
    "stride2": (1, 1, 64, 3, 2, 1, 1, 1, 1, 1, None),          # F0_conv
    "noise": (22, 9, 121, 12, 6, 1, 3, 3, 1, 1, None),         # noise_convs.0
    "depthwise": (8, 8, 50, 5, 1, 1, 2, 2, 8, 1, 0.2),
    "grouped-up2": (6, 4, 33, 1, 1, 1, 0, 0, 2, 2, None),      # conv1x1 of an upsampled input
    "leaky": (16, 22, 70, 7, 1, 1, 3, 3, 1, 1, 0.01),          # conv_post
    "up2": (6, 5, 33, 1, 1, 1, 0, 0, 1, 2, None),              # conv1x1 of an upsampled input
    "tiles": (20, 40, 150, 11, 1, 5, 25, 25, 1, 1, None),      # 2 x 3 tiles, a partial channel chunk
}
# The tiled stamp serves dense convolutions (groups 1) of up to 12 taps.
TILED_CASES = sorted(n for n, c in CONV_CASES.items() if c[8] == 1 and c[3] <= 12)


@pytest.mark.parametrize("stamp,name", [("conv1d", n) for n in sorted(CONV_CASES)] +
                         [("conv1d_tiled", n) for n in TILED_CASES])
def test_conv1d_matches_float64(gpu, stamp, name):  # noqa: F811
    c_in, c_out, l, k, stride, dil, pl, pr, groups, in_up, slope = CONV_CASES[name]
    rng = _rng(f"conv1d {name}")
    x_off, y_off = 2, PAD
    x = rng.standard_normal(x_off + c_in * l + 3).astype(np.float32)
    w = (rng.standard_normal((c_out, c_in // groups, k)) / np.sqrt(k * c_in / groups)
         ).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    xs = x[x_off:x_off + c_in * l].reshape(c_in, l)
    ref = _conv_ref(xs, w, b, stride, dil, pl, pr, groups, in_up, slope)
    l_out = ref.shape[1]
    args = pack_args("IIIIIIIIIIIIIfIfI", c_in, c_out, l, l_out, k, stride, dil, pl, groups,
                     x_off, y_off, 1, 0 if slope is None else 1, slope or 1.0, 0, 1.0, in_up)
    groups_ = (2, 1, 1) if stamp == "conv1d" else (-(-l_out // 64), -(-c_out // 32), 1)
    out = gpu.run(stamp, [x, w, b, nan_filled(y_off + c_out * l_out + PAD)], args, groups_)
    got = _window(out[3], y_off, c_out * l_out).reshape(c_out, l_out)
    # Control: the taps in reverse order (a 1-tap kernel: the group's input channels reversed).
    wc = w[:, :, ::-1] if k > 1 else w[:, ::-1, :]
    ctrl = _conv_ref(xs, wc, b, stride, dil, pl, pr, groups, in_up, slope)
    _report(f"{stamp} {name}", rel_l2(got, ref), CONV_BAR, rel_l2(got, ctrl))


@pytest.mark.parametrize("stamp", ["conv1d", "conv1d_tiled"])
@pytest.mark.parametrize("mode", [1, 2], ids=["add", "add-divide"])
def test_conv1d_output_modes(gpu, mode, stamp):  # noqa: F811
    """mode 1: y = conv + y (a residual); mode 2: y = (conv + y) / div (a block's shortcut)."""
    rng = _rng(f"conv1d mode {mode}")
    c_in, c_out, l, k = 5, 6, 40, 3
    x = rng.standard_normal(c_in * l).astype(np.float32)
    w = (0.3 * rng.standard_normal((c_out, c_in, k))).astype(np.float32)
    y0 = rng.standard_normal(c_out * l).astype(np.float32)
    div = 1.4142135381698608
    args = pack_args("IIIIIIIIIIIIIfIfI", c_in, c_out, l, l, k, 1, 1, 1, 1, 0, 0, 0, 0, 1.0,
                     mode, div, 1)
    out = gpu.run(stamp, [x, w, np.zeros(1, np.float32), y0.copy()], args, (1, 1, 1))
    got = np.asarray(out[3], np.float32).reshape(c_out, l)
    conv = _conv_ref(x.reshape(c_in, l), w, None, 1, 1, 1, 1, 1)
    base = y0.reshape(c_out, l).astype(np.float64)
    ref = conv + base if mode == 1 else (conv + base) / div
    ctrl = conv if mode == 1 else conv + base   # the residual dropped / not divided
    _report(f"{stamp} mode {mode}", rel_l2(got, ref), CONV_BAR, rel_l2(got, ctrl))


# --- conv_tr1d ---------------------------------------------------------------------------------

CONV_TR_BAR = 1e-6   # against csrc/nn's ConvTranspose1d (float32 both): measured 3e-8 .. 1e-7

CONV_TR_CASES = {
    # name: c_in, c_out, n, k, stride, pad_l, pad_r, groups, output_padding
    "ups0": (16, 8, 23, 20, 10, 5, 5, 1, 0),
    "ups1": (8, 4, 31, 12, 6, 3, 3, 1, 0),
    "pool": (10, 10, 37, 3, 2, 1, 1, 10, 1),      # depthwise x2 of a residual block
}


@pytest.mark.parametrize("name", sorted(CONV_TR_CASES))
def test_conv_tr1d_matches_the_cpu_op(gpu, name):  # noqa: F811
    from dasllama import _core

    c_in, c_out, n, k, stride, pl, pr, groups, op = CONV_TR_CASES[name]
    rng = _rng(f"conv_tr {name}")
    x = rng.standard_normal((c_in, n)).astype(np.float32)
    w = (rng.standard_normal((c_in, c_out // groups, k)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    cpu = np.asarray(_core.conv_transpose1d(x, w, b, stride, pl, pr, 1, groups, op))
    l_out = cpu.shape[1]
    y_off = PAD
    args = pack_args("IIIIIIIIIIIIIfII", c_in, c_out, n, l_out, k, stride, 1, pl, groups, 0,
                     y_off, 1, 0, 1.0, 0, 0)
    out = gpu.run("conv_tr1d", [x.ravel(), w, b, nan_filled(y_off + c_out * l_out + PAD)], args,
                  (2, 1, 1))
    got = _window(out[3], y_off, c_out * l_out).reshape(c_out, l_out)
    ctrl = np.asarray(_core.conv_transpose1d(x, w[:, :, ::-1].copy(), b, stride, pl, pr, 1,
                                             groups, op))
    _report(f"conv_tr1d {name}", rel_l2(got, cpu), CONV_TR_BAR, rel_l2(got, ctrl))


def test_conv_tr1d_reflect_shift_and_leaky_input(gpu):  # noqa: F811
    """The generator's last upsampling: LeakyReLU(0.1) on the input as read, the output one
    column later with column 1 mirrored in front (ReflectionPad1d((1, 0))), added to the noise
    branch already in y."""
    from dasllama import _core

    rng = _rng("conv_tr reflect")
    c_in, c_out, n, k, stride, pad = 6, 4, 15, 12, 6, 3
    x = rng.standard_normal((c_in, n)).astype(np.float32)
    w = (0.3 * rng.standard_normal((c_in, c_out, k))).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    xl = np.where(x >= 0, x, x * np.float32(0.1)).astype(np.float32)
    u = np.asarray(_core.conv_transpose1d(xl, w, b, stride, pad, pad, 1, 1, 0))
    lu = u.shape[1]
    noise = rng.standard_normal((c_out, lu + 1)).astype(np.float32)
    ref = noise.astype(np.float64) + np.concatenate([u[:, 1:2], u], axis=1)
    args = pack_args("IIIIIIIIIIIIIfII", c_in, c_out, n, lu, k, stride, 1, pad, 1, 0, 0, 1, 1,
                     0.1, 1, 1)
    out = gpu.run("conv_tr1d", [x.ravel(), w, b, noise.ravel().copy()], args, (1, 1, 1))
    got = np.asarray(out[3], np.float32).reshape(c_out, lu + 1)
    ctrl = noise.astype(np.float64) + np.concatenate([u[:, :1], u], axis=1)   # column 0 copied
    _report("conv_tr1d reflect", rel_l2(got, ref), CONV_TR_BAR, rel_l2(got, ctrl))


# --- mean_rows ---------------------------------------------------------------------------------

def test_mean_rows_matches_the_cpu_order(gpu):  # noqa: F811
    rng = _rng("mean rows")
    n = 1001
    parts = [rng.standard_normal(n + 3).astype(np.float32) for _ in range(3)]
    args = pack_args("IIIIIII", n, 3, 0, 1, 2, 0, PAD)
    out = gpu.run("mean_rows", parts + [parts[0], nan_filled(PAD + n + PAD)], args, (1, 1, 1))
    got = _window(out[4], PAD, n)
    acc = (parts[0][:n] + parts[1][1:n + 1]) + parts[2][2:n + 2]
    ref = acc / np.float32(3.0)   # float32, in block order, divided: the CPU's rounding
    assert np.array_equal(got, ref.astype(np.float32))
    ctrl = (parts[0][:n] + parts[1][1:n + 1]) / 2.0
    assert rel_l2(got, ctrl) > 0.1


# --- the real model's source, STFT and inverse STFT ----------------------------------------------

SOURCE_BAR = 1e-5      # vs the CPU's harmonic source: the Cody-Waite sine at phases up to 1e5 rad
                       # against sinf, then tanh (measured 2e-7)
STFT_MAG_BAR = 1e-6    # the same float32 steps in the same order (measured 0 .. 1e-7)
STFT_PHASE_BAR = 1e-4  # radians, where a bin's magnitude exceeds 1e-3 of the largest (atan's ulp)
ISTFT_BAR = 1e-6       # gathered sums against the CPU's matmul order (measured 1e-7)


@pytest.fixture(scope="module")
def kokoro(real_model):
    """(the converted real model's path, its _core.KokoroModel, its parameters)."""
    from dasllama import _core, gguf
    from dasllama.kokoro import resolve_model

    path = resolve_model(real_model("kokoro"))
    g = "decoder.generator"
    with gguf.open(path) as f:
        meta = f.metadata
        p = {k: meta[f"kokoro.{k}"] for k in ("n_fft", "hop", "harmonics", "sample_rate",
                                              "upsample_scale", "voiced_threshold", "sine_amp")}
        for name in ("m_source.l_linear.weight", "m_source.l_linear.bias", "stft.window",
                     "stft.inverse_basis", "stft.window_sum"):
            p[name] = np.asarray(f.tensor(f"{g}.{name}"), np.float32)
    return path, _core.KokoroModel(str(path), 1), p


def _f0_curve(rng, n):
    """An F0 curve with unvoiced stretches (below the threshold) and a voiced glide."""
    f0 = 120.0 + 80.0 * np.sin(np.linspace(0, 3, n)) + 5.0 * rng.standard_normal(n)
    f0[n // 5:n // 5 + 4] = 0.0
    f0[-3:] = 2.0
    return f0.astype(np.float32)


def _source(gpu, p, f0, amp=None):  # noqa: F811
    curve, up, h = len(f0), int(p["upsample_scale"]), int(p["harmonics"])
    samples = curve * up
    args = pack_args("IIIffffII", curve, up, h, float(p["sample_rate"]),
                     float(p["sine_amp"] if amp is None else amp), float(p["voiced_threshold"]),
                     float(p["m_source.l_linear.bias"].ravel()[0]), 0, PAD)
    bufs = [f0, nan_filled(h * curve), p["m_source.l_linear.weight"].ravel(),
            nan_filled(PAD + samples + PAD)]
    out = gpu.run_many(bufs, [("harmonic_phase", [0, 1, 2, 3], args, (1, 1, 1)),
                              ("harmonic_source", [0, 1, 2, 3], args, (64, 1, 1))], True)
    return _window(out[3], PAD, samples)


def test_harmonic_source_matches_the_cpu(gpu, kokoro):  # noqa: F811
    _, model, p = kokoro
    f0 = _f0_curve(_rng("source"), 160)
    got = _source(gpu, p, f0)
    cpu = np.asarray(model.harmonic_source(f0))
    ctrl = _source(gpu, p, f0, amp=0.9 * float(p["sine_amp"]))
    _report("harmonic source", rel_l2(got, cpu), SOURCE_BAR, rel_l2(ctrl, cpu))


def _stft(gpu, p, x):  # noqa: F811
    n_fft, hop = int(p["n_fft"]), int(p["hop"])
    bins = n_fft // 2 + 1
    frames = (len(x) + 2 * (n_fft // 2) - n_fft) // hop + 1
    step = np.float32(-1.0) * (np.float32(2.0) * np.float32(3.14159265)) / np.float32(n_fft)
    kj = np.outer(np.arange(bins), np.arange(n_fft)).astype(np.float32)
    ang = (kj * step).astype(np.float32).astype(np.float64)
    tw = np.concatenate([np.cos(ang), np.sin(ang)]).astype(np.float32)
    args = pack_args("IIIIIII", len(x), n_fft, hop, bins, frames, 0, PAD)
    out = gpu.run("stft", [x, p["stft.window"], tw, nan_filled(PAD + 2 * bins * frames + PAD)],
                  args, (8, 1, 1))
    return _window(out[3], PAD, 2 * bins * frames).reshape(2 * bins, frames)


def test_stft_matches_the_cpu(gpu, kokoro):  # noqa: F811
    _, model, p = kokoro
    x = np.asarray(model.harmonic_source(_f0_curve(_rng("stft"), 40)), np.float32)
    got = _stft(gpu, p, x)
    cpu = np.asarray(model.stft(x))
    bins = got.shape[0] // 2
    err_mag = rel_l2(got[:bins], cpu[:bins])
    late = np.asarray(model.stft(np.roll(x, 1)))   # the signal one sample late
    print(f"stft magnitudes: rel-l2 {err_mag:.3g} (bar {STFT_MAG_BAR:g}); "
          f"one sample late {rel_l2(got[:bins], late[:bins]):.3g}")
    assert err_mag < STFT_MAG_BAR
    assert rel_l2(got[:bins], late[:bins]) > CONTROL * STFT_MAG_BAR
    defined = cpu[:bins] > 1e-3 * cpu[:bins].max()
    d = np.abs(np.angle(np.exp(1j * (got[bins:][defined].astype(np.float64) -
                                     cpu[bins:][defined]))))
    print(f"stft phases where defined ({defined.sum()} bins): max {d.max():.3g} rad "
          f"(bar {STFT_PHASE_BAR:g})")
    assert d.max() < STFT_PHASE_BAR


def test_istft_matches_the_cpu(gpu, kokoro):  # noqa: F811
    _, model, p = kokoro
    rng = _rng("istft")
    n_fft, hop = int(p["n_fft"]), int(p["hop"])
    bins, frames = n_fft // 2 + 1, 257
    post = rng.standard_normal((2 * bins, frames)).astype(np.float32)
    samples = hop * (frames - 1) + n_fft - 2 * (n_fft // 2)
    basis = p["stft.inverse_basis"].reshape(2 * bins, n_fft)
    ws = p["stft.window_sum"].ravel()
    args = pack_args("IIIIIIfII", bins, frames, n_fft, hop, samples, len(ws), n_fft / hop, 0, PAD)
    bufs = [post.ravel(), nan_filled(2 * bins * frames), basis, ws,
            nan_filled(PAD + samples + PAD)]
    out = gpu.run_many(bufs, [("istft_spectrum", [0, 1, 2, 3, 4], args, (4, 1, 1)),
                              ("istft", [0, 1, 2, 3, 4], args, (4, 1, 1))], True)
    got = _window(out[4], PAD, samples)
    mag, phase = np.exp(post[:bins]), np.sin(post[bins:])
    cpu = np.asarray(model.istft(mag, phase))
    ctrl = np.asarray(model.istft(mag, np.sin(post[bins:][::-1].copy())))   # bins reversed
    _report("istft", rel_l2(got, cpu), ISTFT_BAR, rel_l2(got, ctrl))


# Float32 fc against the CPU's int8 projection of an int8-quantized style row: measured 3e-3.
ADAIN_CPU_BAR = 2e-2


def test_adain_matches_the_models_int8_adain(gpu, kokoro):  # noqa: F811
    """The stamp with the model's style projection dequantized (as the seat uploads it) against
    the CPU's AdaIN of the same module, which quantizes the style row to int8."""
    from dasllama import gguf

    path, model, _ = kokoro
    module = "decoder.generator.resblocks.0.adain1.0"
    with gguf.open(path) as f:
        info = f.tensors[f"{module}.fc.weight"]
        q = np.asarray(f.raw(info.name)).view(np.int8).reshape(info.shape).astype(np.float32)
        zp = np.asarray(f.tensor(f"{module}.fc.weight_zp"), np.float32).ravel()
        sc = np.asarray(f.tensor(f"{module}.fc.weight_scale"), np.float32).ravel()
        fcb = np.asarray(f.tensor(f"{module}.fc.bias"), np.float32)
    fcw = ((q - zp) * sc).astype(np.float32)
    s, c = fcw.shape[0], fcw.shape[1] // 2
    rng = _rng("adain model")
    l = 64
    x = rng.standard_normal((c, l)).astype(np.float32)
    style = (0.3 * rng.standard_normal(s)).astype(np.float32)
    args = pack_args("IIIIIIIIff", c, l, 0, 0, s, 0, 0, 0, 1e-5, 0.2)
    out = gpu.run("adain", [x.ravel(), nan_filled(c * l), fcw, fcb, style,
                            np.ones(1, np.float32)], args, (c, 1, 1))
    got = np.asarray(out[1], np.float32).reshape(c, l)
    cpu = np.asarray(model.ada_in(module, x, style))
    other = np.asarray(model.ada_in(module, x, style[::-1].copy()))
    _report("adain vs the model's", rel_l2(got, cpu), ADAIN_CPU_BAR, rel_l2(got, other))
