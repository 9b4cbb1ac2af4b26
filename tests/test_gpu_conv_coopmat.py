"""The dense convolution on cooperative matrices (conv1d_coopmat, shaders/kernels/
conv1d_coopmat.gk.h) against float64 NumPy on the same float16-rounded operands.

The kernel rounds its weights (the float16 panel [c_out][taps][ci_pad] the host writes, packed
here from the layout the header states; a transposed convolution's one panel a phase, its taps
reversed) and its activated inputs to float16, and
sums in float32. The reference takes those rounded operands in float64, so what is left is the
float32 summation: BAR = 1e-5 (measured on an H200: 6.6e-8 to 8.7e-7, printed). The same output against the
float32 operands (the float32 conv1d's answer) is printed too: that is the rounding the seats
accept when they take this path.

Cases: Kokoro's resblock shapes (dilated taps, partial channel and column tiles, an input
channel count that is not a multiple of the K step), Whisper's stride-2 stem, a 1-tap shortcut
of an upsampled input, a LeakyReLU on the input (conv_post), and the two accumulating output
modes; transposed: Kokoro's two upsampling shapes (stride 10 over 20 taps, 6 over 12), the
last with the mirrored first column and added onto the noise branch. Every output buffer
starts NaN with room on both sides, so an unwritten value or a write outside the window
fails. Negative controls, each of which must miss the bar tenfold: the taps
in reverse order, the panel's input channels shifted by one, and for the mirrored column
position 0 in place of position 1.

Runs only on a device with cooperative matrices (lavapipe has none: the tests skip there, also
under CI=true, a true unavailability).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from gpu_helpers import ceil_div, nan_filled, open_coopmat_gpu, pack_args, rel_l2

BAR = 1e-5
CONTROL = 10
PAD = 5            # NaN elements before and after the output window
K_STEP = 32        # GK_CCM_BK: ci_pad is a multiple of it
TILE_O, TILE_T = 64, 64
ARGS = "IIIIIIIIIIIIIfIfIIII"   # conv1d_coopmat's GK_ARGS


@pytest.fixture(scope="module")
def gpu():
    return open_coopmat_gpu(["conv1d_coopmat"])


def _panel(w: np.ndarray) -> tuple:
    """w [c_out, c_in, taps] as the float16 panel [c_out][taps][ci_pad], bound as words."""
    c_out, c_in, k = w.shape
    ci_pad = ceil_div(c_in, K_STEP) * K_STEP
    p = np.zeros((c_out, k, ci_pad), np.float16)
    p[:, :, :c_in] = np.transpose(w, (0, 2, 1)).astype(np.float16)
    return p.reshape(-1).view("<u4").copy(), ci_pad


def _reference(x, w, b, stride, dil, pad_l, pad_r, in_up, slope, l_out):
    """float64 convolution of the activated input (as read) and weights, both as given."""
    x = np.asarray(x, np.float64)
    if in_up > 1:
        x = np.repeat(x, in_up, axis=1)
    xp = np.pad(x, ((0, 0), (pad_l, pad_r)))
    c_out, c_in, k = w.shape
    cols = (np.arange(l_out)[:, None] * stride + dil * np.arange(k)[None, :])   # [l_out, k]
    win = xp[:, cols]                                                            # [c_in, l_out, k]
    y = np.einsum("oik,itk->ot", np.asarray(w, np.float64), win)
    return y + (0.0 if b is None else b[:, None])


def _activated(x, slope):
    return x if slope is None else np.where(x >= 0, x, x * np.float32(slope)).astype(np.float32)


CASES = {
    # name: c_in, c_out, l, taps, stride, dilation, pad_l, pad_r, in_up, slope
    "resblock-d5": (96, 80, 150, 11, 1, 5, 25, 25, 1, None),   # partial channel / column tiles
    "resblock-odd-ci": (40, 64, 200, 7, 1, 3, 9, 9, 1, None),  # ci_pad 64 > c_in
    "whisper-stem-s2": (80, 72, 130, 3, 2, 1, 1, 1, 1, None),  # conv2's stride 2
    "shortcut-up2": (48, 70, 45, 1, 1, 1, 0, 0, 2, None),      # conv1x1 of an upsampled input
    "post-leaky": (64, 22, 100, 7, 1, 1, 3, 3, 1, 0.01),       # conv_post
}


def _run(gpu, name, mode=0, div=1.0, shift_panel=False):
    c_in, c_out, l, k, stride, dil, pl, pr, in_up, slope = CASES[name]
    rng = np.random.default_rng(zlib.crc32(f"conv1d_coopmat {name} {mode}".encode()))
    x_off, y_off = 3, PAD
    x = rng.standard_normal(x_off + c_in * l + 2).astype(np.float32)
    w = (rng.standard_normal((c_out, c_in, k)) / np.sqrt(k * c_in)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    xs = x[x_off:x_off + c_in * l].reshape(c_in, l)
    l_out = (l * in_up + pl + pr - (k - 1) * dil - 1) // stride + 1
    n = c_out * l_out
    y0 = nan_filled(y_off + n + PAD)
    if mode:
        y0[y_off:y_off + n] = rng.standard_normal(n).astype(np.float32)
    w_panel = np.roll(w, 1, axis=1) if shift_panel else w
    words, ci_pad = _panel(w_panel)
    args = pack_args(ARGS, c_in, c_out, l, l_out, k, stride, dil, pl, ci_pad, x_off, y_off, 1,
                     0 if slope is None else 1, slope or 1.0, mode, div, in_up, 1, l_out, 0)
    out = gpu.run("conv1d_coopmat", [x, words, b, y0.copy()], args,
                  (ceil_div(l_out, TILE_T), ceil_div(c_out, TILE_O), 1))
    y = np.asarray(out[3], np.float32)
    assert np.all(np.isnan(y[:y_off])) and np.all(np.isnan(y[y_off + n:])), \
        "conv1d_coopmat wrote outside its window"
    got = y[y_off:y_off + n].reshape(c_out, l_out).astype(np.float64)
    assert not np.any(np.isnan(got)), "conv1d_coopmat left part of its window unwritten"
    base = y0[y_off:y_off + n].reshape(c_out, l_out).astype(np.float64) if mode else 0.0

    def finish(conv):
        return conv + base if mode == 1 else (conv + base) / div if mode == 2 else conv

    xh = _activated(xs, slope).astype(np.float16)
    wh = w.astype(np.float16)
    ref = finish(_reference(xh, wh, b, stride, dil, pl, pr, in_up, None, l_out))
    f32 = finish(_reference(_activated(xs, slope), w, b, stride, dil, pl, pr, in_up, None, l_out))
    ctrl = finish(_reference(xh, wh[:, :, ::-1] if k > 1 else wh[:, ::-1, :], b, stride, dil,
                             pl, pr, in_up, None, l_out))
    return got, ref, f32, ctrl, base


@pytest.mark.parametrize("name", sorted(CASES))
def test_conv1d_coopmat_matches_float64(gpu, name):
    got, ref, f32, ctrl, _ = _run(gpu, name)
    err, control = rel_l2(got, ref), rel_l2(got, ctrl)
    print(f"conv1d_coopmat {name}: rel-l2 {err:.3g} (bar {BAR:g}); against float32 operands "
          f"{rel_l2(got, f32):.3g}; control (taps reversed) {control:.3g}")
    assert err < BAR
    assert control > CONTROL * BAR


@pytest.mark.parametrize("mode", [1, 2], ids=["add", "add-divide"])
def test_conv1d_coopmat_output_modes(gpu, mode):
    """mode 1: y = conv + y (a residual); mode 2: y = (conv + y) / div (a block's shortcut)."""
    div = 1.4142135381698608
    got, ref, _, _, base = _run(gpu, "resblock-odd-ci", mode, div)
    err = rel_l2(got, ref)
    # Control: the residual dropped (mode 1) or not divided (mode 2).
    ctrl = rel_l2(got, ref - base if mode == 1 else ref * div)
    print(f"conv1d_coopmat mode {mode}: rel-l2 {err:.3g} (bar {BAR:g}); control {ctrl:.3g}")
    assert err < BAR
    assert ctrl > CONTROL * BAR


def test_conv1d_coopmat_reads_the_panel_layout(gpu):
    """A panel whose input channels are shifted by one must miss: the kernel reads channel i of
    tap k at [o][k][i], not another order that happens to agree on symmetric data."""
    got, ref, _, _, _ = _run(gpu, "resblock-odd-ci", shift_panel=True)
    err = rel_l2(got, ref)
    print(f"conv1d_coopmat, panel channels shifted: rel-l2 {err:.3g} "
          f"(must exceed {CONTROL * BAR:g})")
    assert err > CONTROL * BAR


def test_conv1d_coopmat_spirv_passes_spirv_val(tmp_path):
    """The stamp, stamped again here, passes spirv-val (no device needed)."""
    from test_gpu_matmul_coopmat import assert_spirv_val
    assert_spirv_val(tmp_path, ["conv1d_coopmat"])


# --- transposed convolutions -------------------------------------------------------------------

TR_CASES = {
    # name: c_in, c_out, n_in, taps, stride, pad, shift, mode, slope
    "ups0": (40, 70, 23, 20, 10, 5, 0, 0, 0.1),
    "ups1-last": (48, 36, 31, 12, 6, 3, 1, 1, 0.1),   # ReflectionPad1d((1, 0)), onto the noise
}


def _tr_panel(wt: np.ndarray, stride: int) -> tuple:
    """wt [c_in, c_out, taps] as one float16 panel a phase: phase r, tap u holds tap
    r + stride (J - 1 - u) of the transposed weight, J = taps / stride."""
    c_in, c_out, k = wt.shape
    j = k // stride
    ci_pad = ceil_div(c_in, K_STEP) * K_STEP
    p = np.zeros((stride, c_out, j, ci_pad), np.float16)
    for r in range(stride):
        for u in range(j):
            p[r, :, u, :c_in] = wt[:, :, r + stride * (j - 1 - u)].T.astype(np.float16)
    return p.reshape(-1).view("<u4").copy(), ci_pad


def _conv_tr_reference(x, wt, b, stride, pad, l_out):
    """float64 transposed convolution: position p of the output sums x[i, n] wt[i, o, k] over
    p + pad = n stride + k."""
    x = np.asarray(x, np.float64)
    wt = np.asarray(wt, np.float64)
    c_in, c_out, k = wt.shape
    n = x.shape[1]
    full = np.zeros((c_out, (n - 1) * stride + k))
    for t in range(k):
        full[:, t + stride * np.arange(n)] += wt[:, :, t].T @ x
    return full[:, pad:pad + l_out] + b[:, None]


@pytest.mark.parametrize("name", sorted(TR_CASES))
def test_conv_tr1d_coopmat_matches_float64(gpu, name):
    c_in, c_out, n, k, stride, pad, shift, mode, slope = TR_CASES[name]
    rng = np.random.default_rng(zlib.crc32(f"conv_tr1d_coopmat {name}".encode()))
    x_off, y_off = 2, PAD
    x = rng.standard_normal(x_off + c_in * n + 3).astype(np.float32)
    wt = (rng.standard_normal((c_in, c_out, k)) / np.sqrt(c_in * k / stride)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    xs = x[x_off:x_off + c_in * n].reshape(c_in, n)
    l_out = stride * (n - 1) + k - 2 * pad
    row = l_out + shift
    total = c_out * row
    y0 = nan_filled(y_off + total + PAD)
    if mode:
        y0[y_off:y_off + total] = rng.standard_normal(total).astype(np.float32)
    words, ci_pad = _tr_panel(wt, stride)
    args = pack_args(ARGS, c_in, c_out, n, l_out, k // stride, 1, 1, pad, ci_pad, x_off, y_off,
                     1, 1, slope, mode, 1.0, 1, stride, row, shift)
    cols = ceil_div(l_out + pad, stride)
    out = gpu.run("conv1d_coopmat", [x, words, b, y0.copy()], args,
                  (ceil_div(cols, TILE_T), ceil_div(c_out, TILE_O), stride))
    y = np.asarray(out[3], np.float32)
    assert np.all(np.isnan(y[:y_off])) and np.all(np.isnan(y[y_off + total:])), \
        "conv1d_coopmat wrote outside its window"
    got = y[y_off:y_off + total].reshape(c_out, row).astype(np.float64)
    assert not np.any(np.isnan(got)), "conv1d_coopmat left part of its window unwritten"
    base = y0[y_off:y_off + total].reshape(c_out, row).astype(np.float64) if mode else 0.0

    def finish(v, mirror_from=1):
        out = np.empty((c_out, row))
        out[:, shift:] = v
        if shift:
            out[:, 0] = v[:, mirror_from]
        return out + base

    xh = _activated(xs, slope).astype(np.float16)
    wh = wt.astype(np.float16)
    v = _conv_tr_reference(xh, wh, b, stride, pad, l_out)
    err = rel_l2(got, finish(v))
    f32 = rel_l2(got, finish(_conv_tr_reference(_activated(xs, slope), wt, b, stride, pad, l_out)))
    controls = {"taps reversed": finish(_conv_tr_reference(xh, wh[:, :, ::-1], b, stride, pad,
                                                           l_out))}
    if shift:
        controls["column 0 from position 0"] = finish(v, mirror_from=0)
    print(f"conv1d_coopmat transposed {name}: rel-l2 {err:.3g} (bar {BAR:g}); against float32 "
          f"operands {f32:.3g}; controls " +
          ", ".join(f"{c} {rel_l2(got, r):.3g}" for c, r in controls.items()))
    assert err < BAR
    for c, r in controls.items():
        assert rel_l2(got, r) > CONTROL * BAR, c
