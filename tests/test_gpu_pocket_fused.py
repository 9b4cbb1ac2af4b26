"""Pocket TTS's fused kernels against NumPy: the input stages of the matrix-vector stamps that
take its LayerNorms, adaLN modulation and activations (shaders/kernels/mm_input.h, modes 4..11),
the rotary embedding with the K/V cache store (rope_store_f32), and attention_f32's position
read from memory.

References in float64 from the same float32 inputs. Bars a few times the measured error (printed).
Negative controls: the input stage left out (the plain product), a LayerNorm that forgets the
mean, the rotation one position off; each must miss its bar tenfold.
"""

import numpy as np
import pytest

from gpu_helpers import (as_words, ceil_div, gpu, nan_filled, pack_args,  # noqa: F401
                         random_weights, rel_l2)

BAR = 5e-7        # input stages: measured up to 1.3e-7 on lavapipe
BAR_ROPE = 3e-7   # rope_store: measured 6.9e-8
BAR_GATED = 1e-6  # gated residual: measured up to 2.1e-7 (y0 + gate h cancels in places)
ROWS, EPS = 37, 1e-5
SILU, GELU, SILU_SUM, LAYERNORM = 4, 5, 6, 8


def _silu(v):
    return v / (1 + np.exp(-v))


def _gelu(v):
    return 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))


def _run_stage(g, kind, fmt, cols, n_tok, mode, seed):
    rng = np.random.default_rng(seed)
    raw, dense = random_weights(fmt, ROWS, cols, rng)
    x_off, x_stride = 3, cols + 5
    # LayerNorm inputs with an offset, so that forgetting the mean shows.
    x = (0.7 + rng.standard_normal(x_off + n_tok * x_stride)).astype(np.float32)
    # aux: 3 pad, [weight | bias], 2 pad, [shift | scale]; SILU_SUM reads its addend at 3.
    aux = (0.3 * rng.standard_normal(3 + 4 * cols + 2)).astype(np.float32)
    wb, md = 3, 3 + 2 * cols + 2
    aux_off = wb | (md << 16) if mode >= LAYERNORM else (3 if mode == SILU_SUM else 0)
    y = nan_filled(n_tok * ROWS)
    args = pack_args("IIIIIIIIIIf", ROWS, cols, n_tok, x_off, x_stride, 0, ROWS, 0, mode,
                     aux_off, EPS)
    groups = (ceil_div(ROWS, 64 if kind == "matvec_tall" else 4), 1, 1)
    out = g.run(f"{kind}_{fmt.lower()}", [as_words(raw), x, y, aux], args, groups)
    got = np.asarray(out[2]).reshape(n_tok, ROWS)
    v = np.stack([x[x_off + t * x_stride: x_off + t * x_stride + cols] for t in range(n_tok)])
    v = v.astype(np.float64)
    a = aux.astype(np.float64)
    wrong = v
    if mode == SILU:
        xin = _silu(v)
    elif mode == GELU:
        xin = _gelu(v)
    elif mode == SILU_SUM:
        xin = _silu(v + a[3:3 + cols])
        wrong = _silu(v)
    else:
        def norm(centre):
            mean = v.mean(1, keepdims=True) if centre else 0.0
            o = (v - mean) / np.sqrt(((v - v.mean(1, keepdims=True)) ** 2).mean(1, keepdims=True)
                                    + EPS)
            if mode & 1:
                o = o * a[wb:wb + cols] + a[wb + cols:wb + 2 * cols]
            if mode & 2:
                o = o * (1 + a[md + cols:md + 2 * cols]) + a[md:md + cols]
            return o
        xin = norm(True)
        wrong = norm(False)
    return rel_l2(got, xin @ dense.T), rel_l2(got, wrong @ dense.T)


# The paths of matvec: F32 rows (the staged generic path, odd and aligned widths), a block
# format's narrow rows (staged in registers) and wide rows (past the 2048-column chunk), and
# the tall stamps (narrow rows, many a workgroup).
PATHS = [("matvec", "F32", 301), ("matvec", "F32", 512), ("matvec", "Q8_0", 512),
         ("matvec", "Q8_0", 2080), ("matvec_tall", "Q8_0", 512)]


