"""The LSTM step stamp (shaders/kernels/lstm_step.gk.h), the recurrent half of the predictor's
BiLSTMs on the GPU, on the test device (lavapipe in CI): T dispatches, one a time step, both
directions in each, against a float64 NumPy BiLSTM in the file's ONNX gate order (i, o, f, c)
with the backward outputs in time order (csrc/tts/kokoro/bilstm.h's recurrence).

The output rows and the cell state start NaN (step 0 must read neither), with NaN room past the
end that must stay NaN. Negative controls: the PyTorch gate order (i, f, g, o) and a backward
direction left in its own order must each miss the bar tenfold. Bar: float32 dot products of
length H and the gate functions (gk_tanh, a clamped logistic) against float64; measured on
lavapipe 1.3e-7 .. 1.8e-7 (the test prints it).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_helpers import gpu, pack_args, rel_l2  # noqa: F401

BAR = 2e-6
CONTROL = 10
PAD = 5


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _bilstm_ref(xw, r, order="iofc", reverse_back=True):
    """xw [2, T, 4H] (input projection with both biases), r [2, H, 4H] -> hs [T, 2H]."""
    _, t, g4 = xw.shape
    h = g4 // 4
    out = np.zeros((t, 2 * h))
    for d in range(2):
        hp, c = np.zeros(h), np.zeros(h)
        steps = range(t) if d == 0 else range(t - 1, -1, -1)
        for n, tt in enumerate(steps):
            g = xw[d, tt].astype(np.float64) + hp @ r[d].astype(np.float64)
            q = {k: g[i * h:(i + 1) * h] for i, k in enumerate(order)}
            if order == "iofc":
                i, o, f, cand = _sigmoid(q["i"]), _sigmoid(q["o"]), _sigmoid(q["f"]), np.tanh(q["c"])
            else:   # PyTorch's i, f, g, o
                i, f, cand, o = _sigmoid(q["i"]), _sigmoid(q["f"]), np.tanh(q["g"]), _sigmoid(q["o"])
            c = c * f + i * cand
            hp = np.tanh(c) * o
            row = tt if (d == 0 or reverse_back) else n
            out[row, d * h:(d + 1) * h] = hp
    return out


@pytest.mark.parametrize("hidden,steps", [(40, 7), (130, 5)])
def test_lstm_step_matches_a_float64_bilstm(gpu, hidden, steps):  # noqa: F811
    rng = np.random.default_rng(hidden * 31 + steps)
    g4 = 4 * hidden
    xw = (1.5 * rng.standard_normal((2, steps, g4))).astype(np.float32)
    r = (rng.standard_normal((2, hidden, g4)) / np.sqrt(hidden)).astype(np.float32)
    out = np.full(steps * 2 * hidden + PAD, np.nan, np.float32)
    c = np.full(2 * hidden + PAD, np.nan, np.float32)
    groups = ((hidden + 63) // 64, 2, 1)
    for s in range(steps):
        got = gpu.run("lstm_step", [xw.ravel(), r.ravel(), out, c],
                      pack_args("III", steps, hidden, s), groups)
        out = np.asarray(got[2], np.float32).copy()
        c = np.asarray(got[3], np.float32).copy()
    assert np.all(np.isnan(out[steps * 2 * hidden:])), "wrote past the output rows"
    assert np.all(np.isnan(c[2 * hidden:])), "wrote past the cell state"
    y = out[:steps * 2 * hidden].reshape(steps, 2 * hidden)
    assert not np.any(np.isnan(y)), "left part of the output unwritten"
    ref = _bilstm_ref(xw, r)
    err = rel_l2(y, ref)
    swapped_gates = rel_l2(y, _bilstm_ref(xw, r, order="ifgo"))
    back_unreversed = rel_l2(y, _bilstm_ref(xw, r, reverse_back=False))
    print(f"lstm_step H={hidden} T={steps}: rel-l2 {err:.3g} (bar {BAR:g}); controls: "
          f"gate order {swapped_gates:.3g}, backward order {back_unreversed:.3g}")
    assert err < BAR
    assert swapped_gates > CONTROL * BAR and back_unreversed > CONTROL * BAR
