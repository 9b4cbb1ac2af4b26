"""The input stage of matvec and matmul (shaders/kernels/mm_input.h) against NumPy: an RMSNorm
(mode 1) or a gated activation of a [gate | up] row (modes 2 SiLU, 3 tanh-GELU) applied to x as
the product reads it, so the LLM's norms and FFN gates need no pass of their own.

Reference in float64 from the same f32 inputs. Bars a few times the measured error (printed).
Negative controls: the plain product of the untransformed x, and the gate applied to the wrong
half, must miss the bar tenfold.
"""

import numpy as np
import pytest

from gpu_helpers import as_words, ceil_div, gpu, nan_filled, pack_args, random_weights, rel_l2  # noqa: F401

BAR = 1e-6   # measured up to ~2e-7 on lavapipe
ROWS, COLS, EPS = 37, 256, 1e-5


def _gate(g, gelu):
    g = g.astype(np.float64)
    if gelu:
        return g / (1 + np.exp(-2 * np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
    return g / (1 + np.exp(-g))


def _run(g, kind, fmt, n_tok, mode, seed):
    rng = np.random.default_rng(seed)
    raw, dense = random_weights(fmt, ROWS, COLS, rng)
    width = COLS * (2 if mode >= 2 else 1)          # a [gate | up] row for the gated modes
    # The subgroup stamps read x in 16-byte pieces: the host gives them aligned rows only.
    x_off, x_stride = (4, width + 4) if kind.startswith(("matvec_sub", "matvec_split")) \
        else (3, width + 5)
    x = rng.standard_normal(x_off + n_tok * x_stride).astype(np.float32)
    norm_w = (1 + 0.2 * rng.standard_normal(COLS + 4)).astype(np.float32)
    aux_off = 4 if mode == 1 else (COLS if mode >= 2 else 0)
    y = nan_filled(n_tok * ROWS)
    args = pack_args("IIIIIIIIIIf", ROWS, COLS, n_tok, x_off, x_stride, 0, ROWS, 0, mode,
                     aux_off, EPS)
    if kind in ("matvec", "matvec_sub"):
        groups = (ceil_div(ROWS, 4), 1, 1)
    elif kind == "matvec_sub2":
        groups = (ceil_div(ROWS, 8), 1, 1)
    elif kind == "matvec_sub4":
        groups = (ceil_div(ROWS, 16), 1, 1)
    elif kind == "matvec_split4":
        groups = (ceil_div(ROWS, 4), 1, 1)
    elif kind == "matvec_tall":
        groups = (ceil_div(ROWS, 64), 1, 1)
    else:
        groups = (ceil_div(ROWS, 64), ceil_div(n_tok, 64), 1)
    out = g.run(f"{kind}_{fmt.lower()}", [as_words(raw), x, y, norm_w], args, groups)
    got = np.asarray(out[2]).reshape(n_tok, ROWS)
    rows = np.stack([x[x_off + t * x_stride: x_off + t * x_stride + width] for t in range(n_tok)])
    rows = rows.astype(np.float64)
    plain = rows[:, :COLS]
    if mode == 1:
        inv = 1 / np.sqrt((plain * plain).mean(1, keepdims=True) + EPS)
        xin = plain * inv * norm_w[4:4 + COLS]
        wrong = plain
    else:
        xin = _gate(rows[:, :COLS], mode == 3) * rows[:, COLS:]
        wrong = _gate(rows[:, COLS:], mode == 3) * rows[:, :COLS]   # halves swapped
    return rel_l2(got, xin @ dense.T), rel_l2(got, wrong @ dense.T)


@pytest.mark.parametrize("kind,n_tok", [("matvec", 1), ("matvec", 3), ("matvec_tall", 1),
                                         ("matvec_tall", 3), ("matvec_sub", 1),
                                         ("matvec_sub", 3), ("matvec_sub2", 1),
                                         ("matvec_sub2", 3), ("matvec_sub4", 1),
                                         ("matvec_sub4", 3), ("matvec_split4", 1),
                                         ("matvec_split4", 3), ("matmul", 70)])
@pytest.mark.parametrize("fmt", ["Q4_0", "Q8_0", "Q4_K"])
@pytest.mark.parametrize("mode", [1, 2, 3])
def test_input_stage_matches_numpy(gpu, kind, n_tok, fmt, mode):  # noqa: F811
    err, control = _run(gpu, kind, fmt, n_tok, mode, seed=mode * 100 + n_tok)
    print(f"{kind} {fmt} n_tok={n_tok} mode={mode}: {err:.1e} (control {control:.1e})")
    assert err < BAR
    assert control > 10 * BAR