@pytest.mark.parametrize("kind,fmt,cols", PATHS)
@pytest.mark.parametrize("mode", [SILU, GELU, SILU_SUM, LAYERNORM, LAYERNORM + 1, LAYERNORM + 2,
                                  LAYERNORM + 3])
@pytest.mark.parametrize("n_tok", [1, 2])
def test_input_stage_matches_numpy(gpu, kind, fmt, cols, mode, n_tok):  # noqa: F811
    err, control = _run_stage(gpu, kind, fmt, cols, n_tok, mode, seed=mode * 10 + cols + n_tok)
    print(f"{kind} {fmt} cols={cols} mode={mode} n_tok={n_tok}: {err:.1e} "
          f"(control {control:.1e})")
    assert err < BAR
    assert control > 10 * BAR


@pytest.mark.parametrize("mode", [SILU, GELU, SILU_SUM])
def test_activation_stages_in_the_tiled_stamps(gpu, mode):  # noqa: F811
    """The activation modes need no row statistics, so the tiled matmul stamps take them too
    (Pocket's prompt rows: the GELU before each down projection)."""
    rng = np.random.default_rng(mode)
    cols, n_tok = 96, 70
    raw, dense = random_weights("Q8_0", ROWS, cols, rng)
    x = rng.standard_normal(n_tok * cols).astype(np.float32)
    aux = (0.3 * rng.standard_normal(3 + cols)).astype(np.float32)
    args = pack_args("IIIIIIIIIIf", ROWS, cols, n_tok, 0, cols, 0, ROWS, 0, mode,
                     3 if mode == SILU_SUM else 0, 0.0)
    out = gpu.run("matmul_q8_0", [as_words(raw), x, nan_filled(n_tok * ROWS), aux], args,
                  (ceil_div(ROWS, 64), ceil_div(n_tok, 64), 1))
    got = np.asarray(out[2]).reshape(n_tok, ROWS)
    v = x.reshape(n_tok, cols).astype(np.float64)
    xin = {SILU: lambda: _silu(v), GELU: lambda: _gelu(v),
           SILU_SUM: lambda: _silu(v + aux[3:3 + cols])}[mode]()
    err, control = rel_l2(got, xin @ dense.T), rel_l2(got, v @ dense.T)
    print(f"matmul Q8_0 mode={mode}: {err:.1e} (control {control:.1e})")
    assert err < BAR
    assert control > 10 * BAR


def _rope_ref(x, pos, freqs):
    """Pairs (2i, 2i + 1) of each head of x [heads, hd] rotated by pos * freqs[i]."""
    out = x.astype(np.float64).copy()
    ang = pos * freqs
    c, s = np.cos(ang), np.sin(ang)
    x0, x1 = out[:, 0::2].copy(), out[:, 1::2].copy()
    out[:, 0::2] = x0 * c - x1 * s
    out[:, 1::2] = x0 * s + x1 * c
    return out


