"""mm_stage (shaders/kernels/mm_stage.gk.h): a projection's input stage written once as a float16
panel, against NumPy in float64 for the plain, RMSNorm, gated (SiLU, GELU) and LayerNorm modes.

The only rounding beyond the float32 input stage is the final float16 conversion (unit
roundoff 2^-11, about 4.9e-4 per element; rel-l2 of random values about 2.8e-4). Measured on
lavapipe over every case here: at most 2.3e-4 (printed). BAR = 1e-3 is a few times that.
Negative controls, each a plausible bug that must miss the bar tenfold: the panel shifted by one
column (plain), x un-normed (RMSNorm), the gate on the wrong half (gated), the mean left in
(LayerNorm). The panel's halves start as NaN, and the halves past it must stay NaN.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_helpers import gpu, pack_args, rel_l2  # noqa: F401  (gpu is a fixture)

BAR = 1e-3
# Two float16 NaNs in one word: what the panel holds before the kernel runs.
NAN_PAIR = 0x7E007E00
# Halves past the panel that must stay untouched.
GUARD_HALVES = 16


def _gate(g, gelu):
    if gelu:
        return g / (1 + np.exp(-2 * np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
    return g / (1 + np.exp(-g))


def _run(gpu, x, aux, mode, cols, n_tok, x_off, x_stride, aux_off, eps):
    y_off = 8     # halves, a multiple of eight as the kernel needs
    n_half = y_off + n_tok * cols + GUARD_HALVES
    y = np.full(n_half // 2, NAN_PAIR, np.uint32)
    args = pack_args("IIIIIIIIf", cols, n_tok, x_off, x_stride, y_off, cols, mode, aux_off, eps)
    out = gpu.run("mm_stage", [x, y, aux], args, n_tok)
    halves = np.asarray(out[1]).view(np.float16)
    got = halves[y_off:y_off + n_tok * cols].astype(np.float64).reshape(n_tok, cols)
    untouched = np.concatenate([halves[:y_off], halves[y_off + n_tok * cols:]])
    return got, bool(np.all(np.isnan(untouched)))


@pytest.mark.parametrize("mode", [0, 1, 2, 3, 9], ids=["plain", "rmsnorm", "silu", "gelu",
                                                       "layernorm"])
@pytest.mark.parametrize("cols,n_tok", [(64, 3), (576, 17), (1544, 5)])
def test_mm_stage_matches_numpy(gpu, mode, cols, n_tok):
    """Widths of one workgroup sweep, SmolLM2's 576 and a ragged sweep (1544 = 193 runs of
    eight); offsets and strides on x; LayerNorm mode 9 = affine (weight then bias in aux)."""
    rng = np.random.default_rng(cols * 10 + mode + n_tok)
    eps = 1e-5
    width = cols * (2 if mode in (2, 3) else 1)
    x_off, x_stride = 3, width + 5
    x = (1.5 * rng.standard_normal(x_off + n_tok * x_stride) + 0.3).astype(np.float32)
    aux = (1 + 0.2 * rng.standard_normal(2 * cols + 8)).astype(np.float32)
    aux_off = {0: 0, 1: 4, 2: cols, 3: cols, 9: 4}[mode]
    got, untouched = _run(gpu, x, aux, mode, cols, n_tok, x_off, x_stride, aux_off, eps)
    xr = np.stack([x[x_off + t * x_stride: x_off + t * x_stride + width]
                   for t in range(n_tok)]).astype(np.float64)
    plain = xr[:, :cols]
    if mode == 0:
        ref = plain
        wrong = np.roll(plain, 1, axis=1)
    elif mode == 1:
        inv = 1 / np.sqrt((plain * plain).mean(1, keepdims=True) + eps)
        ref = plain * inv * aux[4:4 + cols]
        wrong = plain * aux[4:4 + cols]
    elif mode in (2, 3):
        ref = _gate(plain, mode == 3) * xr[:, cols:]
        wrong = _gate(xr[:, cols:], mode == 3) * plain
    else:
        mean = plain.mean(1, keepdims=True)
        var = ((plain - mean) ** 2).mean(1, keepdims=True)
        wb = aux_off & 0xFFFF
        ref = (plain - mean) / np.sqrt(var + eps) * aux[wb:wb + cols] + aux[wb + cols:wb + 2 * cols]
        wrong = plain / np.sqrt(var + eps) * aux[wb:wb + cols] + aux[wb + cols:wb + 2 * cols]
    err = rel_l2(got, ref) if np.all(np.isfinite(got)) else float("inf")
    control = rel_l2(got, wrong)
    print(f"mm_stage mode={mode} cols={cols} n_tok={n_tok}: rel-l2 {err:.3g} (bar {BAR:.0e}), "
          f"control {control:.3g}")
    assert untouched, "the kernel wrote outside its panel"
    assert err < BAR
    assert control > 10 * BAR