def test_rope_store_matches_numpy(gpu):  # noqa: F811
    rng = np.random.default_rng(7)
    n_tok, n_head, n_kv, hd, base, pos0 = 3, 4, 2, 10, 40, 2
    kvw, qw = n_kv * hd, n_head * hd
    stride = qw + 2 * kvw + 3
    qkv_off, n_ctx, rows_off = 2, base + pos0 + n_tok + 1, 5
    qkv = rng.standard_normal(qkv_off + n_tok * stride).astype(np.float32)
    f64 = 10000.0 ** (-2.0 * np.arange(hd // 2) / hd)
    freqs = np.empty(hd, np.float32)
    freqs[0::2] = f64.astype(np.float32)
    freqs[1::2] = (f64 - f64.astype(np.float32)).astype(np.float32)
    kc, vc = nan_filled(n_ctx * kvw), nan_filled(n_ctx * kvw)
    rows = nan_filled(rows_off + 2 * n_tok * kvw)
    args = pack_args("IIIIIIIIII", n_tok, n_head, n_kv, hd, pos0, qkv_off, stride, 1, rows_off,
                     n_tok * kvw)
    out = gpu.run("rope_store_f32", [qkv, freqs, np.array([base], np.uint32), kc, vc, rows],
                  args, (4, 1, 1))
    q_got, kc_got, vc_got, rows_got = (np.asarray(out[i]) for i in (0, 3, 4, 5))
    errs, controls = [], []
    for t in range(n_tok):
        p = base + pos0 + t
        r = qkv[qkv_off + t * stride:]
        q_want = _rope_ref(r[:qw].reshape(n_head, hd), p, f64)
        k_want = _rope_ref(r[qw:qw + kvw].reshape(n_kv, hd), p, f64)
        v_want = r[qw + kvw:qw + 2 * kvw].astype(np.float64)
        q_got_t = q_got[qkv_off + t * stride:][:qw]
        k_row = kc_got[p * kvw:(p + 1) * kvw]
        errs += [rel_l2(q_got_t, q_want.ravel()), rel_l2(k_row, k_want.ravel()),
                 rel_l2(rows_got[rows_off + t * kvw:][:kvw], k_want.ravel())]
        v32 = v_want.astype(np.float32)
        assert np.array_equal(vc_got[p * kvw:(p + 1) * kvw], v32)
        assert np.array_equal(rows_got[rows_off + (n_tok + t) * kvw:][:kvw], v32)
        controls.append(rel_l2(kc_got[p * kvw:(p + 1) * kvw],
                               _rope_ref(r[qw:qw + kvw].reshape(n_kv, hd), p + 1, f64).ravel()))
    # Cache rows of other positions stay untouched, and v passes through bit for bit.
    written = set(range(base + pos0, base + pos0 + n_tok))
    for p in set(range(n_ctx)) - written:
        assert np.isnan(kc_got[p * kvw:(p + 1) * kvw]).all()
    err, control = max(errs), min(controls)
    print(f"rope_store_f32: {err:.1e} (control, one position off: {control:.1e})")
    assert err < BAR_ROPE
    assert control > 10 * BAR_ROPE


def test_attention_reads_its_position_base(gpu):  # noqa: F811
    """The same queries at base 5 + pos0 1 and at base 0 + pos0 6: bit-identical outputs; at
    base 0 + pos0 1 (the base ignored) they differ."""
    rng = np.random.default_rng(3)
    n_tok, n_head, n_kv, hd, n_ctx = 2, 2, 1, 16, 9
    q = rng.standard_normal(n_tok * n_head * hd).astype(np.float32)
    kc = rng.standard_normal(n_ctx * n_kv * hd).astype(np.float32)
    vc = rng.standard_normal(n_ctx * n_kv * hd).astype(np.float32)

    def run(base, pos0):
        args = pack_args("IIIIIIIIIIIIIf", n_tok, n_head, n_kv, hd, pos0, 0, 0, n_head * hd,
                         n_kv * hd, 0, 0, 0, n_head * hd, 0.25)
        out = gpu.run("attention_f32", [q, kc, vc, nan_filled(n_tok * n_head * hd),
                                        np.array([base], np.uint32)], args, (n_head, n_tok, 1))
        return np.asarray(out[3])

    a, b, c = run(5, 1), run(0, 6), run(0, 1)
    assert not np.isnan(a).any()
    assert np.array_equal(a, b)
    print(f"attention_f32: base ignored would differ by {rel_l2(c, a):.1e}")
    assert rel_l2(c, a) > 1e-3


def _freqs(hd):
    f64 = 10000.0 ** (-2.0 * np.arange(hd // 2) / hd)
    f = np.empty(hd, np.float32)
    f[0::2] = f64.astype(np.float32)
    f[1::2] = (f64 - f64.astype(np.float32)).astype(np.float32)
    return f


@pytest.mark.parametrize("n_head,n_kv,hd,window", [(4, 4, 64, 0), (4, 2, 16, 5)])
def test_attention_step_equals_rope_store_then_attention(  # noqa: F811
        gpu, n_head, n_kv, hd, window):
    """One row's fused step against rope_store_f32 then attention_f32 on the same cache: the
    output, the cache rows and the read-back rows bit for bit. Control: the step at the next
    position."""
    rng = np.random.default_rng(11)
    base, pos0, n_ctx = 6, 3, 12
    pos = base + pos0
    kvw, qw = n_kv * hd, n_head * hd
    qkv = rng.standard_normal(qw + 2 * kvw).astype(np.float32)
    kc = rng.standard_normal(n_ctx * kvw).astype(np.float32)   # rows below pos: earlier keys
    vc = rng.standard_normal(n_ctx * kvw).astype(np.float32)
    freqs, pb = _freqs(hd), np.array([base], np.uint32)
    scale = float(1 / np.sqrt(hd))

    def step(p0):
        args = pack_args("IIIIIIIIIIf", n_head, n_kv, hd, p0, window, 0, 0, 1, 2, kvw, scale)
        out = gpu.run("attention_step_f32", [qkv, freqs, pb, kc, vc, nan_filled(qw),
                                             nan_filled(2 + 2 * kvw)], args, (n_head, 1, 1))
        return [np.asarray(out[i]) for i in (3, 4, 5, 6)]

    rs = gpu.run("rope_store_f32", [qkv, freqs, pb, kc, vc, nan_filled(2 + 2 * kvw)],
                 pack_args("IIIIIIIIII", 1, n_head, n_kv, hd, pos0, 0, qw + 2 * kvw, 1, 2, kvw),
                 (4, 1, 1))
    q_rot, kc2, vc2, rows2 = (np.asarray(rs[i]) for i in (0, 3, 4, 5))
    att = gpu.run("attention_f32", [q_rot, kc2, vc2, nan_filled(qw), pb],
                  pack_args("IIIIIIIIIIIIIf", 1, n_head, n_kv, hd, pos0, window, 0, qw, kvw, 0,
                            0, 0, qw, scale), (n_head, 1, 1))
    want = np.asarray(att[3])
    kc1, vc1, got, rows1 = step(pos0)
    assert not np.isnan(got).any()
    assert np.array_equal(got, want)
    assert np.array_equal(kc1, kc2) and np.array_equal(vc1, vc2)
    assert np.array_equal(rows1, rows2, equal_nan=True)   # NaN: the 2 floats before rows_off
    control = rel_l2(step(pos0 + 1)[2], want)
    print(f"attention_step_f32 {n_head}/{n_kv} heads, window {window}: bit-identical "
          f"(control, next position: {control:.1e})")
    assert control > 1e-4


@pytest.mark.parametrize("kind,fmt,cols", PATHS)
def test_gated_residual_output_stage(gpu, kind, fmt, cols):  # noqa: F811
    """accumulate 2 (mm_input.h's GK_MM_STORE): y += gate * (W silu(x) + bias), the bias and the
    gate read from aux at the two packed offsets. Control: the gate left out."""
    rng = np.random.default_rng(cols + 5)
    raw, dense = random_weights(fmt, ROWS, cols, rng)
    x = rng.standard_normal(2 + cols).astype(np.float32)
    aux = rng.standard_normal(7 + 2 * ROWS).astype(np.float32)
    bias_off, gate_off = 7, 7 + ROWS
    y0 = rng.standard_normal(ROWS + 3).astype(np.float32)
    args = pack_args("IIIIIIIIIIf", ROWS, cols, 1, 2, cols, 3, ROWS, 2, SILU,
                     bias_off | (gate_off << 16), 0.0)
    groups = (ceil_div(ROWS, 64 if kind == "matvec_tall" else 4), 1, 1)
    out = gpu.run(f"{kind}_{fmt.lower()}", [as_words(raw), x, y0, aux], args, groups)
    got = np.asarray(out[2])
    h = dense @ _silu(x[2:].astype(np.float64)) + aux[bias_off:bias_off + ROWS]
    want = y0[3:].astype(np.float64) + aux[gate_off:gate_off + ROWS] * h
    assert np.array_equal(got[:3], y0[:3])
    err = rel_l2(got[3:], want)
    control = rel_l2(got[3:], y0[3:] + h)
    print(f"gated residual {kind} {fmt} cols={cols}: {err:.1e} (control {control:.1e})")
    assert err < BAR_GATED
    assert control > 10 * BAR_GATED
